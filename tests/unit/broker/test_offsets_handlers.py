"""ListOffsets and DeleteRecords handlers against a real replica manager on a temp dir: the
offsets Kafka answers (KIP-734's max timestamp, -4/-5 of tiered storage, a log start that
DeleteRecords moved inside a segment) and the errors it gives."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from kafka.record.default_records import DefaultRecordBatchBuilder
from kio.schema.errors import ErrorCode

from broker.handlers import delete_records, list_offsets  # noqa: F401 (registers)
from broker.handlers.context import BrokerServices
from tests.support.handlers import call, create, make_services, new_topic, only, request

LIST_OFFSETS, DELETE_RECORDS = 2, 21
TS = 1_700_000_000_000


def batch(*deltas: int) -> bytes:
    builder = DefaultRecordBatchBuilder(2, 0, False, -1, -1, -1, 1 << 20)
    for i, delta in enumerate(deltas):
        builder.append(i, TS + delta, None, b"v%d" % i, [])
    return bytes(builder.build())


def list_offsets_of(services: BrokerServices, version: int, topic: str,
                    *timestamps: int) -> list[tuple]:
    response = call(services, request(LIST_OFFSETS, version, {
        "replica_id": -1, "isolation_level": 0, "timeout": timedelta(seconds=1),
        "topics": [{"name": topic, "partitions": [
            {"partition_index": 0, "current_leader_epoch": -1, "timestamp": ts}
            for ts in timestamps]}]}))
    return [(p.error_code, p.offset, p.timestamp) for p in only(response.topics).partitions]


def delete_records_of(services: BrokerServices, version: int,
                      *targets: tuple[str, int, int], timeout_ms: int = 5000) -> list[tuple]:
    topics: dict[str, list] = {}
    for topic, partition, offset in targets:
        topics.setdefault(topic, []).append({"partition_index": partition, "offset": offset})
    response = call(services, request(DELETE_RECORDS, version, {
        "timeout": timedelta(milliseconds=timeout_ms),
        "topics": [{"name": n, "partitions": ps} for n, ps in topics.items()]}))
    return [(t.name, p.partition_index, p.error_code, p.low_watermark)
            for t in response.topics for p in t.partitions]


@pytest.fixture
def services(tmp_path: Path) -> BrokerServices:
    services = make_services(tmp_path)
    create(services, 7, new_topic("t", 1), new_topic("c", 1, configs={"cleanup.policy": "compact"}))
    partition = services.replicas.get("t", 0)
    for records in (batch(0, 1, 2), batch(1000, 3000, 2000), batch(100, 200)):  # 0-2, 3-5, 6-7
        assert partition.append(records, 1 << 20).error == ErrorCode.none
    return services


@pytest.mark.parametrize("version", [1, 7, 10])
def test_list_offsets_answers_as_kafka(services: BrokerServices, version: int) -> None:
    answers = list_offsets_of(services, version, "t", -1, -2, TS + 150)
    assert answers == [(ErrorCode.none, 8, -1), (ErrorCode.none, 0, -1),
                       (ErrorCode.none, 3, TS + 1000)]
    if version >= 7:  # the record holding the largest timestamp, not its batch's last
        assert list_offsets_of(services, version, "t", -3) == [(ErrorCode.none, 4, TS + 3000)]
    if version >= 9:  # no remote tier: everything is local, nothing tiered
        assert list_offsets_of(services, version, "t", -4, -5) == [
            (ErrorCode.none, 0, -1), (ErrorCode.none, -1, -1)]
    assert list_offsets_of(services, version, "t", -7) == [(ErrorCode.invalid_request, -1, -1)]


@pytest.mark.parametrize("version", [0, 2])
def test_delete_records_moves_the_log_start(services: BrokerServices, version: int) -> None:
    # Inside a batch: readers start at 4, the by-timestamp lookup skips what is gone.
    assert delete_records_of(services, version, ("t", 0, 4)) == [("t", 0, ErrorCode.none, 4)]
    assert list_offsets_of(services, 10, "t", -2, -4, TS + 1) == [
        (ErrorCode.none, 4, -1), (ErrorCode.none, 4, -1), (ErrorCode.none, 4, TS + 3000)]
    # Backwards is no change; -1 means the high watermark.
    assert delete_records_of(services, version, ("t", 0, 2)) == [("t", 0, ErrorCode.none, 4)]
    assert delete_records_of(services, version, ("t", 0, -1)) == [("t", 0, ErrorCode.none, 8)]
    assert list_offsets_of(services, 10, "t", -2, -1) == [(ErrorCode.none, 8, -1),
                                                           (ErrorCode.none, 8, -1)]


def test_delete_records_refusals(services: BrokerServices) -> None:
    assert delete_records_of(services, 2, ("t", 0, 9), ("t", 0, -2), ("t", 3, 1),
                             ("nope", 0, 1), ("c", 0, 0)) == [
        ("t", 0, ErrorCode.offset_out_of_range, -1),  # past the high watermark (8)
        ("t", 0, ErrorCode.offset_out_of_range, -1),  # (the last of a duplicate wins)
        ("t", 3, ErrorCode.unknown_topic_or_partition, -1),
        ("nope", 0, ErrorCode.unknown_topic_or_partition, -1),
        ("c", 0, ErrorCode.policy_violation, -1),  # compact only: the cleaner decides
    ]
    assert list_offsets_of(services, 10, "t", -2) == [(ErrorCode.none, 0, -1)]


def test_log_start_survives_a_restart(tmp_path: Path) -> None:
    services = make_services(tmp_path)
    create(services, 7, new_topic("t", 1))
    partition = services.replicas.get("t", 0)
    for _ in range(3):
        assert partition.append(batch(0, 1, 2), 1 << 20).error == ErrorCode.none
    assert delete_records_of(services, 2, ("t", 0, 5)) == [("t", 0, ErrorCode.none, 5)]
    services.replicas.logs.write_checkpoints()
    for p in services.replicas.partitions.values():
        p.log.close()
    restarted = make_services(tmp_path)
    assert restarted.replicas.get("t", 0).log.log_start_offset == 5
    assert list_offsets_of(restarted, 10, "t", -2, -1) == [(ErrorCode.none, 5, -1),
                                                            (ErrorCode.none, 9, -1)]
