"""This broker's view of the cluster: the image, the live brokers, the controller.

Kafka brokers keep a MetadataCache fed by the controller; ours is fed by polling the
coordination backend's image version (``refresh``), and every change a broker makes itself
(a topic created through CreateTopics, an ISR change as leader) is a compare-and-set through
``update``. Every read and write goes through the guard (broker/cluster/guard.py), so an
image of another cluster or an older one is never applied; the log dirs keep meta.properties
and a copy of the newest image (broker/cluster/local_copy.py) to start from and repair with.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
import uuid
from collections.abc import Callable, Container, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from broker.cluster import features
from broker.cluster.backend import CoordinationBackend, StoreUnavailable
from broker.cluster.guard import MetadataFault, MetadataGuard, bootstrap
from broker.cluster.image import ClusterImage
from broker.cluster.local_copy import (
    forget_other_copies,
    read_cluster_id,
    read_image_copy,
    write_image_copy,
    write_meta_properties,
)
from broker.storage.log_dir_failure import KafkaStorageError, probe_log_dir
from kafkube_contract.image import PartitionState, TopicMetadata
from kafkube_contract.registration import BrokerRegistration

COPY_EVERY_S = 5.0  # the image copy in the log dir lags the applied image at most this long
PRODUCER_ID_BLOCK = 1000
MAX_TOPIC_NAME = 249
MAX_CAS_ATTEMPTS = 50
_LEGAL_TOPIC = re.compile(r"^[a-zA-Z0-9._-]+$")
log = logging.getLogger(__name__)
T = TypeVar("T")

__all__ = ["ClusterMetadata", "PartitionState", "TopicMetadata", "topic_name_error"]


def topic_name_error(name: str | None) -> str | None:
    """Why ``name`` is not a legal Kafka topic name (Topic.validate), or None."""
    if not name:
        return "Topic name is illegal, it can't be empty"
    if name in (".", ".."):
        return "Topic name cannot be \".\" or \"..\""
    if len(name) > MAX_TOPIC_NAME:
        return f"Topic name is illegal, it can't be longer than {MAX_TOPIC_NAME} characters"
    if not _LEGAL_TOPIC.match(name):
        return (
            f"Topic name \"{name}\" is illegal, it contains a character other than ASCII "
            "alphanumerics, '.', '_' and '-'"
        )
    return None


class ConcurrentUpdate(Exception):
    """A compare-and-set kept losing to other writers."""


class MetadataUnavailable(ConcurrentUpdate):
    """The stored metadata cannot be trusted now (the guard's fault): nothing is changed, and
    callers answer as for a lost race, which clients retry."""


class ClusterMetadata:
    def __init__(self, backend: CoordinationBackend, log_dirs: list[Path], node_id: int,
                 wait: Callable[[float], None] = time.sleep) -> None:
        """Waits, saying why, until the store holds an image this broker may trust
        (``guard.bootstrap``)."""
        self.node_id = node_id
        # A log dir failing at start-up is passed over here, as by the log manager (JBOD:
        # Kafka starts without it); with none usable there is nothing to serve.
        usable = [d for d in log_dirs if probe_log_dir(d) is None]
        if not usable:
            raise KafkaStorageError("log.dirs: every log dir is offline: "
                                    + ", ".join(f"{d} ({probe_log_dir(d)})" for d in log_dirs))
        log_dirs = self.log_dirs = usable
        local_id = read_cluster_id(log_dirs, node_id)
        cluster_id, image = bootstrap(backend, local_id, read_image_copy(log_dirs, local_id),
                                      backend.where, wait)
        if (why := features.refusal(image.features)) is not None:
            raise features.ClusterTooNew(why)
        write_meta_properties(log_dirs, cluster_id, node_id)
        self.cluster_id = cluster_id
        self.backend = MetadataGuard(backend, cluster_id, image, backend.where)
        self.image = image
        self._copied = (-1, 0.0)  # (version, time.monotonic()) of the last copy kept
        self._copied_format = image.image_format
        self._copy_lock = asyncio.Lock()
        self.brokers: dict[int, BrokerRegistration] = backend.live_brokers()
        self.controller_id = -1
        self.offline_dirs: Container[Path] = ()
        # Called with each newer image, from refresh() or our own update(): the replica
        # manager takes its new roles before anything else can read the image.
        self.listeners: list[Callable[[ClusterImage], None]] = []
        self._next_producer_id = 0
        self._producer_id_limit = 0
        self._writer: ThreadPoolExecutor | None = None

    def close(self) -> None:
        if self._writer is not None:
            self._writer.shutdown(wait=False, cancel_futures=True)
        self.backend.close()

    # -- reading ---------------------------------------------------------------------------

    @property
    def topics(self) -> dict[str, TopicMetadata]:
        return self.image.topics

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicMetadata | None:
        return self.image.topic_by_id(topic_id)

    def partition(self, topic: str, index: int) -> PartitionState | None:
        return self.image.partition(topic, index)

    def broker(self, node_id: int) -> BrokerRegistration | None:
        """A live broker's registration as of the last poll. Look it up on every use:
        ``brokers`` is replaced, not updated, by each poll, so a reference to the dict (or
        its bound ``get``) would keep the brokers of one moment forever."""
        return self.brokers.get(node_id)

    def peer(self, node_id: int, listener: str | None) -> BrokerRegistration | None:
        """A live broker at its address on ``listener`` (this broker's inter-broker
        listener), None if it is not live or does not advertise that listener."""
        registration = self.brokers.get(node_id)
        return None if registration is None else registration.on_listener(listener)

    def live_brokers(self) -> dict[int, BrokerRegistration]:
        """The live brokers now, not as of the last poll: admin requests place replicas."""
        self.brokers = self.backend.live_brokers()
        return self.brokers

    def refresh(self) -> bool:
        """Re-read the live brokers and controller; the image if its version moved."""
        self.brokers = self.backend.live_brokers()
        lease = self.backend.controller()
        self.controller_id = lease.holder if lease is not None else -1
        if self.backend.image_version() == self.image.version:
            return False
        self._set_image(self.backend.read_image())
        return True

    def _set_image(self, image: ClusterImage) -> None:
        if image.version <= self.image.version:  # the guard's images only move forward
            return
        self.image = image
        for listener in self.listeners:
            try:
                listener(image)
            except Exception:
                log.exception("applying cluster metadata version %d failed", image.version)

    # -- writing ---------------------------------------------------------------------------

    async def call(self, write: Callable[..., T], *args: Any) -> T:
        """Make a backend write: inline where it is local and short (SQLite), else on this
        broker's one coordination thread, so the event loop goes on serving produce and
        fetch while the API server is slow or down. One thread keeps our writes in order."""
        if not self.backend.remote:
            return write(*args)
        if self._writer is None:
            self._writer = ThreadPoolExecutor(1, thread_name_prefix="coordination")
        return await asyncio.get_running_loop().run_in_executor(self._writer, write, *args)

    async def update(self, change: Callable[[ClusterImage], ClusterImage | None]
                     ) -> ClusterImage:
        """Apply ``change`` to the newest image with compare-and-set, retrying on conflict.

        ``change`` may raise to refuse (the caller's error), or return None for "nothing to
        do"; it is called again on the fresh image after every lost race, on the event loop.
        """
        for _ in range(MAX_CAS_ATTEMPTS):
            current = self.backend.read_image()
            changed = change(current)
            if changed is None:
                self._set_image(current)
                return current
            with _unavailable_as_retriable():
                written = await self.call(self.backend.write_image, changed)
            if written:
                self._set_image(self.backend.read_image())
                return self.image
        raise ConcurrentUpdate(f"cluster metadata kept changing for {MAX_CAS_ATTEMPTS} attempts")

    async def repair(self) -> bool:
        """Put the image back where the store lost it or went backwards (the guard's fault)."""
        if not self.backend.repairable:
            return False
        return await self.call(self.backend.repair)

    def copy_dir(self) -> Path:
        """Where the image copy goes: the first log dir not offline (``offline_dirs``, the
        log manager's, given by the app)."""
        return next((d for d in self.log_dirs if d not in self.offline_dirs), self.log_dirs[0])

    async def keep_copy(self, force: bool = False) -> None:
        """Keep the applied image in the first log dir, at most every COPY_EVERY_S (it is
        rebuilt whole: tens of milliseconds at 10,000 partitions), on a worker thread."""
        # One writer at a time: the periodic copy and the one forced at shutdown wrote the
        # same temporary file side by side, and the second rename failed (the broker exited 1).
        async with self._copy_lock:
            version, at = self._copied
            now = time.monotonic()
            image = self.image
            # A change of format (kafkube.metadata.version raised or lowered) is kept at
            # once: a rollback after a downgrade must find the older format on disk.
            force = force or image.image_format != self._copied_format
            if image.version == version or (not force and now - at < COPY_EVERY_S):
                return
            self._copied = (version, now)  # a failure retries later
            where = self.copy_dir()
            await asyncio.to_thread(write_image_copy, where, self.cluster_id, image)
            await asyncio.to_thread(forget_other_copies, self.log_dirs, where)
            self._copied = (image.version, now)
            self._copied_format = image.image_format

    async def next_producer_id(self) -> int:
        """Unique cluster-wide: each broker reserves blocks, as brokers do from the controller."""
        if self._next_producer_id >= self._producer_id_limit:
            with _unavailable_as_retriable():
                first = await self.call(self.backend.allocate_producer_ids, PRODUCER_ID_BLOCK)
            if self._next_producer_id >= self._producer_id_limit:  # no one else refilled
                self._next_producer_id = first
                self._producer_id_limit = first + PRODUCER_ID_BLOCK
        pid = self._next_producer_id
        self._next_producer_id += 1
        return pid


@contextlib.contextmanager
def _unavailable_as_retriable() -> Iterator[None]:
    """A write the guard refused, or the store did not answer: MetadataUnavailable, which
    callers answer with a retriable error code, never a closed connection."""
    try:
        yield
    except (MetadataFault, StoreUnavailable) as e:
        raise MetadataUnavailable(f"the cluster metadata cannot be written now: {e}") from e
