"""The partition curve: on a warm broker, the time to create a topic of x partitions until
each is led and until each took a write, the broker memory that topic adds, then produce
and consume throughput and broker CPU per GB over its x partitions."""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable
from typing import Any

from bench import clients
from bench.scale.load_points import PARTITION_METRICS, TOPIC, Point, failure_text
from bench.scale.sampling import Sampler, busiest, idle_rss_mib, profiled, thread_cpu
from bench.systems import Meter, Running, create_topic, silent_logger
from kafkube.harness.waiting import wait_until

REFUSED_BATCH = "excessively large"  # "... batch operation" / "... number of partitions"
STEP = 5000


def timed_create(env: Running, partitions: int, timeout: float, raw: dict[str, Any]) -> float:
    """Seconds from CreateTopics to the third metadata answer in a row with every partition
    led (bench.systems.create_topic; its streak adds ~0.2 s to every point alike).

    Kafka's controller refuses one request adding 10,000 partitions or more (its metadata
    batch limit, KAFKA-17870: POLICY_VIOLATION "Excessively large number of partitions per
    request"); then the topic is made as an operator would have to, CreateTopics of
    ``STEP`` partitions and CreatePartitions up ``STEP`` at a time, all of it timed, and
    ``raw["create_note"]`` says so."""
    from confluent_kafka import KafkaException

    t0 = time.monotonic()
    try:
        create_topic(env, TOPIC, 1, {}, timeout=timeout, partitions=partitions)
    except KafkaException as e:
        if REFUSED_BATCH not in str(e).lower() or partitions <= STEP:
            raise
        raw["create_note"] = (f"one CreateTopics of {partitions:,} partitions was refused "
                              f"({_error_text(e)}); the topic was created "
                              f"with {STEP:,}, then grown by CreatePartitions {STEP:,} at a "
                              "time, all of it timed")
        create_topic(env, TOPIC, 1, {}, timeout=timeout, partitions=STEP)
        for total in range(2 * STEP, partitions + STEP, STEP):  # bounded: partitions / STEP
            grow_topic(env, min(total, partitions), max(1.0, t0 + timeout - time.monotonic()))
    return time.monotonic() - t0


def _error_text(e: Exception) -> str:
    """A KafkaException's own message (its KafkaError's ``str()``), else ``str(e)``."""
    first = e.args[0] if e.args else None
    return first.str() if hasattr(first, "str") else str(e)


def grow_topic(env: Running, total: int, timeout: float) -> None:
    """CreatePartitions up to ``total``, then wait until the metadata shows them all led."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient, NewPartitions

    admin = AdminClient({"bootstrap.servers": env.bootstrap,
                         "logger": silent_logger()})
    admin.create_partitions([NewPartitions(TOPIC, total)],
                            request_timeout=30)[TOPIC].result(timeout)

    def ready() -> bool:
        try:
            found = admin.list_topics(timeout=5).topics.get(TOPIC)
        except KafkaException:
            return False
        return (found is not None and len(found.partitions) == total
                and all(p.leader >= 0 for p in found.partitions.values()))
    wait_until(ready, timeout, f"{TOPIC}: {total} partitions led")


def write_each(bootstrap: str, topic: str, partitions: int, record_size: int,
               timeout: float) -> dict[str, Any]:
    """One record to every partition (acks=1) until each is acknowledged: a partition shown
    led in the metadata may not have its log yet (Kafka's broker publishes the metadata
    image before its ReplicaManager creates the logs), and a producer waits for both. Its
    clock runs from the first produce() to the last delivery report. Own process."""
    from confluent_kafka import Producer

    deadline = time.monotonic() + timeout
    errors: list[str] = []
    last = [0.0]

    def on_delivery(err: Any, _msg: Any) -> None:
        if err is not None:
            errors.append(str(err))
        last[0] = time.perf_counter()

    producer = Producer({"bootstrap.servers": bootstrap, **clients.PRODUCER_CONFIG,
                         "acks": 1, "message.timeout.ms": int(timeout * 1000),
                         "log_level": 3,  # not a warning per partition while leaders move
                         "on_delivery": on_delivery})
    clients.check_topic(producer, topic, partitions, deadline)
    payload = os.urandom(record_size)
    start = time.perf_counter()
    for partition in range(partitions):
        producer.produce(topic, payload, partition=partition)  # 10,000 KiB fit its queue
        producer.poll(0)
    left = producer.flush(max(0.1, deadline - time.monotonic()))
    if left or errors:
        raise RuntimeError(f"write to every partition: {left} undelivered, {len(errors)} "
                           f"failed ({errors[:1]})")
    return {"records": partitions, "seconds": last[0] - start}


def measure_partitions(env: Running, point: Point, args: argparse.Namespace,
                       log: Callable[[str], None]) -> None:
    """Fill ``point`` (the partition curve at ``point.x``) from a broker already warm."""
    n, pids = point.x, env.pids()
    rss_base = idle_rss_mib(pids)
    threads0 = thread_cpu(pids)
    with profiled(env, point, "create", args):
        try:
            point.values["create_s"] = timed_create(env, n, args.create_timeout, point.raw)
        except Exception as e:  # no topic: no other figure either
            why = failure_text(e, args.create_timeout)
            point.failed.update({m.key: why if m.key == "create_s" else "no topic"
                                 for m in PARTITION_METRICS})
            point.raw["create_error"] = str(e)[-2000:]
            return
    log(f"  {env.system:<8} {n:>6} partitions: created and led in "
        f"{point.values['create_s']:.1f} s")
    consume_records = args.records
    try:
        wrote = clients.run_in_process(
            write_each, (env.bootstrap, TOPIC, n, args.record_size, args.create_timeout),
            args.create_timeout + 60)
        point.values["writable_s"] = point.values["create_s"] + wrote["seconds"]
        consume_records += n  # the consume phase reads these too
        log(f"  {env.system:<8} {n:>6} partitions: a write to each acknowledged "
            f"{wrote['seconds']:.1f} s later")
    except Exception as e:
        point.failed["writable_s"] = failure_text(e, args.create_timeout)
        point.raw["writable_error"] = str(e)[-2000:]
    point.raw["create_threads"] = busiest(threads0, thread_cpu(pids))
    point.values["rss_idle"] = idle_rss_mib(pids)
    point.values["rss_topic"] = point.values["rss_idle"] - rss_base
    point.raw["rss_base_mib"] = rss_base
    phases = (("produce", clients.produce, args.records, {"acks": "1"}),
              ("consume", clients.consume, consume_records, {}))
    for phase, fn, records, extra in phases:
        try:
            threads0 = thread_cpu(pids)
            with Sampler(pids) as sampler, profiled(env, point, phase, args):
                meter = Meter(env)
                raw = meter.done(clients.run_in_process(
                    fn, (env.bootstrap, TOPIC, n, records, args.record_size,
                         args.timeout, extra), args.timeout + 60))
        except Exception as e:
            why = failure_text(e, args.timeout)
            point.failed.update({f"{phase}_mbps": why, f"{phase}_cpu": why})
            point.failed.update({"consume_mbps": "no records", "consume_cpu": "no records"}
                                if phase == "produce" else {})
            if phase == "produce":
                point.failed["rss_peak"] = why
            point.raw[f"{phase}_error"] = str(e)[-2000:]
            return
        point.values[f"{phase}_mbps"] = raw["bytes"] / raw["seconds"] / 1e6
        point.values[f"{phase}_cpu"] = raw["broker_cpu_s"] / (raw["bytes"] / 1e9)
        if phase == "produce":
            point.values["rss_peak"] = sampler.peak_mib
        point.raw[phase] = {k: v for k, v in raw.items() if isinstance(v, (int, float))}
        point.raw[f"{phase}_threads"] = busiest(threads0, thread_cpu(pids))
        log(f"  {env.system:<8} {n:>6} partitions: {phase} "
            f"{point.values[f'{phase}_mbps']:.1f} MB/s, "
            f"{point.values[f'{phase}_cpu']:.2f} broker CPU s/GB, RSS peak "
            f"{sampler.peak_mib:.0f} MiB")

