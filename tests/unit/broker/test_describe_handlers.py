"""DescribeLogDirs, DescribeProducers and DescribeTopicPartitions against a real replica
manager on a temp dir, at the versions Kafka 4's admin client uses."""

from __future__ import annotations

from pathlib import Path

import pytest
from kafka.record.default_records import DefaultRecordBatchBuilder
from kio.schema.errors import ErrorCode

from broker.handlers import log_dirs, metadata, producer_id  # noqa: F401 (registers)
from broker.handlers.context import BrokerServices
from tests.support.handlers import call, create, make_services, new_topic, request

DESCRIBE_LOG_DIRS, DESCRIBE_PRODUCERS, DESCRIBE_TOPIC_PARTITIONS = 35, 61, 75
TS = 1_700_000_000_000


def batch(count: int, pid: int = -1, epoch: int = -1, seq: int = -1) -> bytes:
    builder = DefaultRecordBatchBuilder(2, 0, False, pid, epoch, seq, 1 << 20)
    for i in range(count):
        builder.append(i, TS + i, b"k", b"v%d" % i, [])
    return bytes(builder.build())


@pytest.fixture
def services(tmp_path: Path) -> BrokerServices:
    services = make_services(tmp_path, **{"max.request.partition.size.limit": "5"})
    create(services, 7, new_topic("a", 3), new_topic("b", 4), new_topic("c", 1))
    a0 = services.replicas.get("a", 0)
    assert a0.append(batch(3), 1 << 20).error == ErrorCode.none
    assert a0.append(batch(2, pid=7, epoch=1, seq=0), 1 << 20).error == ErrorCode.none
    assert a0.append(batch(4, pid=7, epoch=1, seq=2), 1 << 20).error == ErrorCode.none
    assert a0.append(batch(1, pid=9, epoch=0, seq=0), 1 << 20).error == ErrorCode.none
    return services


@pytest.mark.parametrize("version", [1, 4, 5])
def test_describe_log_dirs(services: BrokerServices, tmp_path: Path, version: int) -> None:
    everything = call(services, request(DESCRIBE_LOG_DIRS, version, {"topics": None}))
    (result,) = everything.results
    assert result.error_code == ErrorCode.none
    assert result.log_dir == str((tmp_path / "logs").resolve())
    sizes = {(t.name, p.partition_index): p.partition_size
             for t in result.topics for p in t.partitions}
    assert set(sizes) == {("a", 0), ("a", 1), ("a", 2), ("b", 0), ("b", 1), ("b", 2),
                          ("b", 3), ("c", 0)}
    assert sizes[("a", 0)] == services.replicas.get("a", 0).log.size_bytes > 0
    assert sizes[("a", 1)] == 0
    if version >= 4:
        assert 0 < result.usable_bytes <= result.total_bytes
    some = call(services, request(DESCRIBE_LOG_DIRS, version, {"topics": [
        {"topic": "a", "partitions": [0, 7]}, {"topic": "nope", "partitions": [0]}]}))
    (result,) = some.results
    assert [(t.name, [p.partition_index for p in t.partitions]) for t in result.topics] == [
        ("a", [0])]  # what is not here is simply absent, as in Kafka


def test_describe_producers(services: BrokerServices) -> None:
    response = call(services, request(DESCRIBE_PRODUCERS, 0, {"topics": [
        {"name": "a", "partition_indexes": [0, 1, 9]}, {"name": "nope",
                                                         "partition_indexes": [0]}]}))
    (a, nope) = response.topics
    p0, p1, p9 = a.partitions
    assert p0.error_code == ErrorCode.none
    assert sorted((s.producer_id, s.producer_epoch, s.last_sequence, s.last_timestamp,
                   s.coordinator_epoch, s.current_txn_start_offset)
                  for s in p0.active_producers) == [
        (7, 1, 5, TS + 3, -1, -1), (9, 0, 0, TS, -1, -1)]
    assert (p1.error_code, p1.active_producers) == (ErrorCode.none, ())
    assert p9.error_code == ErrorCode.unknown_topic_or_partition
    # A follower answers from its own replica, as Kafka's does; no replica here at all:
    follower = services.replicas.get("a", 1)
    follower.leader_id = 2  # as if broker 2 led it
    again = call(services, request(DESCRIBE_PRODUCERS, 0, {"topics": [
        {"name": "a", "partition_indexes": [1]}]}))
    assert again.topics[0].partitions[0].error_code == ErrorCode.none
    assert nope.partitions[0].error_code == ErrorCode.unknown_topic_or_partition


def describe_pages(services: BrokerServices, names: list[str], limit: int,
                   cursor: dict | None = None) -> tuple[list[tuple], dict | None]:
    response = call(services, request(DESCRIBE_TOPIC_PARTITIONS, 0, {
        "topics": [{"name": n} for n in names], "response_partition_limit": limit,
        "cursor": cursor}))
    rows = [(t.name, t.error_code, [p.partition_index for p in t.partitions])
            for t in response.topics]
    nxt = response.next_cursor
    return rows, None if nxt is None else {"topic_name": nxt.topic_name,
                                           "partition_index": nxt.partition_index}


def test_describe_topic_partitions_pages_through_every_topic(services) -> None:
    rows, cursor = describe_pages(services, [], 3)
    assert rows == [("a", ErrorCode.none, [0, 1, 2])]
    assert cursor == {"topic_name": "b", "partition_index": 0}
    rows, cursor = describe_pages(services, [], 3, cursor)
    assert rows == [("b", ErrorCode.none, [0, 1, 2])]
    assert cursor == {"topic_name": "b", "partition_index": 3}
    rows, cursor = describe_pages(services, [], 100, cursor)  # capped by the broker at 5
    assert rows == [("b", ErrorCode.none, [3]), ("c", ErrorCode.none, [0])]
    assert cursor is None


def test_describe_topic_partitions_by_name(services) -> None:
    rows, cursor = describe_pages(services, ["c", "nope", "a", "bad name!"], 10)
    assert rows == [("a", ErrorCode.none, [0, 1, 2]),
                    ("bad name!", ErrorCode.invalid_topic_exception, []),
                    ("c", ErrorCode.none, [0]),
                    ("nope", ErrorCode.unknown_topic_or_partition, [])]
    assert cursor is None
    # The cursor must name a requested topic and a real partition index.
    rows, _ = describe_pages(services, ["a"], 10, {"topic_name": "b", "partition_index": 0})
    assert rows == [("a", ErrorCode.invalid_request, [])]
    rows, _ = describe_pages(services, ["a"], 10, {"topic_name": "a", "partition_index": -1})
    assert rows == [("a", ErrorCode.invalid_request, [])]
