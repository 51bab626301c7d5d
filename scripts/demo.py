"""The main job: a local kafkube cluster with a sample pipeline running through it.

Starts a 3-broker cluster on 127.0.0.1:9092-9094 (``kafkube dev``: broker processes on the
embedded SQLite coordination backend), produces a stream of sample order events with
confluent-kafka (acks=all, replication factor 3, min.insync.replicas 2), consumes them
back and prints a summary, then keeps the cluster running for you to point kcat or any
Kafka client at, until Ctrl-C. ``--once`` stops after the pipeline (used by the tests).
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import signal
import sys
import time
from collections import Counter
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from broker.dev import bootstrap_servers, start_cluster, stop_cluster

TOPIC = "orders"
PARTITIONS = 4


def produce(bootstrap: str, count: int) -> float:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 10,
                         "compression.type": "zstd"})
    rng = random.Random(7)
    started = time.monotonic()
    for i in range(count):
        order = {"id": i, "customer": f"c{rng.randrange(100)}",
                 "amount": round(rng.uniform(1, 500), 2), "ts": int(time.time() * 1000)}
        while True:
            try:
                producer.produce(TOPIC, key=order["customer"], value=json.dumps(order))
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    if producer.flush(60):
        raise SystemExit("some sample events were not delivered")
    return time.monotonic() - started


def consume(bootstrap: str, count: int) -> tuple[Counter[str], float]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "demo",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
    revenue: Counter[str] = Counter()
    seen = 0
    deadline = time.monotonic() + 60
    while seen < count and time.monotonic() < deadline:
        for msg in consumer.consume(1000, 0.5):
            if msg.error():
                if msg.error().code() != KafkaError._PARTITION_EOF:
                    raise SystemExit(f"consumer error: {msg.error()}")
                continue
            order = json.loads(msg.value())
            revenue[order["customer"]] += order["amount"]
            seen += 1
    consumer.close()
    if seen < count:
        raise SystemExit(f"consumed {seen} of {count} events before the deadline")
    return revenue, sum(revenue.values())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, default=9092,
                        help="port of broker 0, +N for broker N; 0 picks free ports")
    parser.add_argument("--brokers", type=int, default=3)
    parser.add_argument("--events", type=int, default=50_000)
    parser.add_argument("--data-dir", type=Path,
                        default=Path.home() / ".cache" / "kafkube" / "demo-data")
    parser.add_argument("--once", action="store_true", help="exit after the pipeline")
    args = parser.parse_args()
    shutil.rmtree(args.data_dir, ignore_errors=True)  # each demo run starts from empty logs
    overrides = [f"num.partitions={PARTITIONS}"]
    try:
        cluster = start_cluster(args.data_dir, args.brokers, args.port, 0, overrides,
                                quiet=args.once)
    except RuntimeError as e:
        raise SystemExit(f"the cluster did not start: {e}") from None
    bootstrap = bootstrap_servers(cluster)
    print(f"{args.brokers} brokers running: {bootstrap}", flush=True)
    try:
        took = produce(bootstrap, args.events)
        print(f"produced {args.events} order events to '{TOPIC}' in {took:.2f}s")
        revenue, total = consume(bootstrap, args.events)
        print(f"consumed them back: {len(revenue)} customers, total revenue {total:,.2f}")
        for customer, amount in revenue.most_common(3):
            print(f"  top customer {customer}: {amount:,.2f}")
        if not args.once:
            print(f"\ncluster running, bootstrap.servers={bootstrap}\n"
                  f"  kcat -b {bootstrap} -t {TOPIC} -C -o beginning -e\n"
                  "Ctrl-C to stop.")
            stop = {signal.SIGINT, signal.SIGTERM}
            signal.pthread_sigmask(signal.SIG_BLOCK, stop)  # so sigwait, not a handler, gets them
            signal.sigwait(stop)
    finally:
        code = stop_cluster(cluster)
    print("cluster stopped cleanly" if code == 0 else f"a broker exited with {code}")
    return code


if __name__ == "__main__":
    sys.exit(main())
