"""Compatibility suite: real Kafka clients against a real broker process.

confluent-kafka (librdkafka), kafka-python, aiokafka and kcat each produce and consume
keys, null values, headers, timestamps and every compression codec. The Java client has
its own module (test_java_client.py).
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
BASE_TS = 1_700_000_000_000


def topic_name(prefix: str = "t") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def sample_records(n: int) -> list[dict]:
    """Records mixing keys, null values and headers, with distinct timestamps."""
    out = []
    for i in range(n):
        out.append({
            # kafka-python refuses a record with neither key nor value.
            "key": None if i % 3 == 0 and i % 5 != 4 else f"k{i}".encode(),
            "value": None if i % 5 == 4 else f"value-{i}".encode() * (1 + i % 7),
            "headers": [("h", f"{i}".encode()), ("x", b"")] if i % 2 else [],
            "timestamp": BASE_TS + i * 1000,
        })
    return out


def normalise(records: list[dict]) -> list[tuple]:
    return [(r["key"], r["value"], tuple(r["headers"]), r["timestamp"]) for r in records]


# -- confluent-kafka -----------------------------------------------------------------------


def ck_produce(bootstrap: str, topic: str, records: list[dict], **conf) -> list:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, **conf})
    errors = []
    for r in records:
        producer.produce(
            topic, value=r["value"], key=r["key"], headers=r["headers"] or None,
            timestamp=r["timestamp"], partition=r.get("partition", 0),
            on_delivery=lambda err, _msg: err and errors.append(err),
        )
        producer.poll(0)
    remaining = producer.flush(30)
    assert remaining == 0, f"{remaining} messages not delivered"
    return errors


def ck_consume(bootstrap: str, topic: str, count: int, partition: int = 0,
               timeout: float = 30, **conf) -> list:
    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False,
        "fetch.wait.max.ms": 100, **conf,
    })
    consumer.assign([TopicPartition(topic, partition, 0)])
    messages = []
    deadline = time.monotonic() + timeout
    try:
        while len(messages) < count and time.monotonic() < deadline:
            for msg in consumer.consume(min(10000, count - len(messages)), 0.5):
                if msg.error():
                    if msg.error().code() != KafkaError._PARTITION_EOF:
                        raise AssertionError(msg.error())
                    continue
                messages.append(msg)
    finally:
        consumer.close()
    return messages


def ck_record(msg) -> dict:
    return {
        "key": msg.key(), "value": msg.value(),
        "headers": [(k, v or b"") for k, v in (msg.headers() or [])],
        "timestamp": msg.timestamp()[1],
    }


@pytest.mark.parametrize("codec", CODECS)
def test_confluent_round_trip(broker, codec):
    topic = topic_name()
    records = sample_records(200)
    assert ck_produce(broker.bootstrap, topic, records, **{"compression.type": codec}) == []
    messages = ck_consume(broker.bootstrap, topic, len(records))
    assert [m.offset() for m in messages] == list(range(len(records)))
    assert normalise([ck_record(m) for m in messages]) == normalise(records)


def test_confluent_large_record(broker_factory):
    broker = broker_factory(**{"message.max.bytes": str(2 * 1024 * 1024)})
    topic = topic_name()
    big = bytes(range(256)) * 4096  # 1 MiB
    records = [{"key": b"big", "value": big, "headers": [], "timestamp": BASE_TS}]
    assert ck_produce(broker.bootstrap, topic, records, **{"message.max.bytes": 2_000_000}) == []
    messages = ck_consume(broker.bootstrap, topic, 1, **{"fetch.max.bytes": 4_000_000})
    assert len(messages) == 1 and messages[0].value() == big


def test_record_over_max_message_bytes_is_refused(broker):
    topic = topic_name()
    records = [{"key": None, "value": b"x" * 1_100_000, "headers": [], "timestamp": BASE_TS}]
    errors = ck_produce(broker.bootstrap, topic, records, **{"message.max.bytes": 2_000_000})
    assert [e.code() for e in errors] == [KafkaError.MSG_SIZE_TOO_LARGE]


def test_confluent_100k_small_records_in_order(broker):
    topic = topic_name()
    n = 100_000
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 20})
    for i in range(n):
        while True:
            try:
                producer.produce(topic, value=b"%d" % i, partition=0)
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(60) == 0
    messages = ck_consume(broker.bootstrap, topic, n, timeout=60)
    assert len(messages) == n
    assert [m.offset() for m in messages] == list(range(n))
    assert [int(m.value()) for m in messages] == list(range(n))


def test_confluent_offsets_for_times(broker):
    topic = topic_name()
    records = sample_records(50)
    assert ck_produce(broker.bootstrap, topic, records, **{"compression.type": "lz4"}) == []
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "unused"})
    try:
        for i in (0, 17, 49):
            [tp] = consumer.offsets_for_times([TopicPartition(topic, 0, BASE_TS + i * 1000)], 10)
            assert tp.offset == i
        [tp] = consumer.offsets_for_times([TopicPartition(topic, 0, BASE_TS + 17_500)], 10)
        assert tp.offset == 18  # the first record at or after the timestamp
        [tp] = consumer.offsets_for_times([TopicPartition(topic, 0, BASE_TS + 10**9)], 10)
        assert tp.offset == -1  # OFFSET_END: nothing that late
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), 10)
        assert (low, high) == (0, 50)
    finally:
        consumer.close()


def test_auto_create_off_refuses_unknown_topics(broker_factory):
    broker = broker_factory(**{"auto.create.topics.enable": "false"})
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    topic = topic_name()
    md = admin.list_topics(topic, timeout=10)
    assert md.topics[topic].error is not None
    assert md.topics[topic].error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    errors = ck_produce(broker.bootstrap, topic, sample_records(1), **{"message.timeout.ms": 3000})
    assert len(errors) == 1
    assert topic not in admin.list_topics(timeout=10).topics


def test_auto_create_on_uses_num_partitions(broker_factory):
    broker = broker_factory(**{"num.partitions": "3"})
    topic = topic_name()
    assert ck_produce(broker.bootstrap, topic, sample_records(3)) == []
    md = AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(timeout=10)
    assert sorted(md.topics[topic].partitions) == [0, 1, 2]


def test_create_and_delete_topic(broker):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    topic = topic_name()
    admin.create_topics([NewTopic(topic, 4, 1)])[topic].result(10)
    assert len(admin.list_topics(timeout=10).topics[topic].partitions) == 4
    assert ck_produce(broker.bootstrap, topic, sample_records(5)) == []
    admin.delete_topics([topic])[topic].result(10)
    assert topic not in admin.list_topics(timeout=10).topics
    # A topic of the same name starts afresh.
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(10)
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "unused"})
    try:
        assert consumer.get_watermark_offsets(TopicPartition(topic, 0), 10) == (0, 0)
    finally:
        consumer.close()


# -- kafka-python --------------------------------------------------------------------------


@pytest.mark.parametrize("codec", CODECS)
def test_kafka_python_round_trip(broker, codec):
    from kafka import KafkaConsumer, KafkaProducer
    from kafka import TopicPartition as KTopicPartition

    topic = topic_name()
    records = sample_records(100)
    producer = KafkaProducer(
        bootstrap_servers=broker.bootstrap,
        compression_type=None if codec == "none" else codec,
        linger_ms=5,
    )
    futures = [
        producer.send(topic, value=r["value"], key=r["key"], headers=r["headers"],
                      timestamp_ms=r["timestamp"], partition=0)
        for r in records
    ]
    offsets = [f.get(timeout=30).offset for f in futures]
    producer.close()
    assert offsets == list(range(len(records)))
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False,
                             consumer_timeout_ms=10000)
    tp = KTopicPartition(topic, 0)
    consumer.assign([tp])
    consumer.seek_to_beginning(tp)
    got = []
    for msg in consumer:
        got.append({"key": msg.key, "value": msg.value, "headers": list(msg.headers),
                    "timestamp": msg.timestamp})
        if len(got) == len(records):
            break
    found = consumer.offsets_for_times({tp: BASE_TS + 30_000})
    consumer.close()
    assert normalise(got) == normalise(records)
    assert found[tp].offset == 30


# -- aiokafka ------------------------------------------------------------------------------


@pytest.mark.parametrize("codec", CODECS)
def test_aiokafka_round_trip(broker, codec):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.structs import TopicPartition as ATopicPartition

    topic = topic_name()
    records = sample_records(100)

    async def run() -> list[dict]:
        producer = AIOKafkaProducer(
            bootstrap_servers=broker.bootstrap, enable_idempotence=True,
            compression_type=None if codec == "none" else codec, linger_ms=5,
        )
        await producer.start()
        try:
            futures = [
                await producer.send(topic, value=r["value"], key=r["key"],
                                    headers=r["headers"], timestamp_ms=r["timestamp"],
                                    partition=0)
                for r in records
            ]
            metas = await asyncio.gather(*futures)
            assert [m.offset for m in metas] == list(range(len(records)))
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(bootstrap_servers=broker.bootstrap,
                                    enable_auto_commit=False)
        await consumer.start()
        try:
            tp = ATopicPartition(topic, 0)
            consumer.assign([tp])
            await consumer.seek_to_beginning(tp)
            got = []
            async with asyncio.timeout(30):
                while len(got) < len(records):
                    msg = await consumer.getone()
                    got.append({"key": msg.key, "value": msg.value,
                                "headers": list(msg.headers), "timestamp": msg.timestamp})
            return got
        finally:
            await consumer.stop()

    got = asyncio.run(run())
    assert normalise(got) == normalise(records)


# -- kcat (librdkafka 2.0 from Debian: the pre-2.11.1 feature probing) -----------------------


@pytest.mark.parametrize("codec", CODECS)
def test_kcat_round_trip(broker, codec):
    topic = topic_name()
    lines = [f"key{i}:value {i}" for i in range(300)]
    subprocess.run(
        ["kcat", "-b", broker.bootstrap, "-t", topic, "-P", "-K:", "-z", codec, "-p", "0",
         "-H", "source=kcat"],
        input="\n".join(lines) + "\n", text=True, check=True, timeout=60,
    )
    out = subprocess.run(
        ["kcat", "-b", broker.bootstrap, "-t", topic, "-C", "-e", "-o", "beginning", "-J"],
        capture_output=True, text=True, check=True, timeout=60,
    ).stdout
    messages = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert [(m["key"], m["payload"]) for m in messages] == [
        tuple(line.split(":", 1)) for line in lines
    ]
    assert [m["offset"] for m in messages] == list(range(len(lines)))
    assert all(m["headers"] == ["source", "kcat"] for m in messages)


def test_kcat_reads_what_confluent_wrote(broker):
    topic = topic_name()
    records = sample_records(20)
    assert ck_produce(broker.bootstrap, topic, records, **{"compression.type": "zstd"}) == []
    out = subprocess.run(
        ["kcat", "-b", broker.bootstrap, "-t", topic, "-C", "-e", "-o", "beginning", "-J"],
        capture_output=True, text=True, check=True, timeout=60,
    ).stdout
    messages = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert [m["ts"] for m in messages] == [r["timestamp"] for r in records]
    assert [m["payload"] for m in messages] == [
        r["value"].decode() if r["value"] is not None else None for r in records
    ]
