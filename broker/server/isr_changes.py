"""The leader's changes to the ISR of the partitions it leads (Kafka's AlterPartition, sent by
its AlterPartitionManager): a follower that caught up joins, one that fell behind for
``replica.lag.time.max.ms`` leaves, each a compare-and-set of the cluster image as leader of
the epoch the change was decided in.

A join is decided on a fetch and written in the background, so the fetch's answer never
waits on the coordination backend. From the moment it is decided until this broker has
applied its outcome, the follower counts for the high watermark (``Partition.begin_isr_join``,
Kafka's maximal ISR): the controller may act on the committed ISR (elect the follower when a
reassignment completes) before this leader sees it, so nothing may be committed that the
follower lacks. A write that ends without an answer (the API server timed out) may still have
been committed: the join stays counted (parked) and is written again, at the follower's
next fetch and by the periodic check, until a write is answered or an image past the version
the lost write was based on is applied (the compare-and-set makes either say for certain);
retrying, as Kafka's AlterPartitionManager does, matters where no image would come: the store
refused the write and nothing else changes. A leaving follower counts until the shrunk ISR
is applied, as the local ISR changes only then (Kafka's pending shrink).

Changes are written in batches, one write in flight at a time, as the AlterPartitionManager
sends every queued item in one AlterPartition request: each write rewrites the whole image,
and a broker rejoining 10,000 ISRs one write each would take minutes of the event loop."""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Container, Iterable
from dataclasses import dataclass

from broker.cluster.image import ClusterImage
from broker.cluster.metadata import ClusterMetadata, ConcurrentUpdate
from broker.server.partition import Partition
from kafkube_contract.image import PartitionState

log = logging.getLogger(__name__)

JoinKey = tuple[str, int, int]  # topic, partition, follower
RETRY_BACKOFF_S = 1.0  # between writes of a parked join: the store may be struggling


@dataclass(slots=True)
class Parked:
    """A join whose write got no answer: it may have been stored."""

    partition: Partition
    base: int  # the version of the image the write was based on
    epoch: int  # the leader epoch it was decided in
    retry_at: float  # monotonic time of the next write


@dataclass(slots=True, eq=False)
class QueuedChange:
    """One ISR change waiting for the next batched write; ``done`` gets the image after it."""

    partition: Partition
    add: int | None
    remove: frozenset[int]
    epoch: int
    done: asyncio.Future[ClusterImage]
    changed: bool = False  # by the last attempt at the write
    base: int = -1  # the version of the image the last write changing it was based on


class IsrChanges:
    def __init__(self, metadata: ClusterMetadata, node_id: int) -> None:
        self.metadata = metadata
        self.node_id = node_id
        self.expands = 0
        self.shrinks = 0
        self.pending: set[asyncio.Task[bool]] = set()
        self._expanding: set[JoinKey] = set()  # joins in flight: one at a time each
        # Joins whose write ended without an answer (parked): still counted for the high
        # watermark, retried until the store answers or an image past the write says.
        self._parked: dict[JoinKey, Parked] = {}
        self._queue: list[QueuedChange] = []
        self._writer: asyncio.Task[None] | None = None

    @property
    def parked(self) -> bool:
        return bool(self._parked)

    def follower_caught_up(self, partition: Partition, replica_id: int) -> None:
        """Start the join of a follower that qualifies (``Partition.record_follower_fetch``)."""
        key = (partition.topic, partition.index, replica_id)
        if key in self._expanding or key in self._parked:
            return
        partition.begin_isr_join(replica_id)  # the high watermark waits for it from now on
        self._start_join(partition, replica_id, partition.leader_epoch)

    def retry_parked(self, partition: Partition, replica_id: int) -> None:
        """Write a parked join again (its follower fetched, or the periodic check): the
        compare-and-set says whether the lost write was stored. It was decided in its
        leader epoch and counted ever since, so it needs no new decision; a new epoch
        (which cleared it from the partition) drops it."""
        key = (partition.topic, partition.index, replica_id)
        parked = self._parked.get(key)
        if parked is None or key in self._expanding or time.monotonic() < parked.retry_at:
            return
        if not partition.is_joining(replica_id) or partition.leader_epoch != parked.epoch:
            del self._parked[key]
            return
        parked.retry_at = time.monotonic() + RETRY_BACKOFF_S
        self._start_join(partition, replica_id, parked.epoch)

    def _start_join(self, partition: Partition, replica_id: int, epoch: int) -> None:
        key = (partition.topic, partition.index, replica_id)
        self._expanding.add(key)
        task = asyncio.get_running_loop().create_task(
            self.change(partition, add=replica_id, epoch=epoch))
        self.pending.add(task)

        def done(finished: asyncio.Task[bool]) -> None:
            self._expanding.discard(key)
            self.pending.discard(finished)
            if not finished.cancelled() and finished.exception() is not None:
                log.error("%s: ISR expansion failed", partition, exc_info=finished.exception())

        task.add_done_callback(done)

    async def shrink_stale(self, partitions: Iterable[Partition], lag_ms: int) -> None:
        """Drop the followers that have not caught up for ``lag_ms`` from the ISRs we lead;
        write the parked joins again (one whose follower died is refused and ends)."""
        for key, parked in list(self._parked.items()):
            self.retry_parked(parked.partition, key[2])
        shrinks = []
        for partition in list(partitions):
            if partition.is_leader:
                stale = partition.out_of_sync_followers(lag_ms)
                if stale:
                    shrinks.append(self.change(partition, remove=stale))
        await asyncio.gather(*shrinks)  # one write for all of them

    def image_applied(self, image: ClusterImage) -> None:
        """Settle the joins of unknown outcome this image is past."""
        for key, parked in list(self._parked.items()):
            if image.version > parked.base:
                del self._parked[key]
                parked.partition.end_isr_join(key[2], image.partition(key[0], key[1]))

    def cancel(self) -> None:
        for task in self.pending:
            task.cancel()
        if self._writer is not None:
            self._writer.cancel()  # a writer not started yet never reaches its ``finally``
        for queued in self._queue:
            queued.done.cancel()
        self._queue.clear()

    async def change(self, partition: Partition, add: int | None = None,
                     remove: Iterable[int] = (), epoch: int | None = None) -> bool:
        """Compare-and-set the ISR as leader of ``epoch`` (the partition's now by default),
        in the next batched write; True if it changed. Only a live broker joins (KIP-841):
        one whose lease lapsed, or that left in a controlled shutdown, may still fetch a
        moment, and adding it back would undo its fencing; liveness is read again at every
        attempt."""
        removed = frozenset(remove)
        if add is None and not removed:
            return False
        epoch = partition.leader_epoch if epoch is None else epoch
        before = list(partition.isr)
        loop = asyncio.get_running_loop()
        queued = QueuedChange(partition, add, removed, epoch, loop.create_future())
        self._queue.append(queued)
        if self._writer is None or self._writer.done():
            self._writer = loop.create_task(self._write_queued(), name="isr-changes")
        image: ClusterImage | None = None
        try:
            image = await queued.done
        except ConcurrentUpdate as e:
            log.warning("%s: ISR change lost: %s", partition, e)
            return False
        finally:  # cancelled while queued: the writer leaves it out of its batch
            if add is not None:
                self._answered(partition, add, image, queued.base, epoch)
        state = image.partition(partition.topic, partition.index)
        if not queued.changed or state is None:
            return False
        if len(state.isr) > len(before):
            self.expands += 1
            log.info("%s: ISR expanded from %s to %s", partition, before, list(state.isr))
        elif len(state.isr) < len(before):
            self.shrinks += 1
            log.info("%s: ISR shrank from %s to %s", partition, before, list(state.isr))
        return True

    async def _write_queued(self) -> None:
        """Write what is queued, one batch at a time, until nothing is; every waiter gets
        the batch's image or its exception (cancelled with this task at shutdown)."""
        batch: list[QueuedChange] = []
        try:
            while self._queue:
                # Not those whose caller was cancelled meanwhile (their futures cancelled).
                batch = [queued for queued in self._queue if not queued.done.done()]
                self._queue = []
                if not batch:
                    continue
                try:
                    image = await self.metadata.update(functools.partial(self._apply, batch))
                except Exception as e:  # ConcurrentUpdate, or what the write raised
                    for queued in batch:
                        if not queued.done.done():
                            queued.done.set_exception(e)
                    continue
                for queued in batch:
                    if not queued.done.done():
                        queued.done.set_result(image)
        finally:
            for queued in (*batch, *self._queue):
                queued.done.cancel()  # a no-op for those answered

    def _apply(self, batch: list[QueuedChange], image: ClusterImage) -> ClusterImage | None:
        """The image with every change of ``batch`` that still holds in it, or None."""
        changes: dict[str, dict[int, PartitionState]] = {}
        live: Container[int] | None = None
        for queued in batch:
            queued.changed = False
            topic, index = queued.partition.topic, queued.partition.index
            state = changes.get(topic, {}).get(index)
            state = image.partition(topic, index) if state is None else state
            if state is None or state.leader != self.node_id \
                    or state.leader_epoch != queued.epoch:
                continue
            isr = [r for r in state.isr if r not in queued.remove]
            add = queued.add
            # A join is written only while it counts for the high watermark: a parked
            # join's retry may have been settled (``image_applied``) while it was queued.
            if add is not None and add not in isr and add in state.replicas \
                    and queued.partition.is_joining(add):
                live = self.metadata.live_brokers() if live is None else live
                if add in live:
                    isr.append(add)
            if tuple(isr) == state.isr:
                continue
            queued.changed, queued.base = True, image.version
            changes.setdefault(topic, {})[index] = state.with_isr(tuple(isr))
        return image.with_partitions(changes) if changes else None

    def _answered(self, partition: Partition, replica_id: int, image: ClusterImage | None,
                  base: int, epoch: int) -> None:
        """A join's write is over: its outcome known from ``image``, or, with no image after
        a write was tried, unknown until an image past ``base`` is applied — perhaps already:
        other writers' images keep coming while ours is retried, and once the cluster waits
        on this join none may come after it. A retry that failed before writing keeps what
        the parked write left unknown."""
        key = (partition.topic, partition.index, replica_id)
        if image is None and base < 0 and key in self._parked:
            base = self._parked[key].base
        if image is None and base >= 0:
            if self.metadata.image.version <= base:
                retry_at = time.monotonic() + RETRY_BACKOFF_S
                self._parked[key] = Parked(partition, base, epoch, retry_at)
                return
            image = self.metadata.image
        self._parked.pop(key, None)
        partition.end_isr_join(
            replica_id, image.partition(partition.topic, partition.index) if image else None)
