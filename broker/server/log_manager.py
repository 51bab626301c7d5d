"""A broker's logs as files and their upkeep, Kafka's LogManager: log dirs, loading,
checkpoints, retention, compaction and the expiry of idle producer ids.

The replica manager decides which replicas this broker hosts and what role each plays; it
asks this class for a replica's log (``get_or_create_log``) and hands the log back when it
stops hosting it (``forget``, then ``delete_log`` or ``release_log``). Everything that is
about files rather than roles is here: which log dir a new log goes to, what the
checkpoint files and the clean-shutdown marker say at start-up, replica dirs left over
(``*-delete``, strays), and the background loops over every log. Those loops read the
replica manager's ``partitions`` (a shared dict, never copied) because retention, the
cleaner and the high-watermark checkpoint need each partition's high watermark. Every loop
is a ``periodic`` task on the event loop: one failed round is logged and the next comes
anyway.

With several log dirs (JBOD), a dir whose I/O fails goes offline (``failures``, Kafka's
LogDirFailureChannel): no new log is placed there, its checkpoints are no longer written,
and at start-up a dir still failing is passed over; the replica manager stops serving what
it held. A replica the metadata had given us before (not ``is_new``) and that no working
dir holds is taken to be on an offline dir, never created empty elsewhere: Kafka's rule.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import inspect
import logging
import os
import shutil
import time
import uuid
from collections import Counter
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from broker.cluster.image import ClusterImage
from broker.config.broker_config import BrokerConfig
from broker.server.partition import Partition
from broker.server.replica_dirs import (
    DELETE_SUFFIX,
    PARTITION_METADATA,
    STRAY_SUFFIX,
    TopicPartition,
    parse_partition_dir,
    parse_stray_dir,
    partition_dir_name,
    read_offset_checkpoint,
    same_topic,
    schedule_removal,
    topic_id_of,
    write_offset_checkpoint,
    write_partition_metadata,
)
from broker.storage.cleaner import CleanResult, CleanTarget, LogCleaner
from broker.storage.leader_epoch import CHECKPOINT_FILE as EPOCH_CHECKPOINT
from broker.storage.log import Log, LogConfig
from broker.storage.log_dir_failure import (
    KafkaStorageError,
    LogDirFailures,
    out_of_files,
    probe_log_dir,
)
from broker.storage.segment import LOG_SUFFIX, LogSegment, segment_name
from kafkube_contract.image import TopicMetadata

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


class LogManager:
    """The logs of one broker: where they live, how they open, and their background loops."""

    def __init__(self, config: BrokerConfig,
                 partitions: Mapping[TopicPartition, Partition]) -> None:
        self.config = config
        self.log_dirs = [Path(d) for d in config.log_dirs]
        self.partitions = partitions  # the replica manager's: it adds and removes, we read
        self.cleaner = LogCleaner()
        self._tasks: list[asyncio.Task[None]] = []
        # By topic id (ids are never reused): the topic configs and dynamic-config generation
        # each LogConfig was made from, so a change to either makes a new one.
        self._log_configs: dict[str, tuple[dict[str, str], int, LogConfig]] = {}
        self._per_log_dir: Counter[Path] = Counter()
        self._recovery: dict[TopicPartition, int] = {}
        self._log_starts: dict[TopicPartition, int] = {}
        self._high_watermarks: dict[TopicPartition, int] = {}
        self._clean: dict[Path, bool] = {}
        self._existing: dict[TopicPartition, Path] = {}
        self._refused: set[TopicPartition] = set()  # out of descriptors when last opened
        self._checkpoints_behind = False  # a checkpoint write was refused since the last
        # Replica dirs set aside (``*-stray``) by partition and topic id: taken back if the
        # metadata gives that partition that topic again.
        self._strays: dict[tuple[TopicPartition, str], Path] = {}
        self.failures = LogDirFailures()

    @property
    def online_dirs(self) -> list[Path]:
        """The log dirs not offline, in ``log.dirs`` order."""
        return [d for d in self.log_dirs if not self.failures.is_offline(d)]

    def _guard(self, log_dir: Path, action: Callable[[], object],
               checkpoint: bool = False) -> None:
        """Run ``action`` on ``log_dir`` unless it is offline; an I/O error takes it
        offline instead of propagating (the dir's replicas then stop being served). A
        ``checkpoint`` write (a temporary file renamed over the old one) out of file
        descriptors changed nothing: refused, written at the next round."""
        if self.failures.is_offline(log_dir):
            return
        try:
            action()
        except OSError as e:
            if checkpoint and out_of_files(e):
                self.failures.refuse(log_dir, e, "a checkpoint")
                self._checkpoints_behind = True
                return
            self.failures.report(log_dir, e)

    # -- loading -------------------------------------------------------------------------

    def load_dirs(self) -> None:
        """Read what each log dir remembers (clean shutdown, checkpoints) and what it holds:
        replica dirs to open, strays set aside, and removals a crash interrupted. A dir that
        fails (unreadable, unwritable, not a directory) is offline from the start; with none
        left the broker cannot start (Kafka stops when every log dir has failed)."""
        for log_dir in self.log_dirs:
            error = probe_log_dir(log_dir)
            if error is not None:
                self.failures.report(log_dir, error)
                continue
            self._guard(log_dir, lambda log_dir=log_dir: self._load_dir(log_dir))
        if not self.online_dirs:
            raise KafkaStorageError("every log dir is offline: " + "; ".join(
                f"{d}: {why}" for d, why in self.failures.offline.items()))

    def _load_dir(self, log_dir: Path) -> None:
        """One working log dir's checkpoints, markers and replica dirs."""
        self._clean[log_dir] = (log_dir / CLEAN_SHUTDOWN_FILE).exists()
        self._recovery.update(read_offset_checkpoint(log_dir / RECOVERY_CHECKPOINT))
        self._high_watermarks.update(read_offset_checkpoint(log_dir / REPLICATION_CHECKPOINT))
        self._log_starts.update(read_offset_checkpoint(log_dir / LOG_START_CHECKPOINT))
        self.cleaner.checkpoints.update(read_offset_checkpoint(log_dir / CLEANER_CHECKPOINT))
        for child in log_dir.iterdir():
            if child.is_dir() and child.name.endswith(DELETE_SUFFIX):
                shutil.rmtree(child, ignore_errors=True)
                continue
            if child.is_dir() and (stray := parse_stray_dir(child.name)) is not None:
                self._strays[stray] = child
                continue
            tp = parse_partition_dir(child.name) if child.is_dir() else None
            if tp is not None:
                self._existing[tp] = child

    def finish_loading(self, image: ClusterImage, started: float) -> None:
        """After the replicas the image assigns us are open: remove the dirs of topics deleted
        while we were down (a dir of a topic not deleted on record is kept, never removed on
        a guess), clear the clean-shutdown markers and write fresh checkpoints."""
        for tp, directory in list(self._existing.items()):
            if tp in self._refused:  # its replica is ours, to be opened when fds are free
                continue
            if image.was_deleted(topic_id_of(directory)):
                log.info("%s: topic %s was deleted while this broker was down; removing it",
                         directory, tp.topic)
                del self._existing[tp]
                schedule_removal(directory, None, 0, self.schedule)
            else:
                log.warning("keeping %s as a stray: no replica of %s here and its topic was "
                            "not deleted on record", directory, tp.topic)
        unclean = [str(d) for d, was_clean in self._clean.items() if not was_clean]
        for log_dir in self.online_dirs:
            self._guard(log_dir, lambda d=log_dir: (d / CLEAN_SHUTDOWN_FILE).unlink(
                missing_ok=True))
        self.write_checkpoints()
        log.info("loaded %d partitions in %.2fs", len(self.partitions), time.monotonic() - started)
        if unclean and self.partitions:
            log.warning("recovered after an unclean shutdown of %s", ", ".join(unclean))

    def log_config(self, topic: TopicMetadata) -> LogConfig:
        """The topic's effective log settings; cached, as produce asks on every request."""
        cached = self._log_configs.get(topic.topic_id)
        generation = self.config.generation
        if cached is not None and cached[1] == generation and cached[0] == topic.configs:
            return cached[2]
        config = LogConfig.from_topic_config(self.config.topic_values(topic.configs),
                                             self.config["producer.id.expiration.ms"])
        self._log_configs[topic.topic_id] = (topic.configs, generation, config)
        return config

    def _pick_log_dir(self) -> Path:
        """The online log dir holding the fewest partitions, as Kafka places new ones.
        Counted as partitions come and go: counting on every pick made creating N partitions
        cost N² (2,048 at once blocked the event loop for 20 s, past the broker's own lease)."""
        online = self.online_dirs
        if not online:
            raise KafkaStorageError("every log dir is offline")
        return min(online, key=lambda d: self._per_log_dir[d])

    def get_or_create_log(self, tp: TopicPartition, topic: TopicMetadata,
                          image: ClusterImage, is_new: bool = True) -> tuple[Log, int]:
        """Open the replica's log (created if new) and its checkpointed high watermark.

        A dir found at start-up is used if it holds this topic id; one of an older topic is
        deleted if that topic was deleted on record (``image``), else set aside as a stray;
        a stray of this very topic is taken back. A replica not ``is_new`` (assigned before
        this start) found in no working dir while a dir is offline raises
        ``KafkaStorageError``: it is on the failed disk, and an empty log elsewhere would
        be a replica that lost its data (Kafka's LogManager refuses the same)."""
        found = self._existing.pop(tp, None)
        try:
            directory = self._replica_dir(tp, topic, image, is_new, found)
        except OSError as e:  # reading what is there, or moving a stray back
            if found is None:
                raise
            if out_of_files(e):
                self._refuse_for_now(tp, found)
                raise self.failures.refuse(found.parent, e, str(tp)) from e
            self.failures.report(found.parent, e)
            raise KafkaStorageError(f"{tp}: log dir {found.parent} failed: {e}") from e
        partition_log: Log | None = None
        created = not directory.exists()  # made by this call: removed again if refused
        try:
            partition_log = Log(
                directory,
                self.log_config(topic),
                recovery_point=self._recovery.get(tp, 0),
                clean_shutdown=self._clean.get(directory.parent, True),
                scheduler=self.schedule,
                log_start_offset=self._log_starts.get(tp, 0),
            )
            write_partition_metadata(directory, topic.topic_id)
        except OSError as e:
            if partition_log is not None:  # its segments' files are not left open
                with contextlib.suppress(OSError):
                    partition_log.close()
            if out_of_files(e):  # nothing written yet: refused, opened again later
                if not created or not _remove_new(directory):
                    self._refuse_for_now(tp, directory)
                raise self.failures.refuse(directory.parent, e, str(tp)) from e
            self.failures.report(directory.parent, e)
            raise KafkaStorageError(f"{tp}: log dir {directory.parent} failed: {e}") from e
        self._refused.discard(tp)
        self._per_log_dir[directory.parent] += 1
        return partition_log, self._high_watermarks.get(tp, 0)

    def _refuse_for_now(self, tp: TopicPartition, directory: Path) -> None:
        """Out of descriptors while opening ``tp``: the next attempt opens this dir, not a
        new one in another log dir, and the dir is no stray meanwhile."""
        self._existing[tp] = directory
        self._refused.add(tp)

    def _replica_dir(self, tp: TopicPartition, topic: TopicMetadata, image: ClusterImage,
                     is_new: bool, found: Path | None) -> Path:
        """Where the replica's log is: the dir ``found`` at start-up if it holds this topic,
        a stray of it taken back, or a new one in the emptiest online log dir."""
        directory = found
        if directory is not None and not same_topic(directory, topic.topic_id):
            older = topic_id_of(directory)
            if image.was_deleted(older):
                log.warning("%s holds an older, deleted topic %s; deleting it", directory,
                            topic.name)
                schedule_removal(directory, None, 0, self.schedule)
            else:
                aside = directory.with_name(
                    f"{directory.name}.{older}.{uuid.uuid4().hex[:8]}{STRAY_SUFFIX}")
                log.error("%s holds topic id %s, not deleted on record, where the metadata "
                          "has %s: kept as %s", directory, older, topic.topic_id, aside)
                os.rename(directory, aside)
                if older is not None:
                    self._strays[(tp, older)] = aside
            directory = None
        if directory is None and (stray := self._strays.pop((tp, topic.topic_id), None)):
            directory = stray.with_name(partition_dir_name(topic.name, tp.partition))
            log.warning("%s: taking back the replica set aside in %s", tp, stray)
            os.rename(stray, directory)
        if directory is None:
            if not is_new and self.failures.offline:
                offline = ", ".join(map(str, self.failures.offline))
                raise KafkaStorageError(f"{tp}: in no online log dir while {offline} is offline")
            directory = self._pick_log_dir() / partition_dir_name(topic.name, tp.partition)
        return directory

    def forget(self, tp: TopicPartition, partition_log: Log) -> None:
        """The replica is no longer hosted: its log leaves the counts and the cleaner."""
        self._per_log_dir[partition_log.dir.parent] -= 1
        self.cleaner.forget(tp)

    def delete_log(self, partition_log: Log) -> None:
        """Remove a forgotten log's files after file.delete.delay.ms, as Kafka does."""
        delay = partition_log.config.file_delete_delay_ms / 1000
        schedule_removal(partition_log.dir, partition_log, delay, self.schedule)

    def release_log(self, tp: TopicPartition, partition_log: Log) -> None:
        """Close a forgotten log and keep its files where they are: the replica comes back
        with its data if the metadata gives it back (``get_or_create_log`` looks first)."""
        partition_log.close()
        self._existing[tp] = partition_log.dir

    def schedule(self, delay: float, fn: Any) -> None:
        """Run ``fn`` after ``delay`` seconds on the event loop, or now if none runs (at
        start-up, and in tests driving the logs without one)."""
        try:
            asyncio.get_running_loop().call_later(delay, fn)
        except RuntimeError:
            fn()

    # -- the background loops ------------------------------------------------------------

    def start(self) -> None:
        """Start the loops; their intervals are read once, as Kafka schedules its tasks."""
        cfg = self.config
        self._tasks = [
            periodic(cfg["log.retention.check.interval.ms"], self._retention_round,
                     "retention check"),
            periodic(cfg["replica.high.watermark.checkpoint.interval.ms"],
                     self._checkpoint_round, "writing checkpoints"),
            periodic(cfg["producer.id.expiration.check.interval.ms"], self.expire_producers,
                     "producer id expiration check"),
        ]
        if cfg["log.cleaner.enable"]:
            self._tasks.append(asyncio.create_task(self._cleaner_loop(), name="log cleaner"))

    def stop(self) -> None:
        """End the loops; a cleaning pass in progress gives up at its next batch."""
        self.cleaner.stop()
        for task in self._tasks:
            task.cancel()

    def shutdown(self) -> None:
        """Once the replicas are closed: everything on disk, checkpoints written, the logs
        closed and the clean-shutdown markers left, so the next start recovers nothing."""
        for partition in self.partitions.values():
            self._guard(partition.log.dir.parent, partition.log.flush)
        self.write_checkpoints()
        for partition in self.partitions.values():
            partition.log.close()
        if self._checkpoints_behind:  # the next start must not trust them as clean
            log.warning("checkpoints not written (out of file descriptors): no clean-"
                        "shutdown marker, the next start recovers the logs")
            return
        for log_dir in self.online_dirs:
            self._guard(log_dir, (log_dir / CLEAN_SHUTDOWN_FILE).touch)

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
        for tp in self._refused:  # not open (out of descriptors): what was read at start
            if (where := self._existing.get(tp)) is not None and where.parent in recovery:
                for into, known in ((recovery, self._recovery), (hws, self._high_watermarks),
                                    (starts, self._log_starts)):
                    if tp in known:
                        into[where.parent][tp] = known[tp]
        self._checkpoints_behind = False
        for log_dir in self.online_dirs:
            self._guard(log_dir, lambda d=log_dir: (
                write_offset_checkpoint(d / RECOVERY_CHECKPOINT, recovery[d]),
                write_offset_checkpoint(d / REPLICATION_CHECKPOINT, hws[d]),
                write_offset_checkpoint(d / LOG_START_CHECKPOINT, starts[d])), checkpoint=True)

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
        for (partition_log, _, target), error in zip(work, synced, strict=True):
            if error is None:
                partition_log.advance_recovery_point(target)
            elif error.errno not in (errno.ENOENT, errno.EBADF):  # not a segment just deleted
                self.failures.report(partition_log.dir.parent, error)

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
            self._guard(log_dir, lambda d=log_dir, o=offsets: write_offset_checkpoint(
                d / CLEANER_CHECKPOINT, o), checkpoint=True)

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


def _sync_all(batches: list[list[LogSegment]]) -> list[OSError | None]:
    """Each batch's segments fsynced (on a worker thread); the error where one was closed
    or deleted meanwhile (ENOENT, EBADF), or where the disk failed."""
    synced: list[OSError | None] = []
    for segments in batches:
        try:
            for segment in segments:
                segment.sync_files()
        except OSError as e:
            synced.append(e)
        else:
            synced.append(None)
    return synced


def _remove_new(directory: Path) -> bool:
    """Remove a new replica's dir whose open was refused (out of descriptors), with the
    files a new log makes, so that no stray without ``partition.metadata`` is left behind;
    False if something else is in it (it is then kept and opened again)."""
    for name in (segment_name(0) + LOG_SUFFIX, PARTITION_METADATA,
                 PARTITION_METADATA + ".tmp", EPOCH_CHECKPOINT,
                 EPOCH_CHECKPOINT + ".tmp"):
        with contextlib.suppress(OSError):
            os.unlink(directory / name)
    try:
        os.rmdir(directory)
    except FileNotFoundError:
        return True
    except OSError:
        return False
    return True
