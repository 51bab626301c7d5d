"""The consumer connection curve: x librdkafka consumers, each reading one partition of a
16-partition topic, spread over client processes. First idle (every consumer long-polling
an empty partition, as most of a large deployment's readers are most of the time), then
while one producer writes a low fixed rate that every consumer of a partition reads (a
fan-out of x/16). Figures: the broker's CPU in each phase, as a share of one core, the p99
from a record's produce() to its arrival at a consumer, the broker's memory and its TCP
connections."""

from __future__ import annotations

import argparse
import multiprocessing
import threading
import time
from collections.abc import Callable
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from typing import Any

from bench import clients
from bench.figures import percentile
from bench.scale.connections import many_producers, split
from bench.scale.load_points import TOPIC, Point, failure_text
from bench.scale.sampling import Sampler, busiest, idle_rss_mib, ports_of, profiled, thread_cpu
from bench.systems import PARTITIONS, Meter, Running, create_topic

# librdkafka's own fetch defaults (fetch.wait.max.ms 500, fetch.min.bytes 1) make the idle
# phase what it is in production: a fetch per consumer held by the broker for 500 ms. Small
# queues, since little flows and thousands of consumers share a client process.
CONSUMER_CONFIG: dict[str, Any] = {
    "group.id": "kafkube-bench-readers",  # required by the client; assign(), never join
    "enable.auto.commit": False,
    "queued.max.messages.kbytes": 1024,
    "fetch.max.bytes": 1 << 20,
    "max.partition.fetch.bytes": 1 << 20,
}
POLL_S = 0.5  # how long one poll() blocks when nothing arrives


def _read(consumer: Any, expected: int, deadline: float) -> tuple[list[float], str]:
    """Latencies (ms, produce() to arrival) of ``expected`` records, and an error if it
    could not read them all."""
    latencies: list[float] = []
    while len(latencies) < expected:
        if time.monotonic() > deadline:
            return latencies, (f"read {len(latencies)} of the {expected} records of its "
                               "partition before the timeout")
        # poll(), not consume(n): a batch consume waits for n records or the timeout.
        msg = consumer.poll(POLL_S)
        if msg is None:
            continue
        if msg.error() is not None:
            return latencies, str(msg.error())
        latencies.append(time.time() * 1000 - msg.timestamp()[1])
    return latencies, ""


def many_consumers(bootstrap: str, topic: str, first: int, consumers: int, expected: int,
                   timeout: float, barrier: Any) -> dict[str, Any]:
    """``consumers`` Consumers in this process, the i-th (counting from ``first`` across
    processes) reading partition i % 16 from offset 0 until it has ``expected`` records
    (the producer writes the same number to every partition). Meets the other processes
    and the benchmark at ``barrier`` once every consumer has its metadata (its connection
    made; it fetches from then on), so the idle phase starts with all of them polling.
    Runs in its own process."""
    from confluent_kafka import Consumer, TopicPartition

    deadline = time.monotonic() + timeout
    instances = []
    try:
        for i in range(first, first + consumers):
            consumer = Consumer({"bootstrap.servers": bootstrap, **CONSUMER_CONFIG})
            instances.append(consumer)
            clients.check_topic(consumer, topic, PARTITIONS, deadline)
            consumer.assign([TopicPartition(topic, i % PARTITIONS, 0)])
        barrier.wait(max(1.0, deadline - time.monotonic()))
        cpu0 = time.process_time()
        # A thread per consumer, blocked in poll() (which releases the GIL) until records
        # arrive: the read time is the arrival time, and idle consumers cost their process
        # nothing (a poll loop over hundreds of them took a core per process).
        with ThreadPoolExecutor(consumers) as readers:
            reads = list(readers.map(lambda c: _read(c, expected, deadline), instances))
        failed = [f"consumer {first + k}: {error}" for k, (_, error) in enumerate(reads)
                  if error]
        if failed:
            raise RuntimeError(f"{len(failed)} of {consumers} consumers: {failed[0]}")
        return {"records": sum(len(lat) for lat, _ in reads),
                "latencies": [x for lat, _ in reads for x in lat],
                "client_cpu": time.process_time() - cpu0}
    finally:
        for consumer in instances:
            consumer.close()


def measure_consumers(env: Running, point: Point, args: argparse.Namespace,
                      log: Callable[[str], None]) -> None:
    """Fill ``point`` (the consumer curve at ``point.x``) from a broker already warm."""
    n, pids = point.x, env.pids()
    create_topic(env, TOPIC, 1, {}, timeout=args.create_timeout)
    point.values["rss_idle"] = idle_rss_mib(pids)
    per_partition = max(1, int(args.consumer_rate * args.rate_seconds / PARTITIONS))
    procs = min(n, args.processes)
    barrier = multiprocessing.get_context("spawn").Barrier(procs + 1)
    shares = split(n, procs)
    firsts = [sum(shares[:i]) for i in range(procs)]
    with Sampler(pids, ports_of(env.bootstrap)) as sampler, \
            ThreadPoolExecutor(procs) as pool:
        futures = [pool.submit(clients.run_in_process, many_consumers,
                               (env.bootstrap, TOPIC, first, share, per_partition,
                                args.timeout, barrier), args.timeout + 60)
                   for first, share in zip(firsts, shares, strict=True)]
        for future in futures:  # a client that fails releases everyone from the barrier
            future.add_done_callback(lambda f: barrier.abort() if f.exception() else None)
        try:
            barrier.wait(args.timeout)
        except threading.BrokenBarrierError:  # a client failed: its error says why
            done, _ = wait(futures, return_when=FIRST_EXCEPTION, timeout=60)
            for f in done:
                f.result()
            raise
        # The idle state is measured after --idle-settle s: what a broker does for hours
        # with these consumers, not the seconds after 2,000 of them connected at once.
        time.sleep(args.idle_settle)  # where the window starts, not a wait for anything
        threads0 = thread_cpu(pids)
        with profiled(env, point, "idle", args):
            idle = Meter(env)
            time.sleep(args.idle_seconds)  # the window measured, not a wait for anything
            idle_cpu = idle.done({})["broker_cpu_s"] / args.idle_seconds
        point.values["idle_cpu"] = 100 * idle_cpu
        point.raw["idle_threads"] = busiest(threads0, thread_cpu(pids))
        threads0 = thread_cpu(pids)
        try:
            with profiled(env, point, "rate", args):
                meter = Meter(env)
                t0 = time.monotonic()
                clients.run_in_process(many_producers, (
                    env.bootstrap, TOPIC, PARTITIONS, 1, per_partition * PARTITIONS,
                    args.record_size, per_partition * PARTITIONS / args.rate_seconds,
                    args.timeout, multiprocessing.get_context("spawn").Barrier(1)),
                    args.timeout + 60)
                results = [f.result() for f in futures]
                seconds = time.monotonic() - t0
                rate_cpu = meter.done({})["broker_cpu_s"] / seconds
        except Exception as e:
            point.failed.update(dict.fromkeys(("rate_cpu", "rate_p50", "rate_p99", "rate_mbps"),
                                              failure_text(e, args.timeout)))
            point.raw["rate_error"] = str(e)[-2000:]
        else:
            latencies = [x for r in results for x in r["latencies"]]
            delivered = sum(r["records"] for r in results)
            point.values.update(
                rate_cpu=100 * rate_cpu, rate_mbps=delivered * args.record_size / seconds / 1e6,
                rate_p50=percentile(latencies, 0.5), rate_p99=percentile(latencies, 0.99))
            point.raw["rate"] = {"delivered": delivered, "seconds": round(seconds, 2),
                                 "client_cpu_s": sum(r["client_cpu"] for r in results)}
        point.raw["rate_threads"] = busiest(threads0, thread_cpu(pids))
    point.values["rss_peak"] = sampler.peak_mib
    point.values["connections"] = sampler.peak_connections
    log(f"  {env.system:<8} {n:>4} consumers: idle {point.values['idle_cpu']:.1f}% of a core; "
        + (f"delivering {point.values['rate_mbps']:.1f} MB/s: "
           f"{point.values['rate_cpu']:.1f}% of a core, p50 {point.values['rate_p50']:.0f} ms, "
           f"p99 {point.values['rate_p99']:.0f} ms"
           if "rate_p99" in point.values else f"rate phase: {point.failed.get('rate_p99')}"))
