"""What the ACL tests of the group and admin APIs share: a broker with SASL/PLAIN
listeners and the StandardAuthorizer (admin a super user), clients logged in as admin
or alice, ACLs granted to alice, Kafka's error codes."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)
from kio.index import load_request_schema
from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest

from broker.protocol.messages import build
from kafkube.harness.metadata import Cluster
from kafkube.harness.waiting import wait_until
from kafkube.harness.wire import WireClient
from tests.support.security_setup import ADMIN, ADMIN_PASSWORD, ALICE, ALICE_PASSWORD

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


def sasl_config(cluster: Cluster, user: str, password: str, **extra: Any) -> dict[str, Any]:
    return {"bootstrap.servers": cluster.brokers[0].bootstrap_of("SASL_PLAINTEXT"),
            "security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": "PLAIN",
            "sasl.username": user, "sasl.password": password, **extra}


def as_admin(cluster: Cluster, **extra: Any) -> dict[str, Any]:
    return sasl_config(cluster, ADMIN, ADMIN_PASSWORD, **extra)


def as_alice(cluster: Cluster, **extra: Any) -> dict[str, Any]:
    return sasl_config(cluster, ALICE, ALICE_PASSWORD, **extra)


def create_led_topics(admin: AdminClient, *names: str, partitions: int = 1) -> None:
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


def add_acl(admin: AdminClient, resource: ResourceType, name: str, operation: AclOperation,
            pattern: ResourcePatternType = ResourcePatternType.LITERAL,
            permission: AclPermissionType = AclPermissionType.ALLOW) -> None:
    binding = AclBinding(resource, name, pattern, f"User:{ALICE}", "*", operation, permission)
    for future in admin.create_acls([binding]).values():
        future.result(10)


@contextmanager
def wire_as(cluster: Cluster, user: str = ALICE, password: str = ALICE_PASSWORD
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


def failure_code(future: Any) -> int:
    """The Kafka error code a confluent-kafka future fails with."""
    with pytest.raises(KafkaException) as failed:
        future.result(15)
    return failed.value.args[0].code()


def only(items: Any) -> Any:
    (item,) = items
    return item


def operation_codes(bits: int) -> set[int]:
    return {code for code in range(32) if bits & (1 << code)}


def commit_offsets(client: WireClient, group: str, *topics: str, offset: int = 1) -> dict[str, int]:
    """Simple (generation -1) commits of partition 0; each topic's error."""
    response = ask(client, 8, 9, group_id=group, generation_id_or_member_epoch=-1,
                   member_id="", group_instance_id=None, topics=[
                       {"name": t, "partitions": [{"partition_index": 0,
                                                   "committed_offset": offset,
                                                   "committed_leader_epoch": -1,
                                                   "committed_metadata": None}]}
                       for t in topics])
    return {t.name: only(t.partitions).error_code for t in response.topics}


def fetch_offsets(client: WireClient, group: str, topics: list[str] | None,
                  version: int = 9) -> Any:
    wanted = None if topics is None else [{"name": t, "partition_indexes": [0]} for t in topics]
    if version >= 8:
        response = ask(client, 9, version, require_stable=True, groups=[
            {"group_id": group, "member_id": None, "member_epoch": -1, "topics": wanted}])
        return only(response.groups)
    return ask(client, 9, version, group_id=group, topics=wanted, require_stable=True)


def delete_topics(client: WireClient, *refs: str | uuid.UUID) -> list[Any]:
    return list(ask(client, 20, 6, timeout=TIMEOUT, topics=[
        {"name": r, "topic_id": uuid.UUID(int=0)} if isinstance(r, str)
        else {"name": None, "topic_id": r} for r in refs]).responses)


def describe_configs(client: WireClient, *resources: tuple[int, str]) -> dict[str, Any]:
    response = ask(client, 32, 4, include_synonyms=False, include_documentation=False,
                   resources=[{"resource_type": t, "resource_name": n, "configuration_keys": None}
                              for t, n in resources])
    return {r.resource_name: r for r in response.results}
