"""The client of the e2e security scenarios (tests/e2e/test_security.py): a pod of the workload
image (confluent-kafka) runs this file, mounted from a ConfigMap, with a KafkaUser's Secret
mounted or in its environment and the cluster CA's certificate mounted, as an application
would use them. Every setting comes from ``--config K=V`` (librdkafka's names).

It prints what the client saw, one line per event, for the test to judge:

    roundtrip BOOTSTRAP TOPIC --count N --prefix P --group G
        W <error>                         the topic not yet visible to the user (retried)
        A <i> <partition> <offset>        record P<i> acknowledged there
        F <i> <error>                     record P<i> failed
        D produce <sent> <acked> <failed>
        R <partition> <offset> <value>    every record of the topic, read in group G from
        D consume <records> <p:end ...>   the beginning to the high watermarks after the
                                          produce; exit 1 unless all acked and all read
    login BOOTSTRAP [--until-refused --seconds S]
        S accepted                        a new client logged in and read the metadata
        E <error> <message>               an error the client reported
        L <message>                       a line librdkafka logged about TLS or SASL
        X refused <error>                 the attempt failed with an authentication, TLS or
                                          transport error (the most telling one reported)
        X failed | X timeout              failed otherwise | still accepted after S seconds
      One attempt, or with --until-refused one every second until refused.
    produce-one BOOTSTRAP TOPIC
        E <error> <message>
        P ok <partition> <offset> | P failed <error> | P none
    flood BOOTSTRAP TOPIC --seconds S --warm-up W
        D flood <bytes acknowledged> <seconds> <bytes of each second, comma separated>
                                                 1 KiB records to partition 0 as fast as
                                                 the cluster takes them; the bytes of the S
                                                 seconds after the first W (a quota's
                                                 window lets a new client run ahead first)

Bounded by time, so a broken cluster ends the pod, not the test's patience. login and
produce-one exit 0 whatever they saw: the test judges.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

# What a refused connection looks like to librdkafka: SASL said no, the TLS handshake failed,
# or the broker closed the connection (a TLS 1.3 client learns of a refused certificate only
# from the alert it reads after its side of the handshake); the most telling first, when one
# failure is reported several ways.
REFUSALS = (KafkaError._AUTHENTICATION, KafkaError._SSL, KafkaError._TRANSPORT)
out = sys.stdout


def say(line: str) -> None:
    out.write(line.replace("\n", " ") + "\n")
    out.flush()


def settings(args: argparse.Namespace, **extra: Any) -> dict[str, Any]:
    return {"bootstrap.servers": args.bootstrap,
            **dict(kv.split("=", 1) for kv in args.config), **extra}


class Logged(logging.Handler):
    """librdkafka's log lines about TLS and SASL, printed as L lines."""

    WORDS = ("SSL", "SASL", "alert", "uthenticat", "certificate")

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if any(w in message for w in self.WORDS):
            say(f"L {message}")


def logger() -> logging.Logger:
    log = logging.getLogger(f"librdkafka-{time.monotonic_ns()}")
    log.addHandler(Logged())
    log.setLevel(logging.INFO)
    log.propagate = False
    return log


def visible(args: argparse.Namespace, deadline: float) -> bool:
    """Wait for the topic to be visible to the user with its partitions: the user's ACLs
    reach every broker a moment after the operator wrote them."""
    admin = AdminClient(settings(args))
    while True:
        try:
            topic = admin.list_topics(args.topic, timeout=10).topics.get(args.topic)
            if topic is not None and topic.error is None and topic.partitions:
                return True
            error = topic.error.name() if topic is not None and topic.error else "missing"
        except KafkaException as e:
            error = e.args[0].name()
        say(f"W {error}")
        if time.monotonic() > deadline:
            return False
        admin.poll(1.0)


def roundtrip(args: argparse.Namespace) -> int:
    deadline = time.monotonic() + args.seconds
    if not visible(args, deadline):
        return 1
    producer = Producer(settings(args, **{
        "acks": "all", "enable.idempotence": True, "linger.ms": 5,
        "message.timeout.ms": 60_000,
        "error_cb": lambda e: say(f"E {e.name()} {e.str()}")}))
    acked = failed = 0

    def delivered(err: KafkaError | None, msg: Any) -> None:
        nonlocal acked, failed
        i = int(msg.value().decode().removeprefix(args.prefix))
        if err is None:
            acked += 1
            say(f"A {i} {msg.partition()} {msg.offset()}")
        else:
            failed += 1
            say(f"F {i} {err.name()}")

    for i in range(args.count):
        while True:
            try:
                producer.produce(args.topic, value=f"{args.prefix}{i}".encode(),
                                 on_delivery=delivered)
                break
            except BufferError:
                producer.poll(0.1)
        producer.poll(0)
    left = producer.flush(90)
    say(f"D produce {args.count} {acked} {failed + left}")

    consumer = Consumer(settings(args, **{
        "group.id": args.group, "auto.offset.reset": "earliest",
        "enable.partition.eof": True,
        "error_cb": lambda e: say(f"E {e.name()} {e.str()}")}))
    partitions = sorted(consumer.list_topics(args.topic, timeout=30)
                        .topics[args.topic].partitions)
    ends = {p: consumer.get_watermark_offsets(TopicPartition(args.topic, p), timeout=30)[1]
            for p in partitions}
    consumer.subscribe([args.topic])
    pending = {p for p in partitions if ends[p] > 0}
    records = 0
    while pending and time.monotonic() < deadline:
        for msg in consumer.consume(1000, 1.0):
            p = msg.partition()
            if msg.error() is not None:
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    if msg.offset() >= ends.get(p, 0):
                        pending.discard(p)
                else:
                    say(f"E {msg.error().name()} {msg.error().str()}")
                continue
            if msg.offset() < ends[p]:
                say(f"R {p} {msg.offset()} {msg.value().decode()}")
                records += 1
            if msg.offset() + 1 >= ends[p]:
                pending.discard(p)
    consumer.close()
    say(f"D consume {records} {' '.join(f'{p}:{ends[p]}' for p in partitions)}")
    return 0 if acked == args.count and not pending else 1


def attempt(args: argparse.Namespace, pause: float) -> KafkaError | None:
    """A new client asks for the metadata: None if it got it, else the first refusal it
    reported (or the failure itself)."""
    errors: list[KafkaError] = []

    def reported(e: KafkaError) -> None:
        errors.append(e)
        say(f"E {e.name()} {e.str()}")

    admin = AdminClient(settings(args, **{"error_cb": reported, "logger": logger(),
                                          "reconnect.backoff.ms": 1000}))
    try:
        admin.list_topics(timeout=8)
    except KafkaException as e:
        failure = e.args[0]
    else:
        admin.poll(pause)  # its callbacks served, which paces the attempts
        return None
    # The error callback runs on poll: give it a few seconds to say why, and a moment more
    # for the other ways the same failure is reported.
    until = time.monotonic() + 5
    while time.monotonic() < until and not any(e.code() in REFUSALS for e in errors):
        admin.poll(0.2)
    admin.poll(0.5)
    for code in REFUSALS:
        found = next((e for e in errors if e.code() == code), None)
        if found is not None:
            return found
    return failure


def login(args: argparse.Namespace) -> int:
    deadline = time.monotonic() + args.seconds
    while True:
        error = attempt(args, 1.0 if args.until_refused else 0.0)
        if error is None:
            say("S accepted")
            if not args.until_refused:
                return 0
            if time.monotonic() > deadline:
                say("X timeout")
                return 0
            continue
        say(f"X refused {error.name()}" if error.code() in REFUSALS else
             f"X failed {error.name()}")
        return 0


def produce_one(args: argparse.Namespace) -> int:
    outcome: list[str] = []

    def delivered(err: KafkaError | None, msg: Any) -> None:
        outcome.append(f"P failed {err.name()}" if err is not None else
                       f"P ok {msg.partition()} {msg.offset()}")

    producer = Producer(settings(args, **{
        "message.timeout.ms": int(args.seconds * 1000), "logger": logger(),
        "error_cb": lambda e: say(f"E {e.name()} {e.str()}")}))
    producer.produce(args.topic, value=b"one record", partition=0, on_delivery=delivered)
    deadline = time.monotonic() + args.seconds + 10
    while not outcome and time.monotonic() < deadline:
        producer.poll(0.2)
    say(outcome[0] if outcome else "P none")
    return 0


def flood(args: argparse.Namespace) -> int:
    """Produce to partition 0 (one broker: quotas are per broker) for ``args.warm_up`` +
    ``args.seconds`` from the first acknowledgement (so connecting and the metadata round
    trips are not counted); the bytes acknowledged in the last ``args.seconds``."""
    acked: list[float] = []
    value = b"x" * 1024

    def delivered(err: KafkaError | None, msg: Any) -> None:
        if err is None:
            acked.append(time.monotonic())

    # 16 KiB batches: with librdkafka's 1 MB default and 5 requests in flight, one burst
    # carries up to 5 MB into the broker before a throttle (capped at the quota window)
    # can hold it, and a 15 s measure says more about that burst than about the quota.
    producer = Producer(settings(args, **{"linger.ms": 5, "acks": "all", "batch.size": 16384,
                                          "queue.buffering.max.kbytes": 4096}))
    deadline = time.monotonic() + 120  # for the first acknowledgement; then S seconds on
    started = False
    while time.monotonic() < deadline:
        if not started and acked:
            started, deadline = True, acked[0] + args.warm_up + args.seconds
        try:
            producer.produce(args.topic, value=value, partition=0, on_delivery=delivered)
        except BufferError:
            producer.poll(0.05)
        producer.poll(0)
    start = (acked[0] if acked else 0.0) + args.warm_up
    counted = [t for t in acked if start < t <= start + args.seconds]
    producer.purge()
    per_second = [0] * args.seconds
    for t in counted:
        per_second[min(int(t - start), args.seconds - 1)] += 1024
    say(f"D flood {len(counted) * 1024} {args.seconds} {','.join(map(str, per_second))}")
    return 0


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="secure_client", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="mode", required=True)
    r = sub.add_parser("roundtrip")
    r.add_argument("bootstrap")
    r.add_argument("topic")
    r.add_argument("--count", type=int, default=1000)
    r.add_argument("--prefix", required=True)
    r.add_argument("--group", required=True)
    r.add_argument("--seconds", type=float, default=240.0)
    lo = sub.add_parser("login")
    lo.add_argument("bootstrap")
    lo.add_argument("--until-refused", action="store_true")
    lo.add_argument("--seconds", type=float, default=60.0)
    p = sub.add_parser("produce-one")
    p.add_argument("bootstrap")
    p.add_argument("topic")
    p.add_argument("--seconds", type=float, default=20.0)
    f = sub.add_parser("flood")
    f.add_argument("bootstrap")
    f.add_argument("topic")
    f.add_argument("--seconds", type=int, default=15)
    f.add_argument("--warm-up", type=float, default=0.0)
    for each in (r, lo, p, f):
        each.add_argument("--config", action="append", default=[],
                          help="K=V, a librdkafka property (repeatable)")
    args = parser.parse_args(argv)
    modes = {"roundtrip": roundtrip, "login": login, "produce-one": produce_one,
             "flood": flood}
    return modes[args.mode](args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
