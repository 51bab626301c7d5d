"""``python -m bench compare``: kafkube side by side with Apache Kafka, same machine, same
clients, same workloads (issue #5).

The two systems never run at the same time: Apache Kafka (KRaft, combined broker+controller
nodes, jars from Maven Central; see ``bench.kafka``) runs every workload first, on a fresh
1-node and then a fresh 3-node cluster, each stopped before the next starts; then kafkube does
the same (``bench.cluster.BenchCluster``, fresh data dirs). That is one round; ``--rounds``
(3) interleave them, Kafka, kafkube, Kafka, kafkube..., so a slow spell of the machine hits
both, and every figure is reported as its median with the range over the rounds, the ratio
as the median of the per-round ratios. Both get the broker settings of
``SHARED_BROKER_CONFIG``; each throughput figure comes with the brokers' CPU seconds per GB.

Workloads (1 KiB values, 16 partitions, topics created up front through the admin API):

1. produce, ``acks=1``, RF 1, 1 broker;
2. produce, ``acks=all``, RF 3, ``min.insync.replicas=2``, 3 brokers;
3. consume a large topic from its start (``--consume-size``, written untimed just before);
4. end-to-end latency at a fixed rate (``--rate``), OMB-style: the producer writes its send
   time into each record, the consumer (another process) subtracts it from its receive time;
   and Kafka's own ``EndToEndLatency`` (java), one record in flight at a time;
5. a consumer group of 3 processes catching up on the topic of 3.

Clients: confluent-kafka (librdkafka), each in its own process (``bench.clients``), for all
five; Kafka's own ``ProducerPerformance``/``ConsumerPerformance`` (kafka-tools, same jars) for
1-3. The ratio column is kafkube / Kafka: above 1 is better for throughput, below 1 is better
for latency and times.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import re
import shlex
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bench import clients, kafka
from bench.broker import cpu_seconds, machine_busy_seconds
from bench.cluster import BenchCluster, wait_until

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs" / "performance.md"
CHART = ROOT / "docs" / "kafka-compare.png"
BEGIN = "<!-- bench compare: begin (written by `python -m bench compare`) -->"
END = "<!-- bench compare: end -->"
LONG_MAX = 2**63 - 1
PARTITIONS = 16
SYSTEMS = ("kafka", "kafkube")

# Given to both systems (Kafka: appended to server.properties; kafkube: --override). These
# are Kafka's defaults, spelled out: 1 GiB segments, no fsync per message or per interval
# (the page cache and replication carry durability), a week's retention, no size limit.
SHARED_BROKER_CONFIG: dict[str, str] = {
    "num.partitions": str(PARTITIONS),
    "log.segment.bytes": "1073741824",
    "log.flush.interval.messages": str(LONG_MAX),
    "log.flush.interval.ms": str(LONG_MAX),
    "log.retention.hours": "168",
    "log.retention.bytes": "-1",
    "log.index.interval.bytes": "4096",
    "log.message.timestamp.type": "CreateTime",
    "message.max.bytes": "1048588",
    "compression.type": "producer",
    "unclean.leader.election.enable": "false",
    "replica.fetch.max.bytes": "1048576",
    "replica.fetch.wait.max.ms": "500",
    "replica.lag.time.max.ms": "30000",
    "group.initial.rebalance.delay.ms": "3000",
    # Reviewed for loopback (docs/performance.md, "Socket buffers"): Kafka's 100 KiB send
    # buffer, and the kernel's autotuned receive buffer in place of Kafka's 100 KiB, which
    # cost kafkube 7-10% of its produce rate and Kafka nothing.
    "socket.send.buffer.bytes": "102400",
    "socket.receive.buffer.bytes": "-1",
}

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


@dataclass
class Figure:
    """One measured figure of one workload, client and system."""

    workload: int
    name: str  # e.g. "produce acks=1, 1 broker"
    client: str  # "rdkafka" or "java"
    metric: str  # e.g. "MB/s", "p99 ms"
    better: str  # "higher" or "lower"
    system: str
    value: float
    raw: dict[str, Any] = field(default_factory=dict)
    round: int = 0  # which of the interleaved rounds (--rounds) measured it


@dataclass(frozen=True)
class Summary:
    """One figure over the rounds: each system's values in round order, and kafkube/Kafka
    per round (the two runs of a round are adjacent in time, so they share the machine's
    mood; their ratio is steadier than a ratio of medians)."""

    workload: int
    name: str
    client: str
    metric: str
    better: str
    kafka: tuple[float, ...]
    kafkube: tuple[float, ...]
    ratios: tuple[float, ...]


def summarise(figures: list[Figure]) -> list[Summary]:
    """Per workload, client and metric (in workload order, then first measured), both
    systems' values over the rounds."""
    keys: dict[tuple[int, str, str, str], dict[str, dict[int, float]]] = {}
    better: dict[tuple[int, str, str, str], str] = {}
    for f in figures:
        key = (f.workload, f.name, f.client, f.metric)
        keys.setdefault(key, {s: {} for s in SYSTEMS})[f.system][f.round] = f.value
        better[key] = f.better
    out = []
    for key, by_system in sorted(keys.items(), key=lambda kv: kv[0][0]):
        kafka_, kafkube_ = by_system["kafka"], by_system["kafkube"]
        ratios = tuple(kafkube_[r] / kafka_[r] for r in sorted(kafka_.keys() & kafkube_.keys())
                       if kafka_[r])
        out.append(Summary(*key, better[key], tuple(v for _, v in sorted(kafka_.items())),
                           tuple(v for _, v in sorted(kafkube_.items())), ratios))
    return out


def spread(values: tuple[float, ...], fmt: Callable[[float], str]) -> str:
    """The median, and with more than one value their range: "1.23 (1.10-1.31)"."""
    if not values:
        return "-"
    middle = fmt(statistics.median(values))
    if len(values) == 1:
        return middle
    return f"{middle} ({fmt(min(values))}-{fmt(max(values))})"


# -- the systems ------------------------------------------------------------------------------

@dataclass
class Running:
    """A running cluster of either system, as the workloads see it."""

    system: str
    brokers: int
    bootstrap: str
    pids: Callable[[], list[int]]
    alive: Callable[[], bool]
    where: str  # data dir / logs, for error messages


@contextlib.contextmanager
def running(system: str, brokers: int, args: argparse.Namespace,
            libs: Path | None) -> Iterator[Running]:
    """A fresh cluster of ``system`` with ``brokers`` nodes; stopped (killed if need be) on
    the way out, whatever happens inside."""
    # --kafka-config / --kafkube-config: settings for one system alone, over the shared ones.
    config = {**SHARED_BROKER_CONFIG, **dict(getattr(args, f"{system}_config", None) or ())}
    if system == "kafka":
        assert libs is not None
        with kafka.KafkaCluster(libs, brokers, config, args.kafka_heap,
                                keep=args.keep) as cluster:
            yield Running(system, brokers, cluster.bootstrap, cluster.pids, cluster.alive,
                          str(cluster.data_dir))
    else:
        overrides = [f"{k}={v}" for k, v in config.items()]
        with BenchCluster(brokers, overrides, keep=args.keep) as cluster:
            def alive() -> bool:
                return all(b.proc is not None and b.proc.poll() is None
                           for b in cluster.brokers)
            yield Running(system, brokers, cluster.bootstrap, cluster.pids, alive,
                          str(cluster.log_path))


def _silent_logger() -> Any:
    import logging

    logger = logging.getLogger("bench.compare.librdkafka")
    logger.propagate = False
    if not logger.handlers:
        logger.addHandler(logging.NullHandler())
    return logger


def create_topic(env: Running, topic: str, rf: int, config: dict[str, str],
                 timeout: float = 60.0, partitions: int = PARTITIONS) -> None:
    """Create ``topic`` (``PARTITIONS`` partitions unless told) and wait until every
    partition has a leader and a full ISR in three metadata answers in a row."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": env.bootstrap, "logger": _silent_logger()})
    futures = admin.create_topics([NewTopic(topic, partitions, rf, config=config)],
                                  request_timeout=30)
    futures[topic].result(timeout)
    streak = [0]

    def ready() -> bool:
        try:
            meta = admin.list_topics(timeout=5)
        except KafkaException:
            return False
        found = meta.topics.get(topic)
        ok = (found is not None and found.error is None and len(found.partitions) == partitions
              and all(p.leader >= 0 and len(p.isrs) == rf for p in found.partitions.values()))
        streak[0] = streak[0] + 1 if ok else 0
        return streak[0] >= 3
    wait_until(ready, timeout, f"{topic}: {partitions} partitions led, ISR of {rf}")


class Meter:
    """Broker CPU seconds (all broker processes) and machine busy share over a span."""

    def __init__(self, env: Running) -> None:
        self.env = env
        self.pids = env.pids()
        self.cpu0 = [cpu_seconds(p) for p in self.pids]
        self.busy0, self.wall0 = machine_busy_seconds(), time.monotonic()

    def done(self, raw: dict[str, Any]) -> dict[str, Any]:
        raw["broker_cpu_s"] = round(sum(cpu_seconds(p) - c
                                        for p, c in zip(self.pids, self.cpu0, strict=True)), 3)
        wall = time.monotonic() - self.wall0
        raw["machine_busy"] = round((machine_busy_seconds() - self.busy0) / wall, 3)
        if not self.env.alive():
            raise RuntimeError(f"a {self.env.system} broker died; see {self.env.where}")
        return raw


# -- the workloads ----------------------------------------------------------------------------

def _throughput(raw: dict[str, Any]) -> float:
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
    clients._check_topic(producer, topic, PARTITIONS, deadline)
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
        clients._check_topic(consumer, topic, PARTITIONS, deadline)
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
    latencies.sort()

    def pct(q: float) -> float:
        return latencies[min(len(latencies) - 1, int(q * len(latencies)))] / 1e6
    return {"records": seen, "measured": len(latencies), "p50_ms": pct(0.5),
            "p99_ms": pct(0.99), "p999_ms": pct(0.999), "max_ms": latencies[-1] / 1e6,
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


# -- running them -----------------------------------------------------------------------------

CPU_PER_GB = "broker CPU s/GB"
SHORT_NAMES = {1: "produce\nacks=1", 2: "produce\nacks=all", 3: "consume\n", 5: "group\nof 3"}
WORKLOAD_NAMES = {
    1: "produce acks=1, RF 1, 1 broker",
    2: "produce acks=all, RF 3, minISR 2, 3 brokers",
    3: "consume from offset 0",
    4: "end-to-end latency",
    5: "consumer group of {members} catching up",
}


def run_system(system: str, args: argparse.Namespace, log: Callable[[str], None],
               round_: int = 0) -> list[Figure]:
    """Every selected workload against ``system``: a 1-node session, then a 3-node one."""
    figures: list[Figure] = []
    rdkafka = "rdkafka" in args.clients
    size = args.record_size

    def add(workload: int, client: str, metric: str, better: str, value: float,
            raw: dict[str, Any], name: str | None = None) -> None:
        label = name or WORKLOAD_NAMES[workload].format(members=args.members)
        figures.append(Figure(workload, label, client, metric, better, system,
                              round(value, 3), raw, round_))
        log(f"  {system:<8} {workload} {label} [{client}]: {value:,.2f} {metric}")
        if metric == "MB/s" and raw.get("bytes"):
            # What survives noise on 2 shared cores: broker CPU per byte moved.
            per_gb = raw["broker_cpu_s"] / (raw["bytes"] / 1e9)
            figures.append(Figure(workload, label, client, CPU_PER_GB, "lower", system,
                                  round(per_gb, 3), raw, round_))

    single = {1, 3, 4, 5} & set(args.workloads)
    triple = {2} & set(args.workloads)
    if args.latency_brokers == 3 and 4 in single:
        single.discard(4)
        triple.add(4)
    for brokers, todo in ((1, single), (3, triple)):
        if not todo:
            continue
        log(f"{system}: starting {brokers} broker{'s' * (brokers > 1)} ...")
        t0 = time.monotonic()
        with running(system, brokers, args, args.libs) as env:
            log(f"{system}: {brokers} up on {env.bootstrap} in {time.monotonic() - t0:.1f} s")
            rf, acks = (1, "1") if brokers == 1 else (3, "all")
            topic_config = {} if brokers == 1 else {"min.insync.replicas": "2"}
            large_written = False
            if args.warmup_records:
                # The same untimed warm-up for both systems: it JIT-compiles Kafka's produce
                # and fetch paths, which a cold JVM otherwise does during the first timed run.
                log(f"  {system:<8} warm-up: {args.warmup_records:,} records produced and "
                    "consumed, untimed ...")
                create_topic(env, "warmup", rf, topic_config)
                rdkafka_produce(env, "warmup", args.warmup_records, args, acks)
                rdkafka_consume(env, "warmup", args.warmup_records, args)
            for workload in sorted(todo):
                if workload in (1, 2):
                    for client, fn in (("rdkafka", rdkafka_produce), ("java", java_produce)):
                        if client not in args.clients:
                            continue
                        topic = f"w{workload}-{client}"
                        create_topic(env, topic, rf, topic_config)
                        raw = fn(env, topic, args.records, args, acks)
                        add(workload, client, "MB/s", "higher", _throughput(raw), raw)
                elif workload in (3, 5) and not large_written:
                    records = args.consume_size // size
                    create_topic(env, "w3-large", rf, topic_config)
                    large_written = True
                    log(f"  {system:<8} writing {records:,} records "
                        f"({records * size / 2**30:.2f} GiB) to w3-large, untimed ...")
                    rdkafka_produce(env, "w3-large", records, args, acks)
                if workload == 3:
                    records = args.consume_size // size
                    for client, fn in (("rdkafka", rdkafka_consume), ("java", java_consume)):
                        if client not in args.clients:
                            continue
                        raw = fn(env, "w3-large", records, args)
                        add(3, client, "MB/s", "higher", _throughput(raw), raw)
                elif workload == 5 and rdkafka:
                    raw = group(env, "w3-large", args.consume_size // size, args)
                    add(5, "rdkafka", "MB/s", "higher", _throughput(raw), raw)
                    add(5, "rdkafka", "s, subscribe to last record", "lower",
                        raw["subscribe_to_last_s"], raw)
                elif workload == 4:
                    if args.latency_warmup_seconds:  # librdkafka processes, whatever --clients
                        # The throughput warm-up's big batches leave the small-request path
                        # cold: Kafka's first ~30 s of this workload ran at p99 1.3-2 s, its
                        # next at 26-42 ms (JIT). So both systems first run it untimed.
                        log(f"  {system:<8} latency warm-up: {args.latency_warmup_seconds:g} s "
                            f"at {max(args.rate):g} MB/s, untimed ...")
                        create_topic(env, "w4-warmup", rf, topic_config)
                        latency(env, "w4-warmup", args, acks, max(args.rate),
                                args.latency_warmup_seconds)
                    if "java" in args.clients:
                        topic = "w4-end-to-end"
                        create_topic(env, topic, rf, topic_config, partitions=1)
                        raw = java_end_to_end(env, topic, args.end_to_end_records, args, acks)
                        name = (f"e2e latency, one record in flight (EndToEndLatency), "
                                f"acks={acks}, {brokers} broker{'s' * (brokers > 1)}")
                        for q in ("p50", "p99", "p999"):
                            add(4, "java", f"{q} ms", "lower", raw[f"{q}_ms"], raw, name)
                    for i, mbps in enumerate(args.rate if rdkafka else ()):
                        topic = f"w4-latency-{i}"
                        create_topic(env, topic, rf, topic_config)
                        raw = latency(env, topic, args, acks, mbps)
                        name = (f"e2e latency at {mbps:g} MB/s, acks={acks}, "
                                f"{brokers} broker{'s' * (brokers > 1)}")
                        for q in ("p50", "p99", "p999"):
                            add(4, "rdkafka", f"{q} ms", "lower", raw[f"{q}_ms"], raw, name)
        log(f"{system}: {brokers} stopped")
    return figures


# -- output -----------------------------------------------------------------------------------

def machine() -> str:
    cpu = platform.processor() or "unknown CPU"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    mem = ""
    with contextlib.suppress(OSError, ValueError, IndexError):
        kib = int(Path("/proc/meminfo").read_text().split()[1])
        mem = f", {kib / 2**20:.0f} GiB RAM"
    return (f"{os.cpu_count()} CPUs ({cpu}){mem}, {platform.system()} {platform.release()}, "
            f"Python {platform.python_version()}, {kafka.java_version()}")


def _commit() -> str:
    try:
        rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                             capture_output=True, text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               cwd=ROOT, capture_output=True, text=True,
                               timeout=10).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    return f"{rev}{' + uncommitted changes' if dirty else ''}" if rev else "unknown"


def _fmt(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:,.1f}" if abs(value) >= 10 else f"{value:,.2f}"


def _ratio_fmt(value: float) -> str:
    return f"{value:.2f}"


def ahead(summary: Summary) -> str:
    """Who leads on the median ratio."""
    if not summary.ratios:
        return ""
    ratio = statistics.median(summary.ratios)
    return "kafkube ahead" if (ratio >= 1 if summary.better == "higher" else ratio <= 1) \
        else "Kafka ahead"


def table(figures: list[Figure], markdown: bool = False) -> str:
    """Each figure's median over the rounds with its range, for both systems, and the
    median of the per-round ratios with theirs."""
    rows = [[str(s.workload), s.name, s.client, s.metric, spread(s.kafka, _fmt),
             spread(s.kafkube, _fmt), spread(s.ratios, _ratio_fmt), f"{s.better} is better",
             ahead(s)] for s in summarise(figures)]
    head = ["#", "workload", "client", "unit", f"Kafka {kafka.version()}", "kafkube",
            "kafkube/Kafka", "", ""]
    if markdown:
        out = ["| " + " | ".join(head[:7]) + " | better | |",
               "|---|---|---|---|---:|---:|---:|---|---|"]
        out += ["| " + " | ".join(r) + " |" for r in rows]
        return "\n".join(out)
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    right = {4, 5, 6}

    def line(r: list[str]) -> str:
        return "  ".join(c.rjust(w) if i in right else c.ljust(w)
                         for i, (c, w) in enumerate(zip(r, widths, strict=True))).rstrip()
    return "\n".join([line(head), "-" * len(line(head)), *map(line, rows)])


def raw_table(figures: list[Figure]) -> str:
    """Markdown: every run's raw numbers, one row per round, system, workload and client."""
    out = ["| # | workload | client | round | system | records | bytes | seconds | "
           "broker CPU s | broker CPU s/GB | machine busy | other |",
           "|---|---|---|---:|---|---:|---:|---:|---:|---:|---:|---|"]
    done: set[tuple[str, int, str, str, int]] = set()
    first: dict[tuple[int, str, str], int] = {}  # rows in run order, within a workload
    for f in figures:
        first.setdefault((f.workload, f.name, f.client), len(first))
    for f in sorted(figures, key=lambda f: (f.workload, first[f.workload, f.name, f.client],
                                            f.round, SYSTEMS.index(f.system))):
        key = (f.system, f.workload, f.client, f.name, f.round)
        if key in done:
            continue
        done.add(key)
        r = f.raw
        nbytes = r.get("bytes", 0)
        per_gb = r["broker_cpu_s"] / (nbytes / 1e9) if nbytes else 0
        other = {k: v for k, v in r.items() if k not in (
            "records", "bytes", "seconds", "broker_cpu_s", "machine_busy", "client_cpu",
            "client_main_cpu")}
        other_text = ", ".join(f"{k}={_short(v)}" for k, v in other.items())
        out.append(f"| {f.workload} | {f.name} | {f.client} | {f.round + 1} | {f.system} | "
                   f"{r.get('records', '-'):,} | "
                   f"{nbytes:,} | {_fmt(r.get('seconds'))} | {r['broker_cpu_s']:.2f} | "
                   f"{per_gb:.2f} | {100 * r['machine_busy']:.0f}% | {other_text} |")
    return "\n".join(out)


def _short(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.3g}" if abs(v) < 1000 else f"{v:,.0f}"
    if isinstance(v, dict):
        return "{" + " ".join(f"{k}:{_short(x)}" for k, x in v.items()) + "}"
    return str(v)


def chart(figures: list[Figure], path: Path, title: str) -> None:
    """Two panels: throughput (MB/s, higher is better) and latency (ms, lower is better)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    summaries = summarise(figures)
    tput = [x for x in summaries if x.metric == "MB/s"]
    lat = [x for x in summaries if x.metric.endswith(" ms")]
    panels = [p for p in ((tput, "MB/s (higher is better)"), (lat, "ms (lower is better)")) if p[0]]
    if not panels:
        return
    fig, axes = plt.subplots(1, len(panels), figsize=(7.5 * len(panels), 5.2), squeeze=False,
                             gridspec_kw={"width_ratios": [max(len(p[0]), 2) for p in panels]})
    colors = {"kafka": "#4c72b0", "kafkube": "#dd8452"}
    for ax, (rows, unit) in zip(axes[0], panels, strict=True):
        labels = []
        for i, x in enumerate(rows):
            if x.metric == "MB/s":
                labels.append(f"{x.workload}. {SHORT_NAMES.get(x.workload, '')}\n{x.client}")
            else:  # "p99 ms" of "e2e latency at 20 MB/s, ..."
                at = re.search(r"at ([\d.]+) MB/s", x.name)
                labels.append(f"{x.metric.split()[0]}, " + (f"{at.group(1)} MB/s" if at else
                                                            "1 in flight\n(EndToEndLatency)"))
            for j, (sys_name, values) in enumerate((("kafka", x.kafka), ("kafkube", x.kafkube))):
                if not values:
                    continue
                middle = statistics.median(values)
                # The bar is the median; the whisker spans the rounds' lowest to highest.
                bar = ax.bar(i + (j - 0.5) * 0.38, middle, 0.38, color=colors[sys_name],
                             yerr=[[middle - min(values)], [max(values) - middle]],
                             error_kw={"elinewidth": 0.8, "capsize": 2},
                             label=(f"Apache Kafka {kafka.version()}" if sys_name == "kafka"
                                    else "kafkube") if i == 0 else None)
                ax.bar_label(bar, labels=[_fmt(middle)], fontsize=6.5, padding=1)
            if x.ratios:
                ax.annotate(f"{statistics.median(x.ratios):.2f}x", (i, 0),
                            xycoords=("data", "axes fraction"),
                            xytext=(0, -46), textcoords="offset points", ha="center",
                            fontsize=7, color="#555")
        ax.set_xticks(range(len(rows)), labels, fontsize=7)
        ax.set_ylabel(unit)
        top = max((v for x in rows for v in (*x.kafka, *x.kafkube)), default=1.0)
        if unit.startswith("ms"):
            ax.set_yscale("log")
            ax.set_ylim(top=top * 6)  # room for the legend above the bars
        else:
            ax.set_ylim(0, top * 1.2)
        ax.legend(fontsize=8, loc="upper left", ncols=2)
        ax.grid(axis="y", alpha=0.3)
    fig.suptitle(title, fontsize=9)
    fig.text(0.01, 0.01, "bars: medians over the rounds, whiskers: their range; below each "
             "pair: the median of kafkube / Kafka per round", fontsize=7, color="#555")
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_docs(figures: list[Figure], header: list[str], chart_path: Path | None) -> None:
    """Replace the generated block of docs/performance.md's "Side by side with Apache Kafka"
    section (the section is added at the end if it is missing)."""
    block = [BEGIN, "", *header, "", table(figures, markdown=True), ""]
    if chart_path is not None:
        block += [f"![kafkube and Apache Kafka side by side]({chart_path.name})", ""]
    block += ["Raw numbers (seconds: the timed span; broker CPU: all broker processes over "
              "the client process's life; machine busy: all cores, 100% = one core):", "",
              raw_table(figures), "", END]
    text = DOCS.read_text() if DOCS.exists() else "# Performance\n"
    if BEGIN in text and END in text:
        before, rest = text.split(BEGIN, 1)
        after = rest.split(END, 1)[1]
        text = before + "\n".join(block) + after
    else:
        text = (text.rstrip("\n") + "\n\n## Side by side with Apache Kafka\n\n"
                + "\n".join(block) + "\n")
    DOCS.write_text(text)


def _command(argv: list[str]) -> str:
    python = os.path.relpath(sys.executable, Path.cwd())
    python = sys.executable if python.startswith("..") else python
    return shlex.join([python, "-m", "bench", "compare", *argv])


def _size(text: str) -> int:
    match = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([KMG]i?B?)?", text.strip(), re.IGNORECASE)
    if not match:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (e.g. 2GiB, 500MiB, 1048576)")
    unit = (match.group(2) or "").upper().rstrip("B").rstrip("I")
    return int(float(match.group(1)) * {"": 1, "K": 2**10, "M": 2**20, "G": 2**30}[unit])


def _setting(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key.strip(), value.strip()


def _list(choices: tuple[str, ...] | None, convert: Callable[[str], Any] = str
          ) -> Callable[[str], list[Any]]:
    def parse(text: str) -> list[Any]:
        items = [convert(x.strip()) for x in text.split(",") if x.strip()]
        bad = [x for x in items if choices is not None and x not in choices]
        if bad or not items:
            raise argparse.ArgumentTypeError(f"choose from {choices}, got {text!r}")
        return items
    return parse


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench compare", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=1_000_000,
                        help="records per produce run, workloads 1 and 2 (1000000)")
    parser.add_argument("--record-size", type=int, default=1024, help="value bytes (1024)")
    parser.add_argument("--consume-size", type=_size, default="2GiB",
                        help="size of the topic workloads 3 and 5 read (2GiB; the issue's "
                             "figure is 5GiB)")
    parser.add_argument("--warmup-records", type=int, default=500_000,
                        help="records produced and consumed untimed on every fresh cluster "
                             "before its first workload (500000; 0 for none)")
    parser.add_argument("--rate", type=_list(None, float), default=[5.0, 20.0],
                        help="workload 4's fixed produce rates, MB/s, one run each (5,20)")
    parser.add_argument("--latency-seconds", type=float, default=20.0,
                        help="workload 4's measured span per rate, after a 5 s warm-up (20)")
    parser.add_argument("--latency-warmup-seconds", type=float, default=30.0,
                        help="workload 4 first runs untimed this long at the highest --rate, "
                             "on both systems (30; JIT of the small-request path)")
    parser.add_argument("--end-to-end-records", type=int, default=10_000,
                        help="records Kafka's EndToEndLatency sends one at a time, workload 4 "
                             "with the java client (10000)")
    parser.add_argument("--latency-brokers", type=int, choices=(1, 3), default=1,
                        help="workload 4 on 1 broker (acks=1, RF 1) or on 3 (acks=all, RF 3, "
                             "minISR 2) (1)")
    parser.add_argument("--rounds", type=int, default=3,
                        help="interleaved rounds (Kafka, kafkube, Kafka, kafkube, ...), each "
                             "on fresh clusters; the table shows medians and ranges (3)")
    parser.add_argument("--members", type=int, default=3,
                        help="consumer processes in workload 5's group (3)")
    parser.add_argument("--workloads", type=_list(None, int), default=[1, 2, 3, 4, 5],
                        help="comma-separated subset of 1-5 (all)")
    parser.add_argument("--systems", type=_list(SYSTEMS), default=list(SYSTEMS),
                        help="kafka,kafkube (both; one alone prints no ratios)")
    parser.add_argument("--clients", type=_list(("rdkafka", "java")),
                        default=["rdkafka", "java"], help="rdkafka,java (both)")
    parser.add_argument("--kafka-heap", default="1G",
                        help="each Kafka node's -Xmx/-Xms (1G, kafka-server-start.sh's)")
    parser.add_argument("--kafka-config", type=_setting, action="append", metavar="KEY=VALUE",
                        help="a server.properties setting for Kafka alone, over "
                             "SHARED_BROKER_CONFIG and the template (repeatable; e.g. "
                             "num.io.threads=2 to try Kafka's threads on 2 cores)")
    parser.add_argument("--kafkube-config", type=_setting, action="append",
                        metavar="KEY=VALUE",
                        help="a broker setting for kafkube alone, over SHARED_BROKER_CONFIG "
                             "(repeatable; e.g. socket.send.buffer.bytes=-1 for an A/B)")
    parser.add_argument("--timeout", type=float, default=300.0,
                        help="seconds allowed per client run (300)")
    parser.add_argument("--no-docs", action="store_true",
                        help="do not write docs/performance.md and docs/kafka-compare.png")
    parser.add_argument("--json", type=Path, metavar="FILE", help="also write every figure here")
    parser.add_argument("--keep", action="store_true",
                        help="keep the clusters' data dirs and logs (kept anyway on failure)")
    parser.add_argument("--render", type=Path, metavar="FILE",
                        help="run nothing: print the table of a --json FILE and write the "
                             "docs and chart from it")
    args = parser.parse_args(argv)
    if args.render:
        publish(json.loads(args.render.read_text()), write=not args.no_docs)
        return 0
    if not set(args.workloads) <= {1, 2, 3, 4, 5}:
        parser.error("--workloads: 1 to 5")
    if args.rounds < 1:
        parser.error("--rounds: at least 1")
    if args.record_size < 16:
        parser.error("--record-size: at least 16 (workload 4 stamps 16 bytes into each value)")
    if args.consume_size < args.record_size:
        parser.error("--consume-size: smaller than one record")

    # SIGTERM (e.g. from a CI timeout) unwinds like Ctrl-C, through every finally block.
    def on_term(_sig: int, _frame: Any) -> None:
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, on_term)

    wall0 = time.monotonic()
    started = time.strftime("%Y-%m-%d %H:%M %Z")

    def log(text: str) -> None:
        print(f"[{time.monotonic() - wall0:7.1f}s] {text}", flush=True)

    args.libs = None
    if "kafka" in args.systems or "java" in args.clients:
        log(f"Apache Kafka {kafka.version()}: jars (bench/setup_kafka.sh, cached) ...")
        args.libs = kafka.ensure_jars()
    size = args.record_size
    lat_acks = "acks=1, RF 1, 1 broker" if args.latency_brokers == 1 else \
        "acks=all, RF 3, minISR 2, 3 brokers"
    header = [
        f"{started}, commit {_commit()}, `{_command(argv)}`",
        "",
        f"- machine: {machine()}; load average at start {_load()}",
        f"- workloads: {PARTITIONS} partitions, {size} B values; 1-2: {args.records:,} records "
        f"({args.records * size / 1e9:.2f} GB) per run; 3 and 5: a "
        f"{args.consume_size / 2**30:.2f} GiB topic ({args.consume_size // size:,} records); "
        f"4: {' and '.join(f'{r:g}' for r in args.rate)} MB/s, each for "
        f"{LATENCY_WARMUP_S:g} s warm-up + "
        f"{args.latency_seconds:g} s, {lat_acks}, linger.ms=1, batch.size=131072",
        f"- {args.rounds} interleaved round(s) ({', '.join(args.systems)}, then again), each "
        "system on fresh clusters every round; the table gives each figure's median with its "
        "range over the rounds, and the median (range) of the per-round ratios",
        f"- every fresh cluster first produces and consumes {args.warmup_records:,} records, "
        f"untimed (JVM warm-up), and before workload 4 runs it {args.latency_warmup_seconds:g} "
        "s at the highest rate, untimed",
        f"- Apache Kafka {kafka.version()}: KRaft, combined broker+controller nodes (3 voters "
        f"for the 3-broker runs), -Xmx{args.kafka_heap}"
        + "".join(f", {k}={v}" for k, v in args.kafka_config or ())
        + "; kafkube: `python -m kafkube broker`"
        + "".join(f", {k}={v}" for k, v in args.kafkube_config or ()),
    ]
    print("\n".join(line for line in header if line), flush=True)
    figures: list[Figure] = []
    failed: BaseException | None = None
    try:
        for round_ in range(args.rounds):
            for system in args.systems:
                log(f"round {round_ + 1} of {args.rounds}: {system}")
                figures += run_system(system, args, log, round_)
    except KeyboardInterrupt:
        print("interrupted: every broker started has been stopped", file=sys.stderr)
        return 130
    except Exception as e:  # still print (not publish) what was measured before it
        failed = e
        traceback.print_exc()
    took = time.monotonic() - wall0
    header.append(f"- the whole comparison took {took / 60:.1f} min; load average at end "
                  f"{_load()}")
    result = {"started": started, "command": _command(argv), "header": header,
              "figures": [asdict(f) for f in figures]}
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
        print(f"figures: {args.json}")
    if failed is not None:
        print("\n" + table(figures) if figures else "", file=sys.stderr)
        print(f"FAILED after {took:.0f} s: {failed}", file=sys.stderr)
        return 1
    publish(result, write=not args.no_docs and len(args.systems) == 2)
    return 0


def publish(result: dict[str, Any], write: bool) -> None:
    """Print the ratio table; with ``write``, also the chart and docs/performance.md."""
    figures = [Figure(**f) for f in result["figures"]]
    print()
    print(table(figures))
    print()
    print(f"ratio: kafkube / Kafka. {result['header'][-1][2:]}")
    print(f"machine: {machine()}")
    print(f"command: {result['command']}")
    if write:
        chart(figures, CHART, f"kafkube vs Apache Kafka {kafka.version()}, "
                              f"{result['started']}; {machine()}")
        write_docs(figures, result["header"], CHART)
        print(f"written: {DOCS} and {CHART}")


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())
