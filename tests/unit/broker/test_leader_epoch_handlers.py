"""OffsetForLeaderEpoch against a real replica manager on a temp dir
(tests/support/handlers.py): the epoch cache's answers, as Kafka gives them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from kafka.record.default_records import DefaultRecordBatchBuilder
from kio.schema.errors import ErrorCode

from broker.handlers import REGISTRY, admin, offset_for_leader_epoch  # noqa: F401 (registers)
from broker.handlers.context import BrokerServices
from tests.support.handlers import (
    OFFSET_FOR_LEADER_EPOCH,
    call,
    create,
    make_services,
    new_topic,
    only,
    request,
)


@pytest.fixture
def services(tmp_path: Path) -> BrokerServices:
    return make_services(tmp_path)


# -- OffsetForLeaderEpoch ---------------------------------------------------------------


def batch(count: int) -> bytes:
    builder = DefaultRecordBatchBuilder(2, 0, False, -1, -1, -1, 1 << 20)
    for i in range(count):
        builder.append(i, 1_700_000_000_000 + i, None, b"v%d" % i, [])
    return bytes(builder.build())


def epochs_request(version: int, topic: str, *partitions: tuple[int, int, int]) -> Any:
    return request(OFFSET_FOR_LEADER_EPOCH, version, {"replica_id": -1, "topics": [{
        "topic": topic,
        "partitions": [
            {"partition": p, "current_leader_epoch": current, "leader_epoch": epoch}
            for p, current, epoch in partitions
        ],
    }]})


@pytest.mark.parametrize("version", [2, 4])
def test_offset_for_leader_epoch(services: BrokerServices, version: int) -> None:
    create(services, 7, new_topic("t", 1))
    partition = services.replicas.get("t", 0)
    assert partition.append(batch(3), 1 << 20).error == ErrorCode.none  # epoch 0: 0..2
    partition.leader_epoch = 2
    assert partition.append(batch(2), 1 << 20).error == ErrorCode.none  # epoch 2: 3..4
    response = call(services, epochs_request(
        version, "t",
        (0, -1, 0),  # epoch 0 ended where epoch 2 began
        (0, 2, 1),  # unknown epoch 1: the largest epoch below it, and its end
        (0, 2, 2),  # the current epoch ends at the log end
        (0, 1, 2),  # the client's current leader epoch is stale
        (0, 3, 2),  # the client knows a newer leader epoch than we do
        (1, -1, 0),  # no such partition
    ))
    result = only(response.topics)
    assert result.topic == "t"
    answers = [(p.partition, p.error_code, p.leader_epoch, p.end_offset)
               for p in result.partitions]
    assert answers == [
        (0, ErrorCode.none, 0, 3),
        (0, ErrorCode.none, 0, 3),
        (0, ErrorCode.none, 2, 5),
        (0, ErrorCode.fenced_leader_epoch, -1, -1),
        (0, ErrorCode.unknown_leader_epoch, -1, -1),
        (1, ErrorCode.unknown_topic_or_partition, -1, -1),
    ]


@pytest.mark.parametrize("version", [2, 4])
def test_offset_for_leader_epoch_unknown_topic_and_empty_log(
    services: BrokerServices, version: int
) -> None:
    create(services, 7, new_topic("empty", 1))
    response = call(services, epochs_request(version, "missing", (0, -1, 0)))
    assert only(only(response.topics).partitions).error_code == (
        ErrorCode.unknown_topic_or_partition)
    # A new leader records where its epoch starts (Kafka's makeLeader), even on an empty log.
    response = call(services, epochs_request(version, "empty", (0, 0, 0)))
    answer = only(only(response.topics).partitions)
    assert (answer.error_code, answer.leader_epoch, answer.end_offset) == (ErrorCode.none, 0, 0)
    response = call(services, epochs_request(version, "empty", (0, 0, 1)))
    answer = only(only(response.topics).partitions)
    assert (answer.error_code, answer.leader_epoch, answer.end_offset) == (
        ErrorCode.none, -1, -1)


def test_offset_for_leader_epoch_outside_the_cache_matches_kafka(
    services: BrokerServices,
) -> None:
    create(services, 7, new_topic("t", 1))
    partition = services.replicas.get("t", 0)
    partition.leader_epoch = 1
    partition.append(batch(3), 1 << 20)  # epoch 1: 0..2
    partition.leader_epoch = 3
    partition.append(batch(2), 1 << 20)  # epoch 3: 3..4
    response = call(services, epochs_request(4, "t", (0, -1, 0), (0, -1, 5)))
    answers = [(p.leader_epoch, p.end_offset) for p in only(response.topics).partitions]
    # Below the first epoch: the requested epoch, ending where the first known one starts.
    # Above the latest: undefined.
    assert answers == [(0, 0), (-1, -1)]
