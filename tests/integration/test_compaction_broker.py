"""Log compaction in a broker process: a compacted topic is compacted, as a client reads
it."""

from __future__ import annotations

import time

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from broker.server.log_manager import CLEANER_CHECKPOINT
from broker.server.replica_dirs import TopicPartition as TP
from broker.server.replica_dirs import read_offset_checkpoint
from kafkube.harness.waiting import wait_until

Pair = tuple[bytes | None, bytes | None]



def _produce(bootstrap: str, topic: str, pairs: list[Pair]) -> list[int]:
    """Produce in order; the offsets the broker gave, in produce order."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 2, "batch.size": 300,
                         "compression.type": "lz4"})
    offsets: dict[int, int] = {}
    errors: list = []

    def delivered(i: int):
        return lambda err, msg: errors.append(err) if err else offsets.__setitem__(i, msg.offset())

    for i, (key, value) in enumerate(pairs):
        producer.produce(topic, key=key, value=value, partition=0, on_delivery=delivered(i))
        producer.poll(0)
    assert producer.flush(30) == 0 and not errors
    return [offsets[i] for i in range(len(pairs))]


def _consume_all(bootstrap: str, topic: str) -> list[tuple[int, bytes | None, bytes | None]]:
    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": "compaction-check",
        "enable.auto.commit": False, "enable.partition.eof": True,
        "auto.offset.reset": "error",
    })
    consumer.assign([TopicPartition(topic, 0, 0)])
    out = []
    deadline = time.monotonic() + 30
    try:
        while time.monotonic() < deadline:
            msg = consumer.poll(1)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    return out
                raise AssertionError(msg.error())
            out.append((msg.offset(), msg.key(), msg.value()))
        raise AssertionError("did not reach the end of the partition in 30s")
    finally:
        consumer.close()


def test_broker_compacts_a_compacted_topic(broker_factory):
    broker = broker_factory(**{"log.cleaner.backoff.ms": "200", "log.segment.bytes": "2000"})
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    topic = "compacted"
    futures = admin.create_topics([NewTopic(topic, 1, 1, config={
        "cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.1",
    })])
    futures[topic].result(30)
    updates = [(b"key-%d" % k, b"value-%d-%d" % (k, r)) for r in range(80) for k in range(5)]
    tombstones = [(b"key-3", None), (b"key-4", None)]
    filler = [(b"other-%d" % (i % 4), b"x" * 50) for i in range(200)]
    pairs = updates + tombstones + filler
    offsets = _produce(broker.bootstrap, topic, pairs)
    assert offsets == list(range(len(pairs)))
    last_tombstone = offsets[len(updates) + 1]

    checkpoint = broker.log_dir / CLEANER_CHECKPOINT
    wait_until(
        lambda: read_offset_checkpoint(checkpoint).get(TP(topic, 0), 0) > last_tombstone,
        30, "the cleaner to compact past the tombstones",
    )
    cleaned_to = read_offset_checkpoint(checkpoint)[TP(topic, 0)]

    seen = _consume_all(broker.bootstrap, topic)
    seen_offsets = [o for o, _, _ in seen]
    assert seen_offsets == sorted(set(seen_offsets))
    assert seen_offsets[-1] == len(pairs) - 1
    clean_keys = [k for o, k, _ in seen if o < cleaned_to]
    assert len(clean_keys) == len(set(clean_keys)), "one record per key in the cleaned part"
    assert len(seen) < len(pairs) - 300
    final = {k: v for _, k, v in seen}
    expected = {k: v for k, v in pairs}
    assert final == expected
    assert final[b"key-3"] is None and final[b"key-0"] == b"value-0-79"
