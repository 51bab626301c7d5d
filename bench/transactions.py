"""``python -m bench transactions``: transactional produce throughput, kafkube beside Apache
Kafka, in one run.

The cluster shape is that of ``bench compare``'s acks=all produce figure (its workload 2):
3 brokers, topics of 16 partitions with RF 3 and ``min.insync.replicas=2``, the broker
settings of ``bench.compare.SHARED_BROKER_CONFIG``. Kafka runs first on a fresh cluster,
stopped before kafkube's fresh cluster starts (``bench.compare.running``).

On each cluster, after an untimed warm-up (both producers, ``--warmup-records`` each), two
producer processes (confluent-kafka / librdkafka, ``bench.clients``'s settings: linger.ms=5,
batch.size=1 MiB, no compression), each to a topic of its own, ``--records`` values of 1 KiB
sent round-robin over the partitions:

1. **idempotent**, the baseline: ``enable.idempotence=true``, acks=all; timed from the first
   ``produce()`` to the last delivery report (``bench.clients.produce``);
2. **transactional**: the same with a ``transactional.id``; ``init_transactions()`` (untimed),
   then ``begin_transaction()``, ``--transaction-size`` records, ``commit_transaction()``,
   again and again; timed from the first ``produce()`` to the return of the last commit.
   Commit latency is the time ``commit_transaction()`` takes (it flushes what is still
   queued, then ends the transaction through the coordinator).

Figures: MB/s (10^6 B of values), records/s, transactions/s, commit latency p50/p99, and the
ratio kafkube / Kafka; the raw table adds broker CPU and the end offsets' excess over the
records written (``markers``: the commit markers, one per partition and transaction).
"""

from __future__ import annotations

import argparse
import os
import shlex
import signal
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from bench import clients, kafka
from bench.compare import (
    PARTITIONS,
    SYSTEMS,
    Figure,
    Meter,
    Running,
    _commit,
    _list,
    _load,
    create_topic,
    machine,
    raw_table,
    running,
    table,
)

BROKERS, RF = 3, 3  # bench compare's workload 2: acks=all, RF 3, minISR 2, 3 brokers
TOPIC_CONFIG = {"min.insync.replicas": "2"}
IDEMPOTENT = {"acks": "all", "enable.idempotence": True}
NAMES = {1: "idempotent producer (baseline)", 2: "transactional producer"}


def transactional_produce(
    bootstrap: str, topic: str, partitions: int, records: int, record_size: int,
    txn_size: int, timeout: float,
) -> dict[str, Any]:
    """Send ``records`` values in transactions of ``txn_size``; runs in its own process."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    deadline = time.monotonic() + timeout
    delivered = failed = 0
    first_error: str | None = None

    def on_delivery(err: Any, _msg: Any) -> None:
        nonlocal delivered, failed, first_error
        if err is None:
            delivered += 1
        else:
            failed += 1
            first_error = first_error or str(err)

    producer = Producer({"bootstrap.servers": bootstrap, "on_delivery": on_delivery,
                         **clients.PRODUCER_CONFIG, **IDEMPOTENT,
                         "transactional.id": f"bench-txn-{os.getpid()}-{time.time_ns()}"})
    clients._check_topic(producer, topic, partitions, deadline)
    t0 = time.perf_counter()
    producer.init_transactions(max(1.0, deadline - time.monotonic()))
    init_s = time.perf_counter() - t0
    payload = os.urandom(record_size)
    send, poll = producer.produce, producer.poll
    commits: list[float] = []
    cpu0, main0 = time.process_time(), time.thread_time()
    start = time.perf_counter()
    sent = 0
    while sent < records:
        producer.begin_transaction()
        for i in range(sent, min(records, sent + txn_size)):
            while True:
                try:
                    send(topic, payload, partition=i % partitions)
                    break
                except BufferError:
                    poll(0.01)
                    if time.monotonic() > deadline:
                        raise TimeoutError(f"only {i} of {records} queued") from None
            if not i & 0x3FF:
                poll(0)
        sent = min(records, sent + txn_size)
        began = time.perf_counter()
        producer.commit_transaction(max(1.0, deadline - time.monotonic()))
        commits.append(time.perf_counter() - began)
    seconds = time.perf_counter() - start
    cpu, main = time.process_time() - cpu0, time.thread_time() - main0
    producer.poll(0)
    if failed or delivered != records:
        raise RuntimeError(f"{delivered} of {records} delivered, {failed} failed "
                           f"({first_error})")
    # Untimed: the end offsets' excess over the records, the commit markers. The coordinator
    # writes them after EndTxn has been answered, so the last ones may take a moment.
    expected = sum(min(txn_size, records - s, partitions) for s in range(0, records, txn_size))
    reader = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-txn-offsets"})
    try:
        until = time.monotonic() + 10
        while True:
            end = sum(reader.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                      for p in range(partitions))
            if end - delivered >= expected or time.monotonic() > until:
                break
            time.sleep(0.1)
    finally:
        reader.close()
    commits.sort()

    def pct(q: float) -> float:
        return round(1e3 * commits[min(len(commits) - 1, int(q * len(commits)))], 2)
    return {"records": delivered, "bytes": delivered * record_size, "seconds": seconds,
            "client_cpu": cpu, "client_main_cpu": main, "transactions": len(commits),
            "init_transactions_ms": round(1e3 * init_s, 1), "commit_p50_ms": pct(0.5),
            "commit_p99_ms": pct(0.99), "commit_max_ms": round(1e3 * commits[-1], 2),
            "commit_mean_ms": round(1e3 * sum(commits) / len(commits), 2),
            "markers": end - delivered, "markers_expected": expected}


def idempotent(env: Running, topic: str, records: int, args: argparse.Namespace
               ) -> dict[str, Any]:
    meter = Meter(env)
    return meter.done(clients.run_in_process(
        clients.produce, (env.bootstrap, topic, PARTITIONS, records, args.record_size,
                          args.timeout, IDEMPOTENT), args.timeout + 60))


def transactional(env: Running, topic: str, records: int, args: argparse.Namespace
                  ) -> dict[str, Any]:
    meter = Meter(env)
    return meter.done(clients.run_in_process(
        transactional_produce, (env.bootstrap, topic, PARTITIONS, records, args.record_size,
                                args.transaction_size, args.timeout), args.timeout + 60))


def run_system(system: str, args: argparse.Namespace, log: Any) -> list[Figure]:
    figures: list[Figure] = []

    def add(workload: int, metric: str, better: str, value: float, raw: dict[str, Any]) -> None:
        figures.append(Figure(workload, NAMES[workload], "rdkafka", metric, better, system,
                              round(value, 3), raw))

    log(f"{system}: starting {BROKERS} brokers ...")
    with running(system, BROKERS, args, args.libs) as env:
        log(f"{system}: up on {env.bootstrap}")
        if args.warmup_records:
            log(f"  {system:<8} warm-up: {args.warmup_records:,} records, each producer, "
                "untimed ...")
            create_topic(env, "warmup-idempotent", RF, TOPIC_CONFIG)
            create_topic(env, "warmup-transactional", RF, TOPIC_CONFIG)
            idempotent(env, "warmup-idempotent", args.warmup_records, args)
            transactional(env, "warmup-transactional", args.warmup_records, args)
        for workload, fn in ((1, idempotent), (2, transactional)):
            topic = f"txn-bench-{workload}"
            create_topic(env, topic, RF, TOPIC_CONFIG)
            raw = fn(env, topic, args.records, args)
            secs = raw["seconds"]
            add(workload, "MB/s", "higher", raw["bytes"] / secs / 1e6, raw)
            add(workload, "records/s", "higher", raw["records"] / secs, raw)
            line = f"{raw['bytes'] / secs / 1e6:.1f} MB/s, {raw['records'] / secs:,.0f} records/s"
            if workload == 2:
                add(2, "transactions/s", "higher", raw["transactions"] / secs, raw)
                add(2, "commit p50 ms", "lower", raw["commit_p50_ms"], raw)
                add(2, "commit p99 ms", "lower", raw["commit_p99_ms"], raw)
                line += (f", {raw['transactions'] / secs:,.1f} transactions/s, commit p50 "
                         f"{raw['commit_p50_ms']} ms p99 {raw['commit_p99_ms']} ms")
            log(f"  {system:<8} {NAMES[workload]}: {line}")
    log(f"{system}: stopped")
    return figures


def _command(argv: list[str]) -> str:
    python = os.path.relpath(sys.executable, Path.cwd())
    python = sys.executable if python.startswith("..") else python
    return shlex.join([python, "-m", "bench", "transactions", *argv])


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench transactions", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=300_000,
                        help="records per timed producer run (300000)")
    parser.add_argument("--transaction-size", type=int, default=1000,
                        help="records per transaction (1000)")
    parser.add_argument("--record-size", type=int, default=1024, help="value bytes (1024)")
    parser.add_argument("--warmup-records", type=int, default=100_000,
                        help="records each producer sends untimed on every fresh cluster "
                             "first (100000; 0 for none)")
    parser.add_argument("--systems", type=_list(SYSTEMS), default=list(SYSTEMS),
                        help="kafka,kafkube (both; one alone prints no ratios)")
    parser.add_argument("--kafka-heap", default="1G", help="each Kafka node's -Xmx/-Xms (1G)")
    parser.add_argument("--timeout", type=float, default=300.0,
                        help="seconds allowed per client run (300)")
    parser.add_argument("--keep", action="store_true",
                        help="keep the clusters' data dirs and logs (kept anyway on failure)")
    args = parser.parse_args(argv)
    if min(args.records, args.transaction_size, args.record_size) < 1 \
            or args.warmup_records < 0:
        parser.error("--records, --transaction-size and --record-size must be at least 1")

    def on_term(_sig: int, _frame: Any) -> None:  # unwind through every finally, as Ctrl-C
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, on_term)

    wall0 = time.monotonic()

    def log(text: str) -> None:
        print(f"[{time.monotonic() - wall0:7.1f}s] {text}", flush=True)

    header = [
        f"{time.strftime('%Y-%m-%d %H:%M %Z')}, commit {_commit()}, `{_command(argv)}`",
        f"- machine: {machine()}; load average at start {_load()}",
        f"- {BROKERS} brokers, topics of {PARTITIONS} partitions, RF {RF}, min.insync.replicas "
        f"2, acks=all; {args.records:,} records of {args.record_size} B per producer "
        f"({args.records * args.record_size / 1e6:.0f} MB), transactions of "
        f"{args.transaction_size:,}; linger.ms={clients.PRODUCER_CONFIG['linger.ms']}, "
        f"batch.size={clients.PRODUCER_CONFIG['batch.size']}, compression none; "
        f"{args.warmup_records:,} records per producer untimed first",
        f"- Apache Kafka {kafka.version()}: KRaft, 3 combined broker+controller nodes, "
        f"-Xmx{args.kafka_heap}; kafkube: `python -m broker broker`",
    ]
    print("\n".join(header), flush=True)
    args.libs = kafka.ensure_jars() if "kafka" in args.systems else None
    figures: list[Figure] = []
    failed: BaseException | None = None
    try:
        for system in args.systems:
            figures += run_system(system, args, log)
    except KeyboardInterrupt:
        print("interrupted: every broker started has been stopped", file=sys.stderr)
        return 130
    except Exception as e:  # still print what was measured before it
        failed = e
        traceback.print_exc()
    header.append(f"- took {(time.monotonic() - wall0) / 60:.1f} min; load average at end "
                  f"{_load()}")
    print()
    print("\n".join(header[1:]))
    if figures:
        print()
        print(table(figures, markdown=True))
        print()
        print(raw_table(figures))
    print(f"\nratio: kafkube / Kafka\nmachine: {machine()}\ncommand: {_command(argv)}")
    if failed is not None:
        print(f"FAILED: {failed}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
