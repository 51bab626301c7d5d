"""``python -m bench scale-load``: how throughput, broker CPU per byte and broker memory grow
with the number of partitions and of producer connections, kafkube beside Apache Kafka
(issue 17's scale curves).

Both systems run the way ``python -m bench compare`` runs them (``bench.compare.running``:
Kafka KRaft from the cached jars, kafkube through ``bench.cluster.BenchCluster``, the same
``SHARED_BROKER_CONFIG``), one broker, never at the same time. Every point of a curve gets a
fresh broker, so memory measured at one point is not left over from the one before; each
fresh broker first produces and consumes ``--warmup-records`` untimed on a 16-partition
topic (Kafka's JIT), then:

1. **partitions** (1, 100, 1,000, 10,000): CreateTopics of that many partitions (RF 1),
   timed until three metadata answers in a row show every partition led, and until one
   record written to each partition is acknowledged (Kafka answers Metadata with leaders
   before its broker has created their logs; a producer waits for both); the broker's RSS
   idle before and after; then ``--records`` 1 KiB values produced round-robin over the
   partitions (librdkafka, acks=1, ``bench.clients`` settings), MB/s, broker CPU s/GB and
   peak RSS, sampled every 100 ms in a thread; then all the records consumed from offset 0.
   Each phase also notes which broker threads spent its CPU (user and system seconds per
   thread name, from /proc), to tell request handling from JIT, GC or the kernel.
2. **connections** (1, 10, 50, 200): that many librdkafka ``Producer`` instances, spread over
   ``--processes`` client processes (2 cores cannot host 200), writing to a 16-partition
   topic: first flat out (``--records`` between them; aggregate MB/s, broker CPU s/GB), then
   at a fixed total ``--rate`` for ``--rate-seconds`` (broker CPU s/GB at equal load, p99 of
   librdkafka's per-message ack latency, produce() to delivery report); broker RSS before
   and at its peak, and the broker's established TCP connections (from /proc/net/tcp).

A figure a system cannot reach within its timeout is recorded as what happened ("timed out
after 300 s"), and the run goes on. RSS is VmRSS of the broker process and its children.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shlex
import signal
import statistics
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bench import clients, compare, kafka
from bench.cluster import wait_until
from bench.compare import PARTITIONS, Meter, Running, create_topic, running

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs" / "performance.md"
CHART = ROOT / "docs" / "scale-load.png"
BEGIN = "<!-- scale-load:begin -->"
END = "<!-- scale-load:end -->"
HEADING = "## Scale curves: partitions and producer connections (issue 17)"
MiB = 1 << 20
CURVES = ("partitions", "connections")
SYSTEMS = compare.SYSTEMS
DEFAULT_POINTS = {"partitions": [1, 100, 1000, 10000], "connections": [1, 10, 50, 200]}
TOPIC = "scale"
SAMPLE_S = 0.1  # RSS / connection sampling interval
MAX_SAMPLES = 100_000  # a sampler's bound, whatever the phase's length (2.8 h at 100 ms)
IDLE_S = 2.0  # how long an idle RSS is sampled (its median is the figure)
# Each of the connection curve's producers may queue this much (librdkafka's default is
# 1 GiB; 200 producers with bench.clients' 512 MiB could hold the whole run in memory).
PRODUCER_QUEUE_KB = 32 * 1024


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
METRICS = {"partitions": PARTITION_METRICS, "connections": CONNECTION_METRICS}


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


# -- memory and connections of the broker -----------------------------------------------------

def rss_bytes(pid: int) -> int:
    """VmRSS of ``pid`` in bytes; 0 once it is gone (a dead broker is caught by Meter)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0
    for line in status.splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0  # a zombie has no VmRSS line


def process_tree(pid: int, limit: int = 1000) -> list[int]:
    """``pid`` and its descendants (from /proc/<pid>/task/*/children), at most ``limit``:
    a broker that forks helpers owns their memory too."""
    found, todo = [], [pid]
    while todo and len(found) < limit:
        current = todo.pop()
        found.append(current)
        with contextlib.suppress(OSError):
            for task in Path(f"/proc/{current}/task").iterdir():
                with contextlib.suppress(OSError):
                    todo += [int(c) for c in (task / "children").read_text().split()]
    return found


def tree_rss(pids: list[int]) -> int:
    """The summed RSS of ``pids`` and all their descendants, in bytes."""
    return sum(rss_bytes(p) for pid in pids for p in process_tree(pid))


def established(ports: set[int], tables: tuple[str, ...] = ("/proc/net/tcp",
                                                           "/proc/net/tcp6")) -> int:
    """Established TCP connections whose local port is one of ``ports``: the broker's side
    of its client connections (the client's side has the port as its remote one)."""
    count = 0
    for table in tables:
        with contextlib.suppress(OSError):
            count += count_established(Path(table).read_text(), ports)
    return count


def count_established(text: str, ports: set[int]) -> int:
    """``established`` on the text of one /proc/net/tcp table."""
    count = 0
    for line in text.splitlines()[1:]:
        fields = line.split()
        if len(fields) > 3 and fields[3] == "01":  # TCP_ESTABLISHED
            local = fields[1].rsplit(":", 1)[-1]
            with contextlib.suppress(ValueError):
                count += int(local, 16) in ports
    return count


def thread_cpu(pids: list[int]) -> dict[str, tuple[float, float]]:
    """User and system CPU seconds per thread name of ``pids`` (trailing digits and dashes
    stripped, so a pool of threads adds up): says whether a phase's broker CPU went to
    request handling, to a JIT compiler, to GC or to the kernel."""
    tick = os.sysconf("SC_CLK_TCK")
    out: dict[str, tuple[float, float]] = {}
    for pid in pids:
        with contextlib.suppress(OSError):
            for task in Path(f"/proc/{pid}/task").iterdir():
                with contextlib.suppress(OSError, IndexError, ValueError):
                    name = (task / "comm").read_text().strip().rstrip("0123456789-#") or "?"
                    fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
                    user, system = out.get(name, (0.0, 0.0))
                    out[name] = (user + int(fields[11]) / tick, system + int(fields[12]) / tick)
    return out


def busiest(before: dict[str, tuple[float, float]], after: dict[str, tuple[float, float]],
            top: int = 4) -> list[tuple[str, float, float]]:
    """The ``top`` thread names by CPU between two ``thread_cpu`` readings: (name, user s,
    system s)."""
    spent = []
    for name, (user, system) in after.items():
        user0, system0 = before.get(name, (0.0, 0.0))
        spent.append((name, round(user - user0, 2), round(system - system0, 2)))
    return sorted(spent, key=lambda t: -(t[1] + t[2]))[:top]


def ports_of(bootstrap: str) -> set[int]:
    return {int(hostport.rsplit(":", 1)[1]) for hostport in bootstrap.split(",") if hostport}


class Sampler:
    """Samples the brokers' summed RSS (and, given ``ports``, their established connections)
    every ``interval`` s in a thread while the ``with`` block runs: the peak of a phase needs
    samples during it, not before and after. Bounded by ``MAX_SAMPLES``."""

    def __init__(self, pids: list[int], ports: set[int] | None = None,
                 interval: float = SAMPLE_S) -> None:
        self.pids, self.ports, self.interval = pids, ports, interval
        self.rss: list[int] = []
        self.connections: list[int] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="scale-load-sampler",
                                         daemon=True)

    def sample(self) -> None:
        if len(self.rss) < MAX_SAMPLES:
            self.rss.append(tree_rss(self.pids))
            if self.ports:
                self.connections.append(established(self.ports))

    def _run(self) -> None:
        while not self._stop.wait(self.interval) and len(self.rss) < MAX_SAMPLES:
            self.sample()

    def __enter__(self) -> Sampler:
        self.sample()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10 + self.interval)
        self.sample()

    @property
    def peak_mib(self) -> float:
        return max(self.rss, default=0) / MiB

    @property
    def peak_connections(self) -> int:
        return max(self.connections, default=0)


def idle_rss_mib(pids: list[int], seconds: float = IDLE_S) -> float:
    """The brokers' RSS at rest: the median of ``seconds`` of samples, so one GC or one
    allocation burst does not make the figure."""
    samples = []
    for _ in range(max(1, int(seconds / SAMPLE_S))):
        samples.append(tree_rss(pids))
        time.sleep(SAMPLE_S)  # sampling at a rate, not waiting for anything
    return statistics.median(samples) / MiB


# -- the connection curve's client ------------------------------------------------------------

def many_producers(bootstrap: str, topic: str, partitions: int, producers: int, records: int,
                   record_size: int, rate: float, timeout: float, barrier: Any
                   ) -> dict[str, Any]:
    """``producers`` librdkafka Producers in this process sending ``records`` values between
    them, each round-robin over ``partitions``; flat out if ``rate`` (records/s for this
    process) is 0. Every process of the run meets at ``barrier`` once all its Producers have
    their metadata, so the producers start together. Runs in its own process."""
    from confluent_kafka import Producer

    deadline = time.monotonic() + timeout
    latencies: list[float] = []
    errors: list[str] = []
    last = [0.0]

    def on_delivery(err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(str(err))
        else:
            latencies.append(msg.latency())
        last[0] = time.perf_counter()

    config = {"bootstrap.servers": bootstrap, "on_delivery": on_delivery,
              **clients.PRODUCER_CONFIG, "acks": 1, "queue.buffering.max.kbytes": PRODUCER_QUEUE_KB}
    instances = [Producer(config) for _ in range(producers)]
    for producer in instances:
        clients._check_topic(producer, topic, partitions, deadline)
    barrier.wait(max(1.0, deadline - time.monotonic()))
    cpu0 = time.process_time()
    start = time.perf_counter()
    _send_all(instances, topic, partitions, records, record_size, rate, start, deadline)
    left = sum(p.flush(max(0.1, deadline - time.monotonic())) for p in instances)
    if left or errors:
        raise RuntimeError(f"{producers} producers: {left} undelivered, {len(errors)} failed "
                           f"({errors[:1]})")
    return {"records": len(latencies), "bytes": len(latencies) * record_size, "first": start,
            "last": last[0], "latencies": latencies, "client_cpu": time.process_time() - cpu0}


def _send_all(instances: list[Any], topic: str, partitions: int, records: int,
              record_size: int, rate: float, start: float, deadline: float) -> None:
    """Record ``i`` goes to producer ``i % k`` and that producer's next partition in turn;
    with a ``rate``, sent in rounds of at least 1 ms on schedule (as bench.compare's
    latency producer paces)."""
    payload = os.urandom(record_size)
    k = len(instances)
    sent = 0
    while sent < records:
        due = records if not rate else min(
            records, int((time.perf_counter() - start) * rate) + 1)
        while sent < due:
            producer = instances[sent % k]
            try:
                producer.produce(topic, payload, partition=(sent // k) % partitions)
            except BufferError:  # its queue is full: serve its delivery reports
                producer.poll(0.01)
                if time.monotonic() > deadline:
                    raise TimeoutError(f"only {sent} of {records} queued") from None
                continue
            sent += 1
            if not sent & 0x3FF:
                for p in instances:
                    p.poll(0)
        for p in instances:
            p.poll(0)
        if time.monotonic() > deadline:
            raise TimeoutError(f"only {sent} of {records} sent")
        if rate:
            pause = start + sent / rate - time.perf_counter()
            time.sleep(max(pause, 0.001))  # pacing to a schedule, not synchronisation


@dataclass(frozen=True)
class ProduceRun:
    """The aggregate of one connection-curve phase over its client processes."""

    records: int
    bytes: int
    seconds: float
    p99_ms: float
    broker_cpu_s: float
    client_cpu_s: float

    @property
    def mbps(self) -> float:
        return self.bytes / self.seconds / 1e6 if self.seconds > 0 else 0.0

    @property
    def cpu_per_gb(self) -> float:
        return self.broker_cpu_s / (self.bytes / 1e9) if self.bytes else 0.0


def split(total: int, parts: int) -> list[int]:
    """``total`` split into ``parts`` near-equal non-negative shares."""
    return [total // parts + (i < total % parts) for i in range(parts)]


def run_producers(env: Running, topic: str, producers: int, records: int, rate_mbps: float,
                  args: argparse.Namespace) -> ProduceRun:
    """``producers`` Producers over ``min(producers, --processes)`` processes; ``rate_mbps``
    0 for flat out."""
    import multiprocessing

    procs = min(producers, args.processes)
    barrier = multiprocessing.get_context("spawn").Barrier(procs)
    rate = rate_mbps * 1e6 / args.record_size / procs
    meter = Meter(env)
    with ThreadPoolExecutor(procs) as pool:
        futures = [pool.submit(clients.run_in_process, many_producers,
                               (env.bootstrap, topic, PARTITIONS, share, n, args.record_size,
                                rate, args.timeout, barrier), args.timeout + 60)
                   for share, n in zip(split(producers, procs), split(records, procs),
                                       strict=True)]
        done, _ = wait(futures, return_when=FIRST_EXCEPTION)
        if any(f.exception() is not None for f in done):
            barrier.abort()  # the others stop waiting for the one that failed
        results = [f.result() for f in futures]
    raw = meter.done({})
    latencies = sorted(x for r in results for x in r["latencies"])
    if not latencies:
        raise RuntimeError("no record delivered")
    return ProduceRun(
        records=sum(r["records"] for r in results), bytes=sum(r["bytes"] for r in results),
        seconds=max(r["last"] for r in results) - min(r["first"] for r in results),
        p99_ms=1000 * latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))],
        broker_cpu_s=raw["broker_cpu_s"], client_cpu_s=sum(r["client_cpu"] for r in results))


# -- the points -------------------------------------------------------------------------------

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


def warm_up(env: Running, args: argparse.Namespace) -> None:
    """The same untimed produce and consume on both systems (as bench.compare does), so no
    timed phase pays for Kafka's JIT."""
    if args.warmup_records:
        create_topic(env, "warmup", 1, {})
        compare.rdkafka_produce(env, "warmup", args.warmup_records, args, "1")
        compare.rdkafka_consume(env, "warmup", args.warmup_records, args)


def timed_create(env: Running, partitions: int, timeout: float, raw: dict[str, Any]) -> float:
    """Seconds from CreateTopics to the third metadata answer in a row with every partition
    led (bench.compare.create_topic; its streak adds ~0.2 s to every point alike).

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


REFUSED_BATCH = "excessively large"  # "... batch operation" / "... number of partitions"
STEP = 5000


def grow_topic(env: Running, total: int, timeout: float) -> None:
    """CreatePartitions up to ``total``, then wait until the metadata shows them all led."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient, NewPartitions

    admin = AdminClient({"bootstrap.servers": env.bootstrap,
                         "logger": compare._silent_logger()})
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
    clients._check_topic(producer, topic, partitions, deadline)
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


def measure_connections(env: Running, point: Point, args: argparse.Namespace,
                        log: Callable[[str], None]) -> None:
    """Fill ``point`` (the connection curve at ``point.x``) from a broker already warm."""
    n, pids = point.x, env.pids()
    create_topic(env, TOPIC, 1, {}, timeout=args.create_timeout)
    point.values["rss_idle"] = idle_rss_mib(pids)
    rate_records = int(args.rate * 1e6 / args.record_size * args.rate_seconds)
    phases = (("produce", args.records, 0.0), ("rate", rate_records, args.rate))
    with Sampler(pids, ports_of(env.bootstrap)) as sampler:
        for phase, records, rate in phases:
            if not records:
                continue
            threads0 = thread_cpu(pids)
            try:
                with profiled(env, point, phase, args):
                    run = run_producers(env, TOPIC, n, records, rate, args)
            except Exception as e:
                why = failure_text(e, args.timeout)
                keys = ("produce_mbps", "produce_cpu") if phase == "produce" else (
                    "rate_mbps", "rate_cpu", "rate_p99")
                point.failed.update(dict.fromkeys(keys, why))
                point.raw[f"{phase}_error"] = str(e)[-2000:]
                continue
            if phase == "produce":
                point.values.update(produce_mbps=run.mbps, produce_cpu=run.cpu_per_gb)
            else:
                point.values.update(rate_cpu=run.cpu_per_gb, rate_p99=run.p99_ms,
                                    rate_mbps=run.mbps)
            point.raw[phase] = asdict(run)
            point.raw[f"{phase}_threads"] = busiest(threads0, thread_cpu(pids))
            log(f"  {env.system:<8} {n:>4} producers, {phase}: {run.mbps:.1f} MB/s, "
                f"{run.cpu_per_gb:.2f} broker CPU s/GB, p99 ack {run.p99_ms:.1f} ms")
    point.values["rss_peak"] = sampler.peak_mib
    point.values["connections"] = sampler.peak_connections


MEASURE = {"partitions": measure_partitions, "connections": measure_connections}


@contextlib.contextmanager
def profiled(env: Running, point: Point, phase: str, args: argparse.Namespace
             ) -> Iterator[None]:
    """py-spy on the kafkube broker during ``phase`` when ``--profile DIR`` asks for it."""
    if args.profile is None or env.system != "kafkube":
        yield
        return
    from bench.profile import PySpy

    args.profile.mkdir(parents=True, exist_ok=True)
    out = args.profile / f"{point.curve}-{point.x}-{phase}.txt"
    with PySpy(env.pids()[0], out):
        yield
    point.raw.setdefault("profiles", []).append(str(out))


def measure_point(curve: str, x: int, system: str, args: argparse.Namespace,
                  log: Callable[[str], None]) -> Point:
    """One point on a fresh broker; whatever fails is recorded in the point, not raised."""
    point = Point(curve, x, system)
    t0 = time.monotonic()
    try:
        with running(system, 1, args, args.libs) as env:
            log(f"{system}: up on {env.bootstrap} in {time.monotonic() - t0:.1f} s "
                f"({curve} = {x:,})")
            warm_up(env, args)
            MEASURE[curve](env, point, args, log)
    except Exception as e:
        why = failure_text(e, args.timeout)
        traceback.print_exc()
        for metric in METRICS[curve]:
            if metric.key not in point.values:
                point.failed.setdefault(metric.key, why)
        point.raw["error"] = str(e)[-2000:]
    point.raw["wall_s"] = round(time.monotonic() - t0, 1)
    return point


# -- output -----------------------------------------------------------------------------------

def _find(points: list[Point], curve: str, x: int, system: str) -> Point | None:
    return next((p for p in points if (p.curve, p.x, p.system) == (curve, x, system)), None)


def cell(point: Point | None, key: str) -> str:
    if point is None:
        return "-"
    if key in point.values:
        value = point.values[key]
        return f"{value:,.0f}" if key == "connections" else compare._fmt(value)
    return point.failed.get(key, "-")


def ratio(points: list[Point], curve: str, x: int, key: str) -> float | None:
    """kafkube / Kafka at one point, when both have the figure."""
    ka, ku = (_find(points, curve, x, s) for s in SYSTEMS)
    if ka is None or ku is None or key not in ka.values or key not in ku.values:
        return None
    return ku.values[key] / ka.values[key] if ka.values[key] else None


def label(metric: Metric, settings: dict[str, Any]) -> str:
    return metric.label.format(rate=settings.get("rate", 0.0))


def table_rows(points: list[Point], settings: dict[str, Any]) -> list[list[str]]:
    """One row per curve, figure and point, the points of a figure one under the other, so
    each figure reads as a curve down the rows."""
    rows = []
    for curve in CURVES:
        xs = sorted({p.x for p in points if p.curve == curve})
        for metric in METRICS[curve]:
            for x in xs:
                r = ratio(points, curve, x, metric.key)
                rows.append([curve, label(metric, settings), metric.unit, f"{x:,}",
                             cell(_find(points, curve, x, "kafka"), metric.key),
                             cell(_find(points, curve, x, "kafkube"), metric.key),
                             "-" if r is None else f"{r:.2f}", metric.better])
    return rows


HEAD = ["curve", "figure", "unit", "x", f"Kafka {kafka.version()}", "kafkube",
        "kafkube/Kafka", "better"]


def table(points: list[Point], settings: dict[str, Any], markdown: bool = False) -> str:
    rows = table_rows(points, settings)
    if markdown:
        out = ["| " + " | ".join(HEAD) + " |", "|---|---|---|---:|---:|---:|---:|---|"]
        return "\n".join(out + ["| " + " | ".join(r) + " |" for r in rows])
    widths = [max(len(r[i]) for r in [HEAD, *rows]) for i in range(len(HEAD))]

    def line(r: list[str]) -> str:
        return "  ".join(c.rjust(w) if i in (3, 4, 5, 6) else c.ljust(w)
                         for i, (c, w) in enumerate(zip(r, widths, strict=True))).rstrip()
    return "\n".join([line(HEAD), "-" * len(line(HEAD)), *map(line, rows)])


def wide_table(points: list[Point], settings: dict[str, Any]) -> str:
    """Markdown, one row per curve and figure, one column per point: "Kafka · kafkube
    (kafkube/Kafka)", so a row reads as both curves side by side."""
    out = []
    for curve in CURVES:
        xs = sorted({p.x for p in points if p.curve == curve})
        if not xs:
            continue
        out += ["", f"| {curve}: Kafka · kafkube (ratio) | unit | better | "
                + " | ".join(at(x, curve) for x in xs) + " |",
                "|---|---|---|" + "---:|" * len(xs)]
        for metric in METRICS[curve]:
            cells = []
            for x in xs:
                ka, ku = (cell(_find(points, curve, x, s), metric.key).split(" (")[0]
                          for s in SYSTEMS)
                r = ratio(points, curve, x, metric.key)
                cells.append(f"{ka} · {ku}" + ("" if r is None else f" ({r:.2f})"))
            out.append(f"| {label(metric, settings)} | {metric.unit} | {metric.better} | "
                       + " | ".join(cells) + " |")
    return "\n".join(out[1:])


@dataclass(frozen=True)
class Growth:
    """How a figure's kafkube/Kafka ratio moves from a curve's first point to a later one: a
    ``worse`` above 1 means kafkube's cost grows faster than Kafka's up to that point."""

    curve: str
    metric: Metric
    first_x: int
    last_x: int
    first: float  # kafkube/Kafka at first_x
    last: float  # ... at last_x

    @property
    def worse(self) -> float:
        change = self.last / self.first
        return 1 / change if self.metric.better == "higher" else change


def growths(points: list[Point]) -> list[Growth]:
    """Per curve and figure with a better side: the ratio at the first point both systems
    reached and at the later one where it is worst against that (a point one system did not
    reach is named apart, in ``failures``)."""
    out = []
    for curve in CURVES:
        xs = sorted({p.x for p in points if p.curve == curve})
        for metric in METRICS[curve]:
            if not metric.better or metric.key == "rss_topic":  # rss_topic: near 0 at x=1
                continue
            both = [(x, r) for x in xs
                    if (r := ratio(points, curve, x, metric.key)) is not None and r > 0]
            if len(both) >= 2:
                grown = [Growth(curve, metric, both[0][0], x, both[0][1], r)
                         for x, r in both[1:]]
                out.append(max(grown, key=lambda g: g.worse))
    return out


def failures(points: list[Point], settings: dict[str, Any]) -> list[str]:
    """Points where one system has a figure and the other could not reach it, the figures
    that failed for one reason named together."""
    out = []
    for p in points:
        other = _find(points, p.curve, p.x, "kafka" if p.system == "kafkube" else "kafkube")
        reasons: dict[str, list[str]] = {}
        for metric in METRICS[p.curve]:
            why = p.failed.get(metric.key, "")
            if other is not None and metric.key in other.values and why \
                    and not why.startswith("no "):
                reasons.setdefault(why, []).append(label(metric, settings))
        out += [f"{p.system} at {at(p.x, p.curve)}, {' / '.join(names)}: {why}"
                for why, names in reasons.items()]
    return out


UNIT_NAMES = {"partitions": "partitions", "connections": "producer connections"}


def at(x: int, curve: str) -> str:
    """``1 partition``, ``10,000 partitions``, ``200 producer connections``."""
    unit = UNIT_NAMES[curve]
    return f"{x:,} {unit[:-1] if x == 1 else unit}"


def findings(points: list[Point], settings: dict[str, Any], threshold: float = 1.2) -> str:
    """The sentence naming where kafkube's cost grows faster than Kafka's: every figure
    whose kafkube/Kafka ratio worsens by more than ``threshold`` over its curve."""
    every = growths(points)
    worst = sorted((g for g in every if g.worse > threshold), key=lambda g: -g.worse)
    parts = [f"{label(g.metric, settings)} (kafkube/Kafka {g.first:.2f} at "
             f"{at(g.first_x, g.curve)}, {g.last:.2f} at {at(g.last_x, g.curve)}: "
             f"{g.worse:.1f}x worse)" for g in worst]
    failed = failures(points, settings)
    text = ("Where one system reached a point and the other did not: " + "; ".join(failed)
            + ". " if failed else "")
    if not every:
        text += "No figure has both systems at two points or more: no growth to compare."
    elif parts:
        text += ("Over the points both reached, kafkube's cost grows faster than Kafka's in: "
                 + "; ".join(parts) + ".")
    else:
        text += ("Over the points both reached, kafkube's cost grows no faster than Kafka's on "
                 f"any figure (no kafkube/Kafka ratio worsens by more than {threshold:g}x).")
    return text


def thread_notes(points: list[Point]) -> list[str]:
    """Where each system's broker CPU went at each curve's largest point, phase by phase:
    the busiest thread names with their user/system seconds."""
    out = []
    for curve in CURVES:
        xs = [p.x for p in points if p.curve == curve]
        for p in points:
            if p.curve != curve or p.x != max(xs, default=None):
                continue
            for key in ("create_threads", "produce_threads", "consume_threads",
                        "rate_threads"):
                spent = p.raw.get(key)
                if spent:
                    busy = ", ".join(f"{name} {user:.1f}+{system:.1f}"
                                     for name, user, system in spent)
                    out.append(f"{p.system}, {at(p.x, curve)}, "
                               f"{key.removesuffix('_threads')}: {busy}")
    return out


def chart(points: list[Point], settings: dict[str, Any], path: Path, title: str) -> None:
    """One row per curve; columns MB/s, broker CPU s/GB, RSS MiB and times (create, or p99
    ack latency) against x (log), one colour per system, one line style per figure."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    curves = [c for c in CURVES if any(p.curve == c for p in points)]
    if not curves:
        return
    panels = {
        "partitions": (("MB/s", ("produce_mbps", "consume_mbps")),
                       ("broker CPU s/GB", ("produce_cpu", "consume_cpu")),
                       ("broker RSS MiB", ("rss_peak", "rss_idle")),
                       ("s (log)", ("writable_s", "create_s"))),
        "connections": (("MB/s", ("produce_mbps",)),
                        ("broker CPU s/GB", ("produce_cpu", "rate_cpu")),
                        ("broker RSS MiB", ("rss_peak", "rss_idle")),
                        ("ms (log)", ("rate_p99",))),
    }
    colors = {"kafka": "#4c72b0", "kafkube": "#dd8452"}
    styles = ("-", "--")
    fig, axes = plt.subplots(len(curves), 4, figsize=(19, 4.6 * len(curves)), squeeze=False)
    for row, curve in zip(axes, curves, strict=True):
        xs = sorted({p.x for p in points if p.curve == curve})
        metrics = {m.key: m for m in METRICS[curve]}
        for ax, (unit, keys) in zip(row, panels[curve], strict=True):
            for row_at, system in enumerate(SYSTEMS):
                for style, key in zip(styles, keys, strict=False):
                    pts = [(x, p.values[key]) for x in xs
                           if (p := _find(points, curve, x, system)) and key in p.values]
                    if pts:
                        ax.plot(*zip(*pts, strict=True), style, marker="o", markersize=3,
                                color=colors[system],
                                label=f"{'Kafka' if system == 'kafka' else 'kafkube'}: "
                                      f"{label(metrics[key], settings)}")
                # A point this system did not reach: one short mark per x, at the bottom.
                for x in xs:
                    p = _find(points, curve, x, system)
                    why = next((p.failed[k] for k in keys if p and k in p.failed), None)
                    if why:
                        ax.annotate(f"x {system}: {why.split(' (')[0]}", (x, 0.03 + 0.06 * row_at),
                                    xycoords=("data", "axes fraction"), fontsize=6,
                                    color=colors[system], ha="right")
            ax.set_xscale("log")
            ax.set_xticks(xs, [f"{x:,}" for x in xs])
            ax.set_xlabel(UNIT_NAMES[curve])
            ax.set_ylabel(unit)
            if unit.endswith("(log)"):
                ax.set_yscale("log")
            else:
                ax.set_ylim(bottom=0)
            ax.grid(alpha=0.3)
            ax.legend(fontsize=6.5)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout(rect=(0, 0, 1, 0.97))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)


def docs_block(result: dict[str, Any], chart_path: Path | None) -> str:
    points = [Point(**p) for p in result["points"]]
    settings = result["settings"]
    lines = [BEGIN, "", f"{result['started']}, commit {result['commit']}: "
             f"`{result['command']}`", "", f"- machine: {result['machine']}",
             *[f"- {line}" for line in result["notes"]], "",
             wide_table(points, settings), "", findings(points, settings), ""]
    for p in points:
        if p.raw.get("create_note"):
            lines += [f"Note: {p.system} at {at(p.x, p.curve)}: "
                      f"{p.raw['create_note']}.", ""]
    busy = thread_notes(points)
    if busy:
        lines += ["Broker CPU by thread at the largest points (thread name: user+system "
                  "seconds over the phase; create: CreateTopics and the write to each "
                  "partition):", "", *[f"- {line}" for line in busy], ""]
    if chart_path is not None:
        lines += [f"![scale curves, kafkube and Apache Kafka]({chart_path.name})", ""]
    return "\n".join([*lines, END])


def replace_section(text: str, block: str) -> str:
    """``text`` with the part between BEGIN and END replaced by ``block``; the section is
    added at the end, under its heading, if the markers are missing."""
    if BEGIN in text and END in text.split(BEGIN, 1)[1]:
        before, rest = text.split(BEGIN, 1)
        return before + block + rest.split(END, 1)[1]
    return text.rstrip("\n") + f"\n\n{HEADING}\n\n{block}\n"


def write_docs(result: dict[str, Any], docs: Path = DOCS, chart_path: Path = CHART) -> None:
    """Chart first, then the section; the docs file is read right before it is written, as
    other sections of it are written by others."""
    points = [Point(**p) for p in result["points"]]
    chart(points, result["settings"], chart_path,
          f"kafkube and Apache Kafka {kafka.version()}, one broker each, "
          f"{result['started']}; {result['machine']}")
    block = docs_block(result, chart_path)
    docs.write_text(replace_section(docs.read_text() if docs.exists() else "# Performance\n",
                                    block))


def publish(result: dict[str, Any], write: bool) -> None:
    """Print the table, the findings and where the CPU went; with ``write``, also the
    chart and the docs section (only a run of both systems has ratios worth publishing)."""
    points = [Point(**p) for p in result["points"]]
    print()
    print(table(points, result["settings"]))
    print()
    print(findings(points, result["settings"]))
    print("\n".join(thread_notes(points)))
    for p in points:
        if p.raw.get("create_note"):
            print(f"note: {p.system} at {at(p.x, p.curve)}: {p.raw['create_note']}")
    print(f"machine: {result['machine']}")
    print(f"command: {result['command']}")
    if write:
        write_docs(result)
        print(f"written: {DOCS} and {CHART}")


# -- the command ------------------------------------------------------------------------------

def _command(argv: list[str]) -> str:
    python = os.path.relpath(sys.executable, Path.cwd())
    python = sys.executable if python.startswith("..") else python
    return shlex.join([python, "-m", "bench", "scale-load", *argv])


def parse(argv: list[str]) -> argparse.Namespace:
    """The options; ``--points`` stands for the one chosen curve's own option."""
    ints = compare._list(None, int)
    parser = argparse.ArgumentParser(prog="python -m bench scale-load", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--curves", type=compare._list(CURVES), default=list(CURVES),
                        help="partitions,connections (both)")
    parser.add_argument("--systems", type=compare._list(SYSTEMS), default=list(SYSTEMS),
                        help="kafka,kafkube (both; one alone gives no ratios)")
    parser.add_argument("--points", type=ints,
                        help="the x values of the one curve in --curves (partitions: "
                             "1,100,1000,10000; connections: 1,10,50,200)")
    parser.add_argument("--partition-points", type=ints, default=DEFAULT_POINTS["partitions"],
                        help="partitions per topic, one point each (1,100,1000,10000)")
    parser.add_argument("--connection-points", type=ints,
                        default=DEFAULT_POINTS["connections"],
                        help="producer connections, one point each (1,10,50,200)")
    parser.add_argument("--records", type=int, default=300_000,
                        help="records per produce (and consume) run (300000)")
    parser.add_argument("--record-size", type=int, default=1024, help="value bytes (1024)")
    parser.add_argument("--warmup-records", type=int, default=100_000,
                        help="untimed produce+consume on every fresh broker (100000; 0: none)")
    parser.add_argument("--rate", type=float, default=10.0,
                        help="connections: the fixed total rate of the second phase, MB/s "
                             "(10; 0 skips it)")
    parser.add_argument("--rate-seconds", type=float, default=10.0,
                        help="connections: how long the fixed-rate phase sends (10)")
    parser.add_argument("--processes", type=int, default=4,
                        help="connections: client processes the producers are spread over (4)")
    parser.add_argument("--timeout", type=float, default=300.0,
                        help="seconds allowed per client run (300)")
    parser.add_argument("--create-timeout", type=float, default=300.0,
                        help="seconds allowed for a topic to be created and led (300)")
    parser.add_argument("--kafka-heap", default="1G", help="Kafka's -Xmx/-Xms (1G)")
    parser.add_argument("--json", type=Path, metavar="FILE", help="also write every figure here")
    parser.add_argument("--no-docs", action="store_true",
                        help="do not write docs/performance.md and docs/scale-load.png")
    parser.add_argument("--render", type=Path, metavar="FILE",
                        help="run nothing: print and publish a --json FILE")
    parser.add_argument("--profile", type=Path, metavar="DIR",
                        help="py-spy the kafkube broker during each phase; raw stacks to DIR")
    parser.add_argument("--keep", action="store_true", help="keep the brokers' data dirs")
    args = parser.parse_args(argv)
    if args.points is not None:
        if len(args.curves) != 1:
            parser.error("--points needs exactly one curve in --curves")
        setattr(args, f"{args.curves[0][:-1]}_points", args.points)
    if args.processes < 1 or args.records < 1 or args.record_size < 1:
        parser.error("--processes, --records and --record-size: at least 1")
    return args


def plan(args: argparse.Namespace) -> list[tuple[str, int, str]]:
    """(curve, x, system) in run order: per point, the systems one after the other, so a
    slow spell of the machine lands on both sides of a ratio."""
    points = {"partitions": args.partition_points, "connections": args.connection_points}
    return [(curve, x, system) for curve in args.curves for x in points[curve]
            for system in args.systems]


def notes(args: argparse.Namespace) -> list[str]:
    size = args.record_size
    return [
        f"one broker per system, a fresh one for every point, {args.warmup_records:,} records "
        f"produced and consumed untimed first; `bench.compare.SHARED_BROKER_CONFIG`; "
        f"Apache Kafka {kafka.version()} KRaft (combined node, -Xmx{args.kafka_heap}), kafkube "
        "`python -m broker broker`",
        f"partitions: topic of x partitions (RF 1), {args.records:,} records of {size} B "
        f"({args.records * size / 1e9:.2f} GB) produced round-robin (librdkafka, acks=1, "
        "linger.ms=5, batch.size=1 MiB), then consumed from offset 0 (with one more record "
        "per partition, below); create: from CreateTopics until 3 metadata answers in a row "
        "show every partition led, and that plus the time a producer then takes to have one "
        "record acknowledged on every partition (Kafka shows partitions led before their "
        "logs exist)",
        f"connections: x librdkafka Producers over {args.processes} processes (fewer when x "
        f"is smaller), a {PARTITIONS}-partition topic; flat out: {args.records:,} records; "
        f"then {args.rate:g} MB/s for {args.rate_seconds:g} s (p99 of produce() to delivery "
        "report); TCP connections: established ones on the broker's port",
        "RSS: VmRSS of the broker process (and children) sampled every 100 ms; idle figures "
        f"are the median of {IDLE_S:g} s; CPU s/GB: broker CPU seconds per 10^9 B of values",
    ]


def main(argv: list[str]) -> int:
    """Every (curve, point, system) of the plan, each on a fresh broker; a failed point is
    recorded and the run goes on, so one system's wall at 10,000 partitions still leaves
    the rest of the curves."""
    args = parse(argv)
    if args.render:
        publish(json.loads(args.render.read_text()), write=not args.no_docs)
        return 0

    def on_term(_sig: int, _frame: Any) -> None:  # unwind through every finally block
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, on_term)
    wall0 = time.monotonic()

    def log(text: str) -> None:
        print(f"[{time.monotonic() - wall0:7.1f}s] {text}", flush=True)

    args.libs = kafka.ensure_jars() if "kafka" in args.systems else None
    settings = {"rate": args.rate, "records": args.records, "record_size": args.record_size}
    result: dict[str, Any] = {
        "started": time.strftime("%Y-%m-%d %H:%M %Z"), "commit": compare._commit(),
        "command": _command(argv), "machine": compare.machine(), "settings": settings,
        "notes": notes(args), "points": []}
    log(f"machine: {result['machine']}; load average {compare._load()}")
    try:
        for curve, x, system in plan(args):
            log(f"{curve} = {x:,}: {system} ...")
            result["points"].append(asdict(measure_point(curve, x, system, args, log)))
    except KeyboardInterrupt:
        print("interrupted: every broker started has been stopped", file=sys.stderr)
        return 130
    result["notes"].append(f"the run took {(time.monotonic() - wall0) / 60:.1f} min; load "
                           f"average at end {compare._load()}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
        print(f"figures: {args.json}")
    publish(result, write=not args.no_docs and len(args.systems) == len(SYSTEMS))
    print_profiles(result)
    return 0


def print_profiles(result: dict[str, Any]) -> None:
    from bench.profile import summarise

    for p in result["points"]:
        for raw in p["raw"].get("profiles", []):
            print(f"\nkafkube broker profile, {Path(raw).stem} (py-spy):")
            print(summarise(Path(raw)))
