"""ACLs on the data plane, with real clients: produce, fetch, metadata, offsets and
transactions as a principal without and then with the ACL each needs, a prefixed ACL, and
a DENY that wins over an ALLOW; denials logged in Kafka's format. alice is a SASL/PLAIN
user; admin and the PLAINTEXT test client are super users."""

from __future__ import annotations

import time
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    ResourcePatternType,
    ResourceType,
)
from kio.schema.list_offsets.v7.request import (
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsTopic,
)
from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest

from kafkube.harness.metadata import Cluster
from kafkube.harness.waiting import wait_until
from kafkube.harness.wire import WireClient
from tests.support.security_setup import ALICE, ALICE_PASSWORD, make_pki, secure_listeners

AUTHORIZER = {"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
              "super.users": "User:admin;User:ANONYMOUS", "group.initial.rebalance.delay.ms": "0"}


@pytest.fixture
def cluster(cluster_factory, tmp_path) -> Cluster:
    cluster = cluster_factory(1, {**secure_listeners(make_pki(tmp_path / "pki")), **AUTHORIZER})
    for topic in ("sec-a", "sec-b", "other"):
        cluster.create_topic(topic, 1, 1)
    # alice's consumers use groups named alice-*: librdkafka looks their coordinator up
    # even when it only assigns partitions (DESCRIBE on the group, implied by READ).
    _allow(cluster, ResourceType.GROUP, "alice-", AclOperation.READ,
           ResourcePatternType.PREFIXED)
    return cluster


def _alice(cluster: Cluster, **extra: Any) -> dict[str, Any]:
    return {"bootstrap.servers": cluster.brokers[0].bootstrap_of("SASL_PLAINTEXT"),
            "security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": "PLAIN",
            "sasl.username": ALICE, "sasl.password": ALICE_PASSWORD, **extra}


def _allow(cluster: Cluster, resource: ResourceType, name: str, operation: AclOperation,
           pattern: ResourcePatternType = ResourcePatternType.LITERAL,
           permission: AclPermissionType = AclPermissionType.ALLOW) -> None:
    binding = AclBinding(resource, name, pattern, f"User:{ALICE}", "*", operation, permission)
    for future in cluster.admin.create_acls([binding]).values():
        future.result(10)


def _produce(cluster: Cluster, topic: str) -> KafkaError | None:
    """The delivery error of one record as alice (None: delivered)."""
    outcome: list[KafkaError | None] = []
    producer = Producer(_alice(cluster, **{"message.timeout.ms": 10000}))
    producer.produce(topic, b"from alice", partition=0,
                     on_delivery=lambda err, _msg: outcome.append(err))
    producer.flush(15)
    assert outcome, "no delivery report"
    return outcome[0]


def _fetch(cluster: Cluster, topic: str) -> KafkaError | bytes:
    # Subscribed (librdkafka reports a topic's authorization error to subscribers), in a
    # new group each time so each read starts at the beginning.
    consumer = Consumer(_alice(cluster, **{"group.id": f"alice-{time.monotonic_ns()}",
                                            "enable.auto.commit": False,
                                            "auto.offset.reset": "earliest"}))
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None:
                return msg.error() if msg.error() is not None else msg.value()
        raise AssertionError(f"nothing read from {topic}, not even an error")
    finally:
        consumer.close()


def _visible(cluster: Cluster) -> set[str]:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient(_alice(cluster))
    return {t for t in admin.list_topics(timeout=10).topics if not t.startswith("__")}


def test_produce_fetch_and_metadata_follow_the_acls(cluster):
    broker = cluster.brokers[0]
    # Nothing granted: alice sees no topic, and may neither write nor read.
    assert _visible(cluster) == set()
    assert _produce(cluster, "sec-a").code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert _fetch(cluster, "sec-a").code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    # librdkafka asked Metadata first, and was refused before it could send Produce.
    wait_until(lambda: any("Principal = User:alice is Denied operation = DESCRIBE from host = "
                           "127.0.0.1 on resource = Topic:LITERAL:sec-a for request = Metadata"
                           in line for line in broker.output), 10, "the denial logged")
    # A prefixed WRITE allows both sec- topics, and implies DESCRIBE: they become visible.
    _allow(cluster, ResourceType.TOPIC, "sec-", AclOperation.WRITE, ResourcePatternType.PREFIXED)
    assert wait_until(lambda: _visible(cluster) == {"sec-a", "sec-b"}, 10, "sec- visible")
    assert _produce(cluster, "sec-a") is None
    assert _produce(cluster, "sec-b") is None
    assert _produce(cluster, "other").code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    # WRITE does not imply READ.
    assert _fetch(cluster, "sec-a").code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    _allow(cluster, ResourceType.TOPIC, "sec-", AclOperation.READ, ResourcePatternType.PREFIXED)
    assert _fetch(cluster, "sec-a") == b"from alice"
    # A DENY wins over the prefixed ALLOW, for that topic only.
    _allow(cluster, ResourceType.TOPIC, "sec-b", AclOperation.READ,
           permission=AclPermissionType.DENY)
    assert _fetch(cluster, "sec-b").code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert _fetch(cluster, "sec-a") == b"from alice"
    # DENY READ does not deny DESCRIBE: sec-b stays visible.
    assert _visible(cluster) == {"sec-a", "sec-b"}


def _alice_on_the_wire(cluster: Cluster) -> WireClient:
    """A raw connection authenticated as alice (SASL/PLAIN), for exact error codes."""
    client = WireClient.connect(cluster.brokers[0].bootstrap_of("SASL_PLAINTEXT"))
    assert client.request(SaslHandshakeRequest(mechanism="PLAIN")).error_code == 0
    answer = client.request(SaslAuthenticateRequest(
        auth_bytes=f"\x00{ALICE}\x00{ALICE_PASSWORD}".encode()))
    assert answer.error_code == 0
    return client


def test_list_offsets_needs_describe(cluster):
    request = ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=(ListOffsetsTopic(
        name="sec-a", partitions=(ListOffsetsPartition(partition_index=0, timestamp=-1),)),))
    with _alice_on_the_wire(cluster) as alice:
        denied = alice.request(request).topics[0].partitions[0]
        assert denied.error_code == KafkaError.TOPIC_AUTHORIZATION_FAILED
        _allow(cluster, ResourceType.TOPIC, "sec-a", AclOperation.DESCRIBE)
        allowed = alice.request(request).topics[0].partitions[0]
        assert (allowed.error_code, allowed.offset) == (0, 0)


def test_transactions_and_idempotence_need_their_acls(cluster):
    # An idempotent producer needs IDEMPOTENT_WRITE on the cluster or WRITE on some topic.
    errors: list[KafkaError] = []
    idempotent = Producer(_alice(cluster, **{"enable.idempotence": True,
                                             "error_cb": errors.append}))
    idempotent.produce("sec-a", b"x", partition=0)

    def fatal() -> KafkaError | None:
        try:  # librdkafka raises the fatal error from poll, or hands it to error_cb
            idempotent.poll(0.2)
        except KafkaException as e:
            errors.append(e.args[0])
        return next((e for e in errors if e.code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED),
                    None)

    wait_until(fatal, 20, "CLUSTER_AUTHORIZATION_FAILED for the idempotent producer")
    # A transactional one needs WRITE on its transactional id.
    producer = Producer(_alice(cluster, **{"transactional.id": "alice-txn"}))
    with pytest.raises(KafkaException) as refused:
        producer.init_transactions(15)
    assert refused.value.args[0].code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    _allow(cluster, ResourceType.TRANSACTIONAL_ID, "alice-", AclOperation.WRITE,
           ResourcePatternType.PREFIXED)
    _allow(cluster, ResourceType.TOPIC, "sec-a", AclOperation.WRITE)
    producer = Producer(_alice(cluster, **{"transactional.id": "alice-txn"}))
    producer.init_transactions(15)
    producer.begin_transaction()
    producer.produce("sec-a", b"in a transaction", partition=0)
    producer.commit_transaction(15)
    # A topic without WRITE cannot join the transaction.
    producer.begin_transaction()
    reports: list[KafkaError | None] = []
    producer.produce("sec-b", b"refused", partition=0,
                     on_delivery=lambda err, _msg: reports.append(err))
    with pytest.raises(KafkaException):
        producer.commit_transaction(15)
    assert [e.code() for e in reports] == [KafkaError.TOPIC_AUTHORIZATION_FAILED]
    # What was committed is there (read by a super user: alice may only write).
    reader = Consumer({"bootstrap.servers": cluster.brokers[0].bootstrap, "group.id": "admin",
                       "isolation.level": "read_committed", "enable.auto.commit": False})
    try:
        reader.assign([TopicPartition("sec-a", 0, 0)])
        msg = wait_until(lambda: reader.poll(0.5), 15, "the committed record")
        assert (msg.error(), msg.value()) == (None, b"in a transaction")
    finally:
        reader.close()
