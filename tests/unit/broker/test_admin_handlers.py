"""CreateTopics, DeleteTopics and CreatePartitions against a real replica manager on a
temp dir (tests/support/handlers.py).

Requests are kio objects of the lowest and highest versions we serve; every response is also
encoded and decoded again, to prove the handler built a message of the right version.
"""

from __future__ import annotations

import uuid
from datetime import timedelta
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode

from broker.cluster.backend import ClusterImageTooLarge
from broker.cluster.image import MAX_TOMBSTONES
from broker.controller.topic_changes import NewTopic
from broker.handlers import REGISTRY, admin, offset_for_leader_epoch  # noqa: F401 (registers)
from broker.handlers.context import BrokerServices
from kafkube_contract.broker_keys import TOPIC_KEYS
from kafkube_contract.image import TopicMetadata
from tests.support.handlers import (
    CREATE_PARTITIONS,
    DELETE_TOPICS,
    NODE_ID,
    call,
    create,
    make_services,
    new_topic,
    only,
    request,
)

TIMEOUT = timedelta(seconds=30)


@pytest.fixture
def services(tmp_path: Path) -> BrokerServices:
    return make_services(tmp_path)


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


def test_one_request_is_one_image_write(services: BrokerServices) -> None:
    # Each topic was a write of the whole image: 1,000 topics held the loop 8 s.
    create(services, 7, new_topic("old"))
    before = services.store.image.version
    topics = [new_topic(f"t{i}", 2) for i in range(200)]
    response = create(services, 7, new_topic("old"), *topics, new_topic("bad", 0))
    assert services.store.image.version == before + 1
    codes = {r.name: r.error_code for r in response.topics}
    assert codes.pop("old") == ErrorCode.topic_already_exists
    assert codes.pop("bad") == ErrorCode.invalid_partitions
    assert set(codes.values()) == {ErrorCode.none}
    stored = services.store.topics
    assert all(r.topic_id == stored[r.name].uuid for r in response.topics[1:-1])
    assert sum(stored[f"t{i}"].partitions for i in range(200)) == 400


def test_topics_that_outgrow_the_store_are_refused_alone(
        services: BrokerServices, monkeypatch: pytest.MonkeyPatch) -> None:
    # The Kubernetes backend refuses an image over a ConfigMap's size for the whole write:
    # the request falls back to one write per topic, so the topics that fit are made.
    create_topics = services.replicas.create_topics

    async def limited(batch: list[NewTopic]) -> list[TopicMetadata | Exception]:
        if any(new.name.startswith("huge") for new in batch):
            raise ClusterImageTooLarge("the cluster image would be 1.6 MB")
        return await create_topics(batch)

    monkeypatch.setattr(services.replicas, "create_topics", limited)
    response = create(services, 7, new_topic("a"), new_topic("huge"), new_topic("b"))
    assert [(r.name, r.error_code) for r in response.topics] == [
        ("a", ErrorCode.none), ("huge", ErrorCode.policy_violation), ("b", ErrorCode.none)]
    assert response.topics[1].error_message == "the cluster image would be 1.6 MB"
    assert set(services.store.topics) == {"a", "b"}


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
        "topic_names": ["gone", "missing"], "timeout": TIMEOUT}))
    codes = {r.name: r.error_code for r in response.responses}
    assert codes == {"gone": ErrorCode.none, "missing": ErrorCode.unknown_topic_or_partition}
    assert set(services.store.topics) == {"kept"}
    assert services.replicas.get("gone", 0) is None
    assert services.metrics.registry.get_sample_value(
        "kafka_server_bytes_in_total", {"topic": "gone"}) is None


def test_one_deletion_request_is_one_image_write(services: BrokerServices) -> None:
    create(services, 7, *(new_topic(f"t{i}") for i in range(100)), new_topic("kept"))
    before = services.store.image.version
    response = call(services, request(DELETE_TOPICS, 1, {
        "topic_names": [f"t{i}" for i in range(100)], "timeout": TIMEOUT}))
    assert {r.error_code for r in response.responses} == {ErrorCode.none}
    assert services.store.image.version == before + 1
    assert set(services.store.topics) == {"kept"}
    assert len(services.store.image.deleted_topics) == 100


def test_every_topic_of_a_large_deletion_is_on_record(services: BrokerServices) -> None:
    # Tombstones are kept to MAX_TOMBSTONES, but never fewer than one write's: a broker
    # deletes a replica's files only for a topic deleted on record.
    count = MAX_TOMBSTONES + 50
    create(services, 7, *(new_topic(f"t{i}") for i in range(count)))
    ids = {services.store.topics[f"t{i}"].topic_id for i in range(count)}
    response = call(services, request(DELETE_TOPICS, 1, {
        "topic_names": [f"t{i}" for i in range(count)], "timeout": TIMEOUT}))
    assert {r.error_code for r in response.responses} == {ErrorCode.none}
    assert set(services.store.image.deleted_topics) == ids
    assert services.replicas.partitions == {}


def test_delete_topics_v6_by_name_and_id(services: BrokerServices) -> None:
    create(services, 7, new_topic("by-name"), new_topic("by-id"), new_topic("both"))
    by_id = services.store.topics["by-id"].uuid
    both = services.store.topics["both"].uuid
    stranger = uuid.uuid4()
    response = call(services, request(DELETE_TOPICS, 6, {"timeout": TIMEOUT, "topics": [
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
    response = call(services, request(DELETE_TOPICS, 6, {"timeout": TIMEOUT, "topics": [
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
        body = {"timeout": timedelta(seconds=1), "topics": [{"name": "stays", "topic_id": None}]}
    else:
        body = {"timeout": timedelta(seconds=1), "topic_names": ["stays"]}
    result = only(call(services, request(DELETE_TOPICS, version, body)).responses)
    assert result.error_code == code
    if version >= 5:
        assert result.error_message == "Topic deletion is disabled."
    assert "stays" in services.store.topics


# -- CreatePartitions -------------------------------------------------------------------


def grow(services: BrokerServices, version: int, *topics: dict, validate_only: bool = False):
    return call(services, request(CREATE_PARTITIONS, version, {
        "topics": list(topics), "timeout": TIMEOUT, "validate_only": validate_only}))


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
