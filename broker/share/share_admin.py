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
from collections.abc import Mapping
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
                 topics: Mapping[str, TopicMetadata]) -> None:
        self.membership = membership
        self.persister = persister
        self.topics = topics

    async def alter_offsets(self, group_id: str, wanted: Mapping[str, Mapping[int, int]]
                            ) -> AdminOutcome:
        """Start each named share-partition again at its offset: its state initialized at
        the next state epoch (every record from there on available, none delivered)."""
        try:
            group = self.membership.empty_group(group_id)
        except CoordinatorError as e:
            return AdminOutcome((e.code, str(e)))
        result = AdminOutcome()
        initialized = dict(group.initialized)
        for name, starts in wanted.items():
            topic = self.topics.get(name)
            done = result.topics[name] = TopicOutcome(topic.uuid if topic else None)
            for index, start in starts.items():
                if topic is None or not 0 <= index < topic.partitions:
                    done.partitions[index] = (ErrorCode.unknown_topic_or_partition,
                                              f"{name}-{index} does not exist.")
                elif start < 0:
                    done.partitions[index] = (ErrorCode.invalid_request,
                                              f"Start offset {start} of {name}-{index} is "
                                              f"negative.")
                else:
                    done.partitions[index] = await self._initialize(
                        ShareKey(group_id, topic.uuid, index), start)
            if topic is not None:
                reset = frozenset(i for i, o in done.partitions.items() if o == OK)
                known = initialized.get(topic.uuid, (name, frozenset()))[1]
                initialized[topic.uuid] = (name, known | reset)
        return self._store(group_id, initialized, result)

    async def _initialize(self, key: ShareKey, start: int) -> Outcome:
        error, stored = await self.persister.read(key, -1)
        if error == ErrorCode.none:
            error = await self.persister.initialize(key, stored.state_epoch + 1, start)
        return OK if error == ErrorCode.none else (error, f"the share state of {key}: "
                                                          f"{error.name}")

    async def delete_offsets(self, group_id: str, names: list[str]) -> AdminOutcome:
        """Forget the group's state of each topic: its next member to be assigned one of
        its partitions starts it where ``share.auto.offset.reset`` says."""
        try:
            group = self.membership.empty_group(group_id)
        except CoordinatorError as e:
            return AdminOutcome((e.code, str(e)))
        result = AdminOutcome()
        initialized = dict(group.initialized)
        for name in names:
            topic = self.topics.get(name)
            done = result.topics[name] = TopicOutcome(topic.uuid if topic else None)
            if topic is None or topic.uuid not in initialized:
                done.outcome = (ErrorCode.unknown_topic_or_partition,
                                f"The share group has no offsets of topic {name}.")
                continue
            done.outcome = await self._delete(group_id, topic.uuid,
                                              initialized[topic.uuid][1])
            if done.outcome == OK:
                del initialized[topic.uuid]
        return self._store(group_id, initialized, result)

    async def delete_group_state(self, group_id: str) -> Outcome:
        """Before DeleteGroups removes an empty share group's records: its share-partitions'
        state, so a group of the same name starts afresh (a non-empty group is left for
        DeleteGroups to refuse)."""
        try:
            group = self.membership.empty_group(group_id)
        except CoordinatorError as e:
            return OK if e.code == ErrorCode.non_empty_group else (e.code, str(e))
        for topic_id, (_, partitions) in group.initialized.items():
            outcome = await self._delete(group_id, topic_id, partitions)
            if outcome != OK:
                return outcome
        return OK

    async def _delete(self, group_id: str, topic_id: uuid.UUID, partitions: frozenset[int]
                      ) -> Outcome:
        for index in sorted(partitions):
            error = await self.persister.delete(ShareKey(group_id, topic_id, index))
            if error != ErrorCode.none:
                return error, f"deleting the share state of partition {index}: {error.name}"
        return OK

    def _store(self, group_id: str, initialized: dict[uuid.UUID, tuple[str, frozenset[int]]],
               result: AdminOutcome) -> AdminOutcome:
        try:
            self.membership.set_initialized(group_id, initialized)
        except CoordinatorError as e:
            result.outcome = (e.code, str(e))
        return result
