"""The load curves' figures: which figures each curve has (``Metric``), one system's
figures at one point (``Point``, the JSON a run writes), and what a figure's cell says when
its phase did not finish. Shared by the measuring and the report."""

from __future__ import annotations

import re
import statistics
from dataclasses import dataclass, field
from typing import Any

from bench.systems import SYSTEMS

CURVES = ("partitions", "connections", "consumers")
SYSTEMS = SYSTEMS
TOPIC = "scale"
UNIT_NAMES = {"partitions": "partitions", "connections": "producer connections",
              "consumers": "consumer connections"}


@dataclass(frozen=True)
class Metric:
    """One figure of a curve: how the table names it and which way is better."""

    key: str
    label: str
    unit: str
    better: str  # "higher", "lower", or "" (context, no better side)


PARTITION_METRICS = (
    Metric("create_s", "create the topic, until every partition is led", "s", "lower"),
    Metric("writable_s", "create the topic, until every partition took a write", "s",
           "lower"),
    Metric("produce_mbps", "produce, acks=1", "MB/s", "higher"),
    Metric("produce_cpu", "broker CPU per GB produced", "s/GB", "lower"),
    Metric("consume_mbps", "consume from offset 0", "MB/s", "higher"),
    Metric("consume_cpu", "broker CPU per GB consumed", "s/GB", "lower"),
    Metric("rss_topic", "broker RSS added by creating the topic", "MiB", "lower"),
    Metric("rss_idle", "broker RSS with the topic, idle", "MiB", "lower"),
    Metric("rss_peak", "broker RSS, peak while producing", "MiB", "lower"),
)
CONNECTION_METRICS = (
    Metric("produce_mbps", "produce flat out, acks=1", "MB/s", "higher"),
    Metric("produce_cpu", "broker CPU per GB, flat out", "s/GB", "lower"),
    Metric("rate_mbps", "rate reached when {rate:g} MB/s is asked", "MB/s", ""),
    Metric("rate_cpu", "broker CPU per GB at {rate:g} MB/s", "s/GB", "lower"),
    Metric("rate_p99", "p99 ack latency at {rate:g} MB/s", "ms", "lower"),
    Metric("rss_idle", "broker RSS before the producers, idle", "MiB", "lower"),
    Metric("rss_peak", "broker RSS, peak while producing", "MiB", "lower"),
    Metric("connections", "broker TCP connections, peak", "", ""),
)
CONSUMER_METRICS = (
    Metric("idle_cpu", "broker CPU with every consumer long-polling, nothing to read",
           "% of a core", "lower"),
    Metric("rate_cpu", "broker CPU while {consumer_rate:g} records/s are read by every "
           "consumer of their partition", "% of a core", "lower"),
    Metric("rate_mbps", "bytes delivered to the consumers then", "MB/s", ""),
    Metric("rate_p50", "p50 from produce() to a consumer, {consumer_rate:g} records/s",
           "ms", "lower"),
    Metric("rate_p99", "p99 from produce() to a consumer, {consumer_rate:g} records/s",
           "ms", "lower"),
    Metric("rss_idle", "broker RSS before the consumers, idle", "MiB", "lower"),
    Metric("rss_peak", "broker RSS, peak with the consumers", "MiB", "lower"),
    Metric("connections", "broker TCP connections, peak", "", ""),
)
METRICS = {"partitions": PARTITION_METRICS, "connections": CONNECTION_METRICS,
           "consumers": CONSUMER_METRICS}


@dataclass
class Point:
    """Every figure of one system at one point of one curve; a figure it could not reach
    is in ``failed`` (metric key -> what happened) instead of ``values``."""

    curve: str
    x: int
    system: str
    values: dict[str, float] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)
    raw: dict[str, Any] = field(default_factory=dict)


def failure_text(error: BaseException, timeout: float) -> str:
    """What a figure's cell says when its phase did not finish: short, as it sits in a table
    cell (the whole error goes to the point's raw data)."""
    text = str(error)
    last = text.strip().splitlines()[-1] if text.strip() else type(error).__name__
    left = re.search(r"(\d+) undelivered", last)
    if left:  # a producer's flush ran out of its time with records still unacknowledged
        return f"timed out after {timeout:.0f} s ({int(left.group(1)):,} unacknowledged)"
    if isinstance(error, TimeoutError) or "still running after" in text or "not within" in text:
        return f"timed out after {timeout:.0f} s"
    code = re.search(r"code=([A-Z_]+)", last)
    if code:
        return f"refused: {code.group(1)}"
    return f"failed: {last[:60]}"


def find(points: list[Point], curve: str, x: int, system: str) -> Point | None:
    return next((p for p in points if (p.curve, p.x, p.system) == (curve, x, system)), None)


def label(metric: Metric, settings: dict[str, Any]) -> str:
    return metric.label.format(rate=settings.get("rate", 0.0),
                               consumer_rate=settings.get("consumer_rate", 0.0))


def at(x: int, curve: str) -> str:
    """``1 partition``, ``10,000 partitions``, ``200 producer connections``, ``1 consumer
    connection``."""
    unit = UNIT_NAMES[curve]
    return f"{x:,} {unit[:-1] if x == 1 else unit}"




def merge_rounds(points: list[Point]) -> list[Point]:
    """One point per (curve, x, system) from several interleaved rounds: each figure the
    median of the rounds that reached it, failed only if none did; every round's figures
    stay in ``raw["rounds"]``. On a machine whose speed moves between minutes, a ratio of
    medians over interleaved rounds moves less than one run's. The first round's notes
    (which threads spent the CPU, how a topic was made) stand for all."""
    groups: dict[tuple[str, int, str], list[Point]] = {}
    for point in points:
        groups.setdefault((point.curve, point.x, point.system), []).append(point)
    merged = []
    for (curve, x, system), rounds in groups.items():
        if len(rounds) == 1:
            merged.append(rounds[0])
            continue
        point = Point(curve, x, system)
        keys = {k for r in rounds for k in (*r.values, *r.failed)}
        for key in sorted(keys):
            reached = [r.values[key] for r in rounds if key in r.values]
            if reached:
                point.values[key] = statistics.median(reached)
            else:
                point.failed[key] = rounds[0].failed[key]
        point.raw = {**rounds[0].raw, "rounds": [
            {"values": r.values, "failed": r.failed, "raw": r.raw} for r in rounds]}
        merged.append(point)
    return merged
