"""All partition replicas on this broker: which it hosts, the role each plays, and how they
come and go as the cluster image changes.

As in Kafka, the logs themselves are the LogManager's (``log_manager.py``: log dirs, loading,
recovery, checkpoints, retention, compaction, producer-id expiry); this class asks it for a
replica's log and keeps to partitions, roles, ISR changes, fetchers and fetch waits.
Handlers call it with topic/partition names; it never builds protocol responses.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from kio.schema.errors import ErrorCode

from broker.cluster.image import ClusterImage
from broker.cluster.metadata import ClusterMetadata
from broker.config.broker_config import BrokerConfig
from broker.security.client import ClientSecurity
from broker.server.isr_changes import IsrChanges
from broker.server.log_manager import LogManager, periodic
from broker.server.partition import Partition
from broker.server.replica_dirs import TopicPartition
from broker.server.replica_fetcher import FetcherConfig, ReplicaFetcher
from broker.server.throttle import Throttle, lists_replica
from broker.server.topic_writes import TopicWrites
from broker.storage.log import LogConfig
from broker.storage.log_dir_failure import KafkaStorageError, OpenFilesExhausted
from kafkube_contract.image import NO_LEADER, PartitionState, TopicMetadata
from kafkube_contract.registration import replica_key

log = logging.getLogger(__name__)

# How long one pass may spend opening partitions before the event loop serves what waits
# (a new partition's files cost 0.3-3 ms to make, depending on the file system).
OPEN_SLICE_S = 0.02
# Replicas refused for want of file descriptors: tried again after this, doubling up to the
# maximum while none opens (each attempt makes and removes a directory).
RETRY_REFUSED_S, RETRY_REFUSED_MAX_S = 5.0, 60.0


class ReplicaManager(TopicWrites):
    def __init__(self, config: BrokerConfig, metadata: ClusterMetadata,
                 peer_security: ClientSecurity | None = None,
                 peer_listener: str | None = None) -> None:
        self.config = config
        self.peer_listener = peer_listener  # where leaders are dialled: see ``peer``
        self.metadata = metadata
        metadata.listeners.append(self.apply_image)
        self.node_id = config.node_id
        self.partitions: dict[TopicPartition, Partition] = {}
        self.logs = LogManager(config, self.partitions)
        self.log_dirs = self.logs.log_dirs  # the same list (DescribeLogDirs reads it here)
        self._topic_ids: dict[TopicPartition, str] = {}
        # Replicas on offline log dirs (KIP-112), with their topic ids: never served again
        # by this process. ``on_offline`` hears when a dir fails (the registration).
        self.offline: dict[TopicPartition, str] = {}
        self.on_offline: list[Callable[[], None]] = []
        self.logs.failures.defer = lambda fn: self.logs.schedule(0, fn)
        self.logs.failures.listeners.append(self._log_dir_failed)
        self.fetchers: dict[int, ReplicaFetcher] = {}
        self._fetchers_stopped = False
        self._more_pending = False  # a pass opening the partitions a slice left
        self._to_open: list[tuple[TopicMetadata, int]] = []  # what the last slice left
        # Out of descriptors when opened: retried by a timer, not by each request.
        self._refused: dict[TopicPartition, tuple[TopicMetadata, int]] = {}
        self._retry_in = RETRY_REFUSED_S
        self._retry_pending = False
        # Partitions opened on demand: from the first image applied (after the join) until
        # shutdown (None then).
        self._serving: bool | None = False
        self.open_slices = 0  # passes that opened partitions (a test counts them)
        self.opened_or_dropped = 0  # partitions opened and dropped so far (broker.common.heap)
        self.isr_changes = IsrChanges(metadata, config.node_id)
        # A listener of its own, after apply_image: it settles parked joins even if applying
        # the roles failed part way (each listener's error is logged apart).
        metadata.listeners.append(self.isr_changes.image_applied)
        self._tasks: list[asyncio.Task[None]] = []
        self.leadership_listeners: list[Callable[[Partition, bool], None]] = []
        self.leader_throttle = Throttle(config["leader.replication.throttled.rate"])
        self.follower_throttle = Throttle(config["follower.replication.throttled.rate"])
        self.fetcher_config = FetcherConfig(
            node_id=config.node_id,
            wait_max_ms=config["replica.fetch.wait.max.ms"],
            min_bytes=config["replica.fetch.min.bytes"],
            max_bytes=config["replica.fetch.max.bytes"],
            response_max_bytes=config["replica.fetch.response.max.bytes"],
            backoff_ms=config["replica.fetch.backoff.ms"],
            socket_timeout_ms=config["replica.socket.timeout.ms"],
            rack=config["broker.rack"],
            security=peer_security or ClientSecurity(),
        )

    # -- startup and shutdown ------------------------------------------------------------

    def load(self) -> None:
        """Open every local replica the image assigns us, recovering after an unclean stop."""
        started = time.monotonic()
        self.logs.load_dirs()
        image = self.metadata.image
        for topic in image.topics.values():
            for index, state in enumerate(topic.assignments):
                if self.node_id in state.replicas:
                    self._open_partition(topic, index, is_new=False)
        self.logs.finish_loading(image, started)

    def start_background_tasks(self) -> None:
        self.logs.start()
        self._tasks = [periodic(self.config["replica.lag.time.max.ms"] / 2, self.check_isr,
                                "ISR check")]

    async def shutdown(self) -> None:
        self._to_open, self._serving = [], None  # nothing more is opened
        self.logs.stop()
        for task in self._tasks:
            task.cancel()
        self.isr_changes.cancel()
        await self.stop_all_fetchers()
        for partition in self.partitions.values():
            partition.close()
        self.logs.shutdown()

    async def stop_all_fetchers(self) -> None:
        """Stop following leaders for good: at shutdown, and in a controlled shutdown before
        we leave the ISRs, where a fetch that caught up would earn our place back."""
        self._fetchers_stopped = True
        for fetcher in list(self.fetchers.values()):
            await fetcher.stop()
        self.fetchers.clear()

    # -- topics --------------------------------------------------------------------------

    def log_config(self, topic: TopicMetadata) -> LogConfig:
        """The topic's effective log settings (the log manager's, cached)."""
        return self.logs.log_config(topic)

    def producer_id_count(self) -> int:
        """Producer ids known in all logs here (Kafka's ReplicaManager ProducerIdCount)."""
        return self.logs.producer_id_count()

    def _open_partition(self, topic: TopicMetadata, index: int,
                        is_new: bool = True) -> Partition | None:
        """The replica opened; None if its log dir is offline (it is then ``offline``) or
        the process is out of descriptors (tried again at the next image)."""
        tp = TopicPartition(topic.name, index)
        self.opened_or_dropped += 1
        try:
            partition_log, hw = self.logs.get_or_create_log(tp, topic, self.metadata.image,
                                                            is_new)
        except OpenFilesExhausted:
            # Not a disk fault (logged by the failures channel, rate-limited): not served
            # for now, tried again later (and with the next image).
            self._refused[tp] = (topic, index)
            if not self._retry_pending and asyncio._get_running_loop() is not None:
                self._retry_pending = True
                self.logs.schedule(self._retry_in, self._retry_refused)
            return None
        except KafkaStorageError as e:
            log.error("%s", e)
            self.offline[tp] = topic.topic_id
            return None
        self._retry_in = RETRY_REFUSED_S  # descriptors to spare: a retry soon again
        partition = Partition(topic.name, index, partition_log, self.node_id, hw)
        partition.failures = self.logs.failures
        self.partitions[tp] = partition
        self._topic_ids[tp] = topic.topic_id
        return partition

    # -- following the cluster image ---------------------------------------------------

    def apply_image(self, image: ClusterImage) -> None:
        """Take the roles the image gives this broker: Kafka's applyDelta on a MetadataImage.

        Opening a partition creates or recovers its files (0.3-3 ms when new), so a pass
        opens partitions for at most OPEN_SLICE_S and leaves the rest to the next passes
        (``_open_more``, which takes them from a list rather than walk the image again),
        after the event loop has served what waits: a CreateTopics of 10,000 partitions, or
        a restart with as many, never stalls produce and fetch, Metadata answers (from the
        image) or the lease's heartbeat. A partition not yet open is opened by the first
        request for it (``opened``)."""
        if self._serving is False:  # (None once shut down)
            self._serving = True
        self._apply_configs(image)
        wanted: set[TopicPartition] = set()
        replaced = 0
        deadline = time.perf_counter() + OPEN_SLICE_S
        self._to_open = []
        slice_opened = False
        for topic in image.topics.values():
            for index, state in enumerate(topic.assignments):
                if self.node_id not in state.replicas:
                    continue
                tp = TopicPartition(topic.name, index)
                wanted.add(tp)
                if self.offline.get(tp) == topic.topic_id:
                    continue  # on an offline log dir: not served by this broker
                partition = self.partitions.get(tp)
                if partition is not None and self._topic_ids.get(tp) != topic.topic_id:
                    if image.was_deleted(self._topic_ids.get(tp)):
                        self._drop(tp, "topic deleted and created again")
                    else:  # its files go back to _existing, and aside when opened
                        self._release(tp)
                    replaced += 1
                    partition = None
                if partition is None:
                    # The coordinators' topics are opened at once (50 partitions each at
                    # most): FindCoordinator names a leader from the image, and the client
                    # asks it next; an open still queued would answer NOT_COORDINATOR.
                    if slice_opened and time.perf_counter() >= deadline \
                            and not topic.name.startswith("__"):
                        self._to_open.append((topic, index))
                        continue
                    slice_opened = True
                    partition = self._open_partition(topic, index)
                    if partition is None:
                        continue
                self._take_role(tp, partition, state)
        for tp in [tp for tp in self.offline if tp not in wanted]:
            del self.offline[tp]  # reassigned away or deleted: nothing here to report
        dropped = [tp for tp in self.partitions if tp not in wanted]
        for tp in dropped:
            topic = image.topics.get(tp.topic)
            if topic is not None and topic.topic_id == self._topic_ids.get(tp):
                self._drop(tp, "reassigned away")
            elif image.was_deleted(self._topic_ids.get(tp)):
                self._drop(tp, "topic deleted")
            else:
                self._release(tp)
        if dropped or replaced:
            # Once per image, not per replica: per replica made deleting N cost N².
            self.logs.write_checkpoints()
            self.logs.write_cleaner_checkpoints()
        self.open_slices += slice_opened
        self._schedule_more()

    def _schedule_more(self) -> None:
        if self._to_open and not self._more_pending:
            self._more_pending = True
            self.logs.schedule(0, self._open_more)

    def _open_more(self) -> None:
        """The next slice of what the last image asked to open. Each is checked against
        the current image first: the list is of that image, and one applied since has
        replaced the list (a partition it no longer gives this broker is not opened)."""
        self._more_pending = False
        image = self.metadata.image
        deadline = time.perf_counter() + OPEN_SLICE_S
        pending, opened = self._to_open, 0
        try:
            while opened < len(pending) and (not opened or time.perf_counter() < deadline):
                topic, index = pending[opened]
                opened += 1
                tp = TopicPartition(topic.name, index)
                current = image.topics.get(topic.name)
                if current is None or current.topic_id != topic.topic_id \
                        or tp in self.partitions or self.offline.get(tp) == topic.topic_id:
                    continue
                state = (current.assignments[index] if index < len(current.assignments)
                         else None)
                if state is None or self.node_id not in state.replicas:
                    continue
                partition = self._open_partition(current, index)
                if partition is not None:
                    self._take_role(tp, partition, state)
                elif tp in self._refused:  # out of fds: all the rest waits the retry
                    self._refused.update((TopicPartition(t.name, i), (t, i))
                                         for t, i in pending[opened:])
                    opened = len(pending)
        finally:  # one that failed is left to the next image; the others are opened
            del pending[:opened]
            self.open_slices += 1
            self._schedule_more()

    def _retry_refused(self) -> None:
        """The replicas refused for want of descriptors, queued to be opened again (each
        checked against the current image); the next retry waits twice as long, unless a
        replica opens meanwhile."""
        self._retry_pending = False
        self._retry_in = min(self._retry_in * 2, RETRY_REFUSED_MAX_S)
        if not self._serving:
            return
        self._to_open.extend(self._refused.values())
        self._refused = {}
        self._schedule_more()

    def _apply_configs(self, image: ClusterImage) -> None:
        """Configs changed at run time take effect now: each log gets its topic's settings as
        they are (the log reads them when it acts: on append, roll, retention, cleaning),
        and the throttles their rates."""
        self.leader_throttle.set_rate(self.config["leader.replication.throttled.rate"])
        self.follower_throttle.set_rate(self.config["follower.replication.throttled.rate"])
        for tp, partition in self.partitions.items():
            topic = image.topics.get(tp.topic)
            if topic is None or topic.topic_id != self._topic_ids.get(tp):
                continue
            config = self.log_config(topic)
            if partition.log.config is not config:
                if partition.log.config != config:
                    log.info("%s: log config now %s", partition, config.changes_from(
                        partition.log.config))
                partition.log.config = config

    def _take_role(self, tp: TopicPartition, partition: Partition, state: PartitionState) -> None:
        if state == partition.state:
            return
        was_leader = partition.is_leader
        if state.leader == self.node_id:
            self._stop_fetching(tp)
            partition.make_leader(state)
            if not was_leader:
                log.info("%s: leader in epoch %d, ISR %s", partition, state.leader_epoch,
                         list(state.isr))
                self._notify(partition, True)
            return
        if partition.make_follower(state) or was_leader:
            self._stop_fetching(tp)
            if state.leader != NO_LEADER:
                self._fetcher_for(state.leader).add(partition)
            if was_leader:
                self._notify(partition, False)

    def _notify(self, partition: Partition, leader: bool) -> None:
        for listener in self.leadership_listeners:
            try:
                listener(partition, leader)
            except Exception:
                log.exception("leadership listener failed for %s", partition)

    def _fetcher_for(self, leader_id: int) -> ReplicaFetcher:
        fetcher = self.fetchers.get(leader_id)
        if fetcher is None:
            fetcher = self.fetchers[leader_id] = ReplicaFetcher(
                leader_id, self.fetcher_config,
                lambda node: self.metadata.peer(node, self.peer_listener),
                self.follower_throttle_for,
            )
            if not self._fetchers_stopped:
                fetcher.start()
        return fetcher

    def _stop_fetching(self, tp: TopicPartition) -> None:
        for fetcher in self.fetchers.values():
            fetcher.remove(tp.topic, tp.partition)

    def _log_dir_failed(self, log_dir: Path) -> None:
        """A log dir went offline: every replica in it stops being served here at once (a
        leader's produce waits fail, its followers' fetches get NOT_LEADER_OR_FOLLOWER, our
        fetchers drop it) and ``on_offline`` tells the controller, which moves leadership
        and ISR places to the replicas on other brokers (Kafka's handleLogDirFailure)."""
        failed = [tp for tp, p in self.partitions.items() if p.log.dir.parent == log_dir]
        for tp in failed:
            topic_id = self._topic_ids[tp]
            partition = self._stop_hosting(tp)
            with contextlib.suppress(OSError):
                partition.log.close()
            self.offline[tp] = topic_id
        log.error("log dir %s offline: %d replicas no longer served here: %s", log_dir,
                  len(failed), ", ".join(f"{tp.topic}-{tp.partition}" for tp in failed[:20]))
        for listener in self.on_offline:
            listener()

    def offline_replicas(self) -> frozenset[str]:
        """The replicas on offline log dirs, as the registration names them."""
        return frozenset(replica_key(topic_id, tp.partition)
                         for tp, topic_id in self.offline.items())

    def _drop(self, tp: TopicPartition, why: str) -> None:
        """Stop hosting a replica and delete its files: its topic was deleted on record, or
        a reassignment moved it away."""
        partition = self._stop_hosting(tp)
        log.info("%s: removing the local replica (%s)", partition, why)
        self.logs.delete_log(partition.log)

    def _release(self, tp: TopicPartition) -> None:
        """Stop hosting a replica whose topic the image lacks without a record of its deletion
        (an image rebuilt from an older copy): its files stay where they are, so the replica
        comes back with its data if the topic does, and is never deleted on a guess."""
        partition = self._stop_hosting(tp)
        self.logs.release_log(tp, partition.log)
        log.error("%s: not in the cluster metadata, and not deleted there: no longer served, "
                  "its files kept in %s", partition, partition.log.dir)

    def _stop_hosting(self, tp: TopicPartition) -> Partition:
        partition = self.partitions.pop(tp)
        self.opened_or_dropped += 1
        self.logs.forget(tp, partition.log)
        self._topic_ids.pop(tp, None)
        self._stop_fetching(tp)
        if partition.is_leader:
            self._notify(partition, False)
        partition.close()
        return partition

    def get(self, topic: str, partition: int) -> Partition | None:
        return self.partitions.get((topic, partition))

    def opened(self, topic: str, index: int) -> Partition | None:
        """The partition, opened now if the image gives it to this broker and the slices
        have not reached it yet: a produce or fetch of a new partition is served at once
        (its files made for it, ~0.3 ms) rather than answered NOT_LEADER_OR_FOLLOWER, which
        librdkafka retries after a metadata refresh and a backoff (10,000 new partitions
        took a write each 40-74 s after they were led, with the broker idle most of it)."""
        partition = self.partitions.get((topic, index))
        if partition is not None or not self._serving or index < 0:
            return partition
        current = self.metadata.image.topics.get(topic)
        tp = TopicPartition(topic, index)
        if current is None or index >= len(current.assignments) or tp in self.offline \
                or tp in self._refused:
            return None
        state = current.assignments[index]
        if self.node_id not in state.replicas:
            return None
        partition = self._open_partition(current, index)
        if partition is not None:
            self._take_role(tp, partition, state)
        return partition

    def leader_for(self, topic: str, index: int) -> tuple[Partition | None, ErrorCode]:
        """The partition if this broker leads it, else the error a client should get."""
        partition = self.opened(topic, index)
        if partition is not None and partition.is_leader:
            return partition, ErrorCode.none
        if (topic, index) in self.offline:
            return None, ErrorCode.kafka_storage_error
        if self.metadata.partition(topic, index) is not None:
            return None, ErrorCode.not_leader_or_follower
        return None, ErrorCode.unknown_topic_or_partition

    def topic_partitions(self, topic: str) -> list[Partition]:
        """The local replicas of ``topic``: all of them on a single broker."""
        meta = self.metadata.topics.get(topic)
        if meta is None:
            return []
        found = (self.get(topic, i) for i in range(meta.partitions))
        return [p for p in found if p is not None]

    # -- controlled shutdown ---------------------------------------------------------------

    # -- ISR changes, as leader ----------------------------------------------------------

    def throttle_for(self, partition: Partition, replica_id: int) -> Throttle | None:
        """The leader-side throttle a follower's fetch is under, if any (see throttle.py)."""
        if replica_id in partition.isr or not lists_replica(
                partition.log.config.leader_throttled_replicas, partition.index, self.node_id):
            return None
        return self.leader_throttle

    def follower_throttle_for(self, partition: Partition) -> Throttle | None:
        """The follower-side throttle our fetches for this partition are under, if any."""
        if self.node_id in partition.isr or not lists_replica(
                partition.log.config.follower_throttled_replicas, partition.index, self.node_id):
            return None
        return self.follower_throttle

    def record_follower_fetch(self, partition: Partition, replica_id: int, offset: int,
                              log_start_offset: int = -1) -> None:
        """Note a follower's fetch; one that caught up joins the ISR in the background, as
        Kafka's leader sends AlterPartition without holding the fetch up: the answer to this
        fetch never waits on the coordination backend."""
        if partition.record_follower_fetch(replica_id, offset, log_start_offset):
            self.isr_changes.follower_caught_up(partition, replica_id)
        elif self.isr_changes.parked:
            self.isr_changes.retry_parked(partition, replica_id)

    async def check_isr(self) -> None:
        await self.isr_changes.shrink_stale(self.partitions.values(),
                                            self.config["replica.lag.time.max.ms"])

    # -- fetch waiting -------------------------------------------------------------------

    async def wait_for_data(self, partitions: Iterable[Partition], timeout: float,
                            fut: asyncio.Future[Any] | None = None) -> None:
        """Return when any of ``partitions`` gets new committed data, or after ``timeout``,
        or when someone else resolves ``fut`` (the caller's, if it has other reasons to
        stop waiting: one future for all of them)."""
        if fut is None:
            fut = asyncio.get_running_loop().create_future()
        loop = asyncio.get_running_loop()
        watched = list(partitions)
        for partition in watched:
            partition.add_waiter(fut)
        # A plain timer resolving the same future: asyncio.wait_for would add a second
        # future and callbacks to every waiting fetch.
        timer = loop.call_later(timeout, _resolve, fut)
        try:
            await fut
        finally:
            timer.cancel()
            for partition in watched:
                partition.remove_waiter(fut)

    # -- DeleteRecords -------------------------------------------------------------------

    async def wait_low_watermark(self, partition: Partition, offset: int,
                                 timeout: float) -> tuple[int, ErrorCode]:
        """DeleteRecords completes when every replica on a live broker dropped the records."""
        return await partition.wait_low_watermark(
            offset, lambda: self.metadata.brokers.keys(), timeout)


def _resolve(fut: asyncio.Future[Any]) -> None:
    if not fut.done():
        fut.set_result(None)
