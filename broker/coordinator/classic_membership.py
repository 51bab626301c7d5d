"""The classic group membership protocol: JoinGroup, SyncGroup, Heartbeat, LeaveGroup, and
the rebalances and timers that drive them.

Kafka's rules (GroupCoordinator.scala, the classic protocol): a rebalance collects every
member's JoinGroup, bumps the generation, picks the protocol all members support, and lets
the leader (the first joiner) compute the assignment that SyncGroup hands out. Members that
stop heartbeating for ``session.timeout.ms`` are removed; members that do not rejoin within
the rebalance timeout (the consumer's ``max.poll.interval.ms``) are dropped from the
rebalance. Each new generation and assignment is written to ``__consumer_offsets`` so a
coordinator taking the partition over knows the group.

Offsets are not this module's business: members' commits only read the membership it keeps.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from broker.config.broker_config import BrokerConfig
from broker.coordinator import consumer_records as cr
from broker.coordinator.alarm import Alarm
from broker.coordinator.group import Group, GroupState, Member
from broker.coordinator.group_store import (
    MAX_NAME_BYTES,
    CoordinatorError,
    GroupStore,
    check_length,
    fail_waits,
    validate_group_id,
)
from broker.coordinator.offsets_writer import OffsetsTopicWriter, group_record

log = logging.getLogger(__name__)
_UUID_SUFFIX = 37  # "-" and a UUID

MemberList = tuple[tuple[str, str | None, bytes], ...]  # (member id, instance id, metadata)


@dataclass(frozen=True, slots=True)
class JoinResult:
    """A JoinGroup answer; only the leader's carries the members to assign to."""

    error: ErrorCode
    generation: int = -1
    protocol_type: str | None = None
    protocol: str | None = None
    leader: str = ""
    member_id: str = ""
    members: MemberList = ()
    skip_assignment: bool = False


def new_member_id(prefix: str) -> str:
    """Kafka's member id, ``<client id or instance id>-<uuid>``, kept within MAX_NAME_BYTES
    however long the client id (which the request header allows up to that length)."""
    room = MAX_NAME_BYTES - _UUID_SUFFIX
    if len(prefix.encode()) > room:
        prefix = prefix.encode()[:room].decode(errors="ignore")
    return f"{prefix}-{uuid.uuid4()}"


def check_join(config: BrokerConfig, group_id: str, instance_id: str | None,
               protocol_type: str, protocols: list[tuple[str, bytes]],
               session_timeout_ms: int) -> ErrorCode | None:
    """Why a JoinGroup is refused before any group is looked at (Kafka checks these first,
    whichever kind of group the id names), or None."""
    try:
        validate_group_id(group_id)
        for name, what in ((instance_id, "group instance id"), (protocol_type, "protocol type"),
                           *((p, "protocol name") for p, _ in protocols)):
            check_length(name, what, ErrorCode.invalid_request)
    except CoordinatorError as e:
        return e.code
    low = config["group.min.session.timeout.ms"]
    high = config["group.max.session.timeout.ms"]
    if not low <= session_timeout_ms <= high:
        return ErrorCode.invalid_session_timeout
    return None


class ClassicMembership:
    """Members joining, syncing, heartbeating and leaving; the generations they make."""

    def __init__(self, config: BrokerConfig, store: GroupStore, writer: OffsetsTopicWriter,
                 alarm: Alarm | None = None) -> None:
        self.config = config
        self.store = store
        self.writer = writer
        self.alarm = alarm or Alarm()
        # Kafka's InitialDelayedJoin: a group rebalancing from Empty waits this long for more
        # members (group.initial.rebalance.delay.ms), extended per join up to the deadline.
        self._initial_delay_until: dict[str, float] = {}

    # -- JoinGroup -----------------------------------------------------------------------

    def _take_over_consumer_group(self, group_id: str) -> ErrorCode | None:
        """A classic member for the id of a KIP-848 group: refused while that group has
        members (INCONSISTENT_GROUP_PROTOCOL, as Kafka answers without migration), else the
        empty group's records are tombstoned and the id becomes a classic group's; its
        offsets stay."""
        if group_id in self.store.share_groups:
            return ErrorCode.inconsistent_group_protocol  # a share group's id
        consumer_group = self.store.consumer_groups.get(group_id)
        if consumer_group is None:
            return None
        if consumer_group.members:
            return ErrorCode.inconsistent_group_protocol
        tombstones = [(cr.encode_key(cr.ConsumerKey(kind, group_id)), None)
                      for kind in (cr.TARGET_METADATA, cr.GROUP_METADATA)]
        error = self.writer.write(group_id, tombstones)
        if error != ErrorCode.none:
            return error
        del self.store.consumer_groups[group_id]
        return None

    def adopt(self, group: Group, now: float) -> None:
        """A consumer group downgraded to ``group`` (stored, each member holding its target
        assignment): its members have their sessions from now, and it rebalances so each
        rejoins the classic way (Kafka's convertToClassicGroup)."""
        for member in group.members.values():
            self._expect_heartbeat(member, now + member.session_timeout_ms / 1000)
        self._prepare_rebalance(group, "downgraded from the consumer protocol")

    async def join_group(
        self, group_id: str, member_id: str, group_instance_id: str | None, client_id: str,
        client_host: str, session_timeout_ms: int, rebalance_timeout_ms: int,
        protocol_type: str, protocols: list[tuple[str, bytes]], require_known_member: bool,
    ) -> JoinResult:
        refused = check_join(self.config, group_id, group_instance_id, protocol_type,
                             protocols, session_timeout_ms)
        if refused is not None:
            return JoinResult(refused, member_id=member_id)
        await self.writer.ensure_offsets_topic()
        refused = self._take_over_consumer_group(group_id)
        if refused is not None:
            return JoinResult(refused, member_id=member_id)
        groups = self.store.groups
        group = groups.get(group_id)
        if group is None:
            if member_id:
                return JoinResult(ErrorCode.unknown_member_id, member_id=member_id)
            group = groups[group_id] = Group(group_id)
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
            member_id = new_member_id(client_id)
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
            self._expect_heartbeat(member, now + session_timeout_ms / 1000)
            unchanged = member.protocols == protocols
            if unchanged and group.is_(GroupState.STABLE) and member_id != group.leader_id:
                # A follower rejoining with nothing new: no rebalance, as in Kafka's
                # doCurrentMemberJoinGroup (the leader's JoinGroup always rebalances).
                return self._current_generation(group, member, leader_view=False)
            member.protocols = protocols
            member.session_timeout_ms = session_timeout_ms
            member.rebalance_timeout_ms = rebalance_timeout_ms
        self._expect_heartbeat(member, now + session_timeout_ms / 1000)
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
        except asyncio.CancelledError:
            # Its connection went: the member no longer waits to join, so its session
            # (perhaps over already) counts again, and the rebalance may wait for it.
            self.alarm.ring()
            raise

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
        new_id = new_member_id(instance_id)
        was_leader = group.leader_id == old_id
        group.remove(old_id)
        fail_waits(old, ErrorCode.fenced_instance_id)
        member = Member(new_id, instance_id, client_id, client_host, session_timeout_ms,
                        rebalance_timeout_ms, protocol_type, protocols, old.assignment)
        group.add(member)
        if was_leader:
            group.leader_id = new_id
        self._expect_heartbeat(member, time.monotonic() + session_timeout_ms / 1000)
        # Kafka rebalances only if the group's protocol would change; new metadata bytes
        # (a restarted consumer's subscription carries what it owned) are not enough.
        if group.is_(GroupState.STABLE) and group.select_protocol() == group.protocol:
            self.writer.write(group.group_id, [group_record(group)])
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
            _member_list(group) if skip else (), skip_assignment=skip,
        )

    def _pending_deadline(self, group: Group, member_id: str, deadline: float) -> None:
        def expire() -> None:
            if member_id in group.pending_members:
                group.pending_members.discard(member_id)
                if group.is_(GroupState.PREPARING_REBALANCE):
                    self._maybe_complete_join(group)

        asyncio.get_running_loop().call_later(max(0.0, deadline - time.monotonic()), expire)

    # -- rebalances ----------------------------------------------------------------------

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
        self.alarm.at(group.rebalance_deadline)
        delay = self.config["group.initial.rebalance.delay.ms"] / 1000
        if was_empty and delay > 0:
            self._initial_delay_until[group.group_id] = min(now + delay, group.rebalance_deadline)
            self.alarm.at(self._initial_delay_until[group.group_id])
        else:
            self._initial_delay_until.pop(group.group_id, None)

    def _extend_initial_delay(self, group: Group) -> None:
        until = self._initial_delay_until.get(group.group_id)
        if until is None:
            return
        delay = self.config["group.initial.rebalance.delay.ms"] / 1000
        until = self._initial_delay_until[group.group_id] = min(
            max(until, time.monotonic() + delay), group.rebalance_deadline
        )
        # Later than it was, but the tick may sleep past it: it drops a delay once over.
        self.alarm.at(until)

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
            self.writer.write(group.group_id, [group_record(group)])
            log.info("group %s: empty at generation %d", group.group_id, group.generation)
            return
        group.protocol = group.select_protocol()
        group.transition(GroupState.COMPLETING_REBALANCE)
        log.info("group %s: generation %d with %d members, protocol %s, leader %s",
                 group.group_id, group.generation, len(group.members), group.protocol,
                 group.leader_id)
        members = _member_list(group)
        for member in group.members.values():
            result = JoinResult(
                ErrorCode.none, group.generation, group.protocol_type, group.protocol,
                group.leader_id or "", member.member_id,
                members if member.member_id == group.leader_id else (),
            )
            self._expect_heartbeat(member, time.monotonic() + member.session_timeout_ms / 1000)
            if member.join_future is not None and not member.join_future.done():
                member.join_future.set_result(result)
            member.join_future = None

    # -- SyncGroup, Heartbeat, LeaveGroup ------------------------------------------------

    async def sync_group(
        self, group_id: str, generation: int, member_id: str, instance_id: str | None,
        protocol_type: str | None, protocol: str | None, assignments: dict[str, bytes],
    ) -> tuple[ErrorCode, bytes, Group | None]:
        try:
            validate_group_id(group_id)
            group, member = self.store.known_member(group_id, member_id, instance_id)
        except CoordinatorError as e:
            return e.code, b"", None
        if generation != group.generation:
            return ErrorCode.illegal_generation, b"", group
        if (protocol_type and protocol_type != group.protocol_type) or (
            protocol and protocol != group.protocol
        ):
            return ErrorCode.inconsistent_group_protocol, b"", group
        self._expect_heartbeat(member, time.monotonic() + member.session_timeout_ms / 1000)
        if group.is_(GroupState.PREPARING_REBALANCE):
            return ErrorCode.rebalance_in_progress, b"", group
        if group.is_(GroupState.STABLE):
            return ErrorCode.none, member.assignment, group
        member.sync_future = asyncio.get_running_loop().create_future()
        if member_id == group.leader_id:
            for m in group.members.values():
                m.assignment = assignments.get(m.member_id, b"")
            error = self.writer.write(group_id, [group_record(group)])
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
            validate_group_id(group_id)
            group, member = self.store.known_member(group_id, member_id, instance_id)
        except CoordinatorError as e:
            return e.code
        if group.is_(GroupState.EMPTY):
            return ErrorCode.unknown_member_id
        self._expect_heartbeat(member, time.monotonic() + member.session_timeout_ms / 1000)
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
        group = self.store.groups.get(group_id)
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
        self._maybe_complete_join(group)  # a pending member that left may be the one it awaited
        return ErrorCode.none, results

    def _remove_member(self, group: Group, member_id: str, why: str) -> None:
        member = group.remove(member_id)
        if member is None:
            return
        log.info("group %s: member %s %s", group.group_id, member_id, why)
        fail_waits(member, ErrorCode.unknown_member_id)
        if group.is_(GroupState.STABLE) or group.is_(GroupState.COMPLETING_REBALANCE):
            self._prepare_rebalance(group, f"member {member_id} {why}")
        self._maybe_complete_join(group)

    # -- timers --------------------------------------------------------------------------

    def _expect_heartbeat(self, member: Member, deadline: float) -> None:
        """``member``'s session now runs until ``deadline``."""
        member.heartbeat_deadline = deadline
        self.alarm.at(deadline)

    def next_deadline(self, now: float) -> float:
        """When ``expire`` next has something to do (inf: never, until a deadline is set):
        the deadlines it looks at. An initial delay already over needs no look: the join
        or the removal that lets the group complete completes it."""
        soonest = math.inf
        for group in self.store.groups.values():
            for member in group.members.values():
                if not member.awaiting_join:
                    soonest = min(soonest, member.heartbeat_deadline)
            if group.is_(GroupState.PREPARING_REBALANCE):
                soonest = min(soonest, group.rebalance_deadline)
                delayed = self._initial_delay_until.get(group.group_id, -math.inf)
                if delayed > now:
                    soonest = min(soonest, delayed)
        return soonest

    def expire(self, now: float) -> None:
        """Remove members whose session expired, end rebalances whose deadline or initial
        delay has passed (``now`` is loop time, as the deadlines are)."""
        for group in list(self.store.groups.values()):
            for member in list(group.members.values()):
                if not member.awaiting_join and member.heartbeat_deadline < now:
                    self._remove_member(group, member.member_id, "session expired")
            if group.is_(GroupState.PREPARING_REBALANCE):
                self._maybe_complete_join(
                    group, deadline_passed=now >= group.rebalance_deadline, now=now
                )

    def cancel_waits(self) -> None:
        """Cancel every JoinGroup and SyncGroup still waiting, as the broker shuts down."""
        for group in self.store.groups.values():
            for member in group.members.values():
                for fut in (member.join_future, member.sync_future):
                    if fut is not None and not fut.done():
                        fut.cancel()


def _member_list(group: Group) -> MemberList:
    return tuple(
        (m.member_id, m.group_instance_id, m.metadata_for(group.protocol))
        for m in group.members.values()
    )
