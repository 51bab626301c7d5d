"""The consumer process of the group tests (``python -m
tests.integration.groups.consumer_driver consume ...``): subscribes with confluent-kafka
(librdkafka) or kafka-python, commits synchronously after every batch and prints one JSON
line per event (assignment change, records read, offsets committed)."""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import threading
import time
from typing import Any

from confluent_kafka import KafkaException

from tests.integration.groups.group_clients import HEARTBEAT_MS, PROC_DEADLINE_S, SESSION_MS

# =========================================================================== the consumer driver
# Runs in the child process (``python -m tests.integration.groups.consumer_driver consume ...``).


class Emitter:
    def __init__(self) -> None:
        self.assignment: set[int] = set()
        self.lock = threading.Lock()

    def emit(self, event: str, **fields: Any) -> None:
        with self.lock:
            print(json.dumps({"ev": event, **fields}), flush=True)

    def change(self, kind: str, partitions: list[int]) -> None:
        # Eager protocols revoke everything and assign the whole new share; cooperative ones
        # revoke and assign increments. Tracking the set covers both.
        if kind == "assign":
            self.assignment |= set(partitions)
        else:
            self.assignment -= set(partitions)
        self.emit("assignment", change=kind, delta=sorted(partitions),
                  partitions=sorted(self.assignment))


def _confluent_consumer(args: argparse.Namespace, out: Emitter):
    from confluent_kafka import Consumer, TopicPartition

    conf: dict[str, Any] = {
        "bootstrap.servers": args.bootstrap, "group.id": args.group, "client.id": args.name,
        "enable.auto.commit": False, "auto.offset.reset": "earliest", "fetch.wait.max.ms": 100,
    }
    if args.protocol == "consumer":  # KIP-848: the broker times and assigns; the client
        conf["group.protocol"] = "consumer"  # may not set these (librdkafka refuses them)
        if args.assignor:
            conf["group.remote.assignor"] = args.assignor
    else:
        conf.update({"session.timeout.ms": args.session_ms, "heartbeat.interval.ms": HEARTBEAT_MS,
                     "partition.assignment.strategy": args.strategy})
    if args.instance_id:
        conf["group.instance.id"] = args.instance_id
    if args.metadata_refresh_ms:
        conf["topic.metadata.refresh.interval.ms"] = args.metadata_refresh_ms
    if args.debug:
        conf["debug"] = "cgrp"
    consumer = Consumer(conf)
    consumer.subscribe(
        [args.topic],
        on_assign=lambda _c, ps: out.change("assign", [p.partition for p in ps]),
        on_revoke=lambda _c, ps: out.change("revoke", [p.partition for p in ps]),
        on_lost=lambda _c, ps: out.change("lost", [p.partition for p in ps]),
    )

    def poll(n: int) -> list[tuple[int, int, str]]:
        got = []
        for m in consumer.consume(n, 0.2):
            if m.error():
                out.emit("error", error=str(m.error()))
            else:
                got.append((m.partition(), m.offset(), (m.value() or b"").decode()))
        return got

    def commit(offsets: dict[int, int]) -> str | None:
        try:
            consumer.commit(offsets=[TopicPartition(args.topic, p, o) for p, o in offsets.items()],
                            asynchronous=False)
        except KafkaException as e:
            return str(e)
        return None

    return poll, commit, consumer.close


def _kafka_python_consumer(args: argparse.Namespace, out: Emitter):
    from kafka import ConsumerRebalanceListener, KafkaConsumer, TopicPartition
    from kafka.errors import KafkaError
    from kafka.structs import OffsetAndMetadata

    class Listener(ConsumerRebalanceListener):
        def on_partitions_revoked(self, revoked):
            out.change("revoke", [tp.partition for tp in revoked])

        def on_partitions_assigned(self, assigned):
            out.change("assign", [tp.partition for tp in assigned])

    consumer = KafkaConsumer(
        bootstrap_servers=args.bootstrap, group_id=args.group, client_id=args.name,
        enable_auto_commit=False, auto_offset_reset="earliest",
        session_timeout_ms=args.session_ms, heartbeat_interval_ms=HEARTBEAT_MS,
        fetch_max_wait_ms=100, group_instance_id=args.instance_id,
    )
    consumer.subscribe([args.topic], listener=Listener())
    # Load the topic's metadata before the first JoinGroup. Otherwise the leader may assign
    # before it knows the topic, and the rejoin that follows can leave kafka-python 3.0.12
    # stuck with its heartbeat disabled: a rejoin asked for only by a metadata change, cut
    # short by the poll timeout, is never resumed (need_rejoin() is False by the next poll).
    if args.topic not in consumer.topics():
        raise SystemExit(f"no metadata for {args.topic}")

    def poll(n: int) -> list[tuple[int, int, str]]:
        batches = consumer.poll(timeout_ms=200, max_records=n)
        return [(tp.partition, m.offset, (m.value or b"").decode())
                for tp, ms in batches.items() for m in ms]

    def commit(offsets: dict[int, int]) -> str | None:
        try:
            consumer.commit({TopicPartition(args.topic, p): OffsetAndMetadata(o, "", -1)
                             for p, o in offsets.items()})
        except KafkaError as e:
            return repr(e)
        return None

    return poll, commit, consumer.close


def consume_main(argv: list[str]) -> None:
    p = argparse.ArgumentParser(prog="python -m tests.integration.groups.consumer_driver consume")
    p.add_argument("bootstrap")
    p.add_argument("topic")
    p.add_argument("group")
    p.add_argument("--name", default="consumer")
    p.add_argument("--client", choices=["confluent", "kafka-python"], default="confluent")
    p.add_argument("--strategy", default="range,roundrobin")
    p.add_argument("--protocol", choices=["classic", "consumer"], default="classic",
                   help="confluent: group.protocol (consumer: KIP-848)")
    p.add_argument("--assignor", help="confluent, consumer protocol: group.remote.assignor")
    p.add_argument("--session-ms", type=int, default=SESSION_MS)
    p.add_argument("--instance-id")
    p.add_argument("--batch", type=int, default=10)
    p.add_argument("--max-records", type=int, default=0,
                   help="close cleanly after this many records (0: run until SIGTERM)")
    p.add_argument("--hang-after", type=int, default=0,
                   help="after this many records, read one more batch, print it, and hang "
                        "without committing it (a consumer stuck mid-batch, to be killed)")
    p.add_argument("--metadata-refresh-ms", type=int, default=0,
                   help="confluent: topic.metadata.refresh.interval.ms (0: the client's)")
    p.add_argument("--deadline", type=float, default=PROC_DEADLINE_S)
    p.add_argument("--debug", action="store_true", help="client debug logs on stderr")
    args = p.parse_args(argv)
    if args.debug:
        logging.basicConfig(level=logging.DEBUG, format="%(asctime)s %(name)s %(message)s")

    out = Emitter()
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    make = _confluent_consumer if args.client == "confluent" else _kafka_python_consumer
    poll, commit, close = make(args, out)
    out.emit("started")
    deadline = time.monotonic() + args.deadline
    count = 0
    while not stopping.is_set() and time.monotonic() < deadline:
        want = args.batch
        if args.max_records:
            if count >= args.max_records:
                break
            want = min(want, args.max_records - count)
        records = poll(want)
        if not records:
            continue
        out.emit("records", records=records)
        count += len(records)
        if args.hang_after and count > args.hang_after:
            out.emit("hang")
            while time.monotonic() < deadline:  # heartbeats go on in the client's thread
                time.sleep(0.1)
            break
        offsets: dict[int, int] = {}
        for part, offset, _ in records:
            offsets[part] = max(offsets.get(part, 0), offset + 1)
        error = commit(offsets)
        if error is None:
            out.emit("committed", offsets=sorted(offsets.items()))
        else:
            out.emit("commit_failed", error=error, offsets=sorted(offsets.items()))
    close()
    out.emit("closed", count=count)


# =========================================================================== entry point

if __name__ == "__main__":
    if sys.argv[1:2] != ["consume"]:
        sys.exit("usage: python -m tests.integration.groups.consumer_driver consume "
                 "<bootstrap> <topic> <group> ...")
    consume_main(sys.argv[2:])
