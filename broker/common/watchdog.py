"""Finds where the event loop stalls, while it stalls.

Every request, fetch and lease renewal of a broker runs on one event loop, so anything that
holds it for a second delays all of them, and past ``broker.session.timeout.ms`` the broker
loses its own lease. Such stalls are found by load (a 2,048-partition CreatePartitions once held
the loop for 20 s), and a profile afterwards rarely shows which call it was. This watchdog
notices the stall from a thread of its own while it lasts, logs the loop thread's stack at
that moment, and when the loop runs again logs how long it was held and counts it in
``kafkube_event_loop_stalls_total`` / ``kafkube_event_loop_stall_seconds``.

Shorter stalls that still reach the tail of every latency have one common cause the watchdog
is too coarse to see: CPython's cyclic garbage collector, which runs on whichever thread
allocates, here the loop. ``GcPauses`` times every collection into
``kafkube_gc_pause_seconds`` (by generation), the figure a Kafka operator reads from the
JVM's GC pause metrics.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import sys
import threading
import time
import traceback

from prometheus_client import CollectorRegistry, Counter, Histogram

log = logging.getLogger(__name__)

# How often the loop says it is alive, at most: a quarter of the threshold, so a stall is
# seen well before it has lasted twice the threshold, and no more often than a quarter
# second, as each tick is an event-loop wake-up even on an idle broker; nor more often than
# every 10 ms, whatever threshold is set.
MAX_TICK_SECONDS = 0.25
MIN_TICK_SECONDS = 0.01


class EventLoopWatchdog:
    def __init__(self, threshold_seconds: float, registry: CollectorRegistry) -> None:
        self.threshold = threshold_seconds
        self.interval = max(min(threshold_seconds / 4, MAX_TICK_SECONDS), MIN_TICK_SECONDS)
        self.stalls = Counter(
            "kafkube_event_loop_stalls", "Times the event loop was held past "
            "kafkube.event.loop.stall.warn.ms", registry=registry)
        self.stall_seconds = Histogram(
            "kafkube_event_loop_stall_seconds", "How long each such stall held the loop",
            buckets=(0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0), registry=registry)
        self._last_tick = time.monotonic()
        self._reported_at: float | None = None  # the tick a stall was reported for
        self._loop_thread = threading.get_ident()
        self._stop = threading.Event()
        self._task: asyncio.Task[None] | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self.threshold <= 0:
            return
        self._loop_thread = threading.get_ident()
        self._last_tick = time.monotonic()
        self._task = asyncio.get_running_loop().create_task(self._tick())
        self._thread = threading.Thread(target=self._watch, name="loop-watchdog", daemon=True)
        self._thread.start()

    async def stop(self) -> None:
        self._stop.set()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _tick(self) -> None:
        while True:
            now = time.monotonic()
            held = now - self._last_tick - self.interval
            if held >= self.threshold:
                self.stalls.inc()
                self.stall_seconds.observe(held)
                log.warning("event loop was held for %.1f s", held)
            self._last_tick = now
            await asyncio.sleep(self.interval)

    def _watch(self) -> None:
        while not self._stop.wait(self.interval):
            last = self._last_tick
            held = time.monotonic() - last
            if held < self.threshold + self.interval or self._reported_at == last:
                continue
            self._reported_at = last
            frame = sys._current_frames().get(self._loop_thread)
            stack = "".join(traceback.format_stack(frame)) if frame is not None else "(gone)"
            log.warning("event loop held for over %.1f s, now at:\n%s", self.threshold, stack)


class GcPauses:
    """Times each garbage collection (``gc.callbacks``) into a histogram per generation, and
    counts the objects it freed: objects freed by the collector, not by their reference
    count, were in reference cycles, and a path that makes cycles per request makes the
    collections that walk everything else with them."""

    def __init__(self, registry: CollectorRegistry) -> None:
        pauses = Histogram(
            "kafkube_gc_pause_seconds", "How long each garbage collection held the broker's "
            "threads (the event loop among them)", ["generation"],
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0),
            registry=registry)
        # Children looked up once: labels() takes a lock and builds a key each call, and a
        # busy broker collects its youngest generation hundreds of times a second.
        self._by_generation = [pauses.labels(str(g)) for g in range(3)]
        collected = Counter(
            "kafkube_gc_collected_objects", "Objects the garbage collector freed (they were "
            "in reference cycles)", ["generation"], registry=registry)
        self._collected = [collected.labels(str(g)) for g in range(3)]
        self._started = 0.0

    def start(self) -> None:
        if self._callback not in gc.callbacks:
            gc.callbacks.append(self._callback)

    def stop(self) -> None:
        with contextlib.suppress(ValueError):
            gc.callbacks.remove(self._callback)

    def _callback(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        else:
            generation = info["generation"]
            self._by_generation[generation].observe(time.perf_counter() - self._started)
            if info["collected"]:
                self._collected[generation].inc(info["collected"])
