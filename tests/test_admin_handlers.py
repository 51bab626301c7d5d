"""Admin handlers and OffsetForLeaderEpoch against a real replica manager on a temp dir.

Requests are kio objects of the lowest and highest versions we serve; every response is also
encoded and decoded again, to prove the handler built a message of the right version.
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import pytest
from kafka.record.default_records import DefaultRecordBatchBuilder
from kio.index import load_request_schema
from kio.schema.errors import ErrorCode

from broker.common.metrics import BrokerMetrics
from broker.config.broker_config import BROKER_KEYS, TOPIC_KEYS, BrokerConfig
from broker.controller.controller import Controller
from broker.coordinator.group_coordinator import GroupCoordinator
from broker.coordinator.transaction_coordinator import TransactionCoordinator
from broker.coordinator.txn_markers import MarkerSender
from broker.handlers import REGISTRY, admin, offset_for_leader_epoch  # noqa: F401 (registers)
from broker.handlers.context import BrokerServices, Endpoint, RequestContext
from broker.network.peers import PeerChannels
from broker.protocol.codec import RequestHeader, decode_response, encode_response
from broker.protocol.messages import build
from broker.security import acl
from broker.server.txn_verification import TransactionVerifier
from tests.support.in_process import open_replicas

NODE_ID = 1
CREATE_TOPICS, DELETE_TOPICS, CREATE_PARTITIONS = 19, 20, 37
DESCRIBE_CONFIGS, DESCRIBE_CLUSTER, OFFSET_FOR_LEADER_EPOCH = 32, 60, 23


def make_services(tmp_path: Path, **settings: str) -> BrokerServices:
    raw = {"log.dirs": str(tmp_path / "logs"), "node.id": str(NODE_ID), **settings}
    config = BrokerConfig.from_dict(raw)
    store, replicas = open_replicas(config, rack="rack-a")
    transactions = TransactionCoordinator(
        config, replicas, store, MarkerSender(store, PeerChannels(store, "markers", 1.0)))
    return BrokerServices(
        config, store, replicas, BrokerMetrics(), {"PLAINTEXT": Endpoint("", 9092, "rack-a")},
        GroupCoordinator(config, replicas), Controller(config, store, lambda: 1),
        transactions, TransactionVerifier(store, NODE_ID, 50, PeerChannels(store, "v", 1.0),
                                          transactions.verify_partitions,
                                          transactions.add_partitions),
        acl.from_config(config, lambda: store.image.acls),
    )


@pytest.fixture
def services(tmp_path: Path) -> BrokerServices:
    return make_services(tmp_path)


def request(api_key: int, version: int, values: dict[str, Any]) -> Any:
    """A kio request of ``version`` from a version-independent dict."""
    return build(load_request_schema(api_key, version), values)


def call(services: BrokerServices, req: Any) -> Any:
    """Run the registered handler, then prove the response encodes and decodes."""
    header = RequestHeader(req.__api_key__, req.__version__, 42, "test-client")
    ctx = RequestContext(services, header, client_host="127.0.0.1", local_host="10.1.2.3")
    spec = REGISTRY[req.__api_key__]
    assert spec.min_version <= req.__version__ <= spec.max_version
    response = asyncio.run(spec.handler(ctx, req))
    assert response.__version__ == req.__version__
    frame = encode_response(42, response)
    correlation_id, decoded = decode_response(frame[4:], req.__api_key__, req.__version__)
    assert correlation_id == 42
    assert decoded == response
    return response


def new_topic(name: str, partitions: int = 1, rf: int = 1, configs: dict | None = None,
              assignments: list[tuple[int, list[int]]] | None = None) -> dict[str, Any]:
    return {
        "name": name,
        "num_partitions": partitions,
        "replication_factor": rf,
        "assignments": [
            {"partition_index": i, "broker_ids": ids} for i, ids in (assignments or [])
        ],
        "configs": [{"name": k, "value": v} for k, v in (configs or {}).items()],
    }


def create(services: BrokerServices, version: int, *topics: dict, validate_only: bool = False):
    req = request(CREATE_TOPICS, version, {"topics": list(topics), "validate_only": validate_only})
    return call(services, req)


def only(results: Any) -> Any:
    assert len(results) == 1
    return results[0]


# -- CreateTopics -----------------------------------------------------------------------


@pytest.mark.parametrize("version", [2, 7])
def test_create_topics_uses_broker_defaults(tmp_path: Path, version: int) -> None:
    services = make_services(tmp_path, **{"num.partitions": "3"})
    result = only(create(services, version, new_topic("orders", -1, -1)).topics)
    assert result.error_code == ErrorCode.none
    assert result.error_message is None
    meta = services.store.topics["orders"]
    assert meta.partitions == 3
    assert len(services.replicas.topic_partitions("orders")) == 3
    if version >= 5:
        assert result.num_partitions == 3
        assert result.replication_factor == 1
    if version >= 7:
        assert result.topic_id == meta.uuid


def test_create_topics_v7_returns_effective_configs(tmp_path: Path) -> None:
    services = make_services(tmp_path, **{"log.segment.bytes": "1048576"})
    topic = new_topic("events", 2, 1, {"retention.ms": "1000", "cleanup.policy": "compact"})
    result = only(create(services, 7, topic).topics)
    assert result.error_code == ErrorCode.none
    configs = {c.name: c for c in result.configs}
    assert [c.name for c in result.configs] == sorted(TOPIC_KEYS)
    assert (configs["retention.ms"].value, configs["retention.ms"].config_source) == ("1000", 1)
    assert (configs["cleanup.policy"].value, configs["cleanup.policy"].config_source) == (
        "compact", 1)
    assert (configs["segment.bytes"].value, configs["segment.bytes"].config_source) == (
        "1048576", 4)
    assert (configs["max.message.bytes"].value, configs["max.message.bytes"].config_source) == (
        "1048588", 5)
    assert not any(c.read_only or c.is_sensitive for c in result.configs)
    assert services.store.topics["events"].configs == {
        "retention.ms": "1000", "cleanup.policy": "compact"}
    assert services.replicas.get("events", 1).log.config.retention_ms == 1000


def test_create_topics_manual_assignment(services: BrokerServices) -> None:
    topic = new_topic("manual", -1, -1, assignments=[(1, [NODE_ID]), (0, [NODE_ID])])
    result = only(create(services, 7, topic).topics)
    assert result.error_code == ErrorCode.none
    assert (result.num_partitions, result.replication_factor) == (2, 1)
    assert services.store.topics["manual"].partitions == 2


ERROR_CASES = [
    (new_topic("bad/name"), ErrorCode.invalid_topic_exception, "illegal"),
    (new_topic(""), ErrorCode.invalid_topic_exception, "can't be empty"),
    (new_topic("p0", 0), ErrorCode.invalid_partitions,
     "Number of partitions was set to an invalid non-positive value."),
    (new_topic("p-2", -2), ErrorCode.invalid_partitions, "non-positive"),
    (new_topic("rf0", 1, 0), ErrorCode.invalid_replication_factor,
     "Replication factor must be larger than 0, or -1 to use the default value."),
    (new_topic("rf3", 1, 3), ErrorCode.invalid_replication_factor,
     "Unable to replicate the partition 3 time(s): The target replication factor of 3 cannot "
     "be reached because only 1 broker(s) are registered."),
    (new_topic("cfg", configs={"no.such.key": "1"}), ErrorCode.invalid_config,
     "Unknown topic config name: no.such.key"),
    (new_topic("cfg2", configs={"segment.bytes": "abc"}), ErrorCode.invalid_config,
     "segment.bytes"),
    (new_topic("cfg3", configs={"segment.bytes": None}), ErrorCode.invalid_config,
     "Null value not supported for topic configs: segment.bytes"),
    (new_topic("a1", 1, -1, assignments=[(0, [NODE_ID])]), ErrorCode.invalid_request,
     "A manual partition assignment was specified, but numPartitions was not set to -1."),
    (new_topic("a2", -1, 1, assignments=[(0, [NODE_ID])]), ErrorCode.invalid_request,
     "replication factor was not set to -1."),
    (new_topic("a3", -1, -1, assignments=[(0, [NODE_ID, 7])]),
     ErrorCode.invalid_replica_assignment,
     "The manual partition assignment includes broker 7, but no such broker is registered."),
    (new_topic("a4", -1, -1, assignments=[(0, [NODE_ID, NODE_ID])]),
     ErrorCode.invalid_replica_assignment,
     f"The manual partition assignment includes the broker {NODE_ID} more than once."),
    (new_topic("a5", -1, -1, assignments=[(0, [])]), ErrorCode.invalid_replica_assignment,
     "empty replica list"),
    (new_topic("a6", -1, -1, assignments=[(0, [NODE_ID]), (2, [NODE_ID])]),
     ErrorCode.invalid_replica_assignment,
     "partitions should be a consecutive 0-based integer sequence"),
    (new_topic("a7", -1, -1, assignments=[(0, [NODE_ID]), (0, [NODE_ID])]),
     ErrorCode.invalid_replica_assignment,
     "Found multiple manual partition assignments for partition 0"),
]


@pytest.mark.parametrize("version", [2, 5, 7])
@pytest.mark.parametrize(("topic", "code", "message"), ERROR_CASES)
def test_create_topics_errors(
    services: BrokerServices, version: int, topic: dict, code: ErrorCode, message: str
) -> None:
    result = only(create(services, version, topic).topics)
    assert result.error_code == code
    assert message in result.error_message
    assert services.store.topics == {}
    if version >= 5:
        assert (result.num_partitions, result.replication_factor) == (-1, -1)
        assert result.configs == ()
    if version >= 7:
        assert result.topic_id is None


def test_create_topics_already_exists_and_collision(services: BrokerServices) -> None:
    create(services, 7, new_topic("a.b"))
    response = create(services, 7, new_topic("a.b"), new_topic("a_b"), new_topic("c"))
    by_name = {r.name: r for r in response.topics}
    assert by_name["a.b"].error_code == ErrorCode.topic_already_exists
    assert by_name["a.b"].error_message == "Topic 'a.b' already exists."
    assert by_name["a_b"].error_code == ErrorCode.invalid_topic_exception
    assert by_name["a_b"].error_message == "Topic 'a_b' collides with existing topic: a.b"
    assert by_name["c"].error_code == ErrorCode.none
    assert set(services.store.topics) == {"a.b", "c"}


@pytest.mark.parametrize("version", [2, 7])
def test_create_topics_duplicate_names(services: BrokerServices, version: int) -> None:
    response = create(services, version, new_topic("dup"), new_topic("ok"), new_topic("dup", 2))
    assert [(r.name, r.error_code) for r in response.topics] == [
        ("dup", ErrorCode.invalid_request), ("ok", ErrorCode.none)]
    assert response.topics[0].error_message == "Duplicate topic name."
    assert set(services.store.topics) == {"ok"}


@pytest.mark.parametrize("version", [2, 7])
def test_create_topics_validate_only(services: BrokerServices, version: int) -> None:
    response = create(services, version, new_topic("dry", 4), validate_only=True)
    result = only(response.topics)
    assert result.error_code == ErrorCode.none
    assert services.store.topics == {}
    assert services.replicas.partitions == {}
    if version >= 7:
        assert result.topic_id is None
        assert result.num_partitions == 4


def test_create_topics_refuses_too_many_partitions(services: BrokerServices) -> None:
    response = create(services, 7, new_topic("big", 6000), new_topic("bigger", 5000))
    assert {r.error_code for r in response.topics} == {ErrorCode.policy_violation}
    assert response.topics[0].error_message == (
        "Excessively large number of partitions per request.")
    assert services.store.topics == {}


# -- DeleteTopics -----------------------------------------------------------------------


def test_delete_topics_v1_by_name(services: BrokerServices) -> None:
    create(services, 7, new_topic("gone", 2), new_topic("kept"))
    services.metrics.topic("gone").bytes_in.inc(10)
    response = call(services, request(DELETE_TOPICS, 1, {
        "topic_names": ["gone", "missing"], "timeout": 30000}))
    codes = {r.name: r.error_code for r in response.responses}
    assert codes == {"gone": ErrorCode.none, "missing": ErrorCode.unknown_topic_or_partition}
    assert set(services.store.topics) == {"kept"}
    assert services.replicas.get("gone", 0) is None
    assert "gone" not in services.metrics._topics


def test_delete_topics_v6_by_name_and_id(services: BrokerServices) -> None:
    create(services, 7, new_topic("by-name"), new_topic("by-id"), new_topic("both"))
    by_id = services.store.topics["by-id"].uuid
    both = services.store.topics["both"].uuid
    stranger = uuid.uuid4()
    response = call(services, request(DELETE_TOPICS, 6, {"timeout": 30000, "topics": [
        {"name": "by-name", "topic_id": None},
        {"name": None, "topic_id": by_id},
        {"name": None, "topic_id": stranger},
        {"name": "missing", "topic_id": None},
        {"name": "both", "topic_id": both},
        {"name": None, "topic_id": None},
    ]}))
    results = {(r.name, r.topic_id): (r.error_code, r.error_message) for r in response.responses}
    by_name_id = next(r.topic_id for r in response.responses if r.name == "by-name")
    assert results == {
        ("by-name", by_name_id): (ErrorCode.none, None),
        ("by-id", by_id): (ErrorCode.none, None),
        (None, stranger): (ErrorCode.unknown_topic_id, "This server does not host this topic ID."),
        ("missing", None): (ErrorCode.unknown_topic_or_partition,
                            "This server does not host this topic-partition."),
        ("both", both): (ErrorCode.invalid_request,
                         "You may not specify both topic name and topic id."),
        (None, None): (ErrorCode.invalid_request, "Neither topic name nor id were specified."),
    }
    assert by_name_id is not None
    assert set(services.store.topics) == {"both"}


def test_delete_topics_v6_duplicates(services: BrokerServices) -> None:
    create(services, 7, new_topic("t1"), new_topic("t2"))
    t2 = services.store.topics["t2"].uuid
    response = call(services, request(DELETE_TOPICS, 6, {"timeout": 30000, "topics": [
        {"name": "t1", "topic_id": None},
        {"name": "t1", "topic_id": None},
        {"name": None, "topic_id": t2},
        {"name": "t2", "topic_id": None},
    ]}))
    messages = sorted((r.name, r.error_message) for r in response.responses)
    assert messages == [
        ("t1", "Duplicate topic name."),
        ("t2", "The provided topic name maps to an ID that was already supplied."),
    ]
    assert set(services.store.topics) == {"t1", "t2"}


@pytest.mark.parametrize(("version", "code"), [
    (1, ErrorCode.invalid_request),
    (3, ErrorCode.topic_deletion_disabled),
    (5, ErrorCode.topic_deletion_disabled),
    (6, ErrorCode.topic_deletion_disabled),
])
def test_delete_topics_disabled(tmp_path: Path, version: int, code: ErrorCode) -> None:
    services = make_services(tmp_path, **{"delete.topic.enable": "false"})
    create(services, 7, new_topic("stays"))
    if version >= 6:
        body = {"timeout": 1000, "topics": [{"name": "stays", "topic_id": None}]}
    else:
        body = {"timeout": 1000, "topic_names": ["stays"]}
    result = only(call(services, request(DELETE_TOPICS, version, body)).responses)
    assert result.error_code == code
    if version >= 5:
        assert result.error_message == "Topic deletion is disabled."
    assert "stays" in services.store.topics


# -- CreatePartitions -------------------------------------------------------------------


def grow(services: BrokerServices, version: int, *topics: dict, validate_only: bool = False):
    return call(services, request(CREATE_PARTITIONS, version, {
        "topics": list(topics), "timeout": 30000, "validate_only": validate_only}))


@pytest.mark.parametrize("version", [0, 3])
def test_create_partitions(services: BrokerServices, version: int) -> None:
    create(services, 7, new_topic("t", 1), new_topic("u", 3))
    response = grow(
        services, version,
        {"name": "t", "count": 3, "assignments": None},
        {"name": "u", "count": 2, "assignments": None},
        {"name": "u2", "count": 5, "assignments": None},
    )
    results = {r.name: (r.error_code, r.error_message) for r in response.results}
    assert results == {
        "t": (ErrorCode.none, None),
        "u": (ErrorCode.invalid_partitions,
              "The topic u currently has 3 partition(s); 2 would not be an increase."),
        "u2": (ErrorCode.unknown_topic_or_partition,
               "This server does not host this topic-partition."),
    }
    assert services.store.topics["t"].partitions == 3
    assert len(services.replicas.topic_partitions("t")) == 3


def test_create_partitions_checks(services: BrokerServices) -> None:
    create(services, 7, new_topic("t", 2))
    response = grow(
        services, 3,
        {"name": "t", "count": 2, "assignments": None},
    )
    assert only(response.results).error_message == "Topic already has 2 partition(s)."
    response = grow(services, 3, {"name": "t", "count": 4, "assignments": [
        {"broker_ids": [NODE_ID]}]})
    assert only(response.results).error_code == ErrorCode.invalid_replica_assignment
    assert only(response.results).error_message == (
        "Attempted to add 2 additional partition(s), but only 1 assignment(s) were specified.")
    response = grow(services, 3, {"name": "t", "count": 3, "assignments": [
        {"broker_ids": [NODE_ID + 1]}]})
    assert only(response.results).error_code == ErrorCode.invalid_replica_assignment
    response = grow(services, 3, {"name": "t", "count": 3, "assignments": [
        {"broker_ids": [NODE_ID]}]})
    assert only(response.results).error_code == ErrorCode.none
    assert services.store.topics["t"].partitions == 3


def test_create_partitions_validate_only_and_duplicates(services: BrokerServices) -> None:
    create(services, 7, new_topic("t", 1), new_topic("v", 1))
    response = grow(
        services, 3,
        {"name": "t", "count": 5, "assignments": None},
        {"name": "v", "count": 2, "assignments": None},
        {"name": "v", "count": 3, "assignments": None},
        validate_only=True,
    )
    results = {r.name: (r.error_code, r.error_message) for r in response.results}
    assert results == {
        "t": (ErrorCode.none, None),
        "v": (ErrorCode.invalid_request, "Duplicate topic name."),
    }
    assert services.store.topics["t"].partitions == 1
    assert len(services.replicas.topic_partitions("t")) == 1


def test_create_partitions_refuses_too_many(services: BrokerServices) -> None:
    create(services, 7, new_topic("t", 1))
    response = grow(services, 3, {"name": "t", "count": 20000, "assignments": None})
    assert only(response.results).error_code == ErrorCode.policy_violation
    assert services.store.topics["t"].partitions == 1


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
