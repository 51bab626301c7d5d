"""The e2e suite's client workload, run as a pod next to the brokers (the `kafkube-workload`
image: the broker image plus confluent-kafka), because the brokers' advertised addresses are
the pods' stable DNS names, which resolve only inside the cluster.

It prints what the client saw, one line per event, for the queue checker on the test's
side (kafkube/harness/queue_checker.py) to judge:

    produce BOOTSTRAP TOPIC --count N [--acks all] [--rate R] [--seconds S]
            [--partition P] [--trace] [--prefix v-] [--size BYTES]
        S <i> <unix ms>                         record v-<i> sent (--trace only)
        A <i> <partition> <offset> <unix ms>    record v-<i> acknowledged there
        F <i> <error>                           record v-<i> failed (or indeterminate)
        D <sent> <acked> <failed>               the end
    create-topic BOOTSTRAP TOPIC --partitions P --replication-factor R [--config K=V ...]
    create-topic BOOTSTRAP TOPIC --assignment '0,1;0,2' [--config K=V ...]
        C <topic>                               created (or already there)
    describe BOOTSTRAP TOPIC
        P <partition> <leader> <replicas,> <isr,>   one line a partition
    drain BOOTSTRAP TOPIC [--first-word]
        R <partition> <offset> <value>          every record, from the log start to the
        D <records>                             high watermark of each partition
    orders BOOTSTRAP TOPIC --count N --start-ms T   the Spark pipeline's sample orders
        O <delivered>                           (kafkube_spark.events, seed 7)
    orders ... --first I --last J --transaction-size K --abort-every A
        T <committed> <aborted>                 orders I..J-1 of the N, in transactions of K
                                                orders (by order id), each A-th one aborted

Values are ``v-<i>`` (``--prefix`` another prefix, so two producers into one topic keep
apart; ``--size`` pads them with spaces, which ``drain --first-word`` drops). Bounded by
count and time, so a broken cluster ends the pod, not the test's patience.
"""

from __future__ import annotations

import argparse
import signal
import sys
import time

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic


def produce(args: argparse.Namespace) -> int:
    idempotent = args.acks == "all"
    producer = Producer({
        "bootstrap.servers": args.bootstrap, "acks": args.acks, "linger.ms": 5,
        "enable.idempotence": idempotent, "message.timeout.ms": 60_000,
        "retries": 1_000_000, "retry.backoff.ms": 100,
        # One request in flight for the idempotent producer: with several, a leader change
        # between two of them (the first refused NOT_LEADER_OR_FOLLOWER, the next refused
        # OUT_OF_ORDER_SEQUENCE_NUMBER by the new leader, which lacks the first) makes
        # librdkafka bump its epoch and resend messages that may have been written, which
        # duplicates them against Apache Kafka too (confluentinc/librdkafka#4953). With one,
        # a duplicate can only be the broker's: the checker counts them.
        "max.in.flight.requests.per.connection": 1 if idempotent else 5,
        **dict(kv.split("=", 1) for kv in args.config),
    })
    acked = failed = 0
    out = sys.stdout

    prefix = args.prefix.encode()

    def delivered(err: KafkaError | None, msg) -> None:
        nonlocal acked, failed
        i = int(msg.value()[len(prefix):])  # int() passes over the padding
        if err is None:
            acked += 1
            out.write(f"A {i} {msg.partition()} {msg.offset()} {int(time.time() * 1000)}\n")
            if args.trace:
                out.flush()
        else:
            failed += 1
            out.write(f"F {i} {err.name()}\n")

    deadline = time.monotonic() + args.seconds
    interval = 1.0 / args.rate if args.rate else 0.0
    sent = 0
    next_send = time.monotonic()
    stopping: list[int] = []  # SIGTERM (the pod deleted): stop sending, flush, report
    signal.signal(signal.SIGTERM, lambda signum, _: stopping.append(signum))
    while sent < args.count and time.monotonic() < deadline and not stopping:
        if interval:
            # poll returns at the first delivery report: without the loop, every ack let
            # the next send go early and --rate 25 sent about 66 a second.
            while (pause := next_send - time.monotonic()) > 0:
                producer.poll(pause)
            next_send += interval
        try:
            value = b"%s%d" % (prefix, sent)
            producer.produce(args.topic, value=value.ljust(args.size), on_delivery=delivered,
                             **({"partition": args.partition} if args.partition >= 0 else {}))
        except BufferError:
            producer.poll(0.1)
            continue
        if args.trace:
            out.write(f"S {sent} {int(time.time() * 1000)}\n")
            out.flush()
        sent += 1
        producer.poll(0)
    left = producer.flush(90)
    out.write(f"D {sent} {acked} {failed + left}\n")
    out.flush()
    return 0


def drain(args: argparse.Namespace) -> int:
    consumer = Consumer({"bootstrap.servers": args.bootstrap, "group.id": "e2e-drain",
                         "enable.auto.commit": False, "enable.partition.eof": True})
    metadata = consumer.list_topics(args.topic, timeout=30)
    partitions = sorted(metadata.topics[args.topic].partitions)
    ends = {p: consumer.get_watermark_offsets(TopicPartition(args.topic, p), timeout=30)[1]
            for p in partitions}
    consumer.assign([TopicPartition(args.topic, p, 0) for p in partitions])
    pending = {p for p in partitions if ends[p] > 0}
    positions = {p: 0 for p in partitions}
    records = 0
    deadline = time.monotonic() + args.seconds
    out = sys.stdout
    while pending and time.monotonic() < deadline:
        for msg in consumer.consume(10_000, 1.0):
            if msg.error() is not None:
                if msg.error().code() != KafkaError._PARTITION_EOF:
                    out.write(f"E {msg.error().name()}\n")
                continue
            p, offset = msg.partition(), msg.offset()
            if offset < ends[p]:
                value = msg.value().decode()
                # Padded values (produce --size) as the producer numbered them.
                value = value.split(" ", 1)[0] if args.first_word else value
                out.write(f"R {p} {offset} {value}\n")
                records += 1
            positions[p] = offset + 1
            if positions[p] >= ends[p]:
                pending.discard(p)
    consumer.close()
    out.write(f"D {records} {' '.join(f'{p}:{ends[p]}' for p in partitions)}\n")
    out.flush()
    return 0 if not pending else 1


def create_topic(args: argparse.Namespace) -> int:
    admin = AdminClient({"bootstrap.servers": args.bootstrap})
    configs = dict(item.split("=", 1) for item in args.config)
    if args.assignment:  # "0,1;0,2": partition i's replicas, the first its preferred leader
        assignment = [[int(b) for b in replicas.split(",")]
                      for replicas in args.assignment.split(";")]
        # confluent-kafka wants the count given with an assignment, and no factor.
        new = NewTopic(args.topic, len(assignment), replica_assignment=assignment,
                       config=configs)
    else:
        new = NewTopic(args.topic, args.partitions, args.replication_factor, config=configs)
    future = admin.create_topics([new], request_timeout=60)[args.topic]
    try:
        future.result(90)
    except KafkaException as e:
        if e.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
            raise
    print(f"C {args.topic}", flush=True)
    return 0


def describe(args: argparse.Namespace) -> int:
    topic = AdminClient({"bootstrap.servers": args.bootstrap}).list_topics(
        args.topic, timeout=30).topics[args.topic]
    if topic.error is not None:
        print(f"E {topic.error.name()}", flush=True)
        return 1
    for p in sorted(topic.partitions.values(), key=lambda p: p.id):
        print(f"P {p.id} {p.leader} {','.join(map(str, p.replicas))} "
              f"{','.join(map(str, p.isrs))}")
    sys.stdout.flush()
    return 0


def sample_orders(args: argparse.Namespace) -> int:
    from kafkube_spark.events import orders, produce

    if args.transaction_size:
        return transactional_orders(args)
    delivered = produce(args.bootstrap, args.topic, orders(args.count, start_ms=args.start_ms))
    print(f"O {len(delivered)}", flush=True)
    return 0


def aborted(order_id: int, transaction_size: int, abort_every: int) -> bool:
    """Whether the transaction an order is sent in is aborted: the test counts on the same
    rule to know which orders the pipeline must not see."""
    return abort_every > 0 and (order_id // transaction_size) % abort_every == abort_every - 1


def transactional_orders(args: argparse.Namespace) -> int:
    """Orders first..last-1 of the sequence, in transactions cut by order id; the aborted ones
    are sent, flushed (in the log, past the last stable offset) and then aborted."""
    from kafkube_spark.events import Order, orders

    producer = Producer({"bootstrap.servers": args.bootstrap, "acks": "all", "linger.ms": 20,
                         "transactional.id": f"orders-{args.first}-{args.last}",
                         "transaction.timeout.ms": 60_000, "message.timeout.ms": 60_000})
    producer.init_transactions(60)
    committed = aborted_count = 0
    batch: list[Order] = []
    size, every = args.transaction_size, args.abort_every

    def end(transaction: list[Order]) -> None:
        nonlocal committed, aborted_count
        producer.begin_transaction()
        for order in transaction:
            producer.produce(args.topic, key=order.key(), value=order.value(),
                             timestamp=order.ts)
            producer.poll(0)
        # In the log before the abort: a reader must skip them, not just never see them.
        left = producer.flush(60)
        if left:
            raise RuntimeError(f"{left} records of a transaction not delivered in 60 s")
        if aborted(transaction[0].order_id, size, every):
            producer.abort_transaction(60)
            aborted_count += 1
        else:
            producer.commit_transaction(60)
            committed += 1

    for order in orders(args.count, start_ms=args.start_ms):
        if order.order_id < args.first:
            continue
        if order.order_id >= args.last:
            break
        if batch and order.order_id // size != batch[0].order_id // size:
            end(batch)
            batch = []
        batch.append(order)
    if batch:
        end(batch)
    print(f"T {committed} {aborted_count}", flush=True)
    return 0


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="workload", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="mode", required=True)
    p = sub.add_parser("produce")
    p.add_argument("bootstrap")
    p.add_argument("topic")
    p.add_argument("--count", type=int, default=100_000)
    p.add_argument("--acks", default="all")
    p.add_argument("--rate", type=float, default=0.0, help="records a second (0: as fast)")
    p.add_argument("--seconds", type=float, default=300.0)
    p.add_argument("--partition", type=int, default=-1, help="this partition only")
    p.add_argument("--trace", action="store_true", help="a line per send too, flushed")
    p.add_argument("--prefix", default="v-", help="of each value, before its number (v-)")
    p.add_argument("--size", type=int, default=0, help="values padded with spaces to this")
    p.add_argument("--config", action="append", default=[],
                   help="K=V, a librdkafka producer property (repeatable)")
    d = sub.add_parser("drain")
    d.add_argument("bootstrap")
    d.add_argument("topic")
    d.add_argument("--seconds", type=float, default=300.0)
    d.add_argument("--first-word", action="store_true",
                   help="print each value up to its first space (padded values)")
    c = sub.add_parser("create-topic")
    c.add_argument("bootstrap")
    c.add_argument("topic")
    c.add_argument("--partitions", type=int, default=6)
    c.add_argument("--replication-factor", type=int, default=3)
    c.add_argument("--config", action="append", default=[], help="K=V, repeatable")
    c.add_argument("--assignment", help="replicas per partition: '0,1;0,2' (no --partitions)")
    e = sub.add_parser("describe")
    e.add_argument("bootstrap")
    e.add_argument("topic")
    o = sub.add_parser("orders")
    o.add_argument("bootstrap")
    o.add_argument("topic")
    o.add_argument("--count", type=int, default=5000)
    o.add_argument("--start-ms", type=int, required=True)
    o.add_argument("--first", type=int, default=0, help="the first order id to send")
    o.add_argument("--last", type=int, default=None, help="the order id to stop before")
    o.add_argument("--transaction-size", type=int, default=0,
                   help="orders per transaction (0: no transactions)")
    o.add_argument("--abort-every", type=int, default=0,
                   help="abort each N-th transaction (0: none)")
    args = parser.parse_args(argv)
    if args.mode == "orders" and args.last is None:
        args.last = args.count
    modes = {"produce": produce, "drain": drain, "create-topic": create_topic,
             "describe": describe, "orders": sample_orders}
    return modes[args.mode](args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
