"""The workloads of ``python -m bench compare``, each against a running cluster of either
system (``bench.systems.Running``) and with librdkafka (``bench.clients``, each client in a
process of its own) or Kafka's own perf tools (``bench.kafka.run_tool``): produce, consume,
end-to-end latency at a fixed rate, and a consumer group catching up. Each returns its raw
numbers with the brokers' CPU over the span (``Meter``)."""

from __future__ import annotations

import argparse
import os
import re
import struct
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from bench import clients, kafka
from bench.figures import percentile
from bench.systems import PARTITIONS, Meter, Running

# The Java producer with the settings of bench.clients.PRODUCER_CONFIG (librdkafka's
# queue.buffering.max.kbytes has no equal; buffer.memory as in the perf-test gist).
JAVA_PRODUCER = {
    "linger.ms": "5", "batch.size": str(1 << 20), "compression.type": "none",
    "enable.idempotence": "false", "buffer.memory": str(64 << 20),
}
# ... and the consumer with those of bench.clients.CONSUMER_CONFIG.
JAVA_CONSUMER = {"fetch.max.bytes": str(50 << 20), "fetch.max.wait.ms": "100"}
JAVA_FETCH_SIZE = 10 << 20  # --fetch-size: max.partition.fetch.bytes

# OMB's driver-kafka/kafka-latency.yaml producer, for workload 4.
LATENCY_PRODUCER: dict[str, Any] = {"linger.ms": 1, "batch.size": 131072}
LATENCY_CONSUMER: dict[str, Any] = {}
LATENCY_WARMUP_S = 5.0
TICK_S = 0.001  # the latency producer's smallest sleep


def throughput(raw: dict[str, Any]) -> float:
    """MB/s of a run's raw numbers."""
    return raw["bytes"] / raw["seconds"] / 1e6


def rdkafka_produce(env: Running, topic: str, records: int, args: argparse.Namespace,
                    acks: str) -> dict[str, Any]:
    meter = Meter(env)
    raw = clients.run_in_process(
        clients.produce,
        (env.bootstrap, topic, PARTITIONS, records, args.record_size, args.timeout,
         {"acks": acks}),
        args.timeout + 60)
    return meter.done(raw)


_PERF_PRODUCER = re.compile(
    r"(\d+) records sent, ([\d.]+) records/sec \(([\d.]+) MB/sec\), ([\d.]+) ms avg latency, "
    r"([\d.]+) ms max latency, (\d+) ms 50th, (\d+) ms 95th, (\d+) ms 99th, (\d+) ms 99.9th")


def java_produce(env: Running, topic: str, records: int, args: argparse.Namespace,
                 acks: str) -> dict[str, Any]:
    props = {"bootstrap.servers": env.bootstrap, "acks": acks, **JAVA_PRODUCER}
    meter = Meter(env)
    out = kafka.run_tool(args.libs, "ProducerPerformance", [
        "--topic", topic, "--num-records", str(records), "--record-size", str(args.record_size),
        "--throughput", "-1", "--producer-props", *(f"{k}={v}" for k, v in props.items()),
    ], args.timeout)
    matches = _PERF_PRODUCER.findall(out)
    if not matches:
        raise RuntimeError(f"ProducerPerformance: no summary line in:\n{out[-2000:]}")
    sent, rate, _, avg, mx, p50, p95, p99, p999 = matches[-1]
    if int(sent) != records:
        raise RuntimeError(f"ProducerPerformance sent {sent} of {records} records")
    seconds = int(sent) / float(rate)
    return meter.done({"records": int(sent), "bytes": int(sent) * args.record_size,
                       "seconds": round(seconds, 3), "ack_latency_ms":
                       {"avg": float(avg), "max": float(mx), "p50": int(p50), "p95": int(p95),
                        "p99": int(p99), "p99.9": int(p999)}})


_END_TO_END = re.compile(r"Percentiles: 50th = (\d+), 99th = (\d+), 99.9th = (\d+)")
_END_TO_END_AVG = re.compile(r"Avg latency: ([\d.]+) ms")


def java_end_to_end(env: Running, topic: str, records: int, args: argparse.Namespace,
                    acks: str) -> dict[str, Any]:
    """Kafka's own ``EndToEndLatency``: one record in flight, sent synchronously (linger.ms
    0) and polled by a consumer with fetch.max.wait.ms 0; whole milliseconds."""
    meter = Meter(env)
    out = kafka.run_tool(args.libs, "EndToEndLatency", [
        env.bootstrap, topic, str(records), acks, str(args.record_size)], args.timeout)
    found, avg = _END_TO_END.search(out), _END_TO_END_AVG.search(out)
    if not found or not avg:
        raise RuntimeError(f"EndToEndLatency: no result line in:\n{out[-2000:]}")
    p50, p99, p999 = (int(x) for x in found.groups())
    return meter.done({"records": records, "p50_ms": p50, "p99_ms": p99, "p999_ms": p999,
                       "avg_ms": float(avg.group(1))})


def rdkafka_consume(env: Running, topic: str, records: int,
                    args: argparse.Namespace) -> dict[str, Any]:
    meter = Meter(env)
    raw = clients.run_in_process(
        clients.consume,
        (env.bootstrap, topic, PARTITIONS, records, args.record_size, args.timeout, {}),
        args.timeout + 60)
    return meter.done(raw)


def java_consume(env: Running, topic: str, records: int,
                 args: argparse.Namespace) -> dict[str, Any]:
    """``ConsumerPerformance`` subscribes in a group; its fetch.time.ms (the run less the
    group join) is the span the figure uses."""
    with tempfile.NamedTemporaryFile("w", suffix=".properties", delete=False) as f:
        f.write("".join(f"{k}={v}\n" for k, v in JAVA_CONSUMER.items()))
    try:
        meter = Meter(env)
        out = kafka.run_tool(args.libs, "ConsumerPerformance", [
            "--bootstrap-server", env.bootstrap, "--topic", topic, "--messages", str(records),
            "--group", f"bench-perf-{time.monotonic_ns()}", "--fetch-size",
            str(JAVA_FETCH_SIZE), "--consumer.config", f.name, "--timeout", "60000",
        ], args.timeout)
    finally:
        os.unlink(f.name)
    lines = [ln for ln in out.splitlines() if ln.count(",") >= 9 and ln[:1].isdigit()]
    if not lines:
        raise RuntimeError(f"ConsumerPerformance: no result line in:\n{out[-2000:]}")
    cols = [c.strip() for c in lines[-1].split(",")]
    mib, nmsg, rebalance_ms, fetch_ms = float(cols[2]), int(cols[4]), int(cols[6]), int(cols[7])
    if nmsg < records:
        raise RuntimeError(f"ConsumerPerformance read {nmsg} of {records} records:\n{out}")
    return meter.done({"records": nmsg, "bytes": int(mib * 2**20), "seconds": fetch_ms / 1e3,
                       "group_join_ms": rebalance_ms})


def latency_producer(bootstrap: str, topic: str, rate: float, record_size: int,
                     warmup_s: float, seconds: float, timeout: float,
                     extra: dict[str, Any]) -> dict[str, Any]:
    """Send ``rate`` records/s for ``warmup_s + seconds``, each value starting with its
    sequence number and its ``time.monotonic_ns()`` at ``produce()`` (CLOCK_MONOTONIC is one
    clock for every process on the machine). Runs in its own process."""
    from confluent_kafka import Producer

    deadline = time.monotonic() + timeout
    failed: list[str] = []

    def on_delivery(err: Any, _msg: Any) -> None:
        if err is not None:
            failed.append(str(err))

    producer = Producer({"bootstrap.servers": bootstrap, "on_delivery": on_delivery,
                         **clients.PRODUCER_CONFIG, **LATENCY_PRODUCER, **extra})
    clients.check_topic(producer, topic, PARTITIONS, deadline)
    total = int(rate * (warmup_s + seconds))
    value = bytearray(os.urandom(record_size))
    send, poll, pack, now_ns = producer.produce, producer.poll, struct.pack_into, time.monotonic_ns
    start = now_ns()
    sent = late = 0
    while sent < total:
        due = min(total, int((now_ns() - start) * rate / 1e9) + 1)
        if due - sent > rate / 100:  # more than 10 ms behind schedule
            late += 1
        while sent < due:
            pack(">qq", value, 0, sent, now_ns())
            try:
                send(topic, bytes(value), partition=sent % PARTITIONS)
            except BufferError:
                poll(0.001)
                continue
            sent += 1
        poll(0)
        if time.monotonic() > deadline:
            raise TimeoutError(f"latency producer: {sent} of {total} sent")
        # Sleep until the next record is due, but at least TICK_S: sending in 1 ms rounds
        # (what linger.ms=1 batches anyway) rather than waking per record keeps this
        # process's CPU, which the brokers share on a small machine, low.
        pause = (start + sent * 1e9 / rate - now_ns()) / 1e9
        if pause > 0:
            time.sleep(max(pause, TICK_S))
    elapsed = (now_ns() - start) / 1e9
    left = producer.flush(max(1.0, deadline - time.monotonic()))
    if left or failed:
        raise RuntimeError(f"latency producer: {left} undelivered, {len(failed)} failed "
                           f"({failed[:1]})")
    return {"sent": total, "seconds": elapsed, "rate": total / elapsed, "late_rounds": late,
            "cpu_s": time.process_time()}


def latency_consumer(bootstrap: str, topic: str, total: int, warm: int, timeout: float,
                     extra: dict[str, Any]) -> dict[str, Any]:
    """Read the (new, empty) topic from offset 0 until every sequence number has arrived;
    latency = receive time - send time, for the records after the warm-up ones."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    deadline = time.monotonic() + timeout
    consumer = Consumer({"bootstrap.servers": bootstrap, **clients.CONSUMER_CONFIG, **extra})
    latencies: list[int] = []
    seen = 0
    unpack, now_ns = struct.unpack_from, time.monotonic_ns
    try:
        clients.check_topic(consumer, topic, PARTITIONS, deadline)
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING)
                         for p in range(PARTITIONS)])
        while seen < total:
            if time.monotonic() > deadline:
                raise TimeoutError(f"latency consumer: {seen} of {total} records")
            # poll() wakes up for the first record; consume(timeout=0) then takes whatever
            # else is queued without waiting. (consume() with a timeout waits for the whole
            # batch or the timeout, adding up to that timeout to every latency.)
            first = consumer.poll(0.1)
            if first is None:
                continue
            received = now_ns()
            for msg in [first, *consumer.consume(10_000, timeout=0)]:
                if msg.error() is not None:
                    raise RuntimeError(f"latency consumer: {msg.error()}")
                seq, sent = unpack(">qq", msg.value())
                seen += 1
                if seq >= warm:
                    latencies.append(received - sent)
    finally:
        consumer.close()
    def pct(q: float) -> float:
        return percentile(latencies, q) / 1e6
    return {"records": seen, "measured": len(latencies), "p50_ms": pct(0.5),
            "p99_ms": pct(0.99), "p999_ms": pct(0.999), "max_ms": max(latencies) / 1e6,
            "mean_ms": sum(latencies) / len(latencies) / 1e6, "cpu_s": time.process_time()}


def latency(env: Running, topic: str, args: argparse.Namespace, acks: str,
            mbps: float, seconds: float | None = None) -> dict[str, Any]:
    """``seconds`` measured (``--latency-seconds`` unless told) after LATENCY_WARMUP_S."""
    seconds = args.latency_seconds if seconds is None else seconds
    rate = mbps * 1e6 / args.record_size  # records/s
    total = int(rate * (LATENCY_WARMUP_S + seconds))
    warm = int(rate * LATENCY_WARMUP_S)
    budget = LATENCY_WARMUP_S + seconds + args.timeout
    meter = Meter(env)
    with ThreadPoolExecutor(2) as pool:
        reader = pool.submit(clients.run_in_process, latency_consumer,
                             (env.bootstrap, topic, total, warm, budget, LATENCY_CONSUMER),
                             budget + 60)
        writer = pool.submit(clients.run_in_process, latency_producer,
                             (env.bootstrap, topic, rate, args.record_size, LATENCY_WARMUP_S,
                              seconds, budget, {**LATENCY_PRODUCER, "acks": acks}),
                             budget + 60)
        sent = writer.result()
        got = reader.result()
    got["consumer_cpu_s"] = round(got.pop("cpu_s"), 2)
    raw = {**got, "bytes": got["records"] * args.record_size, "target_rate_mbps": mbps,
           "producer_cpu_s": round(sent["cpu_s"], 2),
           "achieved_rate_mbps": round(sent["rate"] * args.record_size / 1e6, 2),
           "producer_late_rounds": sent["late_rounds"]}
    return meter.done(raw)


def group(env: Running, topic: str, records: int, args: argparse.Namespace) -> dict[str, Any]:
    """``--members`` confluent-kafka processes in one new group, catching up on ``topic``."""
    name = f"bench-group-{time.monotonic_ns()}"
    meter = Meter(env)
    with ThreadPoolExecutor(args.members) as pool:
        futures = [pool.submit(clients.run_in_process, clients.group_member,
                               (env.bootstrap, topic, name, args.timeout, {}),
                               args.timeout + 60)
                   for _ in range(args.members)]
        results = [f.result() for f in futures]
    total = sum(r["records"] for r in results)
    if total < records:
        raise RuntimeError(f"group read {total} of {records} records")
    first = min(r["first"] for r in results if r["first"] is not None)
    last = max(r["last"] or 0 for r in results)
    joined = min(r["joined"] for r in results)
    return meter.done({"records": total, "bytes": sum(r["bytes"] for r in results),
                       "seconds": last - first, "subscribe_to_last_s": last - joined,
                       "per_member": [r["records"] for r in results],
                       "read_twice": total - records})
