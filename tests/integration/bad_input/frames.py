"""What the bad-input tests share: Kafka's error codes, framed requests, a healthy
client checked while others misbehave, a round trip with a real client."""

from __future__ import annotations

import time

from confluent_kafka import Consumer, Producer, TopicPartition

from broker.protocol.codec import RequestHeader, encode_request
from kafkube.harness.wire import WireClient, api_versions_request, metadata_request
from tests.support.broker_log import CLOSE_TIMEOUT

# Kafka error codes (org.apache.kafka.common.protocol.Errors)
NONE = 0
OFFSET_OUT_OF_RANGE = 1
CORRUPT_MESSAGE = 2
UNKNOWN_TOPIC_OR_PARTITION = 3
MESSAGE_TOO_LARGE = 10
INVALID_TOPIC_EXCEPTION = 17
INVALID_REQUIRED_ACKS = 21
INVALID_TIMESTAMP = 32
UNSUPPORTED_VERSION = 35
INVALID_RECORD = 87
UNKNOWN_TOPIC_ID = 100


class Healthy:
    """A well-behaved client on its own connection, checked while others misbehave."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self.client = WireClient.connect(bootstrap)
        self.checks = 0

    def check(self) -> None:
        versions = self.client.request(api_versions_request())
        assert versions.error_code == NONE
        assert {a.api_key for a in versions.api_keys} >= {0, 1, 3, 18}
        meta = self.client.request(metadata_request(None))
        assert [b.port for b in meta.brokers] == [int(self.bootstrap.rpartition(":")[2])]
        self.checks += 1


def request_bytes(body, version: int | None = None, correlation_id: int = 7,
                  client_id: str | None = "bad-input") -> bytes:
    """A framed request; ``version`` overrides the header's API version."""
    api_version = body.__version__ if version is None else version
    return encode_request(
        RequestHeader(body.__api_key__, api_version, correlation_id, client_id), body
    )


def assert_closed_silently(client: WireClient, what: str) -> None:
    closed = client.closed_by_peer(CLOSE_TIMEOUT, until_data=True)
    assert client.discarded == 0, f"{what}: answered ({client.discarded} bytes) instead of closed"
    assert closed, f"{what}: connection still open after {CLOSE_TIMEOUT}s"


def round_trip_with_confluent(bootstrap: str, topic: str, count: int = 5) -> None:
    """A real client produces and consumes ``count`` messages."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                         "message.timeout.ms": 20000})
    reports: list = []
    for i in range(count):
        producer.produce(topic, value=b"rt-%d" % i,
                         on_delivery=lambda err, msg: reports.append((err, msg.offset())))
    assert producer.flush(30) == 0, "confluent producer did not deliver in time"
    assert [err for err, _ in reports] == [None] * count
    first = min(offset for _, offset in reports)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bad-input-check",
                         "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(topic, 0, first)])
        values = []
        deadline = time.monotonic() + 30
        while len(values) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            values.append(msg.value())
        assert values == [b"rt-%d" % i for i in range(count)]
    finally:
        consumer.close()
