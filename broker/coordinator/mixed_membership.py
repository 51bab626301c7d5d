"""Classic members of a KIP-848 consumer group: JoinGroup, SyncGroup, Heartbeat and LeaveGroup
served from the consumer group's state, as Kafka 4's coordinator does during an online
migration (``group_migration``) or whenever a classic consumer joins a consumer group.

A classic member cannot heartbeat its way towards its target; it learns only by rejoining.
So (Kafka's GroupMetadataManager, classicGroup*ToConsumerGroup):

- **JoinGroup** takes the member's subscription and the partitions it still owns from its
  embedded protocol metadata, moves it towards its target as a heartbeat would
  (``ConsumerMembership.advance``), stores the change, and answers at once: generation = the
  member's epoch, no leader (the coordinator assigns), the member's first protocol;
- **SyncGroup** hands the member its assigned partitions, in its subscription's version of
  the consumer protocol; nothing is written;
- **Heartbeat** answers REBALANCE_IN_PROGRESS when the member should rejoin: the group epoch
  moved past its epoch, it must revoke partitions, or the partitions it waits for are now
  free. From then it has its rebalance timeout to rejoin, as after a JoinGroup to sync;
- **LeaveGroup** removes it and bumps the group epoch.

Its session is its own ``session.timeout.ms`` (from its JoinGroup), kept in the consumer
membership's timers, which fence it as any member.
"""

from __future__ import annotations

import dataclasses
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from broker.config.broker_config import BrokerConfig
from broker.coordinator import consumer_protocol as cp
from broker.coordinator import consumer_records as cr
from broker.coordinator.classic_membership import JoinResult, check_join, new_member_id
from broker.coordinator.consumer_group import (
    Assignment,
    ClassicProtocols,
    ConsumerGroup,
    ConsumerMember,
    MemberState,
    assignment,
    pairs,
)
from broker.coordinator.consumer_membership import ConsumerMembership, copy_group
from broker.coordinator.group_migration import PROTOCOL_TYPE
from broker.coordinator.group_store import CoordinatorError, GroupStore
from broker.coordinator.offsets_writer import Entry


@dataclass(frozen=True, slots=True)
class SyncResult:
    error: ErrorCode
    assignment: bytes = b""
    protocol_type: str | None = None
    protocol: str | None = None


class MixedMembership:
    """The classic protocol's requests to consumer groups with members."""

    def __init__(self, config: BrokerConfig, store: GroupStore, consumers: ConsumerMembership
                 ) -> None:
        self.config = config
        self.store = store
        self.consumers = consumers

    def serves(self, group_id: str) -> bool:
        """Whether ``group_id`` is a consumer group with members: classic requests for it
        come here. (An empty one becomes a classic group on a JoinGroup: offline
        migration.)"""
        group = self.store.consumer_groups.get(group_id)
        return group is not None and bool(group.members)

    # -- JoinGroup -----------------------------------------------------------------------

    async def join_group(
        self, group_id: str, member_id: str, instance_id: str | None, client_id: str,
        client_host: str, session_timeout_ms: int, rebalance_timeout_ms: int,
        protocol_type: str, protocols: list[tuple[str, bytes]], require_known_member: bool,
    ) -> JoinResult:
        now = time.monotonic()
        refused = check_join(self.config, group_id, instance_id, protocol_type, protocols,
                             session_timeout_ms)
        if refused is not None:
            return JoinResult(refused, member_id=member_id)
        try:
            current = self.store.consumer_groups[group_id]
            new_id = member_id or new_member_id(client_id)
            self._check_protocols(current, new_id, protocol_type, protocols)
            if not member_id and require_known_member and not instance_id:
                # KIP-394, as Kafka answers it for consumer groups too.
                return JoinResult(ErrorCode.member_id_required, member_id=new_id)
            try:
                subscription = cp.decode_subscription(protocols[0][1])
            except cp.MalformedProtocol:
                return JoinResult(ErrorCode.inconsistent_group_protocol, member_id=new_id)
            group, entries = copy_group(current), []
            member, replaced = self._member(group, new_id, member_id, instance_id, entries)
            member = dataclasses.replace(
                member, instance_id=instance_id, client_id=client_id,
                client_host=f"/{client_host}", rack_id=subscription.rack_id,
                subscribed_topic_names=tuple(sorted(set(subscription.topics))),
                subscribed_topic_regex=None, server_assignor=None,
                rebalance_timeout_ms=rebalance_timeout_ms,
                classic=ClassicProtocols(session_timeout_ms, tuple(protocols)))
            compared = group.members.get(member.member_id) or replaced
            owned = self._owned(subscription)
            updated = self.consumers.advance(group, member, compared, owned, now, entries)
            self.consumers.store_group(group, entries)
        except CoordinatorError as e:
            return JoinResult(e.code, member_id=member_id)
        if replaced is not None:
            self.consumers.forget(group_id, replaced.member_id)
        stored = await self.consumers.writer.await_replication(
            group_id, self.config["offsets.commit.timeout.ms"] / 1000)
        if stored != ErrorCode.none:
            return JoinResult(stored, member_id=member_id)
        key = (group_id, updated.member_id)
        self.consumers.sessions[key] = now + session_timeout_ms / 1000
        self.consumers.deadlines[key] = now + rebalance_timeout_ms / 1000  # to sync
        return JoinResult(ErrorCode.none, updated.member_epoch, PROTOCOL_TYPE, protocols[0][0],
                          "", updated.member_id)

    def _check_protocols(self, group: ConsumerGroup, member_id: str, protocol_type: str,
                         protocols: list[tuple[str, bytes]]) -> None:
        """The member must speak the consumer protocol, with a protocol (assignor name) the
        group's other classic members all support (Kafka's supportsClassicProtocols)."""
        names = {name for name, _ in protocols}
        others = [m for mid, m in group.members.items()
                  if m.classic is not None and mid != member_id]
        common = set.intersection(*({n for n, _ in m.classic.protocols} for m in others)) \
            if others else names
        if protocol_type != PROTOCOL_TYPE or not names or not names & common:
            raise CoordinatorError(ErrorCode.inconsistent_group_protocol,
                                   f"Member {member_id}'s protocols are not supported.")

    def _member(self, group: ConsumerGroup, new_id: str, member_id: str,
                instance_id: str | None, entries: list[Entry]
                ) -> tuple[ConsumerMember, ConsumerMember | None]:
        """The member joining, and the member it replaces (a static member's new process,
        which takes over its place and partitions)."""
        if instance_id:
            old_id = group.static_members.get(instance_id)
            if old_id is not None and member_id and member_id != old_id:
                raise CoordinatorError(ErrorCode.fenced_instance_id)
            if old_id is not None and not member_id:
                old = group.members[old_id]
                group.remove(old_id)
                entries.extend(cr.member_tombstones(group.group_id, old_id))
                target = group.target.get(old_id)
                if target is not None:
                    group.target[new_id] = target
                    entries.append(cr.target_member_entry(group.group_id, new_id, target))
                return dataclasses.replace(old, member_id=new_id), old
        existing = group.members.get(new_id)
        if existing is not None:
            if existing.classic is None:
                raise CoordinatorError(ErrorCode.unknown_member_id)
            return existing, None
        if len(group.members) >= self.config["group.consumer.max.size"]:
            raise CoordinatorError(ErrorCode.group_max_size_reached)
        return ConsumerMember(new_id), None

    def _owned(self, subscription: cp.Subscription) -> Assignment:
        """What the member says it still owns, by topic id (unknown topics dropped)."""
        topics = self.consumers.topics()
        return assignment((uuid.UUID(topics[t].topic_id), p) for t, parts in subscription.owned
                          for p in parts if t in topics)

    # -- SyncGroup, Heartbeat, LeaveGroup ------------------------------------------------

    def _classic_member(self, group_id: str, member_id: str, instance_id: str | None
                        ) -> tuple[ConsumerGroup, ConsumerMember]:
        group = self.store.consumer_groups.get(group_id)
        if group is None:
            raise CoordinatorError(ErrorCode.unknown_member_id)
        if instance_id:
            known = group.static_members.get(instance_id)
            if known is None:
                raise CoordinatorError(ErrorCode.unknown_member_id)
            if known != member_id:
                raise CoordinatorError(ErrorCode.fenced_instance_id)
        member = group.members.get(member_id)
        if member is None or member.classic is None:
            raise CoordinatorError(ErrorCode.unknown_member_id)
        return group, member

    def sync_group(self, group_id: str, generation: int, member_id: str,
                   instance_id: str | None, protocol_type: str | None, protocol: str | None
                   ) -> SyncResult:
        try:
            group, member = self._classic_member(group_id, member_id, instance_id)
        except CoordinatorError as e:
            return SyncResult(e.code)
        assert member.classic is not None
        name, metadata = member.classic.protocols[0]
        if generation != member.member_epoch:
            return SyncResult(ErrorCode.illegal_generation)
        if (protocol_type and protocol_type != PROTOCOL_TYPE) or (protocol and protocol != name):
            return SyncResult(ErrorCode.inconsistent_group_protocol)
        now = time.monotonic()
        key = (group_id, member_id)
        if group.group_epoch > member.member_epoch and \
                member.state is not MemberState.UNREVOKED_PARTITIONS:
            self.consumers.deadlines.setdefault(key, now + member.rebalance_timeout_ms / 1000)
            return SyncResult(ErrorCode.rebalance_in_progress)
        self.consumers.deadlines.pop(key, None)
        self.consumers.sessions[key] = now + member.classic.session_timeout_ms / 1000
        return SyncResult(ErrorCode.none, self._assignment(member, metadata), PROTOCOL_TYPE, name)

    def _assignment(self, member: ConsumerMember, metadata: bytes) -> bytes:
        names = {uuid.UUID(t.topic_id): name for name, t in self.consumers.topics().items()}
        by_topic: dict[str, list[int]] = {}
        for topic_id, p in pairs(member.assigned):
            if topic_id in names:
                by_topic.setdefault(names[topic_id], []).append(p)
        return cp.encode_assignment(cp.subscription_version(metadata), by_topic.items())

    def heartbeat(self, group_id: str, generation: int, member_id: str,
                  instance_id: str | None) -> ErrorCode:
        try:
            group, member = self._classic_member(group_id, member_id, instance_id)
        except CoordinatorError as e:
            return e.code
        assert member.classic is not None
        if generation != member.member_epoch:
            return ErrorCode.illegal_generation
        now = time.monotonic()
        key = (group_id, member_id)
        self.consumers.sessions[key] = now + member.classic.session_timeout_ms / 1000
        waiting = any(group.owner(*tp) not in (None, member_id)
                      for tp in pairs(group.target.get(member_id, {})))
        if member.member_epoch < group.group_epoch or \
                member.state is MemberState.UNREVOKED_PARTITIONS or \
                (member.state is MemberState.UNRELEASED_PARTITIONS and not waiting):
            self.consumers.deadlines.setdefault(key, now + member.rebalance_timeout_ms / 1000)
            return ErrorCode.rebalance_in_progress
        return ErrorCode.none

    def leave_group(self, group_id: str, members: Iterable[tuple[str, str | None]]
                    ) -> tuple[ErrorCode, list[tuple[str, str | None, ErrorCode]]]:
        results = []
        now = time.monotonic()
        for member_id, instance_id in members:
            try:
                current = self.store.consumer_groups.get(group_id)
                if current is None:
                    raise CoordinatorError(ErrorCode.unknown_member_id)
                if instance_id and not member_id:  # an administrator removing it by instance
                    member_id = current.static_members.get(instance_id, "")
                self._classic_member(group_id, member_id, instance_id)
                self.consumers.remove_member(copy_group(current), member_id, [], now)
                results.append((member_id, instance_id, ErrorCode.none))
            except CoordinatorError as e:
                results.append((member_id, instance_id, e.code))
        return ErrorCode.none, results
