"""Curves 2 and 3 of the recovery command, on a fresh 3-broker cluster: one CreateTopics of
x partitions (RF 3), or x topics of one partition each (RF 3, sent as CreateTopics of
``TOPICS_PER_REQUEST``), timed until EVERY broker, asked over its own connection, answers
Metadata with every partition led and a full ISR."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.scale.clusters import (
    create_topic_async,
    create_topics_async,
    three_brokers,
    wait_future,
)
from bench.scale.probes import BrokerWatch, all_led, wait_registered
from bench.scale.recovery_points import Point


def metadata_point(system: str, partitions: int, libs: Path | None, timeout: float,
                   log: Callable[[str], None]) -> Point:
    return _point("metadata", system, partitions, libs, timeout, log,
                  f"CreateTopics of {partitions:,} partitions",
                  lambda addresses: propagation(addresses, ",".join(addresses),
                                                f"meta-{partitions}", partitions, timeout))


def topics_point(system: str, topics: int, libs: Path | None, timeout: float,
                 log: Callable[[str], None]) -> Point:
    return _point("topics", system, topics, libs, timeout, log,
                  f"{topics:,} topics of 1 partition",
                  lambda addresses: topics_propagation(addresses, ",".join(addresses),
                                                       topics, timeout))


def _point(curve: str, system: str, x: int, libs: Path | None, timeout: float,
           log: Callable[[str], None], what: str,
           measure: Callable[[list[str]], dict[str, Any]]) -> Point:
    """One point on a fresh 3-broker cluster, measured once every broker lists all three."""
    point = Point(curve, system, x, None)
    with three_brokers(system, libs) as addresses:
        wait_registered(addresses, 3)
        log(f"{system}: {what}, RF 3, on 3 brokers ...")
        point.figures |= measure(addresses)
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


def topics_propagation(addresses: list[str], bootstrap: str, topics: int,
                       timeout: float) -> dict[str, Any]:
    """As ``propagation``, for ``topics`` topics: every broker asked for all topics."""
    from kafkube.harness.wire import metadata_request

    prefix = "mt-"
    out: dict[str, Any] = {}
    t0 = time.monotonic()
    futures = create_topics_async(bootstrap, [f"{prefix}{i}" for i in range(topics)], 3)
    for future in futures:  # the last to resolve sets it last
        future.add_done_callback(lambda _f: out.__setitem__(
            "create_returned_s", round(time.monotonic() - t0, 2)))
    with BrokerWatch(addresses, prefix, 1, t0, t0 + timeout,
                     request=metadata_request(None, auto_create=False),
                     ready=lambda answer: all_led(answer, prefix, topics, 3)) as watch:
        out |= watch.result()
    errors = []
    for future in futures:  # a refused batch is recorded beside what the brokers showed
        try:
            if wait_future(future, max(1.0, t0 + timeout - time.monotonic())) is None:
                errors.append("no CreateTopics answer in time")
        except Exception as e:  # the broker's refusal (KafkaException)
            errors.append(str(e))
    if errors:
        out["create_error"] = f"{len(errors)} of {len(futures)} topics: {errors[0]}"
        out.pop("create_returned_s", None)
    return out
