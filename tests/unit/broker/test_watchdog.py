"""The event-loop watchdog names the call that holds the loop, while it holds it."""

from __future__ import annotations

import asyncio
import gc
import logging
import time

from prometheus_client import CollectorRegistry

from broker.common.watchdog import EventLoopWatchdog, GcPauses


def hold_the_loop_for(seconds: float) -> None:
    time.sleep(seconds)  # the stall under test: a synchronous call on the event loop


def test_a_stall_is_logged_with_its_stack_and_counted(caplog) -> None:
    registry = CollectorRegistry()

    async def scenario() -> None:
        watchdog = EventLoopWatchdog(0.3, registry)
        watchdog.start()
        await asyncio.sleep(0.25)  # let a tick or two pass: no stall yet
        assert registry.get_sample_value("kafkube_event_loop_stalls_total") == 0
        hold_the_loop_for(1.0)
        deadline = time.monotonic() + 5
        while registry.get_sample_value("kafkube_event_loop_stalls_total") == 0:
            assert time.monotonic() < deadline, "the stall was never counted"
            await asyncio.sleep(0.05)
        await watchdog.stop()

    with caplog.at_level(logging.WARNING, logger="broker.common.watchdog"):
        asyncio.run(scenario())
    during = [r.getMessage() for r in caplog.records if "now at:" in r.getMessage()]
    assert len(during) == 1 and "hold_the_loop_for" in during[0]
    after = [r.getMessage() for r in caplog.records if "was held for" in r.getMessage()]
    assert len(after) == 1
    held = float(after[0].split("for ")[1].split(" s")[0])
    assert 0.8 <= held <= 1.5
    assert registry.get_sample_value("kafkube_event_loop_stall_seconds_count") == 1


def test_a_busy_but_yielding_loop_is_not_a_stall(caplog) -> None:
    registry = CollectorRegistry()

    async def scenario() -> None:
        watchdog = EventLoopWatchdog(0.3, registry)
        watchdog.start()
        end = time.monotonic() + 1.0
        while time.monotonic() < end:
            hold_the_loop_for(0.05)
            await asyncio.sleep(0)
        await watchdog.stop()

    with caplog.at_level(logging.WARNING, logger="broker.common.watchdog"):
        asyncio.run(scenario())
    assert registry.get_sample_value("kafkube_event_loop_stalls_total") == 0
    assert not [r for r in caplog.records if r.name == "broker.common.watchdog"]


def test_garbage_collections_are_timed_by_generation() -> None:
    registry = CollectorRegistry()
    pauses = GcPauses(registry)
    pauses.start()
    try:
        gc.collect()  # a full collection: generation 2
    finally:
        pauses.stop()
    full = registry.get_sample_value("kafkube_gc_pause_seconds_count", {"generation": "2"})
    assert full is not None and full >= 1
    assert registry.get_sample_value("kafkube_gc_pause_seconds_sum", {"generation": "2"}) > 0
    gc.collect()  # stopped: no longer counted
    assert registry.get_sample_value(
        "kafkube_gc_pause_seconds_count", {"generation": "2"}) == full


def test_objects_freed_by_the_collector_are_counted() -> None:
    registry = CollectorRegistry()
    pauses = GcPauses(registry)
    gc.collect()
    pauses.start()
    try:
        for _ in range(100):  # garbage only the collector can free: a cycle each
            cycle: list = []
            cycle.append(cycle)
        del cycle
        gc.collect()
    finally:
        pauses.stop()
    freed = sum(registry.get_sample_value("kafkube_gc_collected_objects_total",
                                          {"generation": str(g)}) or 0 for g in range(3))
    assert freed >= 100, freed
