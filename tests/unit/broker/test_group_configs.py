"""Group configs (Kafka's GroupConfig, ``kafka-configs.sh --entity-type groups``): set, read back
with their broker defaults as synonyms, refused for unknown keys and bad values, and used by
share groups (where a share group starts reading, how long its locks last)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode

import broker.handlers.configs  # noqa: F401 (registers)
from broker.handlers.context import BrokerServices
from tests.support.handlers import make_services
from tests.support.txn_logs import data_batch
from tests.unit.broker.test_config_handlers import DELETE, SET, alter, described
from tests.unit.broker.test_share_fetch import acquired, fetch, produce

GROUP = 32
DYNAMIC_GROUP, DEFAULT = 8, 5


@pytest.fixture
def services(tmp_path: Path) -> BrokerServices:
    services = make_services(tmp_path, **{"share.coordinator.state.topic.num.partitions": "2",
                                          "group.share.record.lock.duration.ms": "20000"})
    asyncio.run(services.replicas.create_topic("orders", 1, {}))
    return services


def test_group_configs_are_stored_and_described(services: BrokerServices) -> None:
    ok = alter(services, 1, (GROUP, "queue", [("share.auto.offset.reset", SET, "earliest"),
                                              ("share.record.lock.duration.ms", SET, "5000")]))
    assert ok == [(GROUP, "queue", ErrorCode.none, None)]
    configs = described(services, GROUP, "queue")
    lock = configs["share.record.lock.duration.ms"]
    assert (lock.value, lock.config_source) == ("5000", DYNAMIC_GROUP)
    assert [(s.name, s.value) for s in lock.synonyms] == [
        ("share.record.lock.duration.ms", "5000"), ("group.share.record.lock.duration.ms",
                                                     "20000")]
    assert (configs["share.isolation.level"].value,
            configs["share.isolation.level"].config_source) == ("read_uncommitted", DEFAULT)
    alter(services, 1, (GROUP, "queue", [("share.record.lock.duration.ms", DELETE, None)]))
    assert described(services, GROUP, "queue")["share.record.lock.duration.ms"].value == "20000"


def test_unknown_keys_and_bad_values_are_refused(services: BrokerServices) -> None:
    refused = alter(services, 1, (GROUP, "queue", [("share.auto.offset.reset", SET, "middle")]),
                    (GROUP, "other", [("no.such.key", SET, "1")]),
                    (GROUP, "", [("share.auto.offset.reset", SET, "earliest")]))
    assert [r[2] for r in refused] == [ErrorCode.invalid_config, ErrorCode.invalid_config,
                                       ErrorCode.invalid_request]
    assert "Unknown group config name: no.such.key" in refused[1][3]
    assert services.store.image.group_configs == {}


def test_a_share_group_starts_where_its_config_says(services: BrokerServices) -> None:
    produce(services, 3)
    alter(services, 1, (GROUP, "queue", [("share.auto.offset.reset", SET, "earliest")]))
    answer = fetch(services, "a", 0)
    assert acquired(answer) == [(0, 2, 1)]
    assert answer.acquisition_lock_timeout.total_seconds() == 20


def test_a_read_committed_share_group_never_gets_aborted_records(
        services: BrokerServices) -> None:
    """Two transactions of one producer, the first aborted, the second committed, with a plain
    record between: the group gets the plain record and the committed ones only."""
    alter(services, 1, (GROUP, "queue", [("share.auto.offset.reset", SET, "earliest"),
                                         ("share.isolation.level", SET, "read_committed")]))
    partition = services.replicas.get("orders", 0)

    def append(batch: bytes) -> None:
        assert partition.append(batch, 1 << 20).error == ErrorCode.none

    append(data_batch([(None, b"aborted-1"), (None, b"aborted-2")], pid=7, seq=0))  # 0-1
    assert partition.append_marker(7, 0, False, 0).error == ErrorCode.none  # 2
    append(data_batch([(None, b"plain")], transactional=False))  # 3
    append(data_batch([(None, b"committed")], pid=7, seq=2))  # 4
    assert partition.append_marker(7, 0, True, 0).error == ErrorCode.none  # 5
    assert acquired(fetch(services, "a", 0)) == [(3, 4, 1)]


def test_values_outside_the_brokers_bounds_take_effect_clamped(
        services: BrokerServices) -> None:
    """Kafka 4.4 accepts a group value past group.share.min/max.* and clamps it where it
    is used: the bounds are the operator's and may change after the value was stored."""
    produce(services, 3)
    ok = alter(services, 1, (GROUP, "queue", [("share.auto.offset.reset", SET, "earliest"),
                                              ("share.record.lock.duration.ms", SET, "5000"),
                                              ("share.delivery.count.limit", SET, "50")]))
    assert ok == [(GROUP, "queue", ErrorCode.none, None)]
    answer = fetch(services, "a", 0)
    assert answer.acquisition_lock_timeout.total_seconds() == 15  # the broker's minimum
    assert services.shares.settings.number("queue", "share.delivery.count.limit") == 10
    (slot,) = services.shares.slots.values()
    assert (slot.share.lock_seconds, slot.share.max_delivery) == (15, 10)
    alter(services, 1, (GROUP, "queue", [("share.delivery.count.limit", SET, "3")]))
    fetch(services, "b", 0)  # a share-partition already loaded takes the new value
    assert slot.share.max_delivery == 3
