"""All partition replicas on this broker: where their logs live, and how they come and go.

Kafka splits this between LogManager (log dirs, loading, recovery, retention, checkpoints)
and ReplicaManager (partitions, appends, fetch waits); on one event loop they fit in one
class. Handlers call it with topic/partition names; it never builds protocol responses.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from broker.config import BrokerConfig, validate_topic_configs
from broker.server.metadata import LocalMetadataStore, TopicMetadata
from broker.server.partition import Partition
from broker.storage.cleaner import CleanResult, CleanTarget, LogCleaner
from broker.storage.log import Log, LogConfig

log = logging.getLogger(__name__)

CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
RECOVERY_CHECKPOINT = "recovery-point-offset-checkpoint"
CLEANER_CHECKPOINT = "cleaner-offset-checkpoint"
DELETE_SUFFIX = "-delete"


@dataclass(frozen=True, slots=True)
class TopicPartition:
    topic: str
    partition: int


def partition_dir_name(topic: str, partition: int) -> str:
    return f"{topic}-{partition}"


def parse_partition_dir(name: str) -> TopicPartition | None:
    topic, sep, index = name.rpartition("-")
    if not sep or not index.isdigit() or not topic:
        return None
    return TopicPartition(topic, int(index))


class ReplicaManager:
    def __init__(self, config: BrokerConfig, store: LocalMetadataStore) -> None:
        self.config = config
        self.store = store
        self.node_id = config.node_id
        self.log_dirs = [Path(d) for d in config.log_dirs]
        self.partitions: dict[TopicPartition, Partition] = {}
        self._retention_task: asyncio.Task[None] | None = None
        self._checkpoint_task: asyncio.Task[None] | None = None
        self._cleaner_task: asyncio.Task[None] | None = None
        self.cleaner = LogCleaner()
        self._log_configs: dict[str, LogConfig] = {}  # by topic id: ids are never reused

    # -- startup and shutdown ------------------------------------------------------------

    def load(self) -> None:
        """Open every partition of every known topic, recovering after an unclean stop."""
        started = time.monotonic()
        existing: dict[TopicPartition, Path] = {}
        recovery: dict[TopicPartition, int] = {}
        clean: dict[Path, bool] = {}
        for log_dir in self.log_dirs:
            clean[log_dir] = (log_dir / CLEAN_SHUTDOWN_FILE).exists()
            recovery.update(read_offset_checkpoint(log_dir / RECOVERY_CHECKPOINT))
            self.cleaner.checkpoints.update(read_offset_checkpoint(log_dir / CLEANER_CHECKPOINT))
            for child in log_dir.iterdir():
                if child.is_dir() and child.name.endswith(DELETE_SUFFIX):
                    shutil.rmtree(child, ignore_errors=True)
                    continue
                tp = parse_partition_dir(child.name) if child.is_dir() else None
                if tp is not None:
                    existing[tp] = child
        for topic in self.store.topics.values():
            for index in range(topic.partitions):
                tp = TopicPartition(topic.name, index)
                directory = existing.pop(tp, None)
                self._open_partition(topic, index, directory, recovery.get(tp, 0), clean)
        for tp, directory in existing.items():
            log.warning("ignoring %s: no topic %s in the metadata", directory, tp.topic)
        unclean = [str(d) for d, was_clean in clean.items() if not was_clean and self.partitions]
        for log_dir in self.log_dirs:
            (log_dir / CLEAN_SHUTDOWN_FILE).unlink(missing_ok=True)
        self.write_checkpoints()
        log.info("loaded %d partitions in %.2fs", len(self.partitions), time.monotonic() - started)
        if unclean:
            log.warning("recovered after an unclean shutdown of %s", ", ".join(unclean))

    def start_background_tasks(self) -> None:
        self._retention_task = asyncio.create_task(self._retention_loop())
        self._checkpoint_task = asyncio.create_task(self._checkpoint_loop())
        if self.config["log.cleaner.enable"]:
            self._cleaner_task = asyncio.create_task(self._cleaner_loop())

    async def shutdown(self) -> None:
        self.cleaner.stop()
        for task in (self._retention_task, self._checkpoint_task, self._cleaner_task):
            if task is not None:
                task.cancel()
        for partition in self.partitions.values():
            partition.log.flush()
        self.write_checkpoints()
        for partition in self.partitions.values():
            partition.log.close()
        for log_dir in self.log_dirs:
            (log_dir / CLEAN_SHUTDOWN_FILE).touch()

    def write_checkpoints(self) -> None:
        by_dir: dict[Path, dict[TopicPartition, int]] = {d: {} for d in self.log_dirs}
        for tp, partition in self.partitions.items():
            by_dir[partition.log.dir.parent][tp] = partition.log.recovery_point
        for log_dir, points in by_dir.items():
            write_offset_checkpoint(log_dir / RECOVERY_CHECKPOINT, points)

    # -- topics --------------------------------------------------------------------------

    def log_config(self, topic: TopicMetadata) -> LogConfig:
        """The topic's effective log settings; cached, as produce asks on every request."""
        config = self._log_configs.get(topic.topic_id)
        if config is None:
            values = self.config.topic_defaults()
            values.update(validate_topic_configs(topic.configs))
            config = self._log_configs[topic.topic_id] = LogConfig.from_topic_config(values)
        return config

    def _pick_log_dir(self) -> Path:
        counts = {d: 0 for d in self.log_dirs}
        for partition in self.partitions.values():
            counts[partition.log.dir.parent] = counts.get(partition.log.dir.parent, 0) + 1
        return min(self.log_dirs, key=lambda d: counts[d])

    def _open_partition(
        self,
        topic: TopicMetadata,
        index: int,
        directory: Path | None,
        recovery_point: int,
        clean: dict[Path, bool],
    ) -> Partition:
        if directory is None:
            directory = self._pick_log_dir() / partition_dir_name(topic.name, index)
        partition_log = Log(
            directory,
            self.log_config(topic),
            recovery_point=recovery_point,
            clean_shutdown=clean.get(directory.parent, True),
            scheduler=self._schedule,
        )
        partition = Partition(topic.name, index, partition_log, self.node_id)
        self.partitions[TopicPartition(topic.name, index)] = partition
        return partition

    def _schedule(self, delay: float, fn: Any) -> None:
        try:
            asyncio.get_running_loop().call_later(delay, fn)
        except RuntimeError:
            fn()

    def create_topic(self, name: str, partitions: int, configs: dict[str, str]) -> TopicMetadata:
        """Create a topic; the caller has validated the name, count and configs."""
        topic = self.store.add_topic(name, partitions, configs)
        for index in range(partitions):
            self._open_partition(topic, index, None, 0, {})
        self.write_checkpoints()
        return topic

    def create_partitions(self, name: str, total: int) -> None:
        topic = self.store.topics[name]
        for index in range(topic.partitions, total):
            self._open_partition(topic, index, None, 0, {})
        self.store.set_partitions(name, total)

    def delete_topic(self, name: str) -> None:
        """Forget the topic now; its files go after file.delete.delay.ms, as in Kafka."""
        topic = self.store.topics[name]
        self.store.remove_topic(name)
        delay = self.log_config(topic).file_delete_delay_ms / 1000
        for index in range(topic.partitions):
            partition = self.partitions.pop(TopicPartition(name, index), None)
            self.cleaner.forget(TopicPartition(name, index))
            if partition is None:
                continue
            partition.wake_fetchers()
            old = partition.log.dir
            doomed = old.with_name(f"{old.name}.{uuid.uuid4().hex}{DELETE_SUFFIX}")
            os.rename(old, doomed)
            self._schedule(delay, lambda p=partition, d=doomed: _remove(p.log, d))
        self.write_checkpoints()
        self.write_cleaner_checkpoints()

    def get(self, topic: str, partition: int) -> Partition | None:
        return self.partitions.get(TopicPartition(topic, partition))

    def topic_partitions(self, topic: str) -> list[Partition]:
        meta = self.store.topics.get(topic)
        if meta is None:
            return []
        return [self.partitions[TopicPartition(topic, i)] for i in range(meta.partitions)]

    # -- fetch waiting -------------------------------------------------------------------

    async def wait_for_data(self, partitions: Iterable[Partition], timeout: float) -> None:
        """Return when any of ``partitions`` gets new committed data, or after ``timeout``."""
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        watched = list(partitions)
        for partition in watched:
            partition.add_waiter(fut)
        try:
            await asyncio.wait_for(fut, timeout)
        except TimeoutError:
            pass
        finally:
            for partition in watched:
                partition.remove_waiter(fut)

    # -- retention -----------------------------------------------------------------------

    def enforce_retention(self, now_ms: int | None = None) -> int:
        deleted = 0
        for partition in list(self.partitions.values()):
            deleted += partition.log.delete_old_segments(now_ms)
        return deleted

    async def _retention_loop(self) -> None:
        interval = self.config["log.retention.check.interval.ms"] / 1000
        while True:
            await asyncio.sleep(interval)
            try:
                deleted = self.enforce_retention()
                if deleted:
                    log.info("retention deleted %d segments", deleted)
            except Exception:
                log.exception("retention check failed")

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

    async def _checkpoint_loop(self) -> None:
        while True:
            await asyncio.sleep(60)
            self.write_checkpoints()


def _remove(partition_log: Log, directory: Path) -> None:
    partition_log.close()
    shutil.rmtree(directory, ignore_errors=True)


def read_offset_checkpoint(path: Path) -> dict[TopicPartition, int]:
    """Kafka's OffsetCheckpointFile: version 0, a count, then `topic partition offset` lines."""
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        return {}
    out = {}
    try:
        for line in lines[2 : 2 + int(lines[1])]:
            topic, partition, offset = line.split()
            out[TopicPartition(topic, int(partition))] = int(offset)
    except (IndexError, ValueError):
        log.warning("ignoring unreadable checkpoint %s", path)
        return {}
    return out


def write_offset_checkpoint(path: Path, offsets: dict[TopicPartition, int]) -> None:
    body = "".join(f"{tp.topic} {tp.partition} {o}\n" for tp, o in offsets.items())
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(f"0\n{len(offsets)}\n{body}")
    os.replace(tmp, path)
