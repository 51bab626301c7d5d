"""Crash recovery: SIGKILL a broker mid-stream, restart it on the same log.dirs."""

from __future__ import annotations

import re
import threading
import time

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from kafkube.harness.waiting import wait_until

PARTITIONS = 3


def _consume_all(bootstrap: str, topic: str, expected: int) -> dict[int, list[tuple[int, bytes]]]:
    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False,
        "enable.partition.eof": True,
    })
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    got: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(PARTITIONS)}
    at_eof: set[int] = set()
    deadline = time.monotonic() + 60
    try:
        while len(at_eof) < PARTITIONS or sum(map(len, got.values())) < expected:
            assert time.monotonic() < deadline, "consumer did not reach the end in 60 s"
            for msg in consumer.consume(10000, 0.5):
                if msg.error():
                    assert msg.error().code() == KafkaError._PARTITION_EOF, msg.error()
                    at_eof.add(msg.partition())
                    continue
                got[msg.partition()].append((msg.offset(), msg.value()))
    finally:
        consumer.close()
    return got


def test_sigkill_during_produce_loses_no_acknowledged_record(broker_factory):
    broker = broker_factory(**{
        "num.partitions": str(PARTITIONS),
        "log.segment.bytes": str(256 * 1024),  # many segments, so rolls happen mid-stream
        "log.index.interval.bytes": "1024",
    })
    topic = "recovery"
    acked: dict[int, dict[int, bytes]] = {p: {} for p in range(PARTITIONS)}
    lock = threading.Lock()
    stop = threading.Event()

    def on_delivery(err, msg) -> None:
        if err is None:
            with lock:
                acked[msg.partition()][msg.offset()] = msg.value()

    def produce() -> None:
        producer = Producer({
            "bootstrap.servers": broker.bootstrap, "acks": "1", "linger.ms": 2,
            "enable.idempotence": False, "message.timeout.ms": 5000, "retries": 0,
        })
        i = 0
        while not stop.is_set() and i < 2_000_000:
            try:
                producer.produce(
                    topic, value=b"value-%08d-" % i + b"x" * 200, partition=i % 3,
                    on_delivery=on_delivery,
                )
                i += 1
            except BufferError:
                producer.poll(0.01)
            producer.poll(0)
        producer.flush(10)

    thread = threading.Thread(target=produce)
    thread.start()
    try:
        wait_until(lambda: sum(map(len, acked.values())) >= 30_000, 60, "30 000 acks")
        broker.kill()
    finally:
        stop.set()
        thread.join(30)
    assert not thread.is_alive()
    with lock:
        acked_total = sum(map(len, acked.values()))
        snapshot = {p: dict(v) for p, v in acked.items()}

    # A crash can also leave half a batch at the end of a segment: simulate that torn write.
    segments = sorted((broker.log_dir / f"{topic}-0").glob("*.log"))
    head = segments[0].read_bytes()[:100]
    assert len(head) == 100
    with open(segments[-1], "ab") as f:
        f.write(head)
    broker.start()
    warnings = [line for line in broker.output if "WARNING" in line]
    assert any("unclean shutdown" in line for line in warnings), warnings
    # At least our 100 bytes; more when SIGKILL itself interrupted a large write() (Linux
    # may stop a regular-file write between pages), which is exactly what recovery is for.
    cut = [re.search(rf"{topic}-0: truncated (\d+) bytes", line) for line in warnings]
    assert any(m and int(m.group(1)) >= 100 for m in cut), warnings
    stored = _consume_all(broker.bootstrap, topic, acked_total)
    for p in range(PARTITIONS):
        offsets = [o for o, _ in stored[p]]
        assert offsets == list(range(len(offsets))), f"partition {p}: gap or disorder"
        by_offset = dict(stored[p])
        missing = [o for o in snapshot[p] if o not in by_offset]
        assert not missing, f"partition {p}: {len(missing)} acknowledged records lost"
        assert all(by_offset[o] == v for o, v in snapshot[p].items())
        values = [int(v[6:14]) for _, v in stored[p]]
        assert values == sorted(values), f"partition {p}: records out of order"
