"""The periodic work on a broker's logs, Kafka's LogManager and UnifiedLog scheduled tasks:
retention, compaction, checkpoints (with the fsync of rolled segments) and the expiry of
idle producer ids.

``LogMaintenance`` is a base of ``ReplicaManager``, which holds the partitions it works on;
apart so that the replica manager keeps to what replicas are and which role they play.
Every task is a ``periodic`` loop on the event loop: one failed round is logged and the
next comes anyway.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from collections.abc import Callable
from pathlib import Path

from broker.config.broker_config import BrokerConfig
from broker.server.partition import Partition
from broker.server.replica_dirs import TopicPartition, write_offset_checkpoint
from broker.storage.cleaner import CleanResult, CleanTarget, LogCleaner
from broker.storage.segment import LogSegment

log = logging.getLogger(__name__)

CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
RECOVERY_CHECKPOINT = "recovery-point-offset-checkpoint"
CLEANER_CHECKPOINT = "cleaner-offset-checkpoint"
REPLICATION_CHECKPOINT = "replication-offset-checkpoint"
LOG_START_CHECKPOINT = "log-start-offset-checkpoint"


def periodic(interval_ms: float, action: Callable[[], object], what: str) -> asyncio.Task[None]:
    """A task doing ``action`` every ``interval_ms`` (awaiting what it returns, if it is
    awaitable) until cancelled. A round that raises is logged as ``what`` failing: one bad
    round must not end the task, which nothing would start again."""

    async def run() -> None:
        while True:
            await asyncio.sleep(interval_ms / 1000)
            try:
                result = action()
                if inspect.isawaitable(result):
                    await result
            except Exception:
                log.exception("%s failed", what)

    return asyncio.create_task(run(), name=what)


class LogMaintenance:
    """The periodic tasks over ``partitions``, and the calls tests make of them directly."""

    # Set by the replica manager.
    config: BrokerConfig
    partitions: dict[TopicPartition, Partition]
    log_dirs: list[Path]
    cleaner: LogCleaner

    def maintenance_tasks(self) -> list[asyncio.Task[None]]:
        cfg = self.config
        tasks = [
            periodic(cfg["log.retention.check.interval.ms"], self._retention_round,
                     "retention check"),
            periodic(cfg["replica.high.watermark.checkpoint.interval.ms"],
                     self._checkpoint_round, "writing checkpoints"),
            periodic(cfg["producer.id.expiration.check.interval.ms"], self.expire_producers,
                     "producer id expiration check"),
        ]
        if cfg["log.cleaner.enable"]:
            tasks.append(asyncio.create_task(self._cleaner_loop(), name="log cleaner"))
        return tasks

    # -- checkpoints ---------------------------------------------------------------------

    def write_checkpoints(self) -> None:
        recovery: dict[Path, dict[TopicPartition, int]] = {d: {} for d in self.log_dirs}
        hws: dict[Path, dict[TopicPartition, int]] = {d: {} for d in self.log_dirs}
        starts: dict[Path, dict[TopicPartition, int]] = {d: {} for d in self.log_dirs}
        for tp, partition in self.partitions.items():
            partition_log = partition.log
            recovery[partition_log.dir.parent][tp] = partition_log.recovery_point
            hws[partition_log.dir.parent][tp] = partition.high_watermark
            if partition_log.log_start_offset > partition_log.segments[0].base_offset:
                # Only a start inside the first segment needs remembering, as in Kafka.
                starts[partition_log.dir.parent][tp] = partition_log.log_start_offset
        for log_dir in self.log_dirs:
            write_offset_checkpoint(log_dir / RECOVERY_CHECKPOINT, recovery[log_dir])
            write_offset_checkpoint(log_dir / REPLICATION_CHECKPOINT, hws[log_dir])
            write_offset_checkpoint(log_dir / LOG_START_CHECKPOINT, starts[log_dir])

    async def _checkpoint_round(self) -> None:
        """High watermarks (and recovery points) every
        replica.high.watermark.checkpoint.interval.ms: a restarted replica starts from them."""
        await self.sync_sealed_segments()
        self.write_checkpoints()

    async def sync_sealed_segments(self) -> None:
        """fsync the segments rolled since the last pass on a worker thread, then move
        each log's recovery point past them: a restart after a power cut recovers whatever
        the disk may not hold, and the event loop never waits for the disk."""
        work = []
        for partition in list(self.partitions.values()):
            segments, target = partition.log.unsynced_sealed()
            if segments:
                work.append((partition.log, segments, target))
        if not work:
            return
        synced = await asyncio.to_thread(_sync_all, [segments for _, segments, _ in work])
        for (partition_log, _, target), ok in zip(work, synced, strict=True):
            if ok:
                partition_log.advance_recovery_point(target)

    # -- retention -----------------------------------------------------------------------

    def enforce_retention(self, now_ms: int | None = None) -> int:
        deleted = 0
        for partition in list(self.partitions.values()):
            deleted += partition.log.delete_old_segments(now_ms, partition.high_watermark)
        return deleted

    def _retention_round(self) -> None:
        deleted = self.enforce_retention()
        if deleted:
            log.info("retention deleted %d segments", deleted)

    # -- producer ids --------------------------------------------------------------------

    def expire_producers(self, now_ms: int | None = None) -> int:
        """Forget the producers idle past producer.id.expiration.ms with no transaction open,
        in every log here, followers' too (Kafka checks every log), so producer state stays
        bounded however many producers come and go; how many went."""
        now = int(time.time() * 1000) if now_ms is None else now_ms
        expired = 0
        for partition in list(self.partitions.values()):
            partition_log = partition.log
            expired += partition_log.producer_state.remove_expired(
                now, partition_log.config.producer_id_expiration_ms)
        if expired:
            log.info("expired %d producer ids idle past producer.id.expiration.ms", expired)
        return expired

    def producer_id_count(self) -> int:
        """Producer ids known in all logs here (Kafka's ReplicaManager ProducerIdCount)."""
        return sum(len(p.log.producer_state.producers) for p in list(self.partitions.values()))

    # -- compaction ----------------------------------------------------------------------

    async def clean_logs(self, now_ms: int | None = None) -> CleanResult | None:
        """Compact the filthiest compacted log, if one needs it, and save the checkpoints."""
        targets = [
            CleanTarget(tp, p.log, p.high_watermark) for tp, p in self.partitions.items()
        ]
        result = await self.cleaner.clean_filthiest(targets, now_ms)
        if result is not None and not result.aborted:
            self.write_cleaner_checkpoints()
        return result

    def write_cleaner_checkpoints(self) -> None:
        """cleaner-offset-checkpoint of each log dir: how far each log in it is compacted."""
        by_dir: dict[Path, dict[TopicPartition, int]] = {d: {} for d in self.log_dirs}
        for tp, partition in self.partitions.items():
            offset = self.cleaner.checkpoints.get(tp)
            if offset is not None:
                by_dir[partition.log.dir.parent][tp] = offset
        for log_dir, offsets in by_dir.items():
            write_offset_checkpoint(log_dir / CLEANER_CHECKPOINT, offsets)

    async def _cleaner_loop(self) -> None:
        """Clean logs back to back while any needs it, else sleep log.cleaner.backoff.ms."""
        backoff = self.config["log.cleaner.backoff.ms"] / 1000
        while True:
            try:
                result = await self.clean_logs()
            except Exception:
                log.exception("log cleaner failed")
                result = None
            if result is None or result.aborted:
                await asyncio.sleep(backoff)


def _sync_all(batches: list[list[LogSegment]]) -> list[bool]:
    """Each batch's segments fsynced (on a worker thread); False where one was closed or
    deleted meanwhile."""
    synced = []
    for segments in batches:
        try:
            for segment in segments:
                segment.sync_files()
        except OSError:
            synced.append(False)
        else:
            synced.append(True)
    return synced
