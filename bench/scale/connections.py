"""The connection curve: x librdkafka producers, spread over client processes, writing to
one topic flat out and then at a fixed rate; aggregate throughput, broker CPU per GB, p99
ack latency, and the broker's memory and TCP connections while they run."""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import asdict, dataclass
from typing import Any

from bench import clients
from bench.figures import percentile
from bench.scale.load_points import TOPIC, Point, failure_text
from bench.scale.sampling import Sampler, busiest, idle_rss_mib, ports_of, profiled, thread_cpu
from bench.systems import PARTITIONS, Meter, Running, create_topic

# Each of the connection curve's producers may queue this much (librdkafka's default is
# 1 GiB; 200 producers with bench.clients' 512 MiB could hold the whole run in memory).
PRODUCER_QUEUE_KB = 32 * 1024


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
        clients.check_topic(producer, topic, partitions, deadline)
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
    latencies = [x for r in results for x in r["latencies"]]
    if not latencies:
        raise RuntimeError("no record delivered")
    return ProduceRun(
        records=sum(r["records"] for r in results), bytes=sum(r["bytes"] for r in results),
        seconds=max(r["last"] for r in results) - min(r["first"] for r in results),
        p99_ms=1000 * percentile(latencies, 0.99),
        broker_cpu_s=raw["broker_cpu_s"], client_cpu_s=sum(r["client_cpu"] for r in results))


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

