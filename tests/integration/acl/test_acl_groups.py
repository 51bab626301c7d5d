"""ACLs on the group APIs against a real broker (tests/integration/acl/conftest.py):
group membership and offsets; describe, list and delete groups. alice, without the ACL
Kafka asks for, gets Kafka's authorization error in Kafka's place in the response and
sees nothing she may not describe, and with it gets the answer; a PREFIXED allow and a
DENY that wins over an allow on the way. admin is a super user; both log in with
SASL/PLAIN on the SASL_PLAINTEXT listener. confluent-kafka does the calls it can; the
wire client the ones that need exact codes."""

from __future__ import annotations

from typing import Any

from confluent_kafka import (
    Consumer,
    ConsumerGroupTopicPartitions,
    KafkaError,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import (
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

from kafkube.harness.metadata import Cluster
from kafkube.harness.waiting import wait_until
from kafkube.harness.wire import WireClient
from tests.integration.acl.sasl_admin import (
    DESCRIBE,
    GROUP_DENIED,
    MEMBER_ID_REQUIRED,
    OMITTED,
    TIMEOUT,
    TOPIC_DENIED,
    TXN_DENIED,
    add_acl,
    as_admin,
    as_alice,
    ask,
    commit_offsets,
    create_led_topics,
    failure_code,
    fetch_offsets,
    only,
    operation_codes,
    wire_as,
)
from tests.support.security_setup import ADMIN, ADMIN_PASSWORD

# -- group membership and offsets --------------------------------------------------------------


def _join(client: WireClient, group: str) -> Any:
    return ask(client, 11, 9, group_id=group, session_timeout=TIMEOUT,
               rebalance_timeout=TIMEOUT, member_id="", group_instance_id=None,
               protocol_type="consumer", protocols=[{"name": "range", "metadata": b""}],
               reason=None)






def _consumer_error(cluster: Cluster, group: str) -> KafkaError:
    """The error alice's subscribing consumer of ``group`` is given."""
    consumer = Consumer(as_alice(cluster, **{"group.id": group}))
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
    create_led_topics(admin, "orders", "payments")
    assert _consumer_error(cluster, "g1").code() == KafkaError.GROUP_AUTHORIZATION_FAILED
    assert failure_code(only(alice.list_consumer_group_offsets(
        [ConsumerGroupTopicPartitions("g1")]).values())) == KafkaError.GROUP_AUTHORIZATION_FAILED
    with wire_as(cluster) as c:
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
        assert commit_offsets(c, "g1", "orders", "nowhere") == {"orders": GROUP_DENIED,
                                                                "nowhere": GROUP_DENIED}
        assert fetch_offsets(c, "g1", ["orders"]).error_code == GROUP_DENIED
        v7 = fetch_offsets(c, "g1", ["orders"], version=7)
        assert (v7.error_code, v7.topics) == (GROUP_DENIED, ())

    # READ on the group (PREFIXED) is not READ on the topic.
    add_acl(admin, ResourceType.GROUP, "g", AclOperation.READ, ResourcePatternType.PREFIXED)
    with wire_as(cluster) as c:
        assert only(ask(c, 10, 4, key_type=0, coordinator_keys=["g1"]).coordinators
                    ).error_code == 0  # READ implies DESCRIBE
        assert commit_offsets(c, "g1", "orders") == {"orders": TOPIC_DENIED}
        add_acl(admin, ResourceType.TOPIC, "orders", AclOperation.READ)
        # A topic she may not read is refused whether it exists or not.
        assert commit_offsets(c, "g1", "orders", "nowhere", offset=7) == {
            "orders": 0, "nowhere": TOPIC_DENIED}
        assert commit_offsets(c, "g1", "payments") == {"payments": TOPIC_DENIED}
        # Offsets of topics alice may not describe: refused by name, left out of "all".
        with wire_as(cluster, ADMIN, ADMIN_PASSWORD) as super_user:
            assert commit_offsets(super_user, "g1", "payments", offset=3) == {"payments": 0}
        named = fetch_offsets(c, "g1", ["orders", "payments"])
        assert named.error_code == 0
        assert {t.name: (only(t.partitions).error_code, only(t.partitions).committed_offset)
                for t in named.topics} == {"orders": (0, 7), "payments": (TOPIC_DENIED, -1)}
        everything = fetch_offsets(c, "g1", None)
        assert [t.name for t in everything.topics] == ["orders"]
        assert _group_offsets(alice, "g1") == {"orders": 7}
        assert _group_offsets(admin, "g1") == {"orders": 7, "payments": 3}
        v2 = fetch_offsets(c, "g1", None, version=2)
        assert (v2.error_code, [t.name for t in v2.topics]) == (0, ["orders"])

    # A consumer of alice's own joins, reads and commits.
    with Producer(as_admin(cluster)) as producer:
        for i in range(3):
            producer.produce("orders", f"o{i}".encode(), partition=0)
        assert producer.flush(10) == 0
    consumer = Consumer(as_alice(cluster, **{"group.id": "g2", "auto.offset.reset": "earliest",
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
    add_acl(admin, ResourceType.GROUP, "g2", AclOperation.READ,
            permission=AclPermissionType.DENY)
    with wire_as(cluster) as c:
        assert _join(c, "g2").error_code == GROUP_DENIED
        assert commit_offsets(c, "g2", "orders") == {"orders": GROUP_DENIED}
        # Another g- group is still alice's: the coordinator answers, wanting a member id.
        assert _join(c, "g3").error_code == MEMBER_ID_REQUIRED
        # DENY READ does not deny DESCRIBE, which READ implied: the offsets stay readable.
        assert only(fetch_offsets(c, "g2", ["orders"]).topics).partitions[0].committed_offset \
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
    with wire_as(cluster, ADMIN, ADMIN_PASSWORD) as c:
        for group in groups:
            assert commit_offsets(c, group, "orders") == {"orders": 0}


def _listed(alice: AdminClient) -> set[str]:
    return {g.group_id for g in alice.list_consumer_groups().result(10).valid}


def test_describe_list_and_delete_groups(cluster, admin, alice):
    create_led_topics(admin, "orders")
    _groups_with_offsets(cluster, "team-a", "team-b", "other")
    assert _listed(admin) == {"team-a", "team-b", "other"}
    # No ACL: no group listed, none described.
    assert _listed(alice) == set()
    described = alice.describe_consumer_groups(["team-a"], include_authorized_operations=True)
    assert failure_code(described["team-a"]) == KafkaError.GROUP_AUTHORIZATION_FAILED
    with wire_as(cluster) as c:
        group = only(ask(c, 15, 5, groups=["team-a"], include_authorized_operations=True).groups)
        assert (group.error_code, group.group_state, group.authorized_operations) == (
            GROUP_DENIED, "", OMITTED)

    # DESCRIBE on team-* (PREFIXED): those groups are listed and described, with the one
    # operation alice may perform on them.
    add_acl(admin, ResourceType.GROUP, "team-", AclOperation.DESCRIBE,
            ResourcePatternType.PREFIXED)
    assert _listed(alice) == {"team-a", "team-b"}
    team_a = alice.describe_consumer_groups(
        ["team-a"], include_authorized_operations=True)["team-a"].result(10)
    assert team_a.group_id == "team-a"
    assert set(team_a.authorized_operations) == {AclOperation.DESCRIBE}
    with wire_as(cluster) as c:
        answers = {g.group_id: g for g in ask(c, 15, 5, groups=["team-a", "other"],
                                              include_authorized_operations=True).groups}
        assert (answers["team-a"].error_code, answers["team-a"].group_state) == (0, "Empty")
        assert operation_codes(answers["team-a"].authorized_operations) == {DESCRIBE}
        assert answers["other"].error_code == GROUP_DENIED
        # Not asked for: not computed.
        plain = only(ask(c, 15, 5, groups=["team-a"],
                         include_authorized_operations=False).groups)
        assert plain.authorized_operations == OMITTED
    # A DENY on team-b wins over the prefixed ALLOW.
    add_acl(admin, ResourceType.GROUP, "team-b", AclOperation.DESCRIBE,
            permission=AclPermissionType.DENY)
    assert _listed(alice) == {"team-a"}
    assert failure_code(alice.describe_consumer_groups(["team-b"])["team-b"]) == \
        KafkaError.GROUP_AUTHORIZATION_FAILED
    # DESCRIBE on the cluster lists every group (Kafka's rule, DENY or not).
    add_acl(admin, ResourceType.BROKER, "kafka-cluster", AclOperation.DESCRIBE)
    assert _listed(alice) == {"team-a", "team-b", "other"}

    with wire_as(cluster) as c:
        # Deleting a group needs DELETE on it.
        deleted = ask(c, 42, 2, groups_names=["team-a", "other"])
        assert {r.group_id: r.error_code for r in deleted.results} == {
            "team-a": GROUP_DENIED, "other": GROUP_DENIED}
        assert ask(c, 47, 0, group_id="team-a", topics=[
            {"name": "orders", "partitions": [{"partition_index": 0}]}]).error_code \
            == GROUP_DENIED
        add_acl(admin, ResourceType.GROUP, "team-", AclOperation.DELETE,
                ResourcePatternType.PREFIXED)
        # OffsetDelete needs READ, not DELETE, on the topic.
        refused = ask(c, 47, 0, group_id="team-a", topics=[
            {"name": "orders", "partitions": [{"partition_index": 0}]}])
        assert refused.error_code == 0
        assert only(only(refused.topics).partitions).error_code == TOPIC_DENIED
        add_acl(admin, ResourceType.TOPIC, "orders", AclOperation.READ)
        removed = ask(c, 47, 0, group_id="team-a", topics=[
            {"name": "orders", "partitions": [{"partition_index": 0}]}])
        assert only(only(removed.topics).partitions).error_code == 0
        offsets = fetch_offsets(c, "team-a", ["orders"])
        assert only(only(offsets.topics).partitions).committed_offset == -1
    assert alice.delete_consumer_groups(["team-a"])["team-a"].result(10) is None
    assert failure_code(alice.delete_consumer_groups(["other"])["other"]) == \
        KafkaError.GROUP_AUTHORIZATION_FAILED
    assert _listed(admin) == {"team-b", "other"}
    # DeleteGroups' refusal is logged; ListGroups, earlier, filtered without a word.
    wait_until(lambda: any(
        "Principal = User:alice is Denied operation = DELETE from host = 127.0.0.1 on "
        "resource = Group:LITERAL:other for request = DeleteGroups" in line
        for line in cluster.brokers[0].output), 10, "the DeleteGroups denial logged")
    assert not any("for request = ListGroups" in line for line in cluster.brokers[0].output)
