"""The main job: a local kafkube broker with a sample pipeline running through it.

Starts one broker on 127.0.0.1:9092 (the embedded default), produces a stream of sample
order events with confluent-kafka, consumes them back and prints a summary, then keeps the
broker running for you to point kcat or any Kafka client at, until Ctrl-C.
``--once`` stops after the pipeline (used by the test suite).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

ROOT = Path(__file__).resolve().parent.parent
TOPIC = "orders"
PARTITIONS = 4


def start_broker(port: int, data_dir: Path) -> tuple[subprocess.Popen[str], str, str]:
    args = [
        sys.executable, "-m", "broker", "broker",
        "--override", f"listeners=PLAINTEXT://127.0.0.1:{port}",
        "--override", f"log.dirs={data_dir}",
        "--override", f"num.partitions={PARTITIONS}",
        "--override", "kafkube.metrics.port=0",
    ]
    proc = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    assert proc.stdout is not None
    deadline = time.monotonic() + 30
    for line in proc.stdout:
        print(line, end="")
        match = re.search(r"listening on PLAINTEXT://([\d.]+:\d+)", line)
        if match:
            return proc, line.strip(), match.group(1)
        if time.monotonic() > deadline:
            break
    proc.kill()
    raise SystemExit("the broker did not start; see its log above")


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
    parser.add_argument("--port", type=int, default=9092, help="0 picks a free port")
    parser.add_argument("--events", type=int, default=50_000)
    parser.add_argument("--data-dir", type=Path,
                        default=Path.home() / ".cache" / "kafkube" / "demo-data")
    parser.add_argument("--once", action="store_true", help="exit after the pipeline")
    args = parser.parse_args()
    shutil.rmtree(args.data_dir, ignore_errors=True)  # each demo run starts from empty logs
    proc, ready, bootstrap = start_broker(args.port, args.data_dir)
    try:
        took = produce(bootstrap, args.events)
        print(f"produced {args.events} order events to '{TOPIC}' in {took:.2f}s")
        revenue, total = consume(bootstrap, args.events)
        print(f"consumed them back: {len(revenue)} customers, total revenue {total:,.2f}")
        for customer, amount in revenue.most_common(3):
            print(f"  top customer {customer}: {amount:,.2f}")
        if not args.once:
            print(f"\nbroker running ({ready}).\n"
                  f"  kcat -b {bootstrap} -t {TOPIC} -C -o beginning -e\n"
                  "Ctrl-C to stop.")
            stop = {signal.SIGINT, signal.SIGTERM}
            signal.pthread_sigmask(signal.SIG_BLOCK, stop)  # so sigwait, not a handler, gets them
            signal.sigwait(stop)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
    return 0


if __name__ == "__main__":
    sys.exit(main())
