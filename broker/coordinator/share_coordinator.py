"""The share coordinator: keeps share-partitions' delivery state in ``__share_group_state``
(KIP-932's persister), so that a share-partition's leader moving to another broker, or a
broker restarting, loses no acknowledgement.

Each share-partition (group, topic id, partition) is placed in one partition of the topic by
Kafka's rule (the Java hash of its coordinator key); the broker leading that partition is its
share coordinator. A partition's leader reads the state when it starts serving the share
group, and writes it before an acknowledgement, release or lock expiry takes effect
(``broker.share``). Writes are fenced as Kafka fences them: a state epoch older than the stored
one (the state was initialized again since: FENCED_STATE_EPOCH), or a leader epoch older than
the last writer's (a deposed leader: FENCED_LEADER_EPOCH).

Each write is stored as a ShareSnapshot of the whole state and acknowledged once the ISR holds
it; the topic is compacted, so a share-partition keeps its last snapshot. On becoming a
partition's leader the coordinator replays the partition (snapshots, and Kafka's ShareUpdate
records merged into them), as after a failover.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, replace

from kio.schema.errors import ErrorCode

from broker.cluster.internal_topics import partition_for
from broker.cluster.metadata import ConcurrentUpdate
from broker.config.broker_config import BrokerConfig
from broker.coordinator import share_state_log as ssl
from broker.coordinator.share_state_log import ShareKey, ShareSnapshot, StateBatch
from broker.protocol.batch_codec import Record, encode_batch, read_records
from broker.server.partition import Partition
from broker.server.replica_manager import ReplicaManager
from broker.server.topic_writes import TopicExists

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ReadResult:
    error: ErrorCode
    state: ShareSnapshot | None = None  # None: never initialized, or deleted
    message: str | None = None
    # With no state: the epoch of the one deleted last, so the next is initialized above it
    # (a leader still holding the deleted state must never match the new one).
    deleted_epoch: int = 0


class ShareCoordinator:
    def __init__(self, config: BrokerConfig, replicas: ReplicaManager) -> None:
        self.config = config
        self.replicas = replicas
        self.partitions = config["share.coordinator.state.topic.num.partitions"]
        self.states: dict[ShareKey, ShareSnapshot] = {}
        # The state epoch of each state deleted while this broker coordinated it. Lost
        # with the coordinator (a tombstone carries no epoch): only a leader that kept a
        # deleted state through a coordinator failover could then meet a reused epoch.
        self.deleted: dict[ShareKey, int] = {}
        self.owned: dict[int, int] = {}  # partition of the topic led here -> leader epoch
        # One write per share-partition at a time: each stores a whole state, so two in
        # flight could land in either order.
        self._writing: dict[ShareKey, asyncio.Lock] = {}

    def partition_of(self, key: ShareKey) -> int:
        return partition_for(key.coordinator_suffix(), self.partitions, prefix=key.group_id)

    def owns(self, key: ShareKey) -> bool:
        return self.partition_of(key) in self.owned

    async def ensure_topic(self) -> None:
        """Create ``__share_group_state`` on first use, compacted (kafkube writes whole
        snapshots, so the last one per share-partition is all a reader needs)."""
        if ssl.TOPIC in self.replicas.metadata.topics:
            return
        live = max(1, len(self.replicas.metadata.brokers))
        replication_factor = min(self.config["share.coordinator.state.topic.replication.factor"],
                                 live)
        min_isr = min(self.config["share.coordinator.state.topic.min.isr"], replication_factor)
        try:
            await self.replicas.create_topic(ssl.TOPIC, self.partitions, {
                "cleanup.policy": "compact", "min.insync.replicas": str(min_isr),
                "segment.bytes": str(self.config["share.coordinator.state.topic.segment.bytes"]),
            }, replication_factor)
        except TopicExists:
            pass
        except ConcurrentUpdate as e:
            log.warning("cannot create %s now: %s", ssl.TOPIC, e)

    # -- leadership --------------------------------------------------------------------------

    def on_leadership(self, partition: Partition, leader: bool) -> None:
        if partition.topic != ssl.TOPIC:
            return
        index = partition.index
        for key in [k for k in self.states if self.partition_of(k) == index]:
            del self.states[key]
        self.owned.pop(index, None)
        if not leader:
            return
        for segment in list(partition.log.segments):
            for batch in segment.batches_from(0):
                if batch.header.is_control:
                    continue
                raw = segment.read_bytes(batch.position, batch.header.size)
                for record in read_records(raw):
                    self._replay(record)
        self.owned[index] = partition.leader_epoch
        log.info("share coordinator for %s-%d: %d share-partitions", ssl.TOPIC, index,
                 sum(1 for k in self.states if self.partition_of(k) == index))

    def _replay(self, record: Record) -> None:
        decoded = ssl.decode_key(record.key) if record.key is not None else None
        if decoded is None:
            return
        kind, key = decoded
        if record.value is None:
            self.states.pop(key, None)
        elif kind == ssl.SNAPSHOT:
            self.states[key] = ssl.decode_snapshot(record.value)
        elif key in self.states:
            _, leader_epoch, start, batches = ssl.decode_update(record.value)
            self.states[key] = ssl.merged(self.states[key], leader_epoch, start, batches)

    # -- the persister's requests -------------------------------------------------------------

    async def read(self, key: ShareKey, leader_epoch: int = -1) -> ReadResult:
        """The stored state, once any write of it in progress is done (a new leader must not
        load a state an old leader's acknowledgement is about to change); a leader that reads
        with its epoch becomes the last writer, so an older leader's later writes are
        fenced."""
        async with self._writing.setdefault(key, asyncio.Lock()):
            return self._read(key, leader_epoch)

    def _read(self, key: ShareKey, leader_epoch: int) -> ReadResult:
        if not self.owns(key):
            return ReadResult(ErrorCode.not_coordinator)
        state = self.states.get(key)
        if state is None:
            return ReadResult(ErrorCode.none, None, deleted_epoch=self.deleted.get(key, 0))
        if 0 <= leader_epoch < state.leader_epoch:
            return ReadResult(ErrorCode.fenced_leader_epoch, None,
                              f"leader epoch {leader_epoch} is older than "
                              f"{state.leader_epoch}")
        if leader_epoch > state.leader_epoch:
            # The new leader is the writer from now on (stored with its first write).
            state = self.states[key] = replace(state, leader_epoch=leader_epoch)
        return ReadResult(ErrorCode.none, state)

    async def initialize(self, key: ShareKey, state_epoch: int, start_offset: int
                         ) -> tuple[ErrorCode, str | None]:
        """Start (or start again, e.g. after an offsets reset) a share-partition's state."""
        async with self._writing.setdefault(key, asyncio.Lock()):
            return await self._initialize(key, state_epoch, start_offset)

    async def _initialize(self, key: ShareKey, state_epoch: int, start_offset: int
                          ) -> tuple[ErrorCode, str | None]:
        if not self.owns(key):
            return ErrorCode.not_coordinator, None
        known = self.states.get(key)
        last = known.state_epoch if known is not None else self.deleted.get(key, -1)
        if state_epoch <= last:
            return ErrorCode.fenced_state_epoch, \
                f"state epoch {state_epoch} is not newer than {last}"
        now = int(time.time() * 1000)
        # The last writer's leader epoch is kept: a deposed leader stays fenced.
        snapshot = ShareSnapshot(state_epoch, known.leader_epoch if known else -1,
                                 start_offset, (), known.snapshot_epoch + 1 if known else 0,
                                 now, now)
        return await self._store(key, snapshot), None

    async def write(self, key: ShareKey, state_epoch: int, leader_epoch: int,
                    start_offset: int, batches: tuple[StateBatch, ...],
                    delivery_complete_count: int = ssl.NO_COUNT
                    ) -> tuple[ErrorCode, str | None]:
        """Replace a share-partition's state with what its leader sends (the whole window
        from ``start_offset`` on), unless the leader or the state is not the current one."""
        async with self._writing.setdefault(key, asyncio.Lock()):
            return await self._write(key, state_epoch, leader_epoch, start_offset, batches,
                                     delivery_complete_count)

    async def _write(self, key: ShareKey, state_epoch: int, leader_epoch: int,
                     start_offset: int, batches: tuple[StateBatch, ...],
                     delivery_complete_count: int) -> tuple[ErrorCode, str | None]:
        if not self.owns(key):
            return ErrorCode.not_coordinator, None
        known = self.states.get(key)
        if known is None:
            # Deleted (its group or its offsets) or never initialized: a leader still serving
            # it must read it again rather than bring it back.
            return ErrorCode.fenced_state_epoch, "the share-partition has no state"
        if state_epoch != known.state_epoch:  # a leader that read another state
            return ErrorCode.fenced_state_epoch, \
                f"state epoch {state_epoch} is not the state's {known.state_epoch}"
        if leader_epoch < known.leader_epoch:
            return ErrorCode.fenced_leader_epoch, \
                f"leader epoch {leader_epoch} is older than {known.leader_epoch}"
        now = int(time.time() * 1000)
        snapshot = ShareSnapshot(
            known.state_epoch, leader_epoch, start_offset, tuple(batches),
            known.snapshot_epoch + 1, known.create_timestamp, now, delivery_complete_count)
        return await self._store(key, snapshot), None

    async def delete(self, key: ShareKey) -> ErrorCode:
        if not self.owns(key):
            return ErrorCode.not_coordinator
        async with self._writing.setdefault(key, asyncio.Lock()):
            if key not in self.states:
                return ErrorCode.none
            return await self._store(key, None)

    async def _store(self, key: ShareKey, snapshot: ShareSnapshot | None) -> ErrorCode:
        """Append the snapshot (None: a tombstone) and wait until the ISR holds it; only then
        is it the share-partition's state."""
        index = self.partition_of(key)
        partition = self.replicas.get(ssl.TOPIC, index)
        epoch = self.owned.get(index)
        if partition is None or not partition.is_leader or epoch is None:
            return ErrorCode.not_coordinator
        value = ssl.encode_snapshot(snapshot) if snapshot is not None else None
        batch = encode_batch([Record(0, int(time.time() * 1000),
                                     ssl.encode_key(ssl.SNAPSHOT, key), value)], 0)
        min_isr = partition.log.config.min_insync_replicas
        outcome = partition.append(batch, 2**31 - 1, min_isr, acks=-1)
        error = outcome.error
        if error == ErrorCode.none:
            error = await partition.wait_committed(outcome.last_offset, min_isr,
                                                   self.config["request.timeout.ms"] / 1000)
        if error in (ErrorCode.not_leader_or_follower, ErrorCode.kafka_storage_error) or \
                self.owned.get(index) != epoch:
            return ErrorCode.not_coordinator
        if error != ErrorCode.none:
            log.warning("storing share state of %s: %s", key, error.name)
            return ErrorCode.coordinator_not_available
        if snapshot is None:
            gone = self.states.pop(key, None)
            if gone is not None:
                self.deleted[key] = max(gone.state_epoch, self.deleted.get(key, 0))
        else:
            known = self.states.get(key)
            if known is not None and known.leader_epoch > snapshot.leader_epoch:
                snapshot = replace(snapshot, leader_epoch=known.leader_epoch)  # never back
            self.states[key] = snapshot
        return ErrorCode.none
