"""Curve 2 of the recovery command: one CreateTopics of x partitions (RF 3) on a fresh
3-broker cluster, timed until EVERY broker, asked over its own connection, answers Metadata
with every partition led and a full ISR."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.scale.clusters import create_topic_async, three_brokers, wait_future
from bench.scale.probes import BrokerWatch
from bench.scale.recovery_points import Point


def metadata_point(system: str, partitions: int, libs: Path | None, timeout: float,
                   log: Callable[[str], None]) -> Point:
    point = Point("metadata", system, partitions, None)
    with three_brokers(system, libs) as addresses:
        log(f"{system}: CreateTopics of {partitions:,} partitions, RF 3, on 3 brokers ...")
        point.figures |= propagation(addresses, ",".join(addresses), f"meta-{partitions}",
                                     partitions, timeout)
    point.seconds = point.figures.get("every_broker_s")
    if point.seconds is None:
        point.error = f"not on every broker within {timeout:.0f} s"
    return point


def propagation(addresses: list[str], bootstrap: str, topic: str, partitions: int,
                timeout: float) -> dict[str, Any]:
    """CreateTopics, then ask every broker, each from a thread of its own, until each has
    answered once with every partition led and a full ISR; seconds from the call, per
    broker and for the last, and when the CreateTopics answer came (a callback, so a broker
    slow to answer Metadata delays no other figure)."""
    out: dict[str, Any] = {}
    t0 = time.monotonic()
    future = create_topic_async(bootstrap, topic, partitions, 3)
    future.add_done_callback(lambda _f: out.setdefault(
        "create_returned_s", round(time.monotonic() - t0, 2)))
    with BrokerWatch(addresses, topic, partitions, t0, t0 + timeout) as watch:
        out |= watch.result()
    if wait_future(future, max(1.0, t0 + timeout - time.monotonic())) is None:
        out["create_error"] = "no CreateTopics answer in time"
    return out


