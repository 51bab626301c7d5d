"""Sample order events, and what the pipeline must make of them.

The generator is deterministic (a seed), every event carries its event time both in its JSON
and as its Kafka record timestamp (so ``startingTimestamp`` reads an event-time range), and
``expected_totals`` computes the pipeline's answer in plain Python, apart from Spark, for the
tests and the README's main command to check Spark's output against.

    python -m kafkube_spark.events --bootstrap-servers 127.0.0.1:9092 --count 20000
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass

CATEGORIES = ("books", "games", "garden", "music", "tools")
WINDOW_MS = 60_000  # the pipeline's tumbling event-time window: one minute
PER_SECOND = 2.0  # orders per second of event time: ~120 a window, ~24 per category


@dataclass(frozen=True)
class Order:
    order_id: int
    customer: str
    category: str
    amount_cents: int
    ts: int  # event time, epoch milliseconds

    def key(self) -> bytes:
        return self.customer.encode()

    def value(self) -> bytes:
        return json.dumps(asdict(self), separators=(",", ":")).encode()


@dataclass(frozen=True, order=True)
class Total:
    """One row of the pipeline's output: a window and a category, its orders and revenue."""

    window_start: int  # epoch milliseconds
    category: str
    orders: int
    revenue_cents: int


def recent_start(count: int, per_second: float = PER_SECOND) -> int:
    """A start (on a minute) that puts the last of ``count`` orders at about now: brokers
    apply retention.ms to record timestamps, and Kafka deletes a week-old segment, active
    one included, within its first retention check."""
    start = int(time.time() * 1000 - count / per_second * 1000)
    return start - start % WINDOW_MS


def orders(count: int, seed: int = 7, start_ms: int | None = None,
           per_second: float = PER_SECOND) -> Iterator[Order]:
    """``count`` orders, ``per_second`` of event time apart on average, in event-time order,
    from ``start_ms`` (default: ``recent_start``). The same arguments give the same orders."""
    rng = random.Random(seed)
    ts = float(recent_start(count, per_second) if start_ms is None else start_ms)
    for order_id in range(count):
        ts += rng.expovariate(per_second) * 1000
        yield Order(order_id, f"c{rng.randrange(200):03d}", rng.choice(CATEGORIES),
                    rng.randrange(100, 50_000), int(ts))


def window_start(ts: int) -> int:
    return ts - ts % WINDOW_MS


def expected_totals(events: Iterable[Order], closed_before: int | None = None) -> list[Total]:
    """The totals per window and category; with ``closed_before``, only the windows that end
    at or before it (what an append-mode stream has emitted once its watermark got there)."""
    sums: dict[tuple[int, str], list[int]] = {}
    for event in events:
        acc = sums.setdefault((window_start(event.ts), event.category), [0, 0])
        acc[0] += 1
        acc[1] += event.amount_cents
    return sorted(Total(start, category, n, revenue)
                  for (start, category), (n, revenue) in sums.items()
                  if closed_before is None or start + WINDOW_MS <= closed_before)


@dataclass(frozen=True)
class Delivered:
    order: Order
    partition: int
    offset: int


def produce(bootstrap: str, topic: str, events: Iterable[Order],
            config: dict | None = None) -> list[Delivered]:
    """Send ``events`` with acks=all and idempotence, each at its event time; where each
    landed. Raises if any was not delivered."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all",
                         "enable.idempotence": True, "linger.ms": 20,
                         "compression.type": "zstd", **(config or {})})
    delivered: list[Delivered] = []
    failed: list[str] = []

    def report(order: Order):
        def done(err, msg) -> None:
            if err is not None:
                failed.append(f"order {order.order_id}: {err}")
            else:
                delivered.append(Delivered(order, msg.partition(), msg.offset()))
        return done

    for event in events:
        while True:
            try:
                producer.produce(topic, key=event.key(), value=event.value(),
                                 timestamp=event.ts, on_delivery=report(event))
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    left = producer.flush(120)
    if left or failed:
        raise RuntimeError(f"{left} order(s) still queued, {len(failed)} failed: "
                           f"{failed[:3]}")
    return delivered


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kafkube_spark.events",
                                     description="Produce sample order events.")
    parser.add_argument("--bootstrap-servers", default="127.0.0.1:9092")
    parser.add_argument("--topic", default="orders")
    parser.add_argument("--count", type=int, default=20_000)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--start-ms", type=int, default=None,
                        help="event time of the first order, epoch ms (default: so that the "
                             "last one is about now)")
    args = parser.parse_args(argv)
    if args.count < 1:
        parser.error("--count must be at least 1")
    try:
        delivered = produce(args.bootstrap_servers, args.topic,
                            orders(args.count, args.seed, args.start_ms))
    except RuntimeError as e:
        print(f"events: {e}", file=sys.stderr)
        return 1
    print(f"produced {len(delivered)} orders to {args.topic} on {args.bootstrap_servers}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
