"""ACLs on the cluster's admin APIs against a real broker, as in test_acl_groups.py:
leader elections and reassignments, log dirs, SCRAM credentials and client quotas;
last, without an authorizer nothing is refused."""

from __future__ import annotations

from typing import Any

from confluent_kafka import KafkaError
from confluent_kafka.admin import (
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from kafkube.harness.wire import WireClient
from tests.integration.acl.sasl_admin import (
    ALTER,
    ALTER_CONFIGS,
    BROKER_CONFIGS,
    CLUSTER_DENIED,
    DELETE,
    DESCRIBE,
    DESCRIBE_CONFIGS,
    READ,
    TIMEOUT,
    TOPIC_CONFIGS,
    add_acl,
    as_alice,
    ask,
    commit_offsets,
    create_led_topics,
    delete_topics,
    describe_configs,
    failure_code,
    fetch_offsets,
    only,
    operation_codes,
    wire_as,
)
from tests.support.security_setup import make_pki, secure_listeners

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
    create_led_topics(admin, "orders")
    with wire_as(cluster) as c:
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
    add_acl(admin, ResourceType.BROKER, "kafka-cluster", AclOperation.DESCRIBE)
    with wire_as(cluster) as c:
        answers = _cluster_requests(c)
    assert answers["elect"].error_code == CLUSTER_DENIED
    assert answers["reassign"].error_code == CLUSTER_DENIED
    assert (answers["list"].error_code, answers["list"].topics) == (0, ())
    log_dirs = answers["log_dirs"]
    assert log_dirs.error_code == 0
    assert "orders" in {t.name for d in log_dirs.results for t in d.topics}
    assert operation_codes(answers["cluster"].cluster_authorized_operations) == {DESCRIBE}
    described = alice.describe_cluster(include_authorized_operations=True).result(10)
    assert set(described.authorized_operations) == {AclOperation.DESCRIBE}

    # ALTER on the cluster (implies DESCRIBE): elections and reassignments are hers.
    add_acl(admin, ResourceType.BROKER, "kafka-cluster", AclOperation.ALTER)
    with wire_as(cluster) as c:
        answers = _cluster_requests(c)
    elect = answers["elect"]
    assert elect.error_code == 0
    assert only(only(elect.replica_election_results).partition_result).error_code == 84
    reassign = answers["reassign"]
    assert (reassign.error_code, only(only(reassign.responses).partitions).error_code) == (0, 0)
    assert operation_codes(answers["cluster"].cluster_authorized_operations) == {DESCRIBE, ALTER}
    # A DENY of DESCRIBE wins over the ALTER that implied it.
    add_acl(admin, ResourceType.BROKER, "kafka-cluster", AclOperation.DESCRIBE,
            permission=AclPermissionType.DENY)
    with wire_as(cluster) as c:
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
    assert failure_code(only(alice.alter_user_scram_credentials([upsert]).values())) == \
        KafkaError.CLUSTER_AUTHORIZATION_FAILED
    # Describe's refusal on the wire only: librdkafka (2.16) crashes on any top-level error
    # of a DescribeUserScramCredentials response, Kafka's included (it keeps a stack copy of
    # the message, rd_kafka_DescribeUserScramCredentialsResponse_parse).
    with wire_as(cluster) as c:
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
    assert failure_code(admin.describe_user_scram_credentials(["bob"])["bob"]) == \
        KafkaError.RESOURCE_NOT_FOUND  # the super user is answered

    # ALTER on the cluster: credentials altered and (ALTER implies DESCRIBE) described;
    # quotas need DESCRIBE_CONFIGS, which ALTER does not imply.
    add_acl(admin, ResourceType.BROKER, "kafka-cluster", AclOperation.ALTER)
    assert only(alice.alter_user_scram_credentials([upsert]).values()).result(10) is None
    bob = alice.describe_user_scram_credentials(["bob"])["bob"].result(10)
    assert [info.iterations for info in bob.scram_credential_infos] == [8192]
    with wire_as(cluster) as c:
        assert _quotas(c).error_code == CLUSTER_DENIED
        add_acl(admin, ResourceType.BROKER, "kafka-cluster", AclOperation.DESCRIBE_CONFIGS)
        quotas = _quotas(c)
        assert (quotas.error_code, quotas.entries) == (0, ())


# -- without an authorizer -----------------------------------------------------------------------


def test_without_an_authorizer_nothing_is_refused(cluster_factory, tmp_path):
    cluster = cluster_factory(1, secure_listeners(make_pki(tmp_path / "pki")))
    alice = AdminClient(as_alice(cluster))
    create_led_topics(alice, "orders")
    with wire_as(cluster) as c:
        assert commit_offsets(c, "g", "orders") == {"orders": 0}
        assert [t.name for t in fetch_offsets(c, "g", None).topics] == ["orders"]
        assert {g.group_id for g in ask(c, 16, 5, states_filter=[], types_filter=[]).groups} \
            == {"g"}
        group = only(ask(c, 15, 5, groups=["g"], include_authorized_operations=True).groups)
        assert operation_codes(group.authorized_operations) == {READ, DESCRIBE, DELETE,
                                                                DESCRIBE_CONFIGS, ALTER_CONFIGS}
        assert describe_configs(c, (TOPIC_CONFIGS, "orders"), (BROKER_CONFIGS, "0"))[
            "orders"].error_code == 0
        answers = _cluster_requests(c)
        assert [answers[k].error_code for k in ("elect", "reassign", "list", "log_dirs")] == [
            0, 0, 0, 0]
        assert operation_codes(answers["cluster"].cluster_authorized_operations) == {
            5, 7, 8, 9, 10, 11, 12}
        assert _quotas(c).error_code == 0
        assert ask(c, 50, 0, users=None).error_code == 0
        assert only(delete_topics(c, "orders")).error_code == 0
