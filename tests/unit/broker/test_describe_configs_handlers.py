"""DescribeConfigs and DescribeCluster against a real replica manager on a temp dir
(tests/support/handlers.py), at the lowest and highest versions we serve."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from broker.handlers import REGISTRY, admin, offset_for_leader_epoch  # noqa: F401 (registers)
from broker.handlers.context import BrokerServices
from kafkube_contract.broker_keys import BROKER_KEYS, TOPIC_KEYS
from tests.support.handlers import (
    DESCRIBE_CLUSTER,
    DESCRIBE_CONFIGS,
    NODE_ID,
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


# -- DescribeConfigs --------------------------------------------------------------------


def describe(services: BrokerServices, version: int, *resources: tuple, synonyms: bool = False,
             documentation: bool = False) -> Any:
    return call(services, request(DESCRIBE_CONFIGS, version, {
        "resources": [
            {"resource_type": t, "resource_name": n, "configuration_keys": keys}
            for t, n, keys in resources
        ],
        "include_synonyms": synonyms,
        "include_documentation": documentation,
    }))


@pytest.mark.parametrize("version", [1, 4])
def test_describe_topic_configs(tmp_path: Path, version: int) -> None:
    services = make_services(tmp_path, **{"log.segment.bytes": "2097152"})
    create(services, 7, new_topic("t", configs={"retention.ms": "5000"}))
    result = only(describe(services, version, (2, "t", None)).results)
    assert (result.error_code, result.resource_type, result.resource_name) == (
        ErrorCode.none, 2, "t")
    configs = {c.name: c for c in result.configs}
    assert set(configs) == set(TOPIC_KEYS)
    assert (configs["retention.ms"].value, configs["retention.ms"].config_source) == ("5000", 1)
    assert (configs["segment.bytes"].value, configs["segment.bytes"].config_source) == (
        "2097152", 4)
    assert (configs["segment.ms"].value, configs["segment.ms"].config_source) == (
        "604800000", 5)
    assert (configs["cleanup.policy"].value, configs["cleanup.policy"].config_source) == (
        "delete", 5)
    assert all(c.synonyms == () for c in result.configs)
    assert not any(c.read_only for c in result.configs)
    if version >= 3:
        assert configs["retention.ms"].config_type == 5
        assert configs["segment.bytes"].config_type == 3
        assert configs["cleanup.policy"].config_type == 7
        assert configs["unclean.leader.election.enable"].config_type == 1
        assert configs["message.timestamp.type"].config_type == 2
        assert configs["retention.ms"].documentation is None


@pytest.mark.parametrize("version", [1, 4])
def test_describe_topic_configs_synonyms(tmp_path: Path, version: int) -> None:
    services = make_services(tmp_path, **{"log.segment.bytes": "2097152",
                                          "log.roll.hours": "1"})
    create(services, 7, new_topic("t", configs={"segment.bytes": "1048576"}))
    keys = ["segment.bytes", "segment.ms", "min.insync.replicas"]
    result = only(describe(services, version, (2, "t", keys), synonyms=True,
                           documentation=True).results)
    configs = {c.name: c for c in result.configs}
    assert set(configs) == set(keys)
    assert [(s.name, s.value, s.source) for s in configs["segment.bytes"].synonyms] == [
        ("segment.bytes", "1048576", 1),
        ("log.segment.bytes", "2097152", 4),
        ("log.segment.bytes", "1073741824", 5),
    ]
    # As in Kafka, a lone log.roll.hours is not a synonym listed under log.roll.ms...
    assert configs["segment.ms"].synonyms == ()
    assert configs["segment.ms"].config_source == 5
    # ...but it does set the value.
    assert configs["segment.ms"].value == "3600000"
    assert [(s.name, s.source) for s in configs["min.insync.replicas"].synonyms] == [
        ("min.insync.replicas", 5)]
    if version >= 3:
        assert configs["segment.bytes"].documentation == TOPIC_KEYS["segment.bytes"][0].doc


@pytest.mark.parametrize("version", [1, 4])
def test_describe_configs_errors(services: BrokerServices, version: int) -> None:
    response = describe(
        services, version,
        (2, "missing", None), (2, "bad name!", None), (4, "7", None), (4, "x", None),
        (8, str(NODE_ID), None), (99, "y", None),
    )
    results = [(r.resource_type, r.resource_name, r.error_code, r.error_message)
               for r in response.results]
    assert results == [
        (2, "missing", ErrorCode.unknown_topic_or_partition,
         "This server does not host this topic-partition."),
        (2, "bad name!", ErrorCode.invalid_topic_exception,
         "Topic name \"bad name!\" is illegal, it contains a character other than ASCII "
         "alphanumerics, '.', '_' and '-'"),
        (4, "7", ErrorCode.invalid_request,
         f"Unexpected broker id, expected {NODE_ID} or empty string, but received 7"),
        (4, "x", ErrorCode.invalid_request, "Broker id must be an integer, but it is: x"),
        (8, str(NODE_ID), ErrorCode.invalid_request, "Unsupported resource type: BROKER_LOGGER"),
        (99, "y", ErrorCode.invalid_request, "Unsupported resource type: UNKNOWN"),
    ]
    assert all(r.configs == () for r in response.results)


@pytest.mark.parametrize("version", [1, 4])
def test_describe_broker_configs(tmp_path: Path, version: int) -> None:
    services = make_services(tmp_path, **{"num.partitions": "6", "log.retention.hours": "24"})
    response = describe(services, version, (4, str(NODE_ID), None), (4, "", None),
                        synonyms=True)
    mine, defaults = response.results
    assert (mine.error_code, defaults.error_code) == (ErrorCode.none, ErrorCode.none)
    assert defaults.configs == ()  # no dynamic cluster-wide defaults exist
    configs = {c.name: c for c in mine.configs}
    assert set(configs) == set(BROKER_KEYS)
    assert (configs["num.partitions"].value, configs["num.partitions"].config_source) == ("6", 4)
    assert [(s.name, s.value, s.source) for s in configs["num.partitions"].synonyms] == [
        ("num.partitions", "6", 4), ("num.partitions", "1", 5)]
    assert (configs["node.id"].value, configs["node.id"].config_source) == (str(NODE_ID), 4)
    assert configs["log.roll.ms"].value is None
    assert (configs["log.retention.hours"].value,
            configs["log.retention.hours"].config_source) == ("24", 4)
    assert configs["delete.topic.enable"].value == "true"
    assert configs["delete.topic.enable"].config_source == 5
    # Only what can change at run time is writable (DynamicBrokerConfig.AllDynamicConfigs).
    assert configs["node.id"].read_only and configs["listeners"].read_only
    assert not configs["log.retention.ms"].read_only
    assert not configs["leader.replication.throttled.rate"].read_only
    if version >= 3:
        assert configs["listeners"].config_type == 7
        assert configs["listeners"].documentation is None


# -- DescribeCluster --------------------------------------------------------------------


@pytest.mark.parametrize("version", [0, 1])
def test_describe_cluster(services: BrokerServices, version: int) -> None:
    response = call(services, request(DESCRIBE_CLUSTER, version, {
        "include_cluster_authorized_operations": False}))
    assert response.error_code == ErrorCode.none
    assert response.cluster_id == services.store.cluster_id
    assert response.controller_id == NODE_ID
    broker = only(response.brokers)
    assert (broker.broker_id, broker.host, broker.port, broker.rack) == (
        NODE_ID, "10.1.2.3", 9092, "rack-a")
    assert response.cluster_authorized_operations == -(2**31)
    if version >= 1:
        assert response.endpoint_type == 1


def test_describe_cluster_authorized_operations(services: BrokerServices) -> None:
    response = call(services, request(DESCRIBE_CLUSTER, 1, {
        "include_cluster_authorized_operations": True}))
    ops = response.cluster_authorized_operations
    assert {code for code in range(32) if ops & (1 << code)} == {5, 7, 8, 9, 10, 11, 12}


@pytest.mark.parametrize(("endpoint_type", "code", "message"), [
    (2, ErrorCode.mismatched_endpoint_type,
     "The request was sent to an endpoint of type BROKER, but we wanted an endpoint of type "
     "CONTROLLER"),
    (0, ErrorCode.unsupported_endpoint_type, "Unsupported endpoint type 0"),
    (3, ErrorCode.unsupported_endpoint_type, "Unsupported endpoint type 3"),
])
def test_describe_cluster_endpoint_types(
    services: BrokerServices, endpoint_type: int, code: ErrorCode, message: str
) -> None:
    response = call(services, request(DESCRIBE_CLUSTER, 1, {
        "include_cluster_authorized_operations": False, "endpoint_type": endpoint_type}))
    assert (response.error_code, response.error_message) == (code, message)
    assert response.brokers == ()
    assert response.cluster_id == ""
