"""Small client steps the integration tests share (confluent-kafka)."""

from __future__ import annotations

import time
import uuid

from confluent_kafka import Consumer


def read_values(bootstrap: str, topic: str, expected: int, timeout: float = 60.0) -> list[str]:
    """The values of ``topic`` from its start, decoded, read by a fresh group until
    ``expected`` came or ``timeout`` passed (the caller compares what came)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": uuid.uuid4().hex,
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    values: list[str] = []
    deadline = time.monotonic() + timeout
    while len(values) < expected and time.monotonic() < deadline:
        message = consumer.poll(1)
        if message is not None and message.error() is None:
            values.append(message.value().decode())
    consumer.close()
    return values
