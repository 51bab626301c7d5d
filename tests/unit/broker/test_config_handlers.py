"""AlterConfigs and IncrementalAlterConfigs against a real replica manager on a temp dir:
what is stored, what DescribeConfigs then says, and what the logs and throttles do with it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

import broker.handlers.configs  # noqa: F401 (registers)
from broker.handlers.context import BrokerServices
from tests.support.handlers import NODE_ID, call, create, make_services, new_topic, only, request
from tests.unit.broker.test_describe_configs_handlers import describe

ALTER_CONFIGS, INCREMENTAL_ALTER_CONFIGS = 33, 44
TOPIC, BROKER = 2, 4
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
DYNAMIC_TOPIC, DYNAMIC_BROKER, DYNAMIC_DEFAULT, STATIC, DEFAULT = 1, 2, 3, 4, 5


def alter(services: BrokerServices, version: int, *resources: tuple,
          validate_only: bool = False) -> list[tuple[int, str, ErrorCode, str | None]]:
    """IncrementalAlterConfigs; each resource is (type, name, [(key, op, value), ...])."""
    response = call(services, request(INCREMENTAL_ALTER_CONFIGS, version, {
        "resources": [
            {"resource_type": t, "resource_name": n, "configs": [
                {"name": k, "config_operation": op, "value": v} for k, op, v in ops]}
            for t, n, ops in resources
        ],
        "validate_only": validate_only,
    }))
    return [(r.resource_type, r.resource_name, r.error_code, r.error_message)
            for r in response.responses]


def described(services: BrokerServices, resource_type: int, name: str) -> dict[str, Any]:
    result = only(describe(services, 4, (resource_type, name, None), synonyms=True).results)
    assert result.error_code == ErrorCode.none, result
    return {c.name: c for c in result.configs}


@pytest.fixture
def services(tmp_path: Path) -> BrokerServices:
    services = make_services(tmp_path, **{"log.segment.bytes": "2097152"})
    create(services, 7, new_topic("t", 2))
    return services


@pytest.mark.parametrize("version", [0, 1])
def test_topic_configs_change_at_run_time(services: BrokerServices, version: int) -> None:
    ok = alter(services, version, (TOPIC, "t", [("retention.ms", SET, "1000"),
                                                ("segment.bytes", SET, "1048576")]))
    assert ok == [(TOPIC, "t", ErrorCode.none, None)]
    assert services.store.topics["t"].configs == {"retention.ms": "1000",
                                                  "segment.bytes": "1048576"}
    for partition in services.replicas.topic_partitions("t"):
        assert partition.log.config.retention_ms == 1000
        assert partition.log.config.segment_bytes == 1048576
    configs = described(services, TOPIC, "t")
    assert (configs["retention.ms"].value, configs["retention.ms"].config_source) == (
        "1000", DYNAMIC_TOPIC)
    alter(services, version, (TOPIC, "t", [("segment.bytes", DELETE, None)]))
    configs = described(services, TOPIC, "t")
    assert (configs["segment.bytes"].value, configs["segment.bytes"].config_source) == (
        "2097152", STATIC)
    assert services.replicas.topic_partitions("t")[0].log.config.segment_bytes == 2097152


def test_lists_append_and_subtract(services: BrokerServices) -> None:
    alter(services, 1, (TOPIC, "t", [("cleanup.policy", APPEND, "compact")]))
    assert services.store.topics["t"].configs["cleanup.policy"] == "delete,compact"
    log_config = services.replicas.topic_partitions("t")[0].log.config
    assert log_config.cleanup_policy == ("delete", "compact")
    alter(services, 1, (TOPIC, "t", [("cleanup.policy", SUBTRACT, "delete")]))
    assert services.store.topics["t"].configs["cleanup.policy"] == "compact"
    refused = alter(services, 1, (TOPIC, "t", [("retention.ms", APPEND, "5")]))
    assert refused == [(TOPIC, "t", ErrorCode.invalid_config,
                        "Config value append is not allowed for config key: retention.ms")]


def test_a_bad_key_refuses_the_resource_and_nothing_changes(services: BrokerServices) -> None:
    alter(services, 1, (TOPIC, "t", [("retention.ms", SET, "60000")]))
    before = services.store.image
    results = alter(
        services, 1,
        (TOPIC, "t", [("segment.bytes", SET, "1048576"), ("retention.ms", SET, "soon")]),
        (TOPIC, "t", []),
    )
    assert [r[2] for r in results] == [ErrorCode.invalid_request] * 2  # the same one twice
    results = alter(
        services, 1,
        (TOPIC, "t", [("segment.bytes", SET, "1048576"), ("retention.ms", SET, "soon")]),
        (TOPIC, "t2", [("retention.ms", SET, "1")]),
        (TOPIC, "", [("retention.ms", SET, "1")]),
        (TOPIC, "bad name!", [("retention.ms", SET, "1")]),
    )
    assert results == [
        (TOPIC, "t", ErrorCode.invalid_config, "retention.ms: expected an integer, got 'soon'"),
        (TOPIC, "t2", ErrorCode.unknown_topic_or_partition, "The topic 't2' does not exist."),
        (TOPIC, "", ErrorCode.invalid_request, "Default topic resources are not allowed."),
        (TOPIC, "bad name!", ErrorCode.invalid_topic_exception,
         "Topic name \"bad name!\" is illegal, it contains a character other than ASCII "
         "alphanumerics, '.', '_' and '-'"),
    ]
    shape = [
        result
        for resource in [(TOPIC, "t", [("no.such.key", SET, "1")]),
                         (BROKER, str(NODE_ID), [("log.retention.ms", SET, "1"),
                                                 ("log.retention.ms", DELETE, None)]),
                         (BROKER, "", [("log.retention.ms", SET, None)]),
                         (BROKER, "", [("log.retention.ms", 9, "1")])]
        for result in alter(services, 1, resource)
    ]
    assert shape == [
        (TOPIC, "t", ErrorCode.invalid_config, "Unknown topic config name: no.such.key"),
        (BROKER, str(NODE_ID), ErrorCode.invalid_request, "Error due to duplicate config keys"),
        (BROKER, "", ErrorCode.invalid_request, "Null value not supported for : log.retention.ms"),
        (BROKER, "", ErrorCode.invalid_request, "Unknown operations type 9"),
    ]
    assert services.store.image == before
    assert services.replicas.topic_partitions("t")[0].log.config.retention_ms == 60000


def test_validate_only_stores_nothing(services: BrokerServices) -> None:
    before = services.store.image
    ok = alter(services, 1, (TOPIC, "t", [("retention.ms", SET, "1000")]),
               (BROKER, "", [("log.retention.ms", SET, "1000")]), validate_only=True)
    assert [r[2] for r in ok] == [ErrorCode.none, ErrorCode.none]
    assert services.store.image == before
    bad = alter(services, 1, (TOPIC, "t", [("retention.ms", SET, "x")]), validate_only=True)
    assert bad[0][2] == ErrorCode.invalid_config


def test_broker_configs_per_broker_and_cluster_default(services: BrokerServices) -> None:
    results = alter(
        services, 1,
        (BROKER, "", [("log.retention.ms", SET, "7200000"), ("log.cleaner.backoff.ms", SET, "99")]),
        (BROKER, str(NODE_ID), [("log.retention.ms", SET, "3600000"),
                                ("leader.replication.throttled.rate", SET, "1000000")]),
    )
    assert [r[2] for r in results] == [ErrorCode.none, ErrorCode.none]
    config = services.config
    assert config["log.retention.ms"] == 3_600_000  # the broker's own beats the default
    assert config["log.cleaner.backoff.ms"] == 99
    assert services.replicas.leader_throttle.rate == 1_000_000
    assert services.replicas.topic_partitions("t")[0].log.config.retention_ms == 3_600_000
    mine = described(services, BROKER, str(NODE_ID))
    assert [(s.name, s.value, s.source) for s in mine["log.retention.ms"].synonyms][:2] == [
        ("log.retention.ms", "3600000", DYNAMIC_BROKER),
        ("log.retention.ms", "7200000", DYNAMIC_DEFAULT)]
    assert mine["log.cleaner.backoff.ms"].config_source == DYNAMIC_DEFAULT
    defaults = described(services, BROKER, "")
    assert {name: (c.value, c.config_source) for name, c in defaults.items()} == {
        "log.cleaner.backoff.ms": ("99", DYNAMIC_DEFAULT),
        "log.retention.ms": ("7200000", DYNAMIC_DEFAULT)}
    topic = described(services, TOPIC, "t")
    assert (topic["retention.ms"].value, topic["retention.ms"].config_source) == (
        "3600000", DYNAMIC_BROKER)
    alter(services, 1, (BROKER, str(NODE_ID), [("log.retention.ms", DELETE, None)]))
    assert services.replicas.topic_partitions("t")[0].log.config.retention_ms == 7_200_000
    refused = [
        result
        for resource in [(BROKER, str(NODE_ID), [("node.id", SET, "5")]),
                         (BROKER, "", [("log.retention.ms", SET, "-7")]),
                         (BROKER, "", [("no.such.key", SET, "1")]),
                         (BROKER, str(NODE_ID + 1), [("log.retention.ms", SET, "1")]),
                         (BROKER, "x", [("log.retention.ms", SET, "1")])]
        for result in alter(services, 1, resource)
    ]
    assert refused == [
        (BROKER, str(NODE_ID), ErrorCode.invalid_config,
         "Cannot update these configs dynamically: node.id"),
        (BROKER, "", ErrorCode.invalid_config, "log.retention.ms: -7 is below the minimum -1"),
        (BROKER, "", ErrorCode.invalid_config, "Unknown broker config name: no.such.key"),
        (BROKER, str(NODE_ID + 1), ErrorCode.invalid_request,
         f"Unexpected broker id, expected {NODE_ID}, but received {NODE_ID + 1}"),
        (BROKER, "x", ErrorCode.invalid_request, "Node id must be an integer, but it is: x"),
    ]
    assert services.config.node_id == NODE_ID


@pytest.mark.parametrize("version", [0, 2])
def test_legacy_alter_configs_replaces_the_whole_set(services: BrokerServices,
                                                     version: int) -> None:
    alter(services, 1, (TOPIC, "t", [("retention.ms", SET, "1000"),
                                     ("segment.bytes", SET, "1048576")]))
    response = call(services, request(ALTER_CONFIGS, version, {
        "resources": [{"resource_type": TOPIC, "resource_name": "t",
                       "configs": [{"name": "retention.ms", "value": "5000"}]}],
        "validate_only": False,
    }))
    assert only(response.responses).error_code == ErrorCode.none
    assert services.store.topics["t"].configs == {"retention.ms": "5000"}


def test_a_restarted_broker_applies_stored_configs(tmp_path: Path) -> None:
    services = make_services(tmp_path)
    create(services, 7, new_topic("t", 1))
    alter(services, 1, (BROKER, "", [("log.retention.ms", SET, "7200000")]),
          (TOPIC, "t", [("follower.replication.throttled.replicas", SET, "0:1,0:2")]))
    for partition in services.replicas.partitions.values():
        partition.log.close()
    again = make_services(tmp_path)
    assert again.config["log.retention.ms"] == 7_200_000
    log_config = again.replicas.topic_partitions("t")[0].log.config
    assert log_config.retention_ms == 7_200_000
    assert log_config.follower_throttled_replicas == ("0:1", "0:2")
    refused = alter(again, 1, (TOPIC, "t", [("leader.replication.throttled.replicas", SET,
                                              "0-1")]))
    assert refused[0][2] == ErrorCode.invalid_config
    assert "leader.replication.throttled.replicas must be the literal '*'" in refused[0][3]
