"""The classic group coordinator: the one object the handlers and the broker talk to.

One coordinator serves every group on this broker (the leader of every offsets partition);
it runs on the event loop, and a tick task checks session and rebalance deadlines and
offset retention. Its work is split by job, as Kafka splits its own (GroupCoordinator,
GroupMetadataManager, OffsetMetadataManager); each part depends only on those below it:

    group_store      the groups, offsets and owned partitions, in memory; shared checks
    offsets_writer   appends to __consumer_offsets, creates it, awaits replication
    classic_membership  JoinGroup, SyncGroup, Heartbeat, LeaveGroup; rebalances and timers
    offset_commits   OffsetCommit, TxnOffsetCommit and its markers, OffsetFetch
    group_cleanup    DeleteGroups, OffsetDelete, a deleted topic's offsets, retention
    group_loader     loading and unloading a partition on leadership change
    consumer_membership  ConsumerGroupHeartbeat: KIP-848 consumer groups

This class composes them and keeps the API the handlers call; it adds only the lifecycle
(start, tick, stop) and the read-only views (describe, list, lag).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Iterable

from kio.schema.errors import ErrorCode

from broker.common.metrics import ConsumerGroupSample
from broker.config.broker_config import BrokerConfig
from broker.config.group_settings import GroupSettings
from broker.coordinator import offsets_topic as ot
from broker.coordinator.alarm import Alarm
from broker.coordinator.classic_membership import ClassicMembership, JoinResult
from broker.coordinator.consumer_group import ConsumerGroup
from broker.coordinator.consumer_membership import (
    ConsumerMembership,
    Heartbeat,
    HeartbeatResult,
)
from broker.coordinator.group import Group
from broker.coordinator.group_cleanup import GroupCleanup
from broker.coordinator.group_loader import GroupLoader
from broker.coordinator.group_store import (
    MAX_NAME_BYTES,
    CoordinatorError,
    GroupStore,
    OffsetMap,
)
from broker.coordinator.mixed_membership import MixedMembership, SyncResult
from broker.coordinator.offset_commits import OffsetCommits
from broker.coordinator.offsets_writer import OffsetsTopicWriter
from broker.coordinator.share_group import ShareGroup
from broker.coordinator.share_membership import ShareHeartbeat, ShareMembership
from broker.server.partition import Partition
from broker.server.replica_manager import ReplicaManager
from broker.storage.producer_state import VerificationGuard

# Names callers know from this module, which is the coordinator's front.
__all__ = ["MAX_NAME_BYTES", "CoordinatorError", "GroupCoordinator", "JoinResult", "OffsetMap"]

log = logging.getLogger(__name__)
# The soonest the tick task looks again after a look, however soon a deadline (a retry's
# pace), and the longest it sleeps, so a deadline no code rang for is late by at most this.
RETRY_SECONDS = 0.05
MAX_SLEEP_SECONDS = 5.0


class GroupCoordinator:
    def __init__(self, config: BrokerConfig, replicas: ReplicaManager,
                 settings: GroupSettings | None = None) -> None:
        self.config = config
        settings = settings or GroupSettings(config)
        self.replicas = replicas
        self.store = GroupStore(config["offsets.topic.num.partitions"])
        self.writer = OffsetsTopicWriter(config, replicas, self.store)
        # Rung by whatever sets a deadline sooner than the one the tick task sleeps towards.
        self.alarm = Alarm()
        self.membership = ClassicMembership(config, self.store, self.writer, self.alarm)
        self.commits = OffsetCommits(self.store, self.writer, self._topic_id, self.alarm)
        self.cleanup = GroupCleanup(config, self.store, self.writer)
        self.consumers = ConsumerMembership(config, self.store, self.writer,
                                            lambda: replicas.metadata.topics,
                                            on_downgrade=self.membership.adopt,
                                            settings=settings, alarm=self.alarm)
        self.mixed = MixedMembership(config, self.store, self.consumers)
        self.shares = ShareMembership(config, self.store, self.writer,
                                      lambda: replicas.metadata.topics, settings, self.alarm)
        self.loader = GroupLoader(self.store, self.commits, self.consumers, self.shares,
                                  self.membership.adopt)
        self._tick_task: asyncio.Task[None] | None = None

    def _topic_id(self, name: str) -> uuid.UUID | None:
        topic = self.replicas.metadata.topics.get(name)
        return topic.uuid if topic is not None else None

    # The store's state, read by the handlers, the metrics and the tests.

    @property
    def groups(self) -> dict[str, Group]:
        return self.store.groups

    @property
    def offsets(self) -> dict[str, OffsetMap]:
        return self.store.offsets

    @property
    def pending_txn_offsets(self) -> dict[int, dict[str, OffsetMap]]:
        return self.store.pending_txn_offsets

    @property
    def owned(self) -> set[int]:
        return self.store.owned

    @property
    def partitions(self) -> int:
        return self.store.partitions

    def partition_of(self, group_id: str) -> int:
        return self.store.partition_of(group_id)

    def owns(self, group_id: str) -> bool:
        """Whether this broker coordinates ``group_id``: it leads the group's partition."""
        return self.store.owns(group_id)

    # -- lifecycle -----------------------------------------------------------------------

    def load(self) -> None:
        """Take up every ``__consumer_offsets`` partition this broker leads (a restart)."""
        for partition in self.replicas.topic_partitions(ot.TOPIC):
            if partition.is_leader:
                self.on_leadership(partition, True)

    def on_leadership(self, partition: Partition, leader: bool) -> None:
        try:
            self.loader.on_leadership(partition, leader)
        finally:
            self.alarm.ring()  # a load sets the sessions of the members it finds

    def start(self) -> None:
        self._tick_task = asyncio.create_task(self._tick_loop())

    async def stop(self) -> None:
        if self._tick_task:
            self._tick_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._tick_task
        self.membership.cancel_waits()

    async def _tick_loop(self) -> None:
        """Expire what is due, then sleep until the next deadline or until the alarm rings
        (a sooner one was set). A deadline still due after ``tick`` (an expiry that could
        not be written yet) is looked at again every ``RETRY_SECONDS``."""
        while True:
            try:
                # One moment for both: a deadline between two readings of the clock would
                # be too early for the tick and already past for the next deadline.
                now = time.monotonic()
                self.tick(now)
                until = max(self.next_deadline(now), now + RETRY_SECONDS)
            except Exception:
                log.exception("group coordinator tick failed")
                until = time.monotonic() + RETRY_SECONDS
            await self.alarm.sleep_until(min(until, time.monotonic() + MAX_SLEEP_SECONDS))

    def next_deadline(self, now: float) -> float:
        """The earliest deadline ``tick`` acts on (inf: none)."""
        return min(self.membership.next_deadline(now), self.consumers.next_deadline(),
                   self.shares.next_deadline(), self.cleanup.next_check())

    def tick(self, now: float | None = None) -> None:
        """Expire sessions, end rebalances whose deadline or initial delay has passed, and
        expire old offsets when retention is due."""
        now = time.monotonic() if now is None else now
        self.membership.expire(now)
        self.consumers.expire(now)
        self.shares.expire(now)
        self.cleanup.maybe_expire(now)

    async def ensure_offsets_topic(self) -> None:
        await self.writer.ensure_offsets_topic()

    async def await_replication(self, group_id: str, timeout: float) -> ErrorCode:
        return await self.writer.await_replication(group_id, timeout)

    # -- membership ----------------------------------------------------------------------

    async def join_group(
        self, group_id: str, member_id: str, group_instance_id: str | None, client_id: str,
        client_host: str, session_timeout_ms: int, rebalance_timeout_ms: int,
        protocol_type: str, protocols: list[tuple[str, bytes]], require_known_member: bool,
    ) -> JoinResult:
        # A consumer group with members serves classic members itself (mixed_membership).
        serving = self.mixed if self.mixed.serves(group_id) else self.membership
        return await serving.join_group(
            group_id, member_id, group_instance_id, client_id, client_host, session_timeout_ms,
            rebalance_timeout_ms, protocol_type, protocols, require_known_member)

    async def sync_group(
        self, group_id: str, generation: int, member_id: str, instance_id: str | None,
        protocol_type: str | None, protocol: str | None, assignments: dict[str, bytes],
    ) -> SyncResult:
        if self.mixed.serves(group_id):
            return self.mixed.sync_group(group_id, generation, member_id, instance_id,
                                         protocol_type, protocol)
        error, assignment, group = await self.membership.sync_group(
            group_id, generation, member_id, instance_id, protocol_type, protocol, assignments)
        return SyncResult(error, assignment, group.protocol_type if group else None,
                          group.protocol if group else None)

    def heartbeat(
        self, group_id: str, generation: int, member_id: str, instance_id: str | None
    ) -> ErrorCode:
        serving = self.mixed if self.mixed.serves(group_id) else self.membership
        return serving.heartbeat(group_id, generation, member_id, instance_id)

    def leave_group(
        self, group_id: str, members: Iterable[tuple[str, str | None]]
    ) -> tuple[ErrorCode, list[tuple[str, str | None, ErrorCode]]]:
        serving = self.mixed if self.mixed.serves(group_id) else self.membership
        return serving.leave_group(group_id, members)

    def consumer_heartbeat(self, hb: Heartbeat, client_id: str, client_host: str, now: float,
                           version: int) -> HeartbeatResult:
        return self.consumers.heartbeat(hb, client_id, client_host, now, version)

    def share_heartbeat(self, hb: ShareHeartbeat, client_id: str, client_host: str,
                        now: float) -> HeartbeatResult:
        return self.shares.heartbeat(hb, client_id, client_host, now)

    def describe_share_group(self, group_id: str) -> ShareGroup | None:
        return self.store.share_groups.get(group_id)

    def list_share_groups(self) -> list[ShareGroup]:
        return list(self.store.share_groups.values())

    @property
    def default_assignor(self) -> str:
        return self.consumers.assignors[0]

    # -- offsets -------------------------------------------------------------------------

    def commit_offsets(
        self, group_id: str, generation: int, member_id: str, instance_id: str | None,
        offsets: dict[tuple[str, int], ot.OffsetValue],
    ) -> ErrorCode:
        return self.commits.commit_offsets(group_id, generation, member_id, instance_id,
                                           offsets)

    def txn_commit_offsets(
        self, group_id: str, producer_id: int, producer_epoch: int, generation: int,
        member_id: str, instance_id: str | None, offsets: dict[tuple[str, int], ot.OffsetValue],
        verified: VerificationGuard | None = None,
    ) -> ErrorCode:
        return self.commits.txn_commit_offsets(group_id, producer_id, producer_epoch,
                                               generation, member_id, instance_id, offsets,
                                               verified)

    def complete_transaction(self, index: int, producer_id: int, commit: bool) -> None:
        self.commits.complete_transaction(index, producer_id, commit)

    def has_pending_offsets(self, group_id: str, tp: tuple[str, int]) -> bool:
        return self.commits.has_pending_offsets(group_id, tp)

    def fetch_offsets(
        self, group_id: str, partitions: list[tuple[str, int]] | None
    ) -> dict[tuple[str, int], ot.OffsetValue | None]:
        return self.commits.fetch_offsets(group_id, partitions)

    # -- removal and retention -----------------------------------------------------------

    def delete_groups(self, group_ids: list[str]) -> dict[str, ErrorCode]:
        return self.cleanup.delete_groups(group_ids)

    def delete_offsets(
        self, group_id: str, partitions: list[tuple[str, int]]
    ) -> tuple[ErrorCode, dict[tuple[str, int], ErrorCode]]:
        return self.cleanup.delete_offsets(group_id, partitions)

    def delete_topic_offsets(self, topic: str) -> None:
        self.cleanup.delete_topic_offsets(topic)

    def expire_offsets(self, now_ms: int | None = None) -> int:
        return self.cleanup.expire_offsets(now_ms)

    # -- reading state -------------------------------------------------------------------

    def describe(self, group_id: str) -> Group | None:
        return self.store.groups.get(group_id)

    def describe_consumer_group(self, group_id: str) -> ConsumerGroup | None:
        return self.store.consumer_groups.get(group_id)

    def consumer_fetch_error(self, group_id: str, member_id: str | None,
                             member_epoch: int) -> ErrorCode | None:
        """OffsetFetch of a KIP-848 member (v9 names it): it must be a member at its epoch
        (Kafka's ConsumerGroup.validateOffsetFetch); None: go ahead."""
        group = self.store.consumer_groups.get(group_id)
        if group is None or member_epoch < 0:
            return None
        member = group.members.get(member_id or "")
        if member is None:
            return ErrorCode.unknown_member_id
        return None if member.member_epoch == member_epoch else ErrorCode.stale_member_epoch

    def list_consumer_groups(self) -> list[ConsumerGroup]:
        return list(self.store.consumer_groups.values())

    def consumer_group_samples(self) -> list[ConsumerGroupSample]:
        """What the metrics show of each KIP-848 group."""
        samples = []
        for g in list(self.store.consumer_groups.values()):
            epochs = [m.member_epoch for m in g.members.values() if m.member_epoch >= 0]
            classic = sum(1 for m in g.members.values() if m.classic is not None)
            samples.append(ConsumerGroupSample(
                g.group_id, g.group_epoch, min(epochs, default=g.group_epoch),
                len(g.members) - classic, classic, g.rebalances))
        return samples

    def list_groups(self) -> list[Group]:
        """Every group, and as an Empty group of no protocol type each group known only by
        its offsets (simple commits, which after a reload left no GroupMetadata record)."""
        groups = dict(self.store.groups)
        for group_id, offsets in self.store.offsets.items():
            if offsets and group_id not in self.store.consumer_groups:
                groups.setdefault(group_id, Group(group_id, protocol_type=""))
        return list(groups.values())

    def lag(self) -> Iterable[tuple[str, str, int, int, int]]:
        """(group, topic, partition, committed offset, log end offset) for metrics."""
        for group_id, offsets in list(self.store.offsets.items()):
            for (topic, partition), value in list(offsets.items()):
                replica = self.replicas.get(topic, partition)
                if replica is not None:
                    yield group_id, topic, partition, value.offset, replica.high_watermark
