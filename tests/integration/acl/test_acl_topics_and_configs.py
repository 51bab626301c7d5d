"""ACLs on the topic admin APIs against a real broker, as in test_acl_groups.py: topics
and partitions created and deleted, configs of topics and brokers, delete records."""

from __future__ import annotations

import uuid
from typing import Any

from confluent_kafka import KafkaError, Producer, TopicCollection, TopicPartition
from confluent_kafka.admin import (
    AclOperation,
    AclPermissionType,
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from kafkube.harness.wire import WireClient
from tests.integration.acl.sasl_admin import (
    BROKER_CONFIGS,
    CLUSTER_DENIED,
    TIMEOUT,
    TOPIC_CONFIGS,
    TOPIC_DENIED,
    UNKNOWN_TOPIC,
    UNKNOWN_TOPIC_ID,
    add_acl,
    as_admin,
    ask,
    create_led_topics,
    delete_topics,
    describe_configs,
    failure_code,
    only,
    wire_as,
)

# -- topics and partitions ----------------------------------------------------------------------


def _create(client: WireClient, *names: str) -> dict[str, Any]:
    response = ask(client, 19, 7, timeout=TIMEOUT, validate_only=False, topics=[
        {"name": n, "num_partitions": 2, "replication_factor": 1, "assignments": [],
         "configs": [{"name": "retention.ms", "value": "3600000"}]} for n in names])
    return {t.name: t for t in response.topics}




def _topic_ids(admin: AdminClient, *names: str) -> dict[str, uuid.UUID]:
    described = admin.describe_topics(TopicCollection(list(names)))
    ids = {}
    for name, future in described.items():
        tid = future.result(10).topic_id
        high = tid.get_most_significant_bits() & (2**64 - 1)
        low = tid.get_least_significant_bits() & (2**64 - 1)
        ids[name] = uuid.UUID(int=(high << 64) | low)
    return ids


def test_create_and_delete_topics_and_partitions(cluster, admin, alice):
    create_led_topics(admin, "orders")
    # No CREATE: refused whether the topic exists or not (not TOPIC_ALREADY_EXISTS).
    futures = alice.create_topics([NewTopic("alice-1", 1, 1), NewTopic("orders", 1, 1)])
    assert failure_code(futures["alice-1"]) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert failure_code(futures["orders"]) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    with wire_as(cluster) as c:
        refused = _create(c, "alice-1")["alice-1"]
        assert (refused.error_code, refused.error_message) == (
            TOPIC_DENIED, "Authorization failed.")

        # PREFIXED CREATE on alice-: created; without DESCRIBE_CONFIGS its configs are
        # withheld (topic_config_error_code), the topic is created all the same.
        add_acl(admin, ResourceType.TOPIC, "alice-", AclOperation.CREATE,
                ResourcePatternType.PREFIXED)
        created = _create(c, "alice-1")["alice-1"]
        assert (created.error_code, created.topic_config_error_code) == (0, TOPIC_DENIED)
        assert (created.num_partitions, created.replication_factor, created.configs) == (
            -1, -1, ())
        assert created.topic_id is not None and created.topic_id.int != 0
        add_acl(admin, ResourceType.TOPIC, "alice-", AclOperation.ALTER_CONFIGS,
                ResourcePatternType.PREFIXED)  # implies DESCRIBE_CONFIGS
        shown = _create(c, "alice-2")["alice-2"]
        assert (shown.error_code, shown.topic_config_error_code, shown.num_partitions) == (
            0, 0, 2)
        assert {e.name: e.value for e in shown.configs}["retention.ms"] == "3600000"
        # A DENY on one name wins over the prefixed ALLOW.
        add_acl(admin, ResourceType.TOPIC, "alice-no", AclOperation.CREATE,
                permission=AclPermissionType.DENY)
        assert _create(c, "alice-no")["alice-no"].error_code == TOPIC_DENIED
        assert "alice-no" not in admin.list_topics(timeout=10).topics

        # CreatePartitions needs ALTER, checked before existence.
        grown = ask(c, 37, 3, timeout=TIMEOUT, validate_only=False, topics=[
            {"name": n, "count": 3, "assignments": None} for n in ("alice-1", "ghost")])
        assert {r.name: r.error_code for r in grown.results} == {
            "alice-1": TOPIC_DENIED, "ghost": TOPIC_DENIED}
    assert failure_code(alice.create_partitions([NewPartitions("alice-1", 3)])["alice-1"]) == \
        KafkaError.TOPIC_AUTHORIZATION_FAILED
    add_acl(admin, ResourceType.TOPIC, "alice-1", AclOperation.ALTER)
    assert alice.create_partitions([NewPartitions("alice-1", 3)])["alice-1"].result(10) is None
    assert len(admin.list_topics("alice-1", timeout=10).topics["alice-1"].partitions) == 3

    ids = _topic_ids(admin, "orders", "alice-1")
    with wire_as(cluster) as c:
        # By name: a topic alice may not describe is refused whether it exists or not; one
        # she may describe but not delete is refused; a missing one she may describe is
        # unknown. alice-1 is describable (ALTER implies DESCRIBE), not deletable.
        by_name = {r.name: r.error_code for r in delete_topics(c, "orders", "ghost", "alice-1",
                                                               "alice-missing")}
        assert by_name == {"orders": TOPIC_DENIED, "ghost": TOPIC_DENIED,
                           "alice-1": TOPIC_DENIED, "alice-missing": TOPIC_DENIED}
        add_acl(admin, ResourceType.TOPIC, "alice-", AclOperation.DESCRIBE,
                ResourcePatternType.PREFIXED)
        assert only(delete_topics(c, "alice-missing")).error_code == UNKNOWN_TOPIC
        # By id: unknown ids are unknown; a topic she may not describe keeps its name hidden.
        hidden = only(delete_topics(c, ids["orders"]))
        assert (hidden.error_code, hidden.name, hidden.topic_id) == (
            TOPIC_DENIED, None, ids["orders"])
        named = only(delete_topics(c, ids["alice-1"]))
        assert (named.error_code, named.name) == (TOPIC_DENIED, "alice-1")
        unknown = uuid.uuid4()
        assert only(delete_topics(c, unknown)).error_code == UNKNOWN_TOPIC_ID
    assert failure_code(alice.delete_topics(["alice-2"])["alice-2"]) == \
        KafkaError.TOPIC_AUTHORIZATION_FAILED
    add_acl(admin, ResourceType.TOPIC, "alice-", AclOperation.DELETE, ResourcePatternType.PREFIXED)
    assert alice.delete_topics(["alice-2"])["alice-2"].result(10) is None
    assert "alice-2" not in admin.list_topics(timeout=10).topics
    assert "orders" in admin.list_topics(timeout=10).topics
    # CREATE on the cluster allows any name.
    add_acl(admin, ResourceType.BROKER, "kafka-cluster", AclOperation.CREATE)
    assert alice.create_topics([NewTopic("anything", 1, 1)])["anything"].result(10) is None


# -- configs ------------------------------------------------------------------------------------




def test_topic_and_broker_configs(cluster, admin, alice):
    create_led_topics(admin, "orders", "payments")
    topic = ConfigResource(ConfigResource.Type.TOPIC, "orders")
    broker = ConfigResource(ConfigResource.Type.BROKER, "0")
    futures = alice.describe_configs([topic, broker])
    assert failure_code(futures[topic]) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert failure_code(futures[broker]) == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    with wire_as(cluster) as c:
        results = describe_configs(c, (TOPIC_CONFIGS, "orders"), (TOPIC_CONFIGS, "nowhere"),
                                   (BROKER_CONFIGS, "0"))
        assert {n: (r.error_code, r.error_message, r.configs) for n, r in results.items()} == {
            "orders": (TOPIC_DENIED, "Topic authorization failed.", ()),
            "nowhere": (TOPIC_DENIED, "Topic authorization failed.", ()),
            "0": (CLUSTER_DENIED, "Cluster authorization failed.", ())}
        # Altering: per resource, legacy and incremental alike.
        legacy = ask(c, 33, 2, validate_only=False, resources=[
            {"resource_type": TOPIC_CONFIGS, "resource_name": "orders",
             "configs": [{"name": "retention.ms", "value": "1000"}]},
            {"resource_type": BROKER_CONFIGS, "resource_name": "",
             "configs": [{"name": "log.retention.ms", "value": "1000"}]}])
        assert {r.resource_name: r.error_code for r in legacy.responses} == {
            "orders": TOPIC_DENIED, "": CLUSTER_DENIED}

    # DESCRIBE_CONFIGS on orders (ALTER_CONFIGS implies it), and on the cluster.
    add_acl(admin, ResourceType.TOPIC, "orders", AclOperation.ALTER_CONFIGS)
    add_acl(admin, ResourceType.BROKER, "kafka-cluster", AclOperation.DESCRIBE_CONFIGS)
    futures = alice.describe_configs([topic, broker])
    assert futures[topic].result(10)["cleanup.policy"].value == "delete"
    assert "log.retention.ms" in futures[broker].result(10)
    ops = [ConfigEntry("retention.ms", "60000", incremental_operation=AlterConfigOpType.SET)]
    altered = alice.incremental_alter_configs([ConfigResource(
        ConfigResource.Type.TOPIC, "orders", incremental_configs=ops)])
    assert only(altered.values()).result(10) is None
    assert admin.describe_configs([topic])[topic].result(10)["retention.ms"].value == "60000"
    with wire_as(cluster) as c:
        # payments is not hers; the broker's configs are only describable.
        incremental = ask(c, 44, 1, validate_only=False, resources=[
            {"resource_type": TOPIC_CONFIGS, "resource_name": "payments",
             "configs": [{"name": "retention.ms", "config_operation": 0, "value": "1"}]},
            {"resource_type": BROKER_CONFIGS, "resource_name": "0",
             "configs": [{"name": "log.retention.ms", "config_operation": 0,
                          "value": "1000"}]}])
        assert {r.resource_name: r.error_code for r in incremental.responses} == {
            "payments": TOPIC_DENIED, "0": CLUSTER_DENIED}
        assert describe_configs(c, (TOPIC_CONFIGS, "payments"))["payments"].error_code == \
            TOPIC_DENIED
        # A DENY DESCRIBE_CONFIGS on the topic wins over the ALTER_CONFIGS allow.
        add_acl(admin, ResourceType.TOPIC, "orders", AclOperation.DESCRIBE_CONFIGS,
                permission=AclPermissionType.DENY)
        assert describe_configs(c, (TOPIC_CONFIGS, "orders"))["orders"].error_code == \
            TOPIC_DENIED


# -- delete records -----------------------------------------------------------------------------


def test_delete_records(cluster, admin, alice):
    create_led_topics(admin, "orders", "payments")
    with Producer(as_admin(cluster)) as producer:
        for i in range(5):
            producer.produce("orders", f"o{i}".encode(), partition=0)
            producer.produce("payments", f"p{i}".encode(), partition=0)
        assert producer.flush(10) == 0
    with wire_as(cluster) as c:  # refused whether the topic exists or not
        response = ask(c, 21, 2, timeout=TIMEOUT, topics=[
            {"name": n, "partitions": [{"partition_index": 0, "offset": 2}]}
            for n in ("orders", "ordinary")])
        assert {t.name: (only(t.partitions).error_code, only(t.partitions).low_watermark)
                for t in response.topics} == {
            "orders": (TOPIC_DENIED, -1), "ordinary": (TOPIC_DENIED, -1)}
    # librdkafka looks the leader up first, so DESCRIBE, to be refused by DeleteRecords.
    add_acl(admin, ResourceType.TOPIC, "orders", AclOperation.DESCRIBE)
    futures = alice.delete_records([TopicPartition("orders", 0, 2)])
    assert failure_code(only(futures.values())) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    add_acl(admin, ResourceType.TOPIC, "ord", AclOperation.DELETE, ResourcePatternType.PREFIXED)
    futures = alice.delete_records([TopicPartition("orders", 0, 2)])
    assert only(futures.values()).result(10).low_watermark == 2
    with wire_as(cluster) as c:
        response = ask(c, 21, 2, timeout=TIMEOUT, topics=[
            {"name": n, "partitions": [{"partition_index": 0, "offset": 3}]}
            for n in ("orders", "payments", "ordinary")])
        assert {t.name: (only(t.partitions).error_code, only(t.partitions).low_watermark)
                for t in response.topics} == {
            "orders": (0, 3), "payments": (TOPIC_DENIED, -1), "ordinary": (UNKNOWN_TOPIC, -1)}
        add_acl(admin, ResourceType.TOPIC, "orders", AclOperation.DELETE,
                permission=AclPermissionType.DENY)
        again = ask(c, 21, 2, timeout=TIMEOUT, topics=[
            {"name": "orders", "partitions": [{"partition_index": 0, "offset": 4}]}])
        assert only(only(again.topics).partitions).error_code == TOPIC_DENIED
