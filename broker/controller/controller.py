"""The active controller: one broker at a time, chosen by the controller lease.

Every broker runs this loop; only the lease holder acts. Each round it reads the live
brokers and the image and writes, with compare-and-set, what Kafka's controller would:
dead brokers fenced and leaders re-elected from the ISR, finished reassignments completed,
and, every ``leader.imbalance.check.interval.seconds``, leadership handed back to preferred
replicas when a broker's imbalance passes ``leader.imbalance.per.broker.percentage``. The
decisions are the pure functions of ``elections`` and ``rebalance``; this is only the loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable

from broker.cluster.image import ClusterImage
from broker.cluster.metadata import ClusterMetadata, ConcurrentUpdate, MetadataUnavailable
from broker.common.repeated_failure import RepeatedFailure
from broker.config.broker_config import BrokerConfig
from broker.controller.elections import (
    elect_preferred,
    fence_and_elect,
    live_for,
    map_indexed,
    offline_replicas,
    step_reassignment,
)
from kafkube_contract.image import PartitionState
from kafkube_contract.leadership import preferred_leader_moves

log = logging.getLogger(__name__)

ROUND_SECONDS = 0.25


class Controller:
    def __init__(self, config: BrokerConfig, metadata: ClusterMetadata,
                 broker_epoch: Callable[[], int]) -> None:
        self.config = config
        self.metadata = metadata
        self.backend = metadata.backend
        self.node_id = config.node_id
        self._broker_epoch = broker_epoch
        self.epoch: int | None = None  # the controller epoch while active
        self.elections = 0
        self._next_rebalance = 0.0
        self._renewed = 0.0
        self._task: asyncio.Task[None] | None = None
        # What a round's passes read (image version, live brokers, the broker's unclean
        # election default, the replicas on offline log dirs), kept when they changed nothing.
        self._settled: tuple[int, frozenset[int], bool, frozenset[tuple[str, frozenset[int]]]
                             ] | None = None

    @property
    def active(self) -> bool:
        return self.epoch is not None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="controller")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self.active:
            await self.metadata.call(self.backend.resign_controller, self.node_id)
            self.epoch = None

    async def _run(self) -> None:
        failures = RepeatedFailure(log, "controller round")
        while True:
            try:
                await self.round()
                failures.succeeded()
            except Exception as e:
                failures.failed(e)
            await asyncio.sleep(ROUND_SECONDS)

    async def round(self, now: float | None = None) -> None:
        """One pass: hold the lease, then bring the image in line with the live brokers."""
        now = time.monotonic() if now is None else now
        renew_every = self.config["broker.heartbeat.interval.ms"] / 1000
        if self.epoch is None:
            lease = self.backend.controller()  # a read: most rounds end here on most brokers
            held_elsewhere = lease is not None and lease.holder != self.node_id
            epoch = None if held_elsewhere else await self._acquire()
            self._renewed = now
        elif now - self._renewed >= renew_every:
            # A write, so only as often as a heartbeat: the lease lasts a session timeout.
            # Monotonic time runs on while the process is paused, so a broker resumed after
            # its lease lapsed renews first, and finds another controller, before acting.
            epoch = await self._acquire()
            self._renewed = now
        else:
            epoch = self.epoch
        if epoch != self.epoch:
            if epoch is not None:
                log.info("broker %d is the active controller (epoch %d)", self.node_id, epoch)
                self._next_rebalance = now + self._rebalance_interval()
            elif self.epoch is not None:
                log.warning("broker %d lost the controller lease", self.node_id)
            self.epoch = epoch
            self._settled = None
        if epoch is None:
            return
        brokers = self.backend.live_brokers()
        live = frozenset(brokers)
        offline = offline_replicas(brokers)
        before = (self.backend.read_image().version, live,
                  bool(self.config["unclean.leader.election.enable"]),
                  frozenset(offline.items()))
        if before != self._settled:
            # The passes are pure functions of what ``before`` holds, so a round that finds
            # it as a pass left it, with nothing to do, skips them: at 10,000 partitions the
            # two passes took ~30 ms of the event loop, four times a second.
            written = await self._write(
                lambda image: self._fence_and_elect(image, live, offline))
            written &= await self._write(lambda image: map_indexed(
                image, lambda topic, index, state: step_reassignment(
                    state, live_for(live, offline, image.topics[topic].topic_id, index))))
            after = self.backend.read_image().version
            # A refused write (metadata not to be trusted) is done again when it is.
            self._settled = before if written and after == before[0] else None
        if self.config["auto.leader.rebalance.enable"] and now >= self._next_rebalance:
            self._next_rebalance = now + self._rebalance_interval()
            await self._write(lambda image: self.rebalance(image, live))

    async def _acquire(self) -> int | None:
        return await self.metadata.call(
            self.backend.acquire_controller, self.node_id, self._broker_epoch(),
            self.config["broker.session.timeout.ms"])

    def _rebalance_interval(self) -> float:
        return float(self.config["leader.imbalance.check.interval.seconds"])

    async def _write(self, change: Callable[[ClusterImage], ClusterImage | None]) -> bool:
        """Whether the change was made (or nothing was to be made)."""
        try:
            await self.metadata.update(change)
        except MetadataUnavailable:
            return False  # the guard reports the fault itself, and not four times a second
        except ConcurrentUpdate as e:
            log.warning("controller: %s", e)
            return False
        return True

    def _unclean(self, topic: str, image: ClusterImage) -> bool:
        meta = image.topics[topic]
        raw = meta.configs.get("unclean.leader.election.enable")
        if raw is None:
            return bool(self.config["unclean.leader.election.enable"])
        return raw.strip().lower() == "true"

    def _fence_and_elect(self, image: ClusterImage, live: frozenset[int],
                         offline: dict[str, frozenset[int]] | None = None
                         ) -> ClusterImage | None:
        """Dead brokers, and replicas on offline log dirs, out of every ISR; leaders elected
        where the leader is either."""
        def change(topic: str, index: int, state: PartitionState) -> PartitionState:
            here = live_for(live, offline or {}, image.topics[topic].topic_id, index)
            new = fence_and_elect(state, here, self._unclean(topic, image))
            if new.leader != state.leader:
                self.elections += 1
                log.info("%s: leader %d -> %d (epoch %d), ISR %s", topic, state.leader,
                         new.leader, new.leader_epoch, list(new.isr))
            return new

        return map_indexed(image, change)

    def rebalance(self, image: ClusterImage, live: frozenset[int]) -> ClusterImage | None:
        moves = preferred_leader_moves(
            image, live, self.config["leader.imbalance.per.broker.percentage"]
        )
        if not moves:
            return None
        log.info("leader imbalance: moving %d partitions to their preferred leaders",
                 len(moves))
        for topic, index in moves:
            state = image.topics[topic].assignments[index]
            image = image.with_partition(topic, index, elect_preferred(state))
        return image
