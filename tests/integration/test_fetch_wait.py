"""A fetch with nothing to read waits up to its max wait, as in Kafka, unless its connection
sends another request behind it: then it is answered at once, empty, and the request behind
is answered next, in order (broker/handlers/head_of_line.py). Spark's executors send their
ListOffsets behind the consumer's prefetch at the end of each partition."""

from __future__ import annotations

import time
from dataclasses import replace
from datetime import timedelta

from kio.schema.errors import ErrorCode

from kafkube.harness.wire import (
    LATEST,
    WireClient,
    create_topic,
    fetch_request,
    list_offsets_request,
    produce,
    simple_batch,
)

FETCH, LIST_OFFSETS = 1, 2


def waiting_fetch(topic: str, offset: int, max_wait_s: float):
    """A fetch at ``offset`` that waits for one byte, up to ``max_wait_s``."""
    return replace(fetch_request(topic, offset), max_wait=timedelta(seconds=max_wait_s),
                   min_bytes=1)


def test_a_fetch_at_the_end_of_the_log_waits_its_max_wait_when_alone(broker) -> None:
    with WireClient.connect(broker.bootstrap) as client:
        create_topic(client, "alone")
        started = time.monotonic()
        fetched = client.request(waiting_fetch("alone", 0, 1.5))
        assert time.monotonic() - started >= 1.4  # nothing came and nothing followed it
        (partition,) = fetched.responses[0].partitions
        assert partition.error_code == ErrorCode.none and not partition.records

        # A fetch behind a fetch does not end the first one's wait: both wait theirs.
        started = time.monotonic()
        first = client.send(waiting_fetch("alone", 0, 1.5))
        second = client.send(waiting_fetch("alone", 0, 1.5))
        client.receive(FETCH, 12, first)
        assert time.monotonic() - started >= 1.4
        client.receive(FETCH, 12, second)


def test_a_waiting_fetch_is_answered_when_a_request_follows_it(broker) -> None:
    with WireClient.connect(broker.bootstrap) as client:
        create_topic(client, "behind")
        written = produce(client, "behind", simple_batch([b"a", b"b", b"c"]))
        assert written.error_code == ErrorCode.none
        started = time.monotonic()
        fetch_id = client.send(waiting_fetch("behind", 3, 60.0))  # at the end: it waits
        offsets_id = client.send(list_offsets_request("behind", LATEST))
        # Well inside the fetch's 60 s: it was answered because ListOffsets followed it.
        fetched = client.receive(FETCH, 12, fetch_id)
        offsets = client.receive(LIST_OFFSETS, 7, offsets_id)
        assert time.monotonic() - started < 30
        (partition,) = fetched.responses[0].partitions
        assert (partition.error_code, partition.high_watermark) == (ErrorCode.none, 3)
        assert not partition.records
        assert offsets.topics[0].partitions[0].offset == 3

        # Data that arrives while a fetch waits still answers it, with the data.
        fetch_id = client.send(waiting_fetch("behind", 3, 60.0))
        with WireClient.connect(broker.bootstrap) as producer:
            written = produce(producer, "behind", simple_batch([b"d", b"e"]))
            assert written.error_code == ErrorCode.none
        (partition,) = client.receive(FETCH, 12, fetch_id).responses[0].partitions
        assert partition.high_watermark == 5 and partition.records
