"""ShareGroupHeartbeat (KIP-932): members join, heartbeat and leave share groups, and take the
assignment the coordinator computes for them.

One heartbeat does, in order (Kafka's GroupMetadataManager.shareGroupHeartbeat): check the
request; find or create the group and the member (epoch 0 joins, -1 leaves); fence a member
epoch that is neither the member's nor its previous one; take the new subscription; bump the
group epoch if the subscription, the membership or the subscribed topics' partitions changed;
compute a new target with the ``simple`` assignor if the group epoch moved past it; give the
member its target at once (a share group has nothing to revoke first: records, not partitions,
are what members hold, and they are acquired one fetch at a time); store what changed in
``__consumer_offsets`` as one batch, and only then change the group in memory. Members that
stop heartbeating for ``group.share.session.timeout.ms`` are removed by ``expire``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from broker.config.broker_config import BrokerConfig
from broker.config.group_settings import GroupSettings
from broker.coordinator import share_records as sr
from broker.coordinator.alarm import Alarm, Deadlines
from broker.coordinator.consumer_membership import HeartbeatResult, refuse, topics_hash
from broker.coordinator.consumer_records import Entry
from broker.coordinator.group import GroupState
from broker.coordinator.group_store import CoordinatorError, GroupStore, check_length
from broker.coordinator.offsets_writer import OffsetsTopicWriter
from broker.coordinator.share_group import ShareGroup, ShareMember, simple_assignment
from kafkube_contract.image import TopicMetadata

log = logging.getLogger(__name__)

JOIN, LEAVE = 0, -1
Topics = Callable[[], Mapping[str, TopicMetadata]]


@dataclass(frozen=True, slots=True)
class ShareHeartbeat:
    """A ShareGroupHeartbeat request. None: unchanged since the member's last heartbeat."""

    group_id: str
    member_id: str
    member_epoch: int
    rack_id: str | None = None
    subscribed_topic_names: tuple[str, ...] | None = None




class ShareMembership:
    def __init__(self, config: BrokerConfig, store: GroupStore, writer: OffsetsTopicWriter,
                 topics: Topics, settings: GroupSettings | None = None,
                 alarm: Alarm | None = None) -> None:
        self.config = config
        self.settings = settings or GroupSettings(config)
        self.store = store
        self.writer = writer
        self.topics = topics
        self.sessions = Deadlines(alarm or Alarm())  # (group, member) -> session deadline
        self.administered: set[str] = set()  # groups whose offsets are being changed
        # Called with (group id, member id) once a member is gone: the records it holds on
        # the partitions' leaders are released (broker.share).
        self.on_member_left: Callable[[str, str], None] = lambda group_id, member_id: None

    def heartbeat(self, hb: ShareHeartbeat, client_id: str, client_host: str, now: float
                  ) -> HeartbeatResult:
        try:
            self._validate(hb)
            return self._heartbeat(hb, client_id, client_host, now)
        except CoordinatorError as e:
            return HeartbeatResult(e.code, str(e))

    def _validate(self, hb: ShareHeartbeat) -> None:
        invalid = ErrorCode.invalid_request
        if not hb.group_id:
            raise refuse(invalid, "GroupId can't be empty.")
        if not hb.member_id:
            raise refuse(invalid, "MemberId can't be empty.")
        if hb.rack_id == "":
            raise refuse(invalid, "RackId can't be empty.")
        for name in (hb.group_id, hb.member_id, hb.rack_id, *(hb.subscribed_topic_names or ())):
            check_length(name, "name", invalid)
        if hb.member_epoch == JOIN:
            if not hb.subscribed_topic_names:
                raise refuse(invalid, "SubscribedTopicNames must be set in first request.")
        elif hb.member_epoch < LEAVE:
            raise refuse(invalid, "MemberEpoch is invalid.")

    def _heartbeat(self, hb: ShareHeartbeat, client_id: str, client_host: str, now: float
                   ) -> HeartbeatResult:
        if hb.member_epoch == JOIN and hb.group_id in self.administered:
            raise refuse(ErrorCode.coordinator_load_in_progress,
                         f"The offsets of share group {hb.group_id} are being changed: "
                         f"join again in a moment.")
        current = self._group(hb.group_id, create=hb.member_epoch == JOIN)
        group = _copy(current)
        entries: list[Entry] = []
        if hb.member_epoch == LEAVE:
            if hb.member_id not in group.members:
                raise refuse(ErrorCode.unknown_member_id,
                              f"Member {hb.member_id} is not a member of group {hb.group_id}.")
            self.remove_member(group, hb.member_id, entries)
            return HeartbeatResult(member_id=hb.member_id, member_epoch=LEAVE)
        member = self._member(group, hb, client_id, client_host)
        before = group.members.get(member.member_id)
        if before is None or _facts(member) != _facts(before):
            entries.append(sr.member_metadata_entry(group.group_id, member))
        group.members[member.member_id] = member
        topics = self.topics()
        metadata_hash = _metadata_hash(group, topics)
        if before is None or member.subscribed_topic_names != before.subscribed_topic_names \
                or metadata_hash != group.metadata_hash:
            group.group_epoch += 1
            group.metadata_hash = metadata_hash
            entries.append(sr.group_metadata_entry(group))
        if group.group_epoch > group.target_epoch:
            entries.extend(self._new_target(group, topics))
        target = group.target.get(member.member_id, {})
        updated = member
        if member.member_epoch != group.target_epoch or member.assigned != target:
            updated = dataclasses.replace(member, member_epoch=group.target_epoch,
                                          previous_member_epoch=member.member_epoch,
                                          assigned=target)
        if updated != member or before is None:
            entries.append(sr.current_assignment_entry(group.group_id, updated))
        group.members[updated.member_id] = updated
        self.store_group(group, entries)
        self.sessions[(group.group_id, updated.member_id)] = \
            now + self.settings.number(group.group_id, "share.session.timeout.ms") / 1000
        changed = before is None or before.assigned != updated.assigned
        return HeartbeatResult(
            member_id=updated.member_id, member_epoch=updated.member_epoch,
            heartbeat_interval_ms=self.settings.number(group.group_id,
                                                       "share.heartbeat.interval.ms"),
            assignment=updated.assigned if hb.member_epoch == JOIN or changed else None)

    def _group(self, group_id: str, create: bool) -> ShareGroup:
        classic = self.store.groups.get(group_id)
        if group_id in self.store.consumer_groups or (
                classic is not None and not classic.is_(GroupState.DEAD)):
            raise refuse(ErrorCode.group_id_not_found, f"Group {group_id} is not a share group.")
        group = self.store.share_groups.get(group_id)
        if group is not None:
            return group
        if not create:
            raise refuse(ErrorCode.group_id_not_found, f"Share group {group_id} not found.")
        return ShareGroup(group_id)

    def _member(self, group: ShareGroup, hb: ShareHeartbeat, client_id: str,
                client_host: str) -> ShareMember:
        member = group.members.get(hb.member_id)
        if member is None:
            if hb.member_epoch != JOIN:
                raise refuse(ErrorCode.unknown_member_id,
                              f"Member {hb.member_id} is not a member of group {hb.group_id}.")
            if len(group.members) >= self.config["group.share.max.size"]:
                raise refuse(ErrorCode.group_max_size_reached,
                              f"The share group has reached its maximum capacity of "
                              f"{self.config['group.share.max.size']} members.")
            member = ShareMember(hb.member_id)
        elif hb.member_epoch != JOIN and hb.member_epoch not in (
                member.member_epoch, member.previous_member_epoch):
            raise refuse(ErrorCode.fenced_member_epoch,
                          f"The share group member has a member epoch ({hb.member_epoch}) "
                          f"other than its own ({member.member_epoch}): it must rejoin.")
        return dataclasses.replace(
            member, client_id=client_id, client_host=client_host,
            rack_id=hb.rack_id if hb.rack_id is not None else member.rack_id,
            subscribed_topic_names=tuple(hb.subscribed_topic_names)
            if hb.subscribed_topic_names is not None else member.subscribed_topic_names)

    def _new_target(self, group: ShareGroup, topics: Mapping[str, TopicMetadata]
                    ) -> list[Entry]:
        subscriptions = {m.member_id: frozenset(topics[n].uuid for n in m.subscribed_topic_names
                                                if n in topics)
                         for m in group.members.values()}
        partitions = {t.uuid: t.partitions for t in topics.values()}
        target = simple_assignment(subscriptions, partitions, group.target)
        entries = [sr.target_member_entry(group.group_id, m, a) for m, a in target.items()
                   if group.target.get(m) != a]
        group.target = target
        group.target_epoch = group.group_epoch
        group.rebalances += 1
        entries.append(sr.target_metadata_entry(group))
        names = {t.uuid: name for name, t in topics.items()}
        initialized = dict(group.initialized)
        for tid, parts in ((tid, parts) for a in target.values() for tid, parts in a.items()):
            name, known = initialized.get(tid, (names.get(tid, ""), frozenset()))
            initialized[tid] = (name, known | parts)
        if initialized != group.initialized:
            group.initialized = initialized
            entries.append(sr.state_partitions_entry(group))
        return entries

    # -- what an administrator changes -------------------------------------------------------

    @contextlib.contextmanager
    def administering(self, group_id: str, create: bool = False) -> Iterator[ShareGroup]:
        """The share group while an administrator resets or deletes its offsets, or deletes
        it: it must have no member (Kafka's NON_EMPTY_GROUP otherwise), and none may join
        until the change is done, since the state changes over several awaited steps.
        ``create``: a group not known yet is made (AlterShareGroupOffsets may come before
        any consumer, as in Kafka)."""
        if group_id in self.administered:
            raise refuse(ErrorCode.coordinator_load_in_progress,
                         f"Another change of share group {group_id} is under way.")
        known = self.store.share_groups.get(group_id)
        group = known if known is not None or not create else self._group(group_id, True)
        if group is None:
            raise refuse(ErrorCode.group_id_not_found, f"Group {group_id} is not a share group.")
        if group.members:
            raise refuse(ErrorCode.non_empty_group,
                         f"Share group {group_id} has {len(group.members)} members: offsets "
                         f"are changed, and a group deleted, only while it has none.")
        self.administered.add(group_id)
        try:
            yield group
        finally:
            self.administered.discard(group_id)

    def change_initialized(self, group_id: str,
                           added: Mapping[uuid.UUID, tuple[str, frozenset[int]]],
                           removed: Mapping[uuid.UUID, frozenset[int]]) -> None:
        """Store the partitions the group has share state of, after an administrator
        initialized (AlterShareGroupOffsets) or deleted (DeleteShareGroupOffsets, a failed
        DeleteGroups) some; a group made by the change is stored with it."""
        current = self.store.share_groups.get(group_id) or ShareGroup(group_id)
        group = _copy(current)
        for topic_id, (name, partitions) in added.items():
            known = group.initialized.get(topic_id, (name, frozenset()))[1]
            group.initialized[topic_id] = (name, known | partitions)
        for topic_id, partitions in removed.items():
            name, known = group.initialized.get(topic_id, ("", frozenset()))
            group.initialized[topic_id] = (name, known - partitions)
        group.initialized = {t: v for t, v in group.initialized.items() if v[1]}
        entries: list[Entry] = []
        if group_id not in self.store.share_groups:
            group.group_epoch = 1  # an empty group of epoch 0 is not loaded again
            entries.append(sr.group_metadata_entry(group))
        if group.initialized != current.initialized:
            entries.append(sr.state_partitions_entry(group))
        if entries:
            self.store_group(group, entries)

    def remove_member(self, group: ShareGroup, member_id: str, entries: list[Entry]) -> None:
        """Remove a member from ``group`` (a copy) and store it; its records are released."""
        del group.members[member_id]
        group.target.pop(member_id, None)
        group.group_epoch += 1
        entries.extend(sr.member_tombstones(group.group_id, member_id))
        entries.append(sr.group_metadata_entry(group))
        self.store_group(group, entries)
        self.sessions.pop((group.group_id, member_id), None)
        self.on_member_left(group.group_id, member_id)

    def store_group(self, group: ShareGroup, entries: list[Entry]) -> None:
        error = self.writer.write(group.group_id, entries)
        if error != ErrorCode.none:
            raise refuse(error, f"the group could not be stored: {error.name}")
        self.store.share_groups[group.group_id] = group
        self.store.groups.pop(group.group_id, None)  # an empty classic group is replaced

    # -- timers ------------------------------------------------------------------------------

    def resume(self, group: ShareGroup, now: float) -> None:
        """A group loaded by a new coordinator: every member has a session to heartbeat in."""
        session = self.settings.number(group.group_id, "share.session.timeout.ms") / 1000
        for member_id in group.members:
            self.sessions[(group.group_id, member_id)] = now + session

    def drop(self, group_id: str) -> None:
        for key in [k for k in self.sessions if k[0] == group_id]:
            del self.sessions[key]

    def next_deadline(self) -> float:
        """When ``expire`` next has something to do (inf: nothing is timed)."""
        return min(self.sessions.values(), default=math.inf)

    def expire(self, now: float) -> None:
        for group_id, member_id in sorted(k for k, d in self.sessions.items() if d <= now):
            current = self.store.share_groups.get(group_id)
            if current is None or member_id not in current.members:
                self.sessions.pop((group_id, member_id), None)
                continue
            try:
                self.remove_member(_copy(current), member_id, [])
            except CoordinatorError:
                continue  # not the coordinator any more, or not writable now: next tick
            log.info("share group %s: member %s removed, its session expired", group_id,
                     member_id)


def _copy(group: ShareGroup) -> ShareGroup:
    return dataclasses.replace(group, members=dict(group.members), target=dict(group.target),
                               initialized=dict(group.initialized))


def _facts(m: ShareMember) -> tuple:
    """What ShareGroupMemberMetadata holds: a change is written."""
    return m.rack_id, m.client_id, m.client_host, m.subscribed_topic_names


def _metadata_hash(group: ShareGroup, topics: Mapping[str, TopicMetadata]) -> int:
    return topics_hash(group.subscribed_topic_names(), topics)
