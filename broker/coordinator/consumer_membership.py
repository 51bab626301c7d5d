"""ConsumerGroupHeartbeat (KIP-848): members join, heartbeat and leave consumer groups, and the
coordinator computes the target assignment and each member's next step.

One heartbeat does, in order (Kafka's GroupMetadataManager.consumerGroupHeartbeat): check the
request; find or create the group and the member (epoch 0 joins, -1 leaves, -2 leaves for now
keeping a static member's place); fence a stale member epoch; take the member's new
subscription; bump the group epoch if the subscription, the membership or the subscribed
topics' partitions changed; compute a new target assignment if the group epoch moved past
it; move the member towards its target (``reconciliation``); store what changed in
``__consumer_offsets`` (``consumer_records``) as one batch, and only then change the group in
memory. Members that stop heartbeating for ``group.consumer.session.timeout.ms``, or keep
partitions they were told to revoke past their rebalance timeout, are removed by ``expire``.

Nothing here waits: a heartbeat answers at once with what the member may do now, and the
member asks again in ``group.consumer.heartbeat.interval.ms``.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import logging
import math
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import re2
from kio.schema.errors import ErrorCode

from broker.config.broker_config import BrokerConfig
from broker.config.group_settings import GroupSettings
from broker.coordinator import consumer_records as cr
from broker.coordinator import group_migration as migration
from broker.coordinator.alarm import Alarm, Deadlines
from broker.coordinator.assignors import GroupSpec, assign
from broker.coordinator.consumer_group import (
    Assignment,
    ConsumerGroup,
    ConsumerMember,
    MemberState,
)
from broker.coordinator.consumer_protocol import MalformedProtocol
from broker.coordinator.group import Group, GroupState
from broker.coordinator.group_store import CoordinatorError, GroupStore, check_length, fail_waits
from broker.coordinator.offsets_writer import Entry, OffsetsTopicWriter
from broker.coordinator.reconciliation import fenced, reconcile
from kafkube_contract.image import TopicMetadata

log = logging.getLogger(__name__)

JOIN, LEAVE, STATIC_LEAVE = 0, -1, -2
Topics = Callable[[], Mapping[str, TopicMetadata]]


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """A ConsumerGroupHeartbeat request, version-independent. None: unchanged since the
    member's last heartbeat (or, for ``owned``, not said)."""

    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    subscribed_topic_names: tuple[str, ...] | None = None
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    owned: Assignment | None = None

    @property
    def is_full(self) -> bool:
        """A join, or a heartbeat restating everything (the client does after an error):
        it gets the member's whole assignment back."""
        return self.member_epoch == JOIN or (
            self.rebalance_timeout_ms != -1 and self.owned is not None
            and (self.subscribed_topic_names is not None
                 or self.subscribed_topic_regex is not None))


@dataclass(frozen=True, slots=True)
class HeartbeatResult:
    error: ErrorCode = ErrorCode.none
    message: str | None = None
    member_id: str | None = None
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    assignment: Assignment | None = None  # None: unchanged


def refuse(code: ErrorCode, message: str) -> CoordinatorError:
    return CoordinatorError(code, message)


class ConsumerMembership:
    def __init__(self, config: BrokerConfig, store: GroupStore, writer: OffsetsTopicWriter,
                 topics: Topics,
                 on_downgrade: Callable[[Group, float], None] = lambda group, now: None,
                 settings: GroupSettings | None = None, alarm: Alarm | None = None) -> None:
        self.config = config
        self.settings = settings or GroupSettings(config)
        # Called with a classic group a consumer group became, stored: it must rebalance.
        self.on_downgrade = on_downgrade
        self.store = store
        self.writer = writer
        self.topics = topics
        self.alarm = alarm or Alarm()
        self.sessions = Deadlines(self.alarm)  # (group, member) -> session deadline
        # A member's deadline to act: revoke its partitions (KIP-848), or, for a classic
        # member, rejoin or sync after it was told to (its rebalance timeout).
        self.deadlines = Deadlines(self.alarm)

    @property
    def assignors(self) -> list[str]:
        return self.config["group.consumer.assignors"]

    # -- the heartbeat -----------------------------------------------------------------------

    def heartbeat(self, hb: Heartbeat, client_id: str, client_host: str, now: float,
                  version: int = 1) -> HeartbeatResult:
        try:
            self._validate(hb, version)
            return self._heartbeat(hb, client_id, client_host, now)
        except CoordinatorError as e:
            return HeartbeatResult(e.code, str(e))

    def _validate(self, hb: Heartbeat, version: int) -> None:
        invalid = ErrorCode.invalid_request
        if not hb.group_id:
            raise refuse(invalid, "GroupId can't be empty.")
        check_length(hb.group_id, "group id", invalid)
        if hb.instance_id == "":
            raise refuse(invalid, "InstanceId can't be empty.")
        if hb.rack_id == "":
            raise refuse(invalid, "RackId can't be empty.")
        for name in (hb.member_id, hb.instance_id, hb.rack_id, hb.server_assignor,
                     hb.subscribed_topic_regex, *(hb.subscribed_topic_names or ())):
            check_length(name, "name", invalid)  # they are stored with an int16 length
        if hb.member_epoch > 0 or hb.member_epoch == LEAVE:
            if not hb.member_id:
                raise refuse(invalid, "MemberId can't be empty.")
        elif hb.member_epoch == JOIN:
            if not hb.member_id and version >= 1:  # KIP-1082: the client makes its id
                raise refuse(invalid, "MemberId can't be empty.")
            if hb.rebalance_timeout_ms == -1:
                raise refuse(invalid, "RebalanceTimeoutMs must be provided in first request.")
            if hb.owned is None or hb.owned:
                raise refuse(invalid, "TopicPartitions must be empty when (re-)joining.")
            if hb.subscribed_topic_names is None and hb.subscribed_topic_regex is None:
                raise refuse(invalid, "Either SubscribedTopicNames or SubscribedTopicRegex "
                                      "must be non-null when (re-)joining.")
        elif hb.member_epoch == STATIC_LEAVE:
            if not hb.member_id:
                raise refuse(invalid, "MemberId can't be empty.")
            if hb.instance_id is None:
                raise refuse(invalid, "InstanceId can't be null.")
        else:
            raise refuse(invalid, "MemberEpoch is invalid.")
        if hb.server_assignor is not None and hb.server_assignor not in self.assignors:
            raise refuse(ErrorCode.unsupported_assignor,
                         f"ServerAssignor {hb.server_assignor} is not supported. Supported "
                         f"assignors: {', '.join(self.assignors)}.")
        if hb.subscribed_topic_regex:
            try:
                topic_pattern(hb.subscribed_topic_regex)
            except re2.error as e:
                why = e.args[0].decode() if e.args and isinstance(e.args[0], bytes) else e
                raise refuse(ErrorCode.invalid_regular_expression,
                             f"SubscribedTopicRegex `{hb.subscribed_topic_regex}` is not a "
                             f"valid regular expression: {why}.") from None

    def _heartbeat(self, hb: Heartbeat, client_id: str, client_host: str,
                   now: float) -> HeartbeatResult:
        current, classic = self._group(hb.group_id, create=hb.member_epoch == JOIN)
        group = copy_group(current)  # changed here, kept only once stored
        entries: list[Entry] = migration.upgrade_entries(classic, current) if classic else []
        if hb.member_epoch in (LEAVE, STATIC_LEAVE):
            return self._leave(group, hb, entries, now)
        replaced: list[ConsumerMember] = []  # a static member's previous incarnation
        member = self._member(group, hb, client_id, client_host, entries, replaced)
        # A static member back under a new id is the same subscription: no rebalance.
        compared = group.members.get(member.member_id) or (replaced[0] if replaced else None)
        updated = self.advance(group, member, compared, hb.owned, now, entries)
        self.store_group(group, entries)
        if classic is not None:
            self._upgraded(classic, group, now)
        for old in replaced:
            self.forget(group.group_id, old.member_id)
        key = (group.group_id, updated.member_id)
        self.sessions[key] = now + self.settings.number(
            group.group_id, "consumer.session.timeout.ms") / 1000
        if updated.state is MemberState.UNREVOKED_PARTITIONS:
            self.deadlines.setdefault(key, now + updated.rebalance_timeout_ms / 1000)
        else:
            self.deadlines.pop(key, None)
        previous = current.members.get(updated.member_id)
        changed = previous is None or previous.assigned != updated.assigned
        return HeartbeatResult(
            member_id=updated.member_id, member_epoch=updated.member_epoch,
            heartbeat_interval_ms=self.settings.number(group.group_id,
                                                       "consumer.heartbeat.interval.ms"),
            assignment=updated.assigned if hb.is_full or changed else None)

    def advance(self, group: ConsumerGroup, member: ConsumerMember,
                compared: ConsumerMember | None, owned: Assignment | None, now: float,
                entries: list[Entry]) -> ConsumerMember:
        """Take ``member``'s new facts into ``group`` (a copy, stored by the caller): bump
        the group epoch if its subscription differs from ``compared``'s or the subscribed
        topics changed, compute a new target if the epoch moved past it, and move the member
        towards its target given the partitions it says it ``owned``. The records to store
        go to ``entries``. Shared by heartbeats and classic members' JoinGroup."""
        before = group.members.get(member.member_id)
        subscription_changed = compared is None or \
            _subscription(member) != _subscription(compared)
        if before is None or _stored_facts(member) != _stored_facts(before):
            entries.append(cr.member_metadata_entry(group.group_id, member))
        group.put(member)
        topics = self.topics()
        metadata_hash = _metadata_hash(group, topics)
        if subscription_changed or metadata_hash != group.metadata_hash:
            group.group_epoch += 1
            group.metadata_hash = metadata_hash
            entries.append(cr.group_metadata_entry(group.group_id, group.group_epoch,
                                                   metadata_hash))
        if group.group_epoch > group.target_epoch:
            entries.extend(self._new_target(group, topics, now))
        updated = reconcile(member, group.target_epoch, group.target.get(member.member_id, {}),
                            group.owner, owned)
        if updated != member or before is None:
            entries.append(cr.current_assignment_entry(group.group_id, updated))
        group.put(updated)
        return updated

    def _group(self, group_id: str, create: bool) -> tuple[ConsumerGroup, Group | None]:
        """The consumer group a heartbeat is for, and the classic group it is upgraded from
        (not stored yet) if a member joins a classic group that may be upgraded."""
        if group_id in self.store.share_groups:
            raise refuse(ErrorCode.group_id_not_found, f"Group {group_id} is not a consumer group.")
        classic = self.store.groups.get(group_id)
        if classic is not None and not classic.is_(GroupState.DEAD) and classic.members:
            why = migration.why_not_upgrade(classic, self.config["group.consumer.migration.policy"],
                                            self.config["group.consumer.max.size"])
            if not create or why is not None:
                raise refuse(ErrorCode.group_id_not_found,
                             why or f"Group {group_id} is not a consumer group.")
            try:
                return migration.upgraded(classic, self.topics()), classic
            except MalformedProtocol:
                raise refuse(ErrorCode.group_id_not_found,
                             f"Cannot upgrade the classic group {group_id} to consumer group "
                             f"because the embedded consumer protocol is malformed.") from None
        group = self.store.consumer_groups.get(group_id)
        if group is not None:
            return group, None
        if not create:
            raise refuse(ErrorCode.group_id_not_found, f"Consumer group {group_id} not found.")
        return ConsumerGroup(group_id), None

    def _upgraded(self, classic: Group, group: ConsumerGroup, now: float) -> None:
        """A classic group became ``group``: its members' waiting JoinGroup or SyncGroup
        are told to rejoin (they will join the consumer group), and each has its classic
        session to heartbeat in."""
        log.info("group %s: upgraded from the classic protocol at generation %d",
                 group.group_id, classic.generation)
        for member in classic.members.values():
            fail_waits(member, ErrorCode.rebalance_in_progress)
        classic.state = GroupState.DEAD
        for member in group.members.values():
            if member.classic is not None:
                self.sessions[(group.group_id, member.member_id)] = \
                    now + member.classic.session_timeout_ms / 1000

    def _member(self, group: ConsumerGroup, hb: Heartbeat, client_id: str, client_host: str,
                entries: list[Entry], replaced: list[ConsumerMember]) -> ConsumerMember:
        member_id = hb.member_id or str(uuid.uuid4())  # v0 joins may leave it to us
        member = group.members.get(member_id)
        if hb.member_epoch == JOIN:
            if hb.instance_id is not None:
                member = self._static_join(group, hb, member_id, entries, replaced) or member
            if member is None:
                if len(group.members) >= self.config["group.consumer.max.size"]:
                    raise refuse(ErrorCode.group_max_size_reached,
                                 f"The consumer group has reached its maximum capacity of "
                                 f"{self.config['group.consumer.max.size']} members.")
                member = ConsumerMember(member_id)
        else:
            if member is None:
                raise refuse(ErrorCode.unknown_member_id,
                             f"Member {member_id} is not a member of group {group.group_id}.")
            why = fenced(member, hb.member_epoch, hb.owned)
            if why is not None:
                raise refuse(ErrorCode.fenced_member_epoch, why)
            if hb.instance_id is not None and hb.instance_id != member.instance_id:
                raise refuse(ErrorCode.fenced_instance_id,
                             f"Member {member_id} joined with instance id "
                             f"{member.instance_id}, not {hb.instance_id}: it must rejoin.")
        return dataclasses.replace(
            member, client_id=client_id, client_host=client_host, classic=None,
            instance_id=hb.instance_id if hb.instance_id is not None else member.instance_id,
            rack_id=hb.rack_id if hb.rack_id is not None else member.rack_id,
            subscribed_topic_names=hb.subscribed_topic_names
            if hb.subscribed_topic_names is not None else member.subscribed_topic_names,
            subscribed_topic_regex=(hb.subscribed_topic_regex or None)
            if hb.subscribed_topic_regex is not None else member.subscribed_topic_regex,
            rebalance_timeout_ms=hb.rebalance_timeout_ms
            if hb.rebalance_timeout_ms != -1 else member.rebalance_timeout_ms,
            server_assignor=hb.server_assignor
            if hb.server_assignor is not None else member.server_assignor)

    def _static_join(self, group: ConsumerGroup, hb: Heartbeat, member_id: str,
                     entries: list[Entry], replaced: list[ConsumerMember]
                     ) -> ConsumerMember | None:
        """A static member's new incarnation takes over the old one's place and partitions,
        without a rebalance; refused while the old one has not left (epoch -2)."""
        old_id = group.static_members.get(hb.instance_id or "")
        if old_id is None or old_id == member_id:
            return None
        old = group.members[old_id]
        # A classic member never says it left (-2): a KIP-848 process of its instance id
        # replaces it at once, as in a rolling upgrade of static members.
        if old.member_epoch != STATIC_LEAVE and old.classic is None:
            raise refuse(ErrorCode.unreleased_instance_id,
                         f"Static member {member_id} with instance id {hb.instance_id} cannot "
                         f"join the group because the instance id is owned by {old_id} member.")
        group.remove(old_id)
        entries.extend(cr.member_tombstones(group.group_id, old_id))
        replaced.append(old)  # its timers go once the takeover is stored
        target = group.target.get(old_id)
        if target is not None:
            group.target[member_id] = target
            entries.append(cr.target_member_entry(group.group_id, member_id, target))
        if old.classic is not None:  # it starts over at epoch 0, with what it held
            return dataclasses.replace(old, member_id=member_id, member_epoch=0,
                                       previous_member_epoch=0, classic=None)
        return dataclasses.replace(old, member_id=member_id,
                                   member_epoch=old.previous_member_epoch)

    def _leave(self, group: ConsumerGroup, hb: Heartbeat, entries: list[Entry], now: float
               ) -> HeartbeatResult:
        member = group.members.get(hb.member_id)
        if member is None:
            raise refuse(ErrorCode.unknown_member_id,
                         f"Member {hb.member_id} is not a member of group {group.group_id}.")
        if hb.member_epoch == STATIC_LEAVE and member.instance_id is not None:
            # Gone for now: its partitions wait for it (until its session times out).
            left = dataclasses.replace(member, member_epoch=STATIC_LEAVE,
                                       previous_member_epoch=member.member_epoch)
            group.put(left)
            entries.append(cr.current_assignment_entry(group.group_id, left))
        else:
            self.remove_member(group, member.member_id, entries, now)
            return HeartbeatResult(member_id=member.member_id, member_epoch=hb.member_epoch,
                                   heartbeat_interval_ms=0)
        self.store_group(group, entries)
        return HeartbeatResult(member_id=member.member_id, member_epoch=hb.member_epoch,
                               heartbeat_interval_ms=0)

    def remove_member(self, group: ConsumerGroup, member_id: str, entries: list[Entry],
                      now: float) -> None:
        """Remove a member (it left, or was fenced) from ``group`` (a copy) and store the
        change with ``entries``. If it was the last member speaking KIP-848 and classic ones
        remain, the group goes back to the classic protocol as the policy allows."""
        gid = group.group_id
        why = migration.why_not_downgrade(group, member_id,
                                          self.config["group.consumer.migration.policy"],
                                          self.config["group.max.size"])
        if why is None:
            classic = migration.downgraded(group, member_id, self.topics(), int(time.time() * 1000))
            entries.extend(migration.downgrade_entries(group, classic))
            error = self.writer.write(gid, entries)
            if error != ErrorCode.none:
                raise refuse(error, f"the group could not be stored: {error.name}")
            self.store.consumer_groups.pop(gid, None)
            self.store.groups[gid] = classic
            self.drop(gid)
            log.info("group %s: downgraded to the classic protocol at generation %d as its "
                     "last consumer-protocol member %s left", gid, classic.generation, member_id)
            self.on_downgrade(classic, now)
            return
        self._remove(group, member_id, entries)
        self.store_group(group, entries)
        self.forget(gid, member_id)

    def _remove(self, group: ConsumerGroup, member_id: str, entries: list[Entry]) -> None:
        group.remove(member_id)
        group.group_epoch += 1
        entries.extend(cr.member_tombstones(group.group_id, member_id))
        entries.append(cr.group_metadata_entry(group.group_id, group.group_epoch,
                                               group.metadata_hash))

    def _new_target(self, group: ConsumerGroup, topics: Mapping[str, TopicMetadata],
                    now: float) -> list[Entry]:
        subscriptions = {m.member_id: frozenset(topics[name].uuid for name in
                                                _subscribed(m, topics) if name in topics)
                         for m in group.members.values()}
        partitions = {t.uuid: t.partitions for t in topics.values()}
        assignor = group.preferred_assignor(self.assignors[0])
        target = assign(assignor, GroupSpec(subscriptions, partitions, dict(group.target)))
        entries = [cr.target_member_entry(group.group_id, m, a) for m, a in target.items()
                   if group.target.get(m) != a]
        group.target = target
        group.target_epoch = group.group_epoch
        group.rebalances += 1
        entries.append(cr.target_metadata_entry(group.group_id, group.target_epoch))
        return entries

    def store_group(self, group: ConsumerGroup, entries: list[Entry]) -> None:
        error = self.writer.write(group.group_id, entries)
        if error != ErrorCode.none:
            raise refuse(error, f"the group could not be stored: {error.name}")
        if group.members or group.group_id in self.store.consumer_groups:
            self.store.consumer_groups[group.group_id] = group
            self.store.groups.pop(group.group_id, None)  # an empty classic group is replaced

    def forget(self, group_id: str, member_id: str) -> None:
        self.sessions.pop((group_id, member_id), None)
        self.deadlines.pop((group_id, member_id), None)

    # -- timers ------------------------------------------------------------------------------

    def resume(self, group: ConsumerGroup, now: float) -> None:
        """A group loaded by a new coordinator: every member has a session to heartbeat in,
        and one revoking partitions its rebalance timeout."""
        session = self.settings.number(group.group_id, "consumer.session.timeout.ms") / 1000
        for member in group.members.values():
            self.sessions[(group.group_id, member.member_id)] = now + (
                member.classic.session_timeout_ms / 1000 if member.classic else session)
            if member.state is MemberState.UNREVOKED_PARTITIONS:
                self.deadlines[(group.group_id, member.member_id)] = \
                    now + member.rebalance_timeout_ms / 1000

    def _classic(self, key: tuple[str, str]) -> bool:
        group = self.store.consumer_groups.get(key[0])
        member = group.members.get(key[1]) if group is not None else None
        return member is not None and member.classic is not None

    def drop(self, group_id: str) -> None:
        """The group moved to another coordinator: its timers are not ours any more."""
        for timers in (self.sessions, self.deadlines):
            for key in [k for k in timers if k[0] == group_id]:
                del timers[key]

    def next_deadline(self) -> float:
        """When ``expire`` next has something to do (inf: nothing is timed)."""
        return min(min(self.sessions.values(), default=math.inf),
                   min(self.deadlines.values(), default=math.inf))

    def expire(self, now: float) -> None:
        """Remove members whose session ran out, or who kept partitions to revoke past
        their rebalance timeout (Kafka fences them: they must rejoin)."""
        due = {key for key, deadline in self.sessions.items() if deadline <= now}
        due |= {key for key, deadline in self.deadlines.items() if deadline <= now}
        # Classic members first: a dead one must not be carried into the classic group a
        # KIP-848 member's expiry in the same tick may downgrade the group to.
        for group_id, member_id in sorted(due, key=lambda key: (not self._classic(key), key)):
            current = self.store.consumer_groups.get(group_id)
            if current is None or member_id not in current.members:
                self.forget(group_id, member_id)
                continue
            try:
                self.remove_member(copy_group(current), member_id, [], now)
            except CoordinatorError:
                continue  # not the coordinator any more, or not writable now: next tick


def copy_group(group: ConsumerGroup) -> ConsumerGroup:
    """A copy a heartbeat can change freely: members are immutable, the maps are not."""
    return dataclasses.replace(group, members=dict(group.members),
                               static_members=dict(group.static_members),
                               target=dict(group.target), owners=dict(group.owners))


def _subscription(m: ConsumerMember) -> tuple:
    """What the target assignment depends on: a change bumps the group epoch."""
    return m.subscribed_topic_names, m.subscribed_topic_regex, m.server_assignor, m.rack_id


def _stored_facts(m: ConsumerMember) -> tuple:
    """What ConsumerGroupMemberMetadata holds: a change is written."""
    return (*_subscription(m), m.instance_id, m.client_id, m.client_host,
            m.rebalance_timeout_ms, m.classic)


_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False  # an invalid pattern is the client's error, answered as one


@functools.lru_cache(maxsize=1024)
def topic_pattern(regex: str) -> Any:
    """A subscription's regex, compiled with RE2 (linear time whatever the pattern, as
    Kafka's RE2/J); re2.error when it is not one."""
    return re2.compile(regex, _RE2_OPTIONS)


@functools.lru_cache(maxsize=4096)
def _matching(regex: str, topics: frozenset[str]) -> frozenset[str]:
    """The topics a regex matches, computed once per regex and set of topic names."""
    pattern = topic_pattern(regex)
    return frozenset(t for t in topics if pattern.fullmatch(t) is not None)


def matches(regex: str, topic: str) -> bool:
    return topic_pattern(regex).fullmatch(topic) is not None


def _subscribed(m: ConsumerMember, topics: Mapping[str, TopicMetadata]) -> set[str]:
    names = set(m.subscribed_topic_names)
    if m.subscribed_topic_regex:
        names |= _matching(m.subscribed_topic_regex, frozenset(topics))
    return names


def _metadata_hash(group: ConsumerGroup, topics: Mapping[str, TopicMetadata]) -> int:
    return topics_hash({n for m in group.members.values() for n in _subscribed(m, topics)},
                       topics)


def topics_hash(names: Iterable[str], topics: Mapping[str, TopicMetadata]) -> int:
    """A hash of what an assignment depends on besides the members: each subscribed topic's
    name, id and partition count (KIP-1101's idea; not Kafka's exact function)."""
    known = sorted(n for n in set(names) if n in topics)
    text = ";".join(f"{n}:{topics[n].topic_id}:{topics[n].partitions}" for n in known)
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big",
                          signed=True) if known else 0
