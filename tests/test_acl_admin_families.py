"""ACLs on the group and admin APIs against a real broker: for each family (group
membership and offsets; describe, list and delete groups; topics and partitions created
and deleted; configs of topics and brokers; delete records; leader elections and
reassignments; log dirs; SCRAM credentials and client quotas) alice, without the ACL
Kafka asks for, gets Kafka's authorization error in Kafka's place in the response and sees
nothing she may not describe, and with it gets the answer; a PREFIXED allow and a DENY
that wins over an allow on the way. admin is a super user; both log in with SASL/PLAIN on
the SASL_PLAINTEXT listener. confluent-kafka does the calls it can; the wire client the
ones that need exact codes. Last, without an authorizer nothing is refused."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import pytest
from confluent_kafka import (
    Consumer,
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    Producer,
    TopicCollection,
    TopicPartition,
)
from confluent_kafka.admin import (
    AclBinding,
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
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from kio.index import load_request_schema
from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest

from broker.protocol.messages import build
from kafkube.harness.metadata import Cluster
from kafkube.harness.waiting import wait_until
from kafkube.harness.wire import WireClient
from tests.support.security_setup import (
    ADMIN,
    ADMIN_PASSWORD,
    ALICE,
    ALICE_PASSWORD,
    make_pki,
    secure_listeners,
)

AUTHORIZER = {"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
              "super.users": f"User:{ADMIN}"}
TOPIC_DENIED, GROUP_DENIED, CLUSTER_DENIED, TXN_DENIED = 29, 30, 31, 53
UNKNOWN_TOPIC, UNKNOWN_TOPIC_ID, MEMBER_ID_REQUIRED = 3, 100, 79
OMITTED = -(2**31)
# AclOperation codes, for authorized-operations bit fields.
READ, DELETE, ALTER, DESCRIBE, DESCRIBE_CONFIGS, ALTER_CONFIGS = 3, 6, 7, 8, 10, 11
# ConfigResource types on the wire.
TOPIC_CONFIGS, BROKER_CONFIGS = 2, 4
TIMEOUT = timedelta(seconds=10)


# -- set-up ----------------------------------------------------------------------------------


def _sasl(cluster: Cluster, user: str, password: str, **extra: Any) -> dict[str, Any]:
    return {"bootstrap.servers": cluster.brokers[0].bootstrap_of("SASL_PLAINTEXT"),
            "security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": "PLAIN",
            "sasl.username": user, "sasl.password": password, **extra}


def _as_admin(cluster: Cluster, **extra: Any) -> dict[str, Any]:
    return _sasl(cluster, ADMIN, ADMIN_PASSWORD, **extra)


def _as_alice(cluster: Cluster, **extra: Any) -> dict[str, Any]:
    return _sasl(cluster, ALICE, ALICE_PASSWORD, **extra)


def _create_topics(admin: AdminClient, *names: str, partitions: int = 1) -> None:
    """Created as admin, and led (PLAINTEXT's ANONYMOUS may not see them: not
    Cluster.create_topic)."""
    futures = admin.create_topics([NewTopic(n, partitions, 1) for n in names])
    for future in futures.values():
        future.result(15)

    def led() -> bool:
        topics = admin.list_topics(timeout=5).topics
        return all(n in topics and topics[n].partitions
                   and all(p.leader >= 0 for p in topics[n].partitions.values())
                   for n in names)
    wait_until(led, 15, f"{names} led")


def _acl(admin: AdminClient, resource: ResourceType, name: str, operation: AclOperation,
         pattern: ResourcePatternType = ResourcePatternType.LITERAL,
         permission: AclPermissionType = AclPermissionType.ALLOW) -> None:
    binding = AclBinding(resource, name, pattern, f"User:{ALICE}", "*", operation, permission)
    for future in admin.create_acls([binding]).values():
        future.result(10)


@pytest.fixture
def cluster(cluster_factory, tmp_path) -> Cluster:
    return cluster_factory(1, {**secure_listeners(make_pki(tmp_path / "pki")), **AUTHORIZER})


@pytest.fixture
def admin(cluster: Cluster) -> AdminClient:
    return AdminClient(_as_admin(cluster))


@pytest.fixture
def alice(cluster: Cluster) -> AdminClient:
    return AdminClient(_as_alice(cluster))


@contextmanager
def _wire(cluster: Cluster, user: str = ALICE, password: str = ALICE_PASSWORD
          ) -> Iterator[WireClient]:
    """A wire connection logged in with SASL/PLAIN."""
    with WireClient.connect(cluster.brokers[0].bootstrap_of("SASL_PLAINTEXT")) as client:
        assert client.request(SaslHandshakeRequest(mechanism="PLAIN")).error_code == 0
        token = f"\x00{user}\x00{password}".encode()
        assert client.request(SaslAuthenticateRequest(auth_bytes=token)).error_code == 0
        yield client


def ask(client: WireClient, api_key: int, version: int, **values: Any) -> Any:
    """One request of ``version`` built from keyword values, and its decoded response."""
    return client.request(build(load_request_schema(api_key, version), values))


def _failure(future: Any) -> int:
    """The Kafka error code a confluent-kafka future fails with."""
    with pytest.raises(KafkaException) as failed:
        future.result(15)
    return failed.value.args[0].code()


def only(items: Any) -> Any:
    (item,) = items
    return item


def _ops(bits: int) -> set[int]:
    return {code for code in range(32) if bits & (1 << code)}


# -- group membership and offsets --------------------------------------------------------------


def _join(client: WireClient, group: str) -> Any:
    return ask(client, 11, 9, group_id=group, session_timeout=TIMEOUT,
               rebalance_timeout=TIMEOUT, member_id="", group_instance_id=None,
               protocol_type="consumer", protocols=[{"name": "range", "metadata": b""}],
               reason=None)


def _commit(client: WireClient, group: str, *topics: str, offset: int = 1) -> dict[str, int]:
    """Simple (generation -1) commits of partition 0; each topic's error."""
    response = ask(client, 8, 9, group_id=group, generation_id_or_member_epoch=-1,
                   member_id="", group_instance_id=None, topics=[
                       {"name": t, "partitions": [{"partition_index": 0,
                                                   "committed_offset": offset,
                                                   "committed_leader_epoch": -1,
                                                   "committed_metadata": None}]}
                       for t in topics])
    return {t.name: only(t.partitions).error_code for t in response.topics}


def _fetch_offsets(client: WireClient, group: str, topics: list[str] | None,
                   version: int = 9) -> Any:
    wanted = None if topics is None else [{"name": t, "partition_indexes": [0]} for t in topics]
    if version >= 8:
        response = ask(client, 9, version, require_stable=True, groups=[
            {"group_id": group, "member_id": None, "member_epoch": -1, "topics": wanted}])
        return only(response.groups)
    return ask(client, 9, version, group_id=group, topics=wanted, require_stable=True)


def _consumer_error(cluster: Cluster, group: str) -> KafkaError:
    """The error alice's subscribing consumer of ``group`` is given."""
    consumer = Consumer(_as_alice(cluster, **{"group.id": group}))
    try:
        consumer.subscribe(["orders"])

        def failed() -> KafkaError | None:
            msg = consumer.poll(0.5)
            return msg.error() if msg is not None and msg.error() is not None else None
        return wait_until(failed, 20, f"alice's consumer of {group} refused", interval=0)
    finally:
        consumer.close()


def _group_offsets(alice: AdminClient, group: str) -> dict[str, int]:
    """Committed offsets of every topic of ``group`` as alice's AdminClient lists them."""
    future = only(alice.list_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(group)]).values())
    return {tp.topic: tp.offset for tp in future.result(10).topic_partitions}


def test_group_membership_and_offsets(cluster, admin, alice):
    _create_topics(admin, "orders", "payments")
    assert _consumer_error(cluster, "g1").code() == KafkaError.GROUP_AUTHORIZATION_FAILED
    assert _failure(only(alice.list_consumer_group_offsets(
        [ConsumerGroupTopicPartitions("g1")]).values())) == KafkaError.GROUP_AUTHORIZATION_FAILED
    with _wire(cluster) as c:
        # No ACL: the group's coordinator, membership and offsets are all refused with
        # GROUP_AUTHORIZATION_FAILED, whatever the group's state.
        found = ask(c, 10, 4, key_type=0, coordinator_keys=["g1"])
        assert (only(found.coordinators).error_code, only(found.coordinators).node_id) == (
            GROUP_DENIED, -1)
        old = ask(c, 10, 3, key="g1", key_type=0)
        assert (old.error_code, old.node_id, old.host, old.port) == (GROUP_DENIED, -1, "", -1)
        txn = ask(c, 10, 4, key_type=1, coordinator_keys=["alice-txn"])
        assert only(txn.coordinators).error_code == TXN_DENIED
        joined = _join(c, "g1")
        assert (joined.error_code, joined.generation_id, joined.member_id) == (
            GROUP_DENIED, -1, "")
        assert ask(c, 14, 5, group_id="g1", generation_id=1, member_id="m",
                   group_instance_id=None, protocol_type="consumer", protocol_name="range",
                   assignments=[]).error_code == GROUP_DENIED
        assert ask(c, 12, 4, group_id="g1", generation_id=1, member_id="m",
                   group_instance_id=None).error_code == GROUP_DENIED
        left = ask(c, 13, 5, group_id="g1", members=[
            {"member_id": "m", "group_instance_id": None, "reason": None}])
        assert (left.error_code, left.members) == (GROUP_DENIED, ())
        # Every partition of an OffsetCommit, even of a topic that does not exist.
        assert _commit(c, "g1", "orders", "nowhere") == {"orders": GROUP_DENIED,
                                                         "nowhere": GROUP_DENIED}
        assert _fetch_offsets(c, "g1", ["orders"]).error_code == GROUP_DENIED
        v7 = _fetch_offsets(c, "g1", ["orders"], version=7)
        assert (v7.error_code, v7.topics) == (GROUP_DENIED, ())

    # READ on the group (PREFIXED) is not READ on the topic.
    _acl(admin, ResourceType.GROUP, "g", AclOperation.READ, ResourcePatternType.PREFIXED)
    with _wire(cluster) as c:
        assert only(ask(c, 10, 4, key_type=0, coordinator_keys=["g1"]).coordinators
                    ).error_code == 0  # READ implies DESCRIBE
        assert _commit(c, "g1", "orders") == {"orders": TOPIC_DENIED}
        _acl(admin, ResourceType.TOPIC, "orders", AclOperation.READ)
        # A topic she may not read is refused whether it exists or not.
        assert _commit(c, "g1", "orders", "nowhere", offset=7) == {
            "orders": 0, "nowhere": TOPIC_DENIED}
        assert _commit(c, "g1", "payments") == {"payments": TOPIC_DENIED}
        # Offsets of topics alice may not describe: refused by name, left out of "all".
        with _wire(cluster, ADMIN, ADMIN_PASSWORD) as super_user:
            assert _commit(super_user, "g1", "payments", offset=3) == {"payments": 0}
        named = _fetch_offsets(c, "g1", ["orders", "payments"])
        assert named.error_code == 0
        assert {t.name: (only(t.partitions).error_code, only(t.partitions).committed_offset)
                for t in named.topics} == {"orders": (0, 7), "payments": (TOPIC_DENIED, -1)}
        everything = _fetch_offsets(c, "g1", None)
        assert [t.name for t in everything.topics] == ["orders"]
        assert _group_offsets(alice, "g1") == {"orders": 7}
        assert _group_offsets(admin, "g1") == {"orders": 7, "payments": 3}
        v2 = _fetch_offsets(c, "g1", None, version=2)
        assert (v2.error_code, [t.name for t in v2.topics]) == (0, ["orders"])

    # A consumer of alice's own joins, reads and commits.
    with Producer(_as_admin(cluster)) as producer:
        for i in range(3):
            producer.produce("orders", f"o{i}".encode(), partition=0)
        assert producer.flush(10) == 0
    consumer = Consumer(_as_alice(cluster, **{"group.id": "g2", "auto.offset.reset": "earliest",
                                              "enable.auto.commit": False}))
    try:
        consumer.subscribe(["orders"])
        values = []

        def read() -> bool:
            msg = consumer.poll(0.5)
            if msg is not None:
                assert msg.error() is None, msg.error()
                values.append(msg.value())
            return len(values) == 3
        wait_until(read, 30, "alice's consumer read orders", interval=0)
        consumer.commit(asynchronous=False)
        assert consumer.committed([TopicPartition("orders", 0)], 10)[0].offset == 3
    finally:
        consumer.close()

    # A DENY on the one group wins over the prefixed ALLOW.
    _acl(admin, ResourceType.GROUP, "g2", AclOperation.READ,
         permission=AclPermissionType.DENY)
    with _wire(cluster) as c:
        assert _join(c, "g2").error_code == GROUP_DENIED
        assert _commit(c, "g2", "orders") == {"orders": GROUP_DENIED}
        # Another g- group is still alice's: the coordinator answers, wanting a member id.
        assert _join(c, "g3").error_code == MEMBER_ID_REQUIRED
        # DENY READ does not deny DESCRIBE, which READ implied: the offsets stay readable.
        assert only(_fetch_offsets(c, "g2", ["orders"]).topics).partitions[0].committed_offset \
            == 3
    denial = wait_until(lambda: next(
        (line for line in cluster.brokers[0].output
         if "Principal = User:alice is Denied operation = READ from host = 127.0.0.1 on "
            "resource = Group:LITERAL:g2 for request = JoinGroup" in line), None),
        10, "the JoinGroup denial logged")
    assert "based on rule MatchingAcl(acl=StandardAcl(resourceType=GROUP, resourceName=g2" \
        in denial


# -- describe, list and delete groups ----------------------------------------------------------


def _groups_with_offsets(cluster: Cluster, *groups: str) -> None:
    with _wire(cluster, ADMIN, ADMIN_PASSWORD) as c:
        for group in groups:
            assert _commit(c, group, "orders") == {"orders": 0}


def _listed(alice: AdminClient) -> set[str]:
    return {g.group_id for g in alice.list_consumer_groups().result(10).valid}


def test_describe_list_and_delete_groups(cluster, admin, alice):
    _create_topics(admin, "orders")
    _groups_with_offsets(cluster, "team-a", "team-b", "other")
    assert _listed(admin) == {"team-a", "team-b", "other"}
    # No ACL: no group listed, none described.
    assert _listed(alice) == set()
    described = alice.describe_consumer_groups(["team-a"], include_authorized_operations=True)
    assert _failure(described["team-a"]) == KafkaError.GROUP_AUTHORIZATION_FAILED
    with _wire(cluster) as c:
        group = only(ask(c, 15, 5, groups=["team-a"], include_authorized_operations=True).groups)
        assert (group.error_code, group.group_state, group.authorized_operations) == (
            GROUP_DENIED, "", OMITTED)

    # DESCRIBE on team-* (PREFIXED): those groups are listed and described, with the one
    # operation alice may perform on them.
    _acl(admin, ResourceType.GROUP, "team-", AclOperation.DESCRIBE,
         ResourcePatternType.PREFIXED)
    assert _listed(alice) == {"team-a", "team-b"}
    team_a = alice.describe_consumer_groups(
        ["team-a"], include_authorized_operations=True)["team-a"].result(10)
    assert team_a.group_id == "team-a"
    assert set(team_a.authorized_operations) == {AclOperation.DESCRIBE}
    with _wire(cluster) as c:
        answers = {g.group_id: g for g in ask(c, 15, 5, groups=["team-a", "other"],
                                              include_authorized_operations=True).groups}
        assert (answers["team-a"].error_code, answers["team-a"].group_state) == (0, "Empty")
        assert _ops(answers["team-a"].authorized_operations) == {DESCRIBE}
        assert answers["other"].error_code == GROUP_DENIED
        # Not asked for: not computed.
        plain = only(ask(c, 15, 5, groups=["team-a"],
                         include_authorized_operations=False).groups)
        assert plain.authorized_operations == OMITTED
    # A DENY on team-b wins over the prefixed ALLOW.
    _acl(admin, ResourceType.GROUP, "team-b", AclOperation.DESCRIBE,
         permission=AclPermissionType.DENY)
    assert _listed(alice) == {"team-a"}
    assert _failure(alice.describe_consumer_groups(["team-b"])["team-b"]) == \
        KafkaError.GROUP_AUTHORIZATION_FAILED
    # DESCRIBE on the cluster lists every group (Kafka's rule, DENY or not).
    _acl(admin, ResourceType.BROKER, "kafka-cluster", AclOperation.DESCRIBE)
    assert _listed(alice) == {"team-a", "team-b", "other"}

    with _wire(cluster) as c:
        # Deleting a group needs DELETE on it.
        deleted = ask(c, 42, 2, groups_names=["team-a", "other"])
        assert {r.group_id: r.error_code for r in deleted.results} == {
            "team-a": GROUP_DENIED, "other": GROUP_DENIED}
        assert ask(c, 47, 0, group_id="team-a", topics=[
            {"name": "orders", "partitions": [{"partition_index": 0}]}]).error_code \
            == GROUP_DENIED
        _acl(admin, ResourceType.GROUP, "team-", AclOperation.DELETE,
             ResourcePatternType.PREFIXED)
        # OffsetDelete needs READ, not DELETE, on the topic.
        refused = ask(c, 47, 0, group_id="team-a", topics=[
            {"name": "orders", "partitions": [{"partition_index": 0}]}])
        assert refused.error_code == 0
        assert only(only(refused.topics).partitions).error_code == TOPIC_DENIED
        _acl(admin, ResourceType.TOPIC, "orders", AclOperation.READ)
        removed = ask(c, 47, 0, group_id="team-a", topics=[
            {"name": "orders", "partitions": [{"partition_index": 0}]}])
        assert only(only(removed.topics).partitions).error_code == 0
        offsets = _fetch_offsets(c, "team-a", ["orders"])
        assert only(only(offsets.topics).partitions).committed_offset == -1
    assert alice.delete_consumer_groups(["team-a"])["team-a"].result(10) is None
    assert _failure(alice.delete_consumer_groups(["other"])["other"]) == \
        KafkaError.GROUP_AUTHORIZATION_FAILED
    assert _listed(admin) == {"team-b", "other"}
    # DeleteGroups' refusal is logged; ListGroups, earlier, filtered without a word.
    wait_until(lambda: any(
        "Principal = User:alice is Denied operation = DELETE from host = 127.0.0.1 on "
        "resource = Group:LITERAL:other for request = DeleteGroups" in line
        for line in cluster.brokers[0].output), 10, "the DeleteGroups denial logged")
    assert not any("for request = ListGroups" in line for line in cluster.brokers[0].output)


# -- topics and partitions ----------------------------------------------------------------------


def _create(client: WireClient, *names: str) -> dict[str, Any]:
    response = ask(client, 19, 7, timeout=TIMEOUT, validate_only=False, topics=[
        {"name": n, "num_partitions": 2, "replication_factor": 1, "assignments": [],
         "configs": [{"name": "retention.ms", "value": "3600000"}]} for n in names])
    return {t.name: t for t in response.topics}


def _delete(client: WireClient, *refs: str | uuid.UUID) -> list[Any]:
    return list(ask(client, 20, 6, timeout=TIMEOUT, topics=[
        {"name": r, "topic_id": uuid.UUID(int=0)} if isinstance(r, str)
        else {"name": None, "topic_id": r} for r in refs]).responses)


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
    _create_topics(admin, "orders")
    # No CREATE: refused whether the topic exists or not (not TOPIC_ALREADY_EXISTS).
    futures = alice.create_topics([NewTopic("alice-1", 1, 1), NewTopic("orders", 1, 1)])
    assert _failure(futures["alice-1"]) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert _failure(futures["orders"]) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    with _wire(cluster) as c:
        refused = _create(c, "alice-1")["alice-1"]
        assert (refused.error_code, refused.error_message) == (
            TOPIC_DENIED, "Authorization failed.")

        # PREFIXED CREATE on alice-: created; without DESCRIBE_CONFIGS its configs are
        # withheld (topic_config_error_code), the topic is created all the same.
        _acl(admin, ResourceType.TOPIC, "alice-", AclOperation.CREATE,
             ResourcePatternType.PREFIXED)
        created = _create(c, "alice-1")["alice-1"]
        assert (created.error_code, created.topic_config_error_code) == (0, TOPIC_DENIED)
        assert (created.num_partitions, created.replication_factor, created.configs) == (
            -1, -1, ())
        assert created.topic_id is not None and created.topic_id.int != 0
        _acl(admin, ResourceType.TOPIC, "alice-", AclOperation.ALTER_CONFIGS,
             ResourcePatternType.PREFIXED)  # implies DESCRIBE_CONFIGS
        shown = _create(c, "alice-2")["alice-2"]
        assert (shown.error_code, shown.topic_config_error_code, shown.num_partitions) == (
            0, 0, 2)
        assert {e.name: e.value for e in shown.configs}["retention.ms"] == "3600000"
        # A DENY on one name wins over the prefixed ALLOW.
        _acl(admin, ResourceType.TOPIC, "alice-no", AclOperation.CREATE,
             permission=AclPermissionType.DENY)
        assert _create(c, "alice-no")["alice-no"].error_code == TOPIC_DENIED
        assert "alice-no" not in admin.list_topics(timeout=10).topics

        # CreatePartitions needs ALTER, checked before existence.
        grown = ask(c, 37, 3, timeout=TIMEOUT, validate_only=False, topics=[
            {"name": n, "count": 3, "assignments": None} for n in ("alice-1", "ghost")])
        assert {r.name: r.error_code for r in grown.results} == {
            "alice-1": TOPIC_DENIED, "ghost": TOPIC_DENIED}
    assert _failure(alice.create_partitions([NewPartitions("alice-1", 3)])["alice-1"]) == \
        KafkaError.TOPIC_AUTHORIZATION_FAILED
    _acl(admin, ResourceType.TOPIC, "alice-1", AclOperation.ALTER)
    assert alice.create_partitions([NewPartitions("alice-1", 3)])["alice-1"].result(10) is None
    assert len(admin.list_topics("alice-1", timeout=10).topics["alice-1"].partitions) == 3

    ids = _topic_ids(admin, "orders", "alice-1")
    with _wire(cluster) as c:
        # By name: a topic alice may not describe is refused whether it exists or not; one
        # she may describe but not delete is refused; a missing one she may describe is
        # unknown. alice-1 is describable (ALTER implies DESCRIBE), not deletable.
        by_name = {r.name: r.error_code for r in _delete(c, "orders", "ghost", "alice-1",
                                                         "alice-missing")}
        assert by_name == {"orders": TOPIC_DENIED, "ghost": TOPIC_DENIED,
                           "alice-1": TOPIC_DENIED, "alice-missing": TOPIC_DENIED}
        _acl(admin, ResourceType.TOPIC, "alice-", AclOperation.DESCRIBE,
             ResourcePatternType.PREFIXED)
        assert only(_delete(c, "alice-missing")).error_code == UNKNOWN_TOPIC
        # By id: unknown ids are unknown; a topic she may not describe keeps its name hidden.
        hidden = only(_delete(c, ids["orders"]))
        assert (hidden.error_code, hidden.name, hidden.topic_id) == (
            TOPIC_DENIED, None, ids["orders"])
        named = only(_delete(c, ids["alice-1"]))
        assert (named.error_code, named.name) == (TOPIC_DENIED, "alice-1")
        unknown = uuid.uuid4()
        assert only(_delete(c, unknown)).error_code == UNKNOWN_TOPIC_ID
    assert _failure(alice.delete_topics(["alice-2"])["alice-2"]) == \
        KafkaError.TOPIC_AUTHORIZATION_FAILED
    _acl(admin, ResourceType.TOPIC, "alice-", AclOperation.DELETE, ResourcePatternType.PREFIXED)
    assert alice.delete_topics(["alice-2"])["alice-2"].result(10) is None
    assert "alice-2" not in admin.list_topics(timeout=10).topics
    assert "orders" in admin.list_topics(timeout=10).topics
    # CREATE on the cluster allows any name.
    _acl(admin, ResourceType.BROKER, "kafka-cluster", AclOperation.CREATE)
    assert alice.create_topics([NewTopic("anything", 1, 1)])["anything"].result(10) is None


# -- configs ------------------------------------------------------------------------------------


def _describe_configs(client: WireClient, *resources: tuple[int, str]) -> dict[str, Any]:
    response = ask(client, 32, 4, include_synonyms=False, include_documentation=False,
                   resources=[{"resource_type": t, "resource_name": n, "configuration_keys": None}
                              for t, n in resources])
    return {r.resource_name: r for r in response.results}


def test_topic_and_broker_configs(cluster, admin, alice):
    _create_topics(admin, "orders", "payments")
    topic = ConfigResource(ConfigResource.Type.TOPIC, "orders")
    broker = ConfigResource(ConfigResource.Type.BROKER, "0")
    futures = alice.describe_configs([topic, broker])
    assert _failure(futures[topic]) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert _failure(futures[broker]) == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    with _wire(cluster) as c:
        results = _describe_configs(c, (TOPIC_CONFIGS, "orders"), (TOPIC_CONFIGS, "nowhere"),
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
    _acl(admin, ResourceType.TOPIC, "orders", AclOperation.ALTER_CONFIGS)
    _acl(admin, ResourceType.BROKER, "kafka-cluster", AclOperation.DESCRIBE_CONFIGS)
    futures = alice.describe_configs([topic, broker])
    assert futures[topic].result(10)["cleanup.policy"].value == "delete"
    assert "log.retention.ms" in futures[broker].result(10)
    ops = [ConfigEntry("retention.ms", "60000", incremental_operation=AlterConfigOpType.SET)]
    altered = alice.incremental_alter_configs([ConfigResource(
        ConfigResource.Type.TOPIC, "orders", incremental_configs=ops)])
    assert only(altered.values()).result(10) is None
    assert admin.describe_configs([topic])[topic].result(10)["retention.ms"].value == "60000"
    with _wire(cluster) as c:
        # payments is not hers; the broker's configs are only describable.
        incremental = ask(c, 44, 1, validate_only=False, resources=[
            {"resource_type": TOPIC_CONFIGS, "resource_name": "payments",
             "configs": [{"name": "retention.ms", "config_operation": 0, "value": "1"}]},
            {"resource_type": BROKER_CONFIGS, "resource_name": "0",
             "configs": [{"name": "log.retention.ms", "config_operation": 0,
                          "value": "1000"}]}])
        assert {r.resource_name: r.error_code for r in incremental.responses} == {
            "payments": TOPIC_DENIED, "0": CLUSTER_DENIED}
        assert _describe_configs(c, (TOPIC_CONFIGS, "payments"))["payments"].error_code == \
            TOPIC_DENIED
        # A DENY DESCRIBE_CONFIGS on the topic wins over the ALTER_CONFIGS allow.
        _acl(admin, ResourceType.TOPIC, "orders", AclOperation.DESCRIBE_CONFIGS,
             permission=AclPermissionType.DENY)
        assert _describe_configs(c, (TOPIC_CONFIGS, "orders"))["orders"].error_code == \
            TOPIC_DENIED


# -- delete records -----------------------------------------------------------------------------


def test_delete_records(cluster, admin, alice):
    _create_topics(admin, "orders", "payments")
    with Producer(_as_admin(cluster)) as producer:
        for i in range(5):
            producer.produce("orders", f"o{i}".encode(), partition=0)
            producer.produce("payments", f"p{i}".encode(), partition=0)
        assert producer.flush(10) == 0
    with _wire(cluster) as c:  # refused whether the topic exists or not
        response = ask(c, 21, 2, timeout=TIMEOUT, topics=[
            {"name": n, "partitions": [{"partition_index": 0, "offset": 2}]}
            for n in ("orders", "ordinary")])
        assert {t.name: (only(t.partitions).error_code, only(t.partitions).low_watermark)
                for t in response.topics} == {
            "orders": (TOPIC_DENIED, -1), "ordinary": (TOPIC_DENIED, -1)}
    # librdkafka looks the leader up first, so DESCRIBE, to be refused by DeleteRecords.
    _acl(admin, ResourceType.TOPIC, "orders", AclOperation.DESCRIBE)
    futures = alice.delete_records([TopicPartition("orders", 0, 2)])
    assert _failure(only(futures.values())) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    _acl(admin, ResourceType.TOPIC, "ord", AclOperation.DELETE, ResourcePatternType.PREFIXED)
    futures = alice.delete_records([TopicPartition("orders", 0, 2)])
    assert only(futures.values()).result(10).low_watermark == 2
    with _wire(cluster) as c:
        response = ask(c, 21, 2, timeout=TIMEOUT, topics=[
            {"name": n, "partitions": [{"partition_index": 0, "offset": 3}]}
            for n in ("orders", "payments", "ordinary")])
        assert {t.name: (only(t.partitions).error_code, only(t.partitions).low_watermark)
                for t in response.topics} == {
            "orders": (0, 3), "payments": (TOPIC_DENIED, -1), "ordinary": (UNKNOWN_TOPIC, -1)}
        _acl(admin, ResourceType.TOPIC, "orders", AclOperation.DELETE,
             permission=AclPermissionType.DENY)
        again = ask(c, 21, 2, timeout=TIMEOUT, topics=[
            {"name": "orders", "partitions": [{"partition_index": 0, "offset": 4}]}])
        assert only(only(again.topics).partitions).error_code == TOPIC_DENIED


# -- leader elections, reassignments, log dirs, the cluster's operations -------------------------


def _cluster_requests(c: WireClient) -> dict[str, Any]:
    """The cluster-level admin requests, each on orders-0."""
    return {
        "elect": ask(c, 43, 2, election_type=0, timeout=TIMEOUT,
                     topic_partitions=[{"topic": "orders", "partitions": [0]}]),
        "reassign": ask(c, 45, 0, timeout=TIMEOUT, topics=[
            {"name": "orders", "partitions": [{"partition_index": 0, "replicas": [0]}]}]),
        "list": ask(c, 46, 0, timeout=TIMEOUT,
                    topics=[{"name": "orders", "partition_indexes": [0]}]),
        "log_dirs": ask(c, 35, 4, topics=None),
        "cluster": ask(c, 60, 1, include_cluster_authorized_operations=True, endpoint_type=1),
    }


def test_elections_reassignments_log_dirs_and_cluster_operations(cluster, admin, alice):
    _create_topics(admin, "orders")
    with _wire(cluster) as c:
        answers = _cluster_requests(c)
    elect = answers["elect"]
    assert elect.error_code == CLUSTER_DENIED
    result = only(only(elect.replica_election_results).partition_result)
    assert (result.partition_id, result.error_code) == (0, CLUSTER_DENIED)
    assert "is not authorized" in result.error_message
    reassign = answers["reassign"]
    assert (reassign.error_code, only(only(reassign.responses).partitions).error_code) == (
        CLUSTER_DENIED, CLUSTER_DENIED)
    listed = answers["list"]
    assert listed.error_code == CLUSTER_DENIED
    assert only(only(listed.topics).partitions).replicas == ()
    assert (answers["log_dirs"].error_code, answers["log_dirs"].results) == (CLUSTER_DENIED, ())
    assert answers["cluster"].error_code == 0
    assert answers["cluster"].cluster_authorized_operations == 0  # no DESCRIBE on the cluster
    described = alice.describe_cluster(include_authorized_operations=True).result(10)
    assert not described.authorized_operations

    # DESCRIBE on the cluster: listing and log dirs, not the changes.
    _acl(admin, ResourceType.BROKER, "kafka-cluster", AclOperation.DESCRIBE)
    with _wire(cluster) as c:
        answers = _cluster_requests(c)
    assert answers["elect"].error_code == CLUSTER_DENIED
    assert answers["reassign"].error_code == CLUSTER_DENIED
    assert (answers["list"].error_code, answers["list"].topics) == (0, ())
    log_dirs = answers["log_dirs"]
    assert log_dirs.error_code == 0
    assert "orders" in {t.name for d in log_dirs.results for t in d.topics}
    assert _ops(answers["cluster"].cluster_authorized_operations) == {DESCRIBE}
    described = alice.describe_cluster(include_authorized_operations=True).result(10)
    assert set(described.authorized_operations) == {AclOperation.DESCRIBE}

    # ALTER on the cluster (implies DESCRIBE): elections and reassignments are hers.
    _acl(admin, ResourceType.BROKER, "kafka-cluster", AclOperation.ALTER)
    with _wire(cluster) as c:
        answers = _cluster_requests(c)
    elect = answers["elect"]
    assert elect.error_code == 0
    assert only(only(elect.replica_election_results).partition_result).error_code == 84
    reassign = answers["reassign"]
    assert (reassign.error_code, only(only(reassign.responses).partitions).error_code) == (0, 0)
    assert _ops(answers["cluster"].cluster_authorized_operations) == {DESCRIBE, ALTER}
    # A DENY of DESCRIBE wins over the ALTER that implied it.
    _acl(admin, ResourceType.BROKER, "kafka-cluster", AclOperation.DESCRIBE,
         permission=AclPermissionType.DENY)
    with _wire(cluster) as c:
        answers = _cluster_requests(c)
    assert answers["elect"].error_code == 0
    assert answers["list"].error_code == CLUSTER_DENIED
    assert answers["log_dirs"].error_code == CLUSTER_DENIED
    assert answers["cluster"].cluster_authorized_operations == 0


# -- SCRAM credentials and client quotas ---------------------------------------------------------


def _quotas(c: WireClient) -> Any:
    return ask(c, 48, 1, strict=False,
               components=[{"entity_type": "user", "match_type": 1, "match": None}])


def test_scram_credentials_and_client_quotas(cluster, admin, alice):
    upsert = UserScramCredentialUpsertion(
        "bob", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 8192), b"bob-secret")
    assert _failure(only(alice.alter_user_scram_credentials([upsert]).values())) == \
        KafkaError.CLUSTER_AUTHORIZATION_FAILED
    # Describe's refusal on the wire only: librdkafka (2.16) crashes on any top-level error
    # of a DescribeUserScramCredentials response, Kafka's included (it keeps a stack copy of
    # the message, rd_kafka_DescribeUserScramCredentialsResponse_parse).
    with _wire(cluster) as c:
        described = ask(c, 50, 0, users=[{"name": "bob"}, {"name": "carol"}])
        assert (described.error_code, described.error_message) == (
            CLUSTER_DENIED, "Cluster authorization failed.")
        assert [(r.user, r.error_code) for r in described.results] == [
            ("bob", CLUSTER_DENIED), ("carol", CLUSTER_DENIED)]
        altered = ask(c, 51, 0, deletions=[{"name": "carol", "mechanism": 1}], upsertions=[
            {"name": "bob", "mechanism": 1, "iterations": 8192, "salt": b"s" * 16,
             "salted_password": b"p" * 32}])
        assert [(r.user, r.error_code) for r in altered.results] == [
            ("bob", CLUSTER_DENIED), ("carol", CLUSTER_DENIED)]
        quotas = _quotas(c)
        assert (quotas.error_code, quotas.entries) == (CLUSTER_DENIED, None)
    assert _failure(admin.describe_user_scram_credentials(["bob"])["bob"]) == \
        KafkaError.RESOURCE_NOT_FOUND  # the super user is answered

    # ALTER on the cluster: credentials altered and (ALTER implies DESCRIBE) described;
    # quotas need DESCRIBE_CONFIGS, which ALTER does not imply.
    _acl(admin, ResourceType.BROKER, "kafka-cluster", AclOperation.ALTER)
    assert only(alice.alter_user_scram_credentials([upsert]).values()).result(10) is None
    bob = alice.describe_user_scram_credentials(["bob"])["bob"].result(10)
    assert [info.iterations for info in bob.scram_credential_infos] == [8192]
    with _wire(cluster) as c:
        assert _quotas(c).error_code == CLUSTER_DENIED
        _acl(admin, ResourceType.BROKER, "kafka-cluster", AclOperation.DESCRIBE_CONFIGS)
        quotas = _quotas(c)
        assert (quotas.error_code, quotas.entries) == (0, ())


# -- without an authorizer -----------------------------------------------------------------------


def test_without_an_authorizer_nothing_is_refused(cluster_factory, tmp_path):
    cluster = cluster_factory(1, secure_listeners(make_pki(tmp_path / "pki")))
    alice = AdminClient(_as_alice(cluster))
    _create_topics(alice, "orders")
    with _wire(cluster) as c:
        assert _commit(c, "g", "orders") == {"orders": 0}
        assert [t.name for t in _fetch_offsets(c, "g", None).topics] == ["orders"]
        assert {g.group_id for g in ask(c, 16, 5, states_filter=[], types_filter=[]).groups} \
            == {"g"}
        group = only(ask(c, 15, 5, groups=["g"], include_authorized_operations=True).groups)
        assert _ops(group.authorized_operations) == {READ, DESCRIBE, DELETE,
                                                     DESCRIBE_CONFIGS, ALTER_CONFIGS}
        assert _describe_configs(c, (TOPIC_CONFIGS, "orders"), (BROKER_CONFIGS, "0"))[
            "orders"].error_code == 0
        answers = _cluster_requests(c)
        assert [answers[k].error_code for k in ("elect", "reassign", "list", "log_dirs")] == [
            0, 0, 0, 0]
        assert _ops(answers["cluster"].cluster_authorized_operations) == {
            5, 7, 8, 9, 10, 11, 12}
        assert _quotas(c).error_code == 0
        assert ask(c, 50, 0, users=None).error_code == 0
        assert only(_delete(c, "orders")).error_code == 0
