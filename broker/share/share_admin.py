"""What an administrator changes of a share group's delivery state (KIP-932):
AlterShareGroupOffsets (91) starts share-partitions again at given offsets,
DeleteShareGroupOffsets (92) forgets a group's state of whole topics, and DeleteGroups removes
a share group's state before its records (``kafka-share-groups.sh --reset-offsets``,
``--delete-offsets``, ``--delete``).

Each works only while the group has no member, as in Kafka, and in two steps: the share
coordinator's state first (initialized at a newer state epoch, or deleted), then the group's
record of the partitions it has state of (record 15). A leader still holding the old state in
memory finds out when it next loads it (``SharePartitionManager.revalidate``) or when its next
write is fenced by the state epoch; so the reset is what the next member to fetch sees.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

from broker.coordinator.group_store import CoordinatorError
from broker.coordinator.share_membership import ShareMembership
from broker.coordinator.share_state_log import ShareKey
from broker.share.persister import SharePersister
from kafkube_contract.image import TopicMetadata

Outcome = tuple[ErrorCode, str | None]
OK: Outcome = (ErrorCode.none, None)


@dataclass
class TopicOutcome:
    topic_id: uuid.UUID | None
    outcome: Outcome = OK  # the whole topic's (DeleteShareGroupOffsets)
    partitions: dict[int, Outcome] = field(default_factory=dict)  # (AlterShareGroupOffsets)


@dataclass
class AdminOutcome:
    outcome: Outcome = OK  # the whole request's: the group
    topics: dict[str, TopicOutcome] = field(default_factory=dict)


class ShareGroupAdmin:
    def __init__(self, membership: ShareMembership, persister: SharePersister,
                 topics: Mapping[str, TopicMetadata],
                 delete_records: Callable[[str], ErrorCode] = lambda group_id: ErrorCode.none
                 ) -> None:
        self.membership = membership
        self.persister = persister
        self.topics = topics
        self.delete_records = delete_records  # the group coordinator's DeleteGroups

    async def alter_offsets(self, group_id: str, wanted: Mapping[str, Mapping[int, int]]
                            ) -> AdminOutcome:
        """Start each named share-partition again at its offset: its state initialized at
        the next state epoch (every record from there on available, none delivered). A
        group not known yet is made, as Kafka does."""
        result = AdminOutcome()
        try:
            with self.membership.administering(group_id, create=True):
                added: dict[uuid.UUID, tuple[str, frozenset[int]]] = {}
                for name, starts in wanted.items():
                    topic = self.topics.get(name)
                    done = result.topics[name] = TopicOutcome(topic.uuid if topic else None)
                    for index, start in starts.items():
                        done.partitions[index] = await self._reset(group_id, topic, name,
                                                                   index, start)
                    reset = frozenset(i for i, o in done.partitions.items() if o == OK)
                    if topic is not None and reset:
                        added[topic.uuid] = (name, reset)
                self.membership.change_initialized(group_id, added, {})
        except CoordinatorError as e:
            result.outcome = (e.code, str(e))
        return result

    async def _reset(self, group_id: str, topic: TopicMetadata | None, name: str, index: int,
                     start: int) -> Outcome:
        if topic is None or not 0 <= index < topic.partitions:
            return ErrorCode.unknown_topic_or_partition, f"{name}-{index} does not exist."
        if start < 0:
            return ErrorCode.invalid_request, \
                f"Start offset {start} of {name}-{index} is negative."
        key = ShareKey(group_id, topic.uuid, index)
        error, stored = await self.persister.read(key, -1)
        if error == ErrorCode.none:
            error = await self.persister.initialize(key, stored.state_epoch + 1, start)
        return OK if error == ErrorCode.none else (error, f"the share state of {name}-{index}: "
                                                          f"{error.name}")

    async def delete_offsets(self, group_id: str, names: list[str]) -> AdminOutcome:
        """Forget the group's state of each topic: its next member to be assigned one of
        its partitions starts it where ``share.auto.offset.reset`` says."""
        result = AdminOutcome()
        try:
            with self.membership.administering(group_id) as group:
                removed: dict[uuid.UUID, frozenset[int]] = {}
                for name in names:
                    topic = self.topics.get(name)
                    done = result.topics[name] = TopicOutcome(topic.uuid if topic else None)
                    if topic is None or topic.uuid not in group.initialized:
                        done.outcome = (ErrorCode.unknown_topic_or_partition,
                                        f"The share group has no offsets of topic {name}.")
                        continue
                    gone, done.outcome = await self._delete(
                        group_id, topic.uuid, group.initialized[topic.uuid][1])
                    removed[topic.uuid] = gone
                self.membership.change_initialized(group_id, {}, removed)
        except CoordinatorError as e:
            result.outcome = (e.code, str(e))
        return result

    async def delete_group(self, group_id: str) -> ErrorCode:
        """DeleteGroups of an empty share group: its share-partitions' state first, then its
        records, with no member let in between (one that joined once the state was gone
        would start at ``share.auto.offset.reset``, past records never delivered). If a
        state cannot be deleted the group stays, without the partitions already done."""
        try:
            with self.membership.administering(group_id) as group:
                removed: dict[uuid.UUID, frozenset[int]] = {}
                for topic_id, (_, partitions) in list(group.initialized.items()):
                    removed[topic_id], outcome = await self._delete(group_id, topic_id,
                                                                    partitions)
                    if outcome != OK:
                        self.membership.change_initialized(group_id, {}, removed)
                        return outcome[0]
                return self.delete_records(group_id)
        except CoordinatorError as e:
            return e.code

    async def _delete(self, group_id: str, topic_id: uuid.UUID, partitions: frozenset[int]
                      ) -> tuple[frozenset[int], Outcome]:
        """The partitions whose state is deleted, and the outcome."""
        done: set[int] = set()
        for index in sorted(partitions):
            error = await self.persister.delete(ShareKey(group_id, topic_id, index))
            if error != ErrorCode.none:
                return frozenset(done), (error, f"deleting the share state of partition "
                                                f"{index}: {error.name}")
            done.add(index)
        return frozenset(done), OK
