"""The classic group coordinator: membership, rebalances, and committed offsets.

Kafka's rules (GroupCoordinator.scala, the classic protocol): a rebalance collects every
member's JoinGroup, bumps the generation, picks the protocol all members support, and lets
the leader (the first joiner) compute the assignment that SyncGroup hands out. Members that
stop heartbeating for ``session.timeout.ms`` are removed; members that do not rejoin within
the rebalance timeout (the consumer's ``max.poll.interval.ms``) are dropped from the
rebalance. Offsets and group metadata are written to ``__consumer_offsets`` before they
are acknowledged, and read back from it at start-up.

One coordinator serves every group on this broker (the leader of every offsets partition);
it runs on the event loop, and a tick task checks session and rebalance deadlines.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from broker.cluster.internal_topics import partition_for
from broker.cluster.metadata import ConcurrentUpdate
from broker.config.broker_config import BrokerConfig
from broker.coordinator import offsets_topic as ot
from broker.coordinator.group import Group, GroupState, Member
from broker.protocol.batch_codec import Record, encode_batch, read_records
from broker.protocol.records import ATTR_TRANSACTIONAL, BatchHeader
from broker.server.partition import Partition
from broker.server.replica_manager import ReplicaManager, TopicExists
from broker.storage.producer_state import VerificationGuard

log = logging.getLogger(__name__)
TICK_SECONDS = 0.05
OffsetMap = dict[tuple[str, int], ot.OffsetValue]


class CoordinatorError(Exception):
    def __init__(self, code: ErrorCode, message: str = "") -> None:
        super().__init__(message or code.name)
        self.code = code


@dataclass(frozen=True, slots=True)
class JoinResult:
    error: ErrorCode
    generation: int = -1
    protocol_type: str | None = None
    protocol: str | None = None
    leader: str = ""
    member_id: str = ""
    members: tuple[tuple[str, str | None, bytes], ...] = ()
    skip_assignment: bool = False


# The longest name a group keeps: the offsets topic's keys and the legacy (non-flexible)
# responses that list groups and members write strings with a 16-bit length, so a longer
# name sent in a flexible request would be stored and then break every later reader.
MAX_NAME_BYTES = 32767
_UUID_SUFFIX = 37  # "-" and a UUID


def _check_length(name: str | None, what: str, error: ErrorCode) -> None:
    if name is not None and len(name.encode()) > MAX_NAME_BYTES:
        raise CoordinatorError(error, f"the {what} is longer than {MAX_NAME_BYTES} bytes")


def _new_member_id(prefix: str) -> str:
    """Kafka's member id, ``<client id or instance id>-<uuid>``, kept within MAX_NAME_BYTES
    however long the client id (which the request header allows up to that length)."""
    room = MAX_NAME_BYTES - _UUID_SUFFIX
    if len(prefix.encode()) > room:
        prefix = prefix.encode()[:room].decode(errors="ignore")
    return f"{prefix}-{uuid.uuid4()}"


class GroupCoordinator:
    def __init__(self, config: BrokerConfig, replicas: ReplicaManager) -> None:
        self.config = config
        self.replicas = replicas
        self.groups: dict[str, Group] = {}
        self.offsets: dict[str, OffsetMap] = {}
        self.partitions = config["offsets.topic.num.partitions"]
        self._tick_task: asyncio.Task[None] | None = None
        self._last_expiry_check = 0.0
        # Kafka's InitialDelayedJoin: a group rebalancing from Empty waits this long for more
        # members (group.initial.rebalance.delay.ms), extended per join up to the deadline.
        self._initial_delay_until: dict[str, float] = {}
        self.owned: set[int] = set()  # partitions of __consumer_offsets led here
        self._last_write: dict[str, tuple[Partition, int]] = {}
        # Offsets committed inside a transaction, by producer id, then group: they take
        # effect when the transaction's COMMIT marker reaches the group's partition.
        self.pending_txn_offsets: dict[int, dict[str, OffsetMap]] = {}

    # -- lifecycle -----------------------------------------------------------------------

    def load(self) -> None:
        """Take up every ``__consumer_offsets`` partition this broker leads (a restart)."""
        for partition in self.replicas.topic_partitions(ot.TOPIC):
            if partition.is_leader:
                self.on_leadership(partition, True)

    def owns(self, group_id: str) -> bool:
        """Whether this broker coordinates ``group_id``: it leads the group's partition."""
        return partition_for(group_id, self.partitions) in self.owned

    def on_leadership(self, partition: Partition, leader: bool) -> None:
        """Load a partition's groups on becoming its leader, drop them on losing it, as
        Kafka's GroupMetadataManager does on election and resignation."""
        if partition.topic != ot.TOPIC:
            return
        if not leader:
            self.owned.discard(partition.index)
            for group_id in [g for g in self.groups if self.partition_of(g) == partition.index]:
                self._unload(self.groups.pop(group_id))
            for group_id in [g for g in self.offsets if self.partition_of(g) == partition.index]:
                del self.offsets[group_id]
            for by_group in self.pending_txn_offsets.values():
                for group_id in [g for g in by_group if self.partition_of(g) == partition.index]:
                    del by_group[group_id]
            return
        for segment in list(partition.log.segments):
            for batch in segment.batches_from(0):
                raw = segment.read_bytes(batch.position, batch.header.size)
                self._replay_batch(partition.index, batch.header, raw)
        now = time.monotonic()
        for group_id, group in self.groups.items():
            if self.partition_of(group_id) != partition.index or not group.members:
                continue
            # Members keep their assignment; they are expired unless they heartbeat.
            group.state = GroupState.STABLE
            for member in group.members.values():
                member.heartbeat_deadline = now + member.session_timeout_ms / 1000
        self.owned.add(partition.index)
        log.info("coordinating %s-%d: %d groups known", ot.TOPIC, partition.index,
                 sum(1 for g in self.groups if self.partition_of(g) == partition.index))

    def partition_of(self, group_id: str) -> int:
        return partition_for(group_id, self.partitions)

    @staticmethod
    def _unload(group: Group) -> None:
        for member in group.members.values():
            for fut in (member.join_future, member.sync_future):
                if fut is not None and not fut.done():
                    fut.set_exception(CoordinatorError(ErrorCode.not_coordinator))

    def _replay_batch(self, index: int, header: BatchHeader, raw: bytes) -> None:
        if header.is_control:
            commit = is_commit_marker(raw)
            if commit is not None:
                self.complete_transaction(index, header.producer_id, commit)
            return
        for record in read_records(raw):
            if header.is_transactional:
                self._replay_txn_offset(header.producer_id, record)
            else:
                self._replay(record)

    def _replay_txn_offset(self, producer_id: int, record: Record) -> None:
        key = ot.decode_key(record.key) if record.key is not None else None
        if isinstance(key, ot.OffsetKey) and record.value is not None:
            pending = self.pending_txn_offsets.setdefault(producer_id, {})
            pending.setdefault(key.group, {})[(key.topic, key.partition)] = ot.decode_offset(
                record.value)

    def _replay(self, record: Record) -> None:
        if record.key is None:
            return
        key = ot.decode_key(record.key)
        if isinstance(key, ot.OffsetKey):
            offsets = self.offsets.setdefault(key.group, {})
            if record.value is None:
                offsets.pop((key.topic, key.partition), None)
            else:
                offsets[(key.topic, key.partition)] = ot.decode_offset(record.value)
        elif isinstance(key, ot.GroupKey):
            if record.value is None:
                self.groups.pop(key.group, None)
                return
            value = ot.decode_group(record.value)
            group = Group(key.group, generation=value.generation,
                          protocol_type=value.protocol_type or None, protocol=value.protocol,
                          state_timestamp=value.current_state_timestamp)
            for m in value.members:
                group.add(Member(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                                 m.session_timeout, m.rebalance_timeout, value.protocol_type,
                                 [(value.protocol or "", m.subscription)], m.assignment))
            group.leader_id = value.leader if value.leader in group.members else group.leader_id
            self.groups[key.group] = group

    def start(self) -> None:
        self._tick_task = asyncio.create_task(self._tick_loop())

    async def stop(self) -> None:
        if self._tick_task:
            self._tick_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._tick_task
        for group in self.groups.values():
            for member in group.members.values():
                for fut in (member.join_future, member.sync_future):
                    if fut is not None and not fut.done():
                        fut.cancel()

    async def ensure_offsets_topic(self) -> None:
        """Create ``__consumer_offsets`` on first use (FindCoordinator, JoinGroup), compacted,
        as Kafka does."""
        if ot.TOPIC in self.replicas.metadata.topics:
            return
        live = max(1, len(self.replicas.metadata.brokers))
        replication_factor = min(self.config["offsets.topic.replication.factor"], live)
        try:
            await self.replicas.create_topic(ot.TOPIC, self.partitions, {
                "cleanup.policy": "compact",
                "segment.bytes": str(self.config["offsets.topic.segment.bytes"]),
            }, replication_factor)
        except TopicExists:  # another broker created it first
            pass
        except ConcurrentUpdate as e:  # callers find no coordinator yet, which clients retry
            log.warning("cannot create %s now: %s", ot.TOPIC, e)

    # -- persistence ---------------------------------------------------------------------

    def _write(self, group_id: str, entries: list[tuple[bytes, bytes | None]],
               producer: tuple[int, int] | None = None,
               verified: VerificationGuard | None = None) -> ErrorCode:
        """Append records for ``group_id`` to its offsets partition; NONE once stored.
        With ``producer`` (id, epoch) they are a transactional batch of that producer,
        checked against the transaction verification ``verified`` if there was one."""
        if not entries:
            return ErrorCode.none
        partition = self.replicas.get(ot.TOPIC, partition_for(group_id, self.partitions))
        now = int(time.time() * 1000)
        records = [Record(i, now, key, value) for i, (key, value) in enumerate(entries)]
        if producer is None:
            batch = encode_batch(records, 0)
        else:
            # Sequence 0 always, as Kafka writes them: a coordinator's append is not
            # sequence-checked, only fenced by the producer's epoch.
            batch = encode_batch(records, 0, producer_id=producer[0], producer_epoch=producer[1],
                                 base_sequence=0, attributes=ATTR_TRANSACTIONAL)
        if partition is None or not partition.is_leader:
            return ErrorCode.not_coordinator
        outcome = partition.append(batch, 2**31 - 1, from_coordinator=producer is not None,
                                   verified=verified)
        if outcome.error in (ErrorCode.invalid_producer_epoch, ErrorCode.producer_fenced):
            return ErrorCode.producer_fenced
        if outcome.error == ErrorCode.invalid_txn_state:
            return outcome.error
        if outcome.error != ErrorCode.none:
            log.error("writing group %s to %s failed: %s", group_id, ot.TOPIC, outcome.message)
            return ErrorCode.coordinator_not_available
        self._last_write[group_id] = (partition, outcome.last_offset)
        return ErrorCode.none

    async def await_replication(self, group_id: str, timeout: float) -> ErrorCode:
        """Wait until the group's last write is committed (in the whole ISR), so an offset
        commit is acknowledged only once a leader change cannot lose it (KAFKA-20634)."""
        written = self._last_write.pop(group_id, None)
        if written is None:
            return ErrorCode.none
        partition, last_offset = written
        error = await partition.wait_committed(last_offset, 1, timeout)
        if error == ErrorCode.not_leader_or_follower:
            return ErrorCode.not_coordinator
        if error != ErrorCode.none:
            return ErrorCode.coordinator_not_available
        return ErrorCode.none

    def _group_record(self, group: Group) -> tuple[bytes, bytes | None]:
        members = tuple(
            ot.MemberValue(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                           m.rebalance_timeout_ms, m.session_timeout_ms,
                           m.metadata_for(group.protocol), m.assignment)
            for m in group.members.values()
        )
        value = ot.GroupValue(group.protocol_type or "", group.generation, group.protocol,
                              group.leader_id if group.members else None,
                              group.state_timestamp, members)
        return ot.encode_key(ot.GroupKey(group.group_id)), ot.encode_group(value)

    # -- membership ----------------------------------------------------------------------

    def _validate_group_id(self, group_id: str | None) -> None:
        if not group_id:
            raise CoordinatorError(ErrorCode.invalid_group_id, "the group id is empty")
        _check_length(group_id, "group id", ErrorCode.invalid_group_id)

    async def join_group(
        self, group_id: str, member_id: str, group_instance_id: str | None, client_id: str,
        client_host: str, session_timeout_ms: int, rebalance_timeout_ms: int,
        protocol_type: str, protocols: list[tuple[str, bytes]], require_known_member: bool,
    ) -> JoinResult:
        try:
            self._validate_group_id(group_id)
            for name, what in ((group_instance_id, "group instance id"),
                               (protocol_type, "protocol type"),
                               *((p, "protocol name") for p, _ in protocols)):
                _check_length(name, what, ErrorCode.invalid_request)
        except CoordinatorError as e:
            return JoinResult(e.code, member_id=member_id)
        low = self.config["group.min.session.timeout.ms"]
        high = self.config["group.max.session.timeout.ms"]
        if not low <= session_timeout_ms <= high:
            return JoinResult(ErrorCode.invalid_session_timeout, member_id=member_id)
        await self.ensure_offsets_topic()
        group = self.groups.get(group_id)
        if group is None:
            if member_id:
                return JoinResult(ErrorCode.unknown_member_id, member_id=member_id)
            group = self.groups[group_id] = Group(group_id)
        if group.is_(GroupState.DEAD):
            return JoinResult(ErrorCode.coordinator_not_available, member_id=member_id)
        if not group.supports(protocol_type, protocols):
            return JoinResult(ErrorCode.inconsistent_group_protocol, member_id=member_id)
        if len(group.members) >= self.config["group.max.size"] and member_id not in group.members:
            return JoinResult(ErrorCode.group_max_size_reached, member_id=member_id)
        now = time.monotonic()
        known_static = group.static_members.get(group_instance_id or "")
        if known_static is not None and member_id and member_id != known_static:
            return JoinResult(ErrorCode.fenced_instance_id, member_id=member_id)
        if known_static is not None and not member_id:
            # A static member's new process: it takes over the old member id's place.
            return await self._rejoin_static(group, group_instance_id, member_id, client_id,
                                             client_host, session_timeout_ms,
                                             rebalance_timeout_ms, protocol_type, protocols)
        if not member_id:
            member_id = _new_member_id(client_id)
            if require_known_member and not group_instance_id:
                # KIP-394: hand out the id first, so a client that dies before its first
                # JoinGroup completes leaves no member behind.
                group.pending_members.add(member_id)
                self._pending_deadline(group, member_id, now + session_timeout_ms / 1000)
                return JoinResult(ErrorCode.member_id_required, member_id=member_id)
        elif member_id not in group.members and member_id not in group.pending_members:
            return JoinResult(ErrorCode.unknown_member_id, member_id=member_id)
        group.pending_members.discard(member_id)
        member = group.members.get(member_id)
        if member is None:
            member = Member(member_id, group_instance_id, client_id, client_host,
                            session_timeout_ms, rebalance_timeout_ms, protocol_type, protocols)
            group.add(member)
        else:
            member.heartbeat_deadline = now + session_timeout_ms / 1000
            unchanged = member.protocols == protocols
            if unchanged and group.is_(GroupState.STABLE) and member_id != group.leader_id:
                # A follower rejoining with nothing new: no rebalance, as in Kafka's
                # doCurrentMemberJoinGroup (the leader's JoinGroup always rebalances).
                return self._current_generation(group, member, leader_view=False)
            member.protocols = protocols
            member.session_timeout_ms = session_timeout_ms
            member.rebalance_timeout_ms = rebalance_timeout_ms
        member.heartbeat_deadline = now + session_timeout_ms / 1000
        joined = member.join_future = asyncio.get_running_loop().create_future()
        if not group.is_(GroupState.PREPARING_REBALANCE):
            self._prepare_rebalance(group, f"member {member_id} joined")
        else:
            self._extend_initial_delay(group)
        self._maybe_complete_join(group)  # may answer everyone, this member included
        return await self._await_join(joined, member_id)

    async def _await_join(self, future: asyncio.Future, member_id: str) -> JoinResult:
        try:
            return await future
        except CoordinatorError as e:  # removed or fenced while waiting
            return JoinResult(e.code, member_id=member_id)

    async def _rejoin_static(
        self, group: Group, instance_id: str, member_id: str, client_id: str, client_host: str,
        session_timeout_ms: int, rebalance_timeout_ms: int, protocol_type: str,
        protocols: list[tuple[str, bytes]],
    ) -> JoinResult:
        """A static member (group.instance.id) rejoining: it replaces its old member id.

        In a stable group whose protocol it does not change, it gets its assignment back
        without a rebalance (KIP-345); the old process, if still alive, is fenced.
        """
        old_id = group.static_members[instance_id]
        old = group.members[old_id]
        new_id = _new_member_id(instance_id)
        was_leader = group.leader_id == old_id
        group.remove(old_id)
        for fut in (old.join_future, old.sync_future):
            if fut is not None and not fut.done():
                fut.set_exception(CoordinatorError(ErrorCode.fenced_instance_id))
        member = Member(new_id, instance_id, client_id, client_host, session_timeout_ms,
                        rebalance_timeout_ms, protocol_type, protocols, old.assignment)
        group.add(member)
        if was_leader:
            group.leader_id = new_id
        member.heartbeat_deadline = time.monotonic() + session_timeout_ms / 1000
        # Kafka rebalances only if the group's protocol would change; new metadata bytes
        # (a restarted consumer's subscription carries what it owned) are not enough.
        if group.is_(GroupState.STABLE) and group.select_protocol() == group.protocol:
            self._write(group.group_id, [self._group_record(group)])
            return self._current_generation(group, member, leader_view=True)
        joined = member.join_future = asyncio.get_running_loop().create_future()
        if not group.is_(GroupState.PREPARING_REBALANCE):
            self._prepare_rebalance(group, f"static member {instance_id} rejoined")
        self._maybe_complete_join(group)
        return await self._await_join(joined, new_id)

    def _current_generation(self, group: Group, member: Member, leader_view: bool) -> JoinResult:
        """The current generation, for a member that joins without causing a rebalance.

        A returning static leader gets the member list with ``skip_assignment`` (KIP-814),
        so it knows the group without computing a new assignment.
        """
        skip = leader_view and member.member_id == group.leader_id
        return JoinResult(
            ErrorCode.none, group.generation, group.protocol_type, group.protocol,
            group.leader_id or "", member.member_id,
            self._member_list(group) if skip else (), skip_assignment=skip,
        )

    def _pending_deadline(self, group: Group, member_id: str, deadline: float) -> None:
        def expire() -> None:
            if member_id in group.pending_members:
                group.pending_members.discard(member_id)
                if group.is_(GroupState.PREPARING_REBALANCE):
                    self._maybe_complete_join(group)

        asyncio.get_running_loop().call_later(max(0.0, deadline - time.monotonic()), expire)

    def _prepare_rebalance(self, group: Group, reason: str) -> None:
        log.info("group %s: preparing to rebalance (%s)", group.group_id, reason)
        was_empty = group.is_(GroupState.EMPTY)
        for member in group.members.values():
            if member.sync_future is not None and not member.sync_future.done():
                member.sync_future.set_exception(CoordinatorError(ErrorCode.rebalance_in_progress))
        group.transition(GroupState.PREPARING_REBALANCE)
        timeout = max((m.rebalance_timeout_ms for m in group.members.values()), default=0) / 1000
        now = time.monotonic()
        group.rebalance_deadline = now + timeout
        delay = self.config["group.initial.rebalance.delay.ms"] / 1000
        if was_empty and delay > 0:
            self._initial_delay_until[group.group_id] = min(now + delay, group.rebalance_deadline)
        else:
            self._initial_delay_until.pop(group.group_id, None)

    def _extend_initial_delay(self, group: Group) -> None:
        until = self._initial_delay_until.get(group.group_id)
        if until is None:
            return
        delay = self.config["group.initial.rebalance.delay.ms"] / 1000
        self._initial_delay_until[group.group_id] = min(
            max(until, time.monotonic() + delay), group.rebalance_deadline
        )

    def _maybe_complete_join(
        self, group: Group, deadline_passed: bool = False, now: float | None = None
    ) -> None:
        if not group.is_(GroupState.PREPARING_REBALANCE):
            return
        delayed = self._initial_delay_until.get(group.group_id)
        now = time.monotonic() if now is None else now
        if delayed is not None and now < delayed and not deadline_passed:
            return
        if not deadline_passed and not group.has_all_members_joined:
            return
        self._initial_delay_until.pop(group.group_id, None)
        for member in list(group.members.values()):
            if not member.awaiting_join:
                log.info("group %s: removing %s, which did not rejoin in time",
                         group.group_id, member.member_id)
                group.remove(member.member_id)
        group.pending_members.clear()
        self._complete_join(group)

    def _complete_join(self, group: Group) -> None:
        group.generation += 1
        group.state_timestamp = int(time.time() * 1000)
        if not group.members:
            group.protocol = None
            group.transition(GroupState.EMPTY)
            self._write(group.group_id, [self._group_record(group)])
            log.info("group %s: empty at generation %d", group.group_id, group.generation)
            return
        group.protocol = group.select_protocol()
        group.transition(GroupState.COMPLETING_REBALANCE)
        log.info("group %s: generation %d with %d members, protocol %s, leader %s",
                 group.group_id, group.generation, len(group.members), group.protocol,
                 group.leader_id)
        members = self._member_list(group)
        for member in group.members.values():
            result = JoinResult(
                ErrorCode.none, group.generation, group.protocol_type, group.protocol,
                group.leader_id or "", member.member_id,
                members if member.member_id == group.leader_id else (),
            )
            member.heartbeat_deadline = time.monotonic() + member.session_timeout_ms / 1000
            if member.join_future is not None and not member.join_future.done():
                member.join_future.set_result(result)
            member.join_future = None

    def _member_list(self, group: Group) -> tuple[tuple[str, str | None, bytes], ...]:
        return tuple(
            (m.member_id, m.group_instance_id, m.metadata_for(group.protocol))
            for m in group.members.values()
        )

    def _known_member(self, group_id: str, member_id: str, instance_id: str | None) -> tuple[
        Group, Member
    ]:
        group = self.groups.get(group_id)
        if group is None or group.is_(GroupState.DEAD):
            raise CoordinatorError(ErrorCode.unknown_member_id)
        if instance_id and instance_id in group.static_members and (
            group.static_members[instance_id] != member_id
        ):
            raise CoordinatorError(ErrorCode.fenced_instance_id)
        member = group.members.get(member_id)
        if member is None:
            raise CoordinatorError(ErrorCode.unknown_member_id)
        return group, member

    async def sync_group(
        self, group_id: str, generation: int, member_id: str, instance_id: str | None,
        protocol_type: str | None, protocol: str | None, assignments: dict[str, bytes],
    ) -> tuple[ErrorCode, bytes, Group | None]:
        try:
            self._validate_group_id(group_id)
            group, member = self._known_member(group_id, member_id, instance_id)
        except CoordinatorError as e:
            return e.code, b"", None
        if generation != group.generation:
            return ErrorCode.illegal_generation, b"", group
        if (protocol_type and protocol_type != group.protocol_type) or (
            protocol and protocol != group.protocol
        ):
            return ErrorCode.inconsistent_group_protocol, b"", group
        member.heartbeat_deadline = time.monotonic() + member.session_timeout_ms / 1000
        if group.is_(GroupState.PREPARING_REBALANCE):
            return ErrorCode.rebalance_in_progress, b"", group
        if group.is_(GroupState.STABLE):
            return ErrorCode.none, member.assignment, group
        member.sync_future = asyncio.get_running_loop().create_future()
        if member_id == group.leader_id:
            for m in group.members.values():
                m.assignment = assignments.get(m.member_id, b"")
            error = self._write(group_id, [self._group_record(group)])
            if error != ErrorCode.none:
                for m in group.members.values():
                    m.assignment = b""
                self._prepare_rebalance(group, "storing the assignment failed")
                return error, b"", group
            group.transition(GroupState.STABLE)
            for m in group.members.values():
                if m.sync_future is not None and not m.sync_future.done():
                    m.sync_future.set_result(m.assignment)
        try:
            assignment = await member.sync_future
        except CoordinatorError as e:
            return e.code, b"", group
        finally:
            member.sync_future = None
        return ErrorCode.none, assignment, group

    def heartbeat(
        self, group_id: str, generation: int, member_id: str, instance_id: str | None
    ) -> ErrorCode:
        try:
            self._validate_group_id(group_id)
            group, member = self._known_member(group_id, member_id, instance_id)
        except CoordinatorError as e:
            return e.code
        if group.is_(GroupState.EMPTY):
            return ErrorCode.unknown_member_id
        member.heartbeat_deadline = time.monotonic() + member.session_timeout_ms / 1000
        if generation != group.generation:
            return ErrorCode.illegal_generation
        if group.is_(GroupState.PREPARING_REBALANCE):
            return ErrorCode.rebalance_in_progress
        # Stable, or CompletingRebalance: a member may heartbeat between its JoinGroup answer
        # and its SyncGroup; that is not a reason to rejoin (Kafka answers NONE too).
        return ErrorCode.none

    def leave_group(
        self, group_id: str, members: Iterable[tuple[str, str | None]]
    ) -> tuple[ErrorCode, list[tuple[str, str | None, ErrorCode]]]:
        if not group_id:
            return ErrorCode.invalid_group_id, []
        group = self.groups.get(group_id)
        if group is None or group.is_(GroupState.DEAD):
            return ErrorCode.unknown_member_id, []
        results = []
        for member_id, instance_id in members:
            if instance_id:
                known = group.static_members.get(instance_id)
                if known is None:
                    results.append((member_id, instance_id, ErrorCode.unknown_member_id))
                    continue
                if member_id and member_id != known:
                    results.append((member_id, instance_id, ErrorCode.fenced_instance_id))
                    continue
                member_id = known
            if member_id in group.pending_members:
                group.pending_members.discard(member_id)
                results.append((member_id, instance_id, ErrorCode.none))
                continue
            if member_id not in group.members:
                results.append((member_id, instance_id, ErrorCode.unknown_member_id))
                continue
            self._remove_member(group, member_id, "left the group")
            results.append((member_id, instance_id, ErrorCode.none))
        return ErrorCode.none, results

    def _remove_member(self, group: Group, member_id: str, why: str) -> None:
        member = group.remove(member_id)
        if member is None:
            return
        log.info("group %s: member %s %s", group.group_id, member_id, why)
        for fut in (member.join_future, member.sync_future):
            if fut is not None and not fut.done():
                fut.set_exception(CoordinatorError(ErrorCode.unknown_member_id))
        if group.is_(GroupState.STABLE) or group.is_(GroupState.COMPLETING_REBALANCE):
            self._prepare_rebalance(group, f"member {member_id} {why}")
        self._maybe_complete_join(group)

    async def _tick_loop(self) -> None:
        while True:
            await asyncio.sleep(TICK_SECONDS)
            try:
                self.tick()
            except Exception:
                log.exception("group coordinator tick failed")

    def tick(self, now: float | None = None) -> None:
        """Expire sessions, end rebalances whose deadline or initial delay has passed."""
        now = time.monotonic() if now is None else now
        for group in list(self.groups.values()):
            for member in list(group.members.values()):
                if not member.awaiting_join and member.heartbeat_deadline < now:
                    self._remove_member(group, member.member_id, "session expired")
            if group.is_(GroupState.PREPARING_REBALANCE):
                self._maybe_complete_join(
                    group, deadline_passed=now >= group.rebalance_deadline, now=now
                )
        interval = self.config["offsets.retention.check.interval.ms"] / 1000
        if now - self._last_expiry_check >= interval:
            self._last_expiry_check = now
            self.expire_offsets()

    # -- offsets -------------------------------------------------------------------------

    def commit_offsets(
        self, group_id: str, generation: int, member_id: str, instance_id: str | None,
        offsets: dict[tuple[str, int], ot.OffsetValue],
    ) -> ErrorCode:
        """Store commits; a group error applies to every partition of the request.

        The empty group id is accepted, as Kafka still does for old clients' commits.
        """
        try:
            _check_length(group_id, "group id", ErrorCode.invalid_group_id)
        except CoordinatorError as e:
            return e.code
        group = self.groups.get(group_id)
        if generation < 0 and not member_id:
            # A "simple" commit from a consumer that manages partitions itself.
            if group is not None and not group.is_(GroupState.EMPTY) and group.members:
                return ErrorCode.unknown_member_id
            if group is None:
                group = self.groups[group_id] = Group(group_id)
        else:
            try:
                group, member = self._known_member(group_id, member_id, instance_id)
            except CoordinatorError as e:
                return e.code
            if generation != group.generation:
                return ErrorCode.illegal_generation
            if group.is_(GroupState.COMPLETING_REBALANCE):
                return ErrorCode.rebalance_in_progress
            member.heartbeat_deadline = time.monotonic() + member.session_timeout_ms / 1000
        entries = [
            (ot.encode_key(ot.OffsetKey(group_id, topic, partition)), ot.encode_offset(value))
            for (topic, partition), value in offsets.items()
        ]
        error = self._write(group_id, entries)
        if error == ErrorCode.none:
            self.offsets.setdefault(group_id, {}).update(offsets)
        return error

    def txn_commit_offsets(
        self, group_id: str, producer_id: int, producer_epoch: int, generation: int,
        member_id: str, instance_id: str | None, offsets: dict[tuple[str, int], ot.OffsetValue],
        verified: VerificationGuard | None = None,
    ) -> ErrorCode:
        """TxnOffsetCommit: store offsets as part of the producer's transaction. They are
        written now, as a transactional batch of that producer, and count once its COMMIT
        marker arrives (Kafka's handleTxnCommitOffsets checks, without the rebalance one)."""
        try:
            self._validate_group_id(group_id)
        except CoordinatorError as e:
            return e.code
        group = self.groups.get(group_id)
        if group is None:
            if generation >= 0 or member_id:
                return ErrorCode.illegal_generation if generation >= 0 else (
                    ErrorCode.unknown_member_id)
            group = self.groups[group_id] = Group(group_id)
        else:
            if member_id and member_id not in group.members:
                return ErrorCode.unknown_member_id
            if instance_id is not None and member_id and group.members[member_id] \
                    .group_instance_id not in (None, instance_id):
                return ErrorCode.fenced_instance_id
            if generation >= 0 and generation != group.generation:
                return ErrorCode.illegal_generation
        entries = [
            (ot.encode_key(ot.OffsetKey(group_id, topic, partition)), ot.encode_offset(value))
            for (topic, partition), value in offsets.items()
        ]
        error = self._write(group_id, entries, (producer_id, producer_epoch), verified)
        if error == ErrorCode.none:
            pending = self.pending_txn_offsets.setdefault(producer_id, {})
            pending.setdefault(group_id, {}).update(offsets)
        return error

    def complete_transaction(self, index: int, producer_id: int, commit: bool) -> None:
        """A transaction's marker reached partition ``index`` of the offsets topic: its
        offsets for the groups there take effect (COMMIT) or are dropped (ABORT)."""
        by_group = self.pending_txn_offsets.get(producer_id)
        if not by_group:
            return
        for group_id in [g for g in by_group if self.partition_of(g) == index]:
            offsets = by_group.pop(group_id)
            if commit:
                self.offsets.setdefault(group_id, {}).update(offsets)
        if not by_group:
            del self.pending_txn_offsets[producer_id]

    def has_pending_offsets(self, group_id: str, tp: tuple[str, int]) -> bool:
        """An open transaction holds an offset for this partition (OffsetFetch's
        require_stable answers UNSTABLE_OFFSET_COMMIT until it ends)."""
        return any(tp in by_group.get(group_id, ())
                   for by_group in self.pending_txn_offsets.values())

    def fetch_offsets(
        self, group_id: str, partitions: list[tuple[str, int]] | None
    ) -> dict[tuple[str, int], ot.OffsetValue | None]:
        committed = self.offsets.get(group_id, {})
        if partitions is None:
            return dict(committed)
        return {tp: committed.get(tp) for tp in partitions}

    def delete_groups(self, group_ids: list[str]) -> dict[str, ErrorCode]:
        results = {}
        for group_id in group_ids:
            group = self.groups.get(group_id)
            if group is None and group_id not in self.offsets:
                results[group_id] = ErrorCode.group_id_not_found
                continue
            if group is not None and not (group.is_(GroupState.EMPTY) or group.is_(
                    GroupState.DEAD)):
                results[group_id] = ErrorCode.non_empty_group
                continue
            entries = [
                (ot.encode_key(ot.OffsetKey(group_id, t, p)), None)
                for t, p in self.offsets.get(group_id, {})
            ]
            entries.append((ot.encode_key(ot.GroupKey(group_id)), None))
            results[group_id] = self._write(group_id, entries)
            if results[group_id] == ErrorCode.none:
                self.offsets.pop(group_id, None)
                if group is not None:
                    group.transition(GroupState.DEAD)
                    del self.groups[group_id]
        return results

    def delete_offsets(
        self, group_id: str, partitions: list[tuple[str, int]]
    ) -> tuple[ErrorCode, dict[tuple[str, int], ErrorCode]]:
        group = self.groups.get(group_id)
        if group is None and group_id not in self.offsets:
            return ErrorCode.group_id_not_found, {}
        subscribed = set()
        if group is not None and not group.is_(GroupState.EMPTY):
            topics = group.subscribed_topics()
            if topics is None:
                return ErrorCode.non_empty_group, {}
            subscribed = topics
        results = {}
        entries = []
        for topic, partition in partitions:
            if topic in subscribed:
                results[(topic, partition)] = ErrorCode.group_subscribed_to_topic
                continue
            results[(topic, partition)] = ErrorCode.none
            if (topic, partition) in self.offsets.get(group_id, {}):
                entries.append((ot.encode_key(ot.OffsetKey(group_id, topic, partition)), None))
        error = self._write(group_id, entries)
        if error != ErrorCode.none:
            return error, {}
        for tp, code in results.items():
            if code == ErrorCode.none:
                self.offsets.get(group_id, {}).pop(tp, None)
        return ErrorCode.none, results

    def delete_topic_offsets(self, topic: str) -> None:
        """Forget every group's offsets of a deleted topic (Kafka's onPartitionsDeleted), so
        a topic created again under the same name is read from its start."""
        for group_id, offsets in list(self.offsets.items()):
            gone = [tp for tp in offsets if tp[0] == topic]
            entries = [(ot.encode_key(ot.OffsetKey(group_id, t, p)), None) for t, p in gone]
            if entries and self._write(group_id, entries) == ErrorCode.none:
                for tp in gone:
                    offsets.pop(tp)

    def expire_offsets(self, now_ms: int | None = None) -> int:
        """Drop offsets of empty groups older than offsets.retention.minutes (KIP-211)."""
        now_ms = int(time.time() * 1000) if now_ms is None else now_ms
        horizon = now_ms - self.config["offsets.retention.minutes"] * 60_000
        expired = 0
        for group_id, offsets in list(self.offsets.items()):
            group = self.groups.get(group_id)
            if group is not None and not group.is_(GroupState.EMPTY):
                continue
            base = group.state_timestamp if group is not None and group.state_timestamp > 0 else 0
            old = [tp for tp, v in offsets.items() if max(v.commit_timestamp, base) < horizon]
            if not old:
                continue
            entries = [(ot.encode_key(ot.OffsetKey(group_id, t, p)), None) for t, p in old]
            if len(old) == len(offsets):
                # An empty group with no offsets left is gone (cleanupGroupMetadata).
                entries.append((ot.encode_key(ot.GroupKey(group_id)), None))
            if self._write(group_id, entries) == ErrorCode.none:
                for tp in old:
                    offsets.pop(tp)
                expired += len(old)
                if not offsets:
                    del self.offsets[group_id]
                    self.groups.pop(group_id, None)
        return expired

    # -- reading state -------------------------------------------------------------------

    def describe(self, group_id: str) -> Group | None:
        return self.groups.get(group_id)

    def list_groups(self) -> list[Group]:
        groups = dict(self.groups)
        for group_id, offsets in self.offsets.items():
            if offsets:
                groups.setdefault(group_id, Group(group_id, protocol_type=""))
        return list(groups.values())

    def lag(self) -> Iterable[tuple[str, str, int, int, int]]:
        """(group, topic, partition, committed offset, log end offset) for metrics."""
        for group_id, offsets in list(self.offsets.items()):
            for (topic, partition), value in list(offsets.items()):
                replica = self.replicas.get(topic, partition)
                if replica is not None:
                    yield group_id, topic, partition, value.offset, replica.high_watermark


def is_commit_marker(batch: bytes) -> bool | None:
    """A control batch's marker: True for COMMIT, False for ABORT, None for any other
    control record (its key: int16 version, int16 type; 0 is ABORT, 1 COMMIT)."""
    records = read_records(batch)
    if not records or records[0].key is None or len(records[0].key) < 4:
        return None
    kind = int.from_bytes(records[0].key[2:4], "big", signed=True)
    return {0: False, 1: True}.get(kind)
