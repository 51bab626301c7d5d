"""ACL admin against real brokers: DescribeAcls, CreateAcls and DeleteAcls on the wire in
every version served, with Kafka's error codes and messages (no authorizer, a client not
allowed on the cluster, invalid ACLs and filters); through confluent-kafka's AdminClient and
Apache Kafka's own AclCommand; every broker of a cluster seeing the same ACLs, a restarted
cluster keeping them, and each request one image update.

The PLAINTEXT test client is ``User:ANONYMOUS``, made a super user where a test needs to be
allowed everything.
"""

from __future__ import annotations

import importlib
import re
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AclBinding as ClientAcl
from confluent_kafka.admin import (
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
)
from confluent_kafka.admin import ResourceType as ClientResourceType
from kio.schema.errors import ErrorCode

from broker.cluster.image import ClusterImage
from broker.cluster.sqlite import SqliteBackend
from broker.protocol.messages import build
from broker.security.acl import (
    STANDARD_AUTHORIZER,
    AclBinding,
    Operation,
    PatternType,
    Permission,
    ResourceType,
)
from kafkube.harness.metadata import Cluster
from kafkube.harness.waiting import wait_until
from kafkube.harness.wire import WireClient

ACL_COMMAND = "org.apache.kafka.tools.AclCommand"  # kafka.admin.AclCommand until Kafka 4.0
ANONYMOUS = "User:ANONYMOUS"
AUTHORIZER = {"authorizer.class.name": STANDARD_AUTHORIZER}
SUPER = {**AUTHORIZER, "super.users": ANONYMOUS}
VERSIONS = (1, 2, 3)

TOPIC, GROUP, CLUSTER = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
LITERAL, PREFIXED, MATCH = PatternType.LITERAL, PatternType.PREFIXED, PatternType.MATCH
ALLOW, DENY = Permission.ALLOW, Permission.DENY
ANY = 1  # every enum's ANY
NONE, INVALID, NOT_ALLOWED, DISABLED = (ErrorCode.none, ErrorCode.invalid_request,
                                        ErrorCode.cluster_authorization_failed,
                                        ErrorCode.security_disabled)


# -- requests on the wire ---------------------------------------------------------------


def _request(api: str, version: int, values: dict[str, Any]) -> Any:
    module = importlib.import_module(f"kio.schema.{api}.v{version}.request")
    cls = next(getattr(module, n) for n in dir(module)
               if n.endswith("Request") and n != "RequestHeader")
    return build(cls, values)


def acl(op: Operation = Operation.READ, perm: Permission = ALLOW, name: str = "orders",
        pattern: PatternType = LITERAL, principal: str = "User:alice", host: str = "*",
        rtype: ResourceType = TOPIC) -> AclBinding:
    return AclBinding(rtype, name, pattern, principal, host, op, perm)


def creation(binding: AclBinding | None = None, **codes: int) -> dict[str, Any]:
    """A CreateAcls entry for ``binding``, with raw ``codes`` (by kio field name) on top."""
    b = binding or acl()
    return {"resource_type": int(b.resource_type), "resource_name": b.resource_name,
            "resource_pattern_type": int(b.pattern_type), "principal": b.principal,
            "host": b.host, "operation": int(b.operation),
            "permission_type": int(b.permission), **codes}


def acl_filter(rtype: int = ANY, name: str | None = None, pattern: int = ANY,
               principal: str | None = None, host: str | None = None, op: int = ANY,
               perm: int = ANY) -> dict[str, Any]:
    return {"resource_type_filter": int(rtype), "resource_name_filter": name,
            "pattern_type_filter": int(pattern), "principal_filter": principal,
            "host_filter": host, "operation": int(op), "permission_type": int(perm)}


def create(client: WireClient, *creations: dict[str, Any], version: int = 3
           ) -> list[tuple[ErrorCode, str | None]]:
    response = client.request(_request("create_acls", version,
                                       {"creations": list(creations)}))
    assert len(response.results) == len(creations)
    return [(r.error_code, r.error_message) for r in response.results]


Described = dict[tuple[int, str, int], set[tuple[str, str, int, int]]]


def describe(client: WireClient, version: int = 3, **filter_args: Any
             ) -> tuple[ErrorCode, str | None, Described]:
    """(error, message, {resource pattern: {(principal, host, operation, permission)}})."""
    response = client.request(_request("describe_acls", version, acl_filter(**filter_args)))
    described: Described = {}
    for resource in response.resources:
        key = (resource.resource_type, resource.resource_name, resource.pattern_type)
        assert key not in described, f"{key} listed twice: ACLs are grouped by pattern"
        described[key] = {(a.principal, a.host, a.operation, a.permission_type)
                          for a in resource.acls}
        assert len(described[key]) == len(resource.acls), "an ACL listed twice"
    return response.error_code, response.error_message, described


def described_acls(client: WireClient) -> set[AclBinding]:
    """Every ACL, as DescribeAcls lists them (it must succeed)."""
    code, message, described = describe(client)
    assert (code, message) == (NONE, None)
    return {AclBinding(ResourceType(rt), name, PatternType(pt), principal, host,
                       Operation(op), Permission(perm))
            for (rt, name, pt), entries in described.items()
            for principal, host, op, perm in entries}


def delete(client: WireClient, *filters: dict[str, Any], version: int = 3
           ) -> list[tuple[ErrorCode, str | None, list[AclBinding]]]:
    response = client.request(_request("delete_acls", version, {"filters": list(filters)}))
    assert len(response.filter_results) == len(filters)
    results = []
    for r in response.filter_results:
        for m in r.matching_acls:
            assert (m.error_code, m.error_message) == (NONE, None)
        results.append((r.error_code, r.error_message, [
            AclBinding(ResourceType(m.resource_type), m.resource_name,
                       PatternType(m.pattern_type), m.principal, m.host,
                       Operation(m.operation), Permission(m.permission_type))
            for m in r.matching_acls]))
    return results


def stored(cluster: Cluster) -> ClusterImage:
    """The cluster metadata as the coordination store holds it."""
    backend = SqliteBackend(cluster.coordination_path)
    try:
        return backend.read_image()
    finally:
        backend.close()


ORDERS_READ = acl(Operation.READ, name="orders", principal="User:alice")
ORD_DENY = acl(Operation.WRITE, DENY, name="ord", pattern=PREFIXED, principal="User:bob",
               host="10.0.0.5")
EVERYONE_DESCRIBE = acl(Operation.DESCRIBE, name="*", principal="User:*")
GROUP_READ = acl(Operation.READ, name="app", rtype=GROUP, principal="User:alice")
CLUSTER_ALTER = acl(Operation.ALTER, name="kafka-cluster", rtype=CLUSTER, principal="User:bob")
SAMPLE = (ORDERS_READ, ORD_DENY, EVERYONE_DESCRIBE, GROUP_READ, CLUSTER_ALTER)


def entry(b: AclBinding) -> tuple[str, str, int, int]:
    return b.principal, b.host, int(b.operation), int(b.permission)


def pattern(b: AclBinding) -> tuple[int, str, int]:
    return int(b.resource_type), b.resource_name, int(b.pattern_type)


# -- no authorizer, no permission ---------------------------------------------------------


def test_without_an_authorizer_every_answer_is_security_disabled(cluster_factory):
    cluster = cluster_factory(1)
    with WireClient.connect(cluster.bootstrap) as client:
        for v in VERSIONS:
            assert describe(client, v) == (DISABLED, "No Authorizer is configured on the "
                                                     "broker", {})
            assert create(client, creation(ORDERS_READ), creation(GROUP_READ), version=v) == [
                (DISABLED, "No Authorizer is configured.")] * 2
            assert delete(client, acl_filter(), acl_filter(TOPIC), version=v) == [
                (DISABLED, "No Authorizer is configured.", [])] * 2
    assert stored(cluster).acls == ()
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    topic_read = ClientAcl(ClientResourceType.TOPIC, "orders", ResourcePatternType.LITERAL,
                           "User:alice", "*", AclOperation.READ, AclPermissionType.ALLOW)
    with pytest.raises(KafkaException) as refused:
        admin.create_acls([topic_read], request_timeout=10)[topic_read].result(15)
    assert refused.value.args[0].code() == KafkaError.SECURITY_DISABLED
    assert "No Authorizer is configured." in refused.value.args[0].str()


def test_a_client_not_allowed_on_the_cluster_is_refused(cluster_factory):
    """No super users, no ACLs: the PLAINTEXT client may neither describe (DESCRIBE on the
    cluster) nor create or delete (ALTER); the denials are logged as Kafka's are."""
    cluster = cluster_factory(1, AUTHORIZER)
    with WireClient.connect(cluster.bootstrap) as client:
        for v in VERSIONS:
            code, message, described = describe(client, v)
            assert (code, described) == (NOT_ALLOWED, {})
            assert message is not None and "is not authorized" in message, message
            created = create(client, creation(ORDERS_READ), creation(CLUSTER_ALTER), version=v)
            assert [c for c, _ in created] == [NOT_ALLOWED] * 2
            deleted = delete(client, acl_filter(), acl_filter(TOPIC), version=v)
            assert [(c, acls) for c, _, acls in deleted] == [(NOT_ALLOWED, [])] * 2
    assert stored(cluster).acls == ()
    broker = cluster.brokers[0]
    for operation, request in (("DESCRIBE", "DescribeAcls"), ("ALTER", "CreateAcls"),
                               ("ALTER", "DeleteAcls")):
        line = (f"kafka.authorizer.logger: Principal = User:ANONYMOUS is Denied operation = "
                f"{operation} from host = 127.0.0.1 on resource = Cluster:LITERAL:kafka-cluster"
                f" for request = {request} with resourceRefCount = 1 based on rule DefaultDeny")
        wait_until(lambda line=line: any(line in out for out in broker.output), 10,
                   f"the authorizer's log line for {request}")


def test_cluster_acls_decide_who_administers_acls(cluster_factory):
    """With allow.everyone.if.no.acl.found and no super user: anyone may while no ACL names
    the cluster; then ALTER on it allows creating, deleting and (implied) describing, and a
    DENY DESCRIBE takes describing away but not ALTER."""
    cluster = cluster_factory(1, {**AUTHORIZER, "allow.everyone.if.no.acl.found": "true"})
    me = acl(Operation.ALTER, name="kafka-cluster", rtype=CLUSTER, principal=ANONYMOUS,
             host="127.0.0.1")
    no_describe = acl(Operation.DESCRIBE, DENY, name="kafka-cluster", rtype=CLUSTER,
                      principal="User:*")
    with WireClient.connect(cluster.bootstrap) as client:
        assert describe(client) == (NONE, None, {})
        assert create(client, creation(CLUSTER_ALTER)) == [(NONE, None)]
        # An ACL now names the cluster, and none is for this client.
        assert describe(client)[0] == NOT_ALLOWED
        assert create(client, creation(me))[0][0] == NOT_ALLOWED
        assert stored(cluster).acls == (CLUSTER_ALTER,)

    cluster = cluster_factory(1, {**AUTHORIZER, "allow.everyone.if.no.acl.found": "true"})
    with WireClient.connect(cluster.bootstrap) as client:
        assert create(client, creation(me)) == [(NONE, None)]
        assert described_acls(client) == {me}, "ALTER implies DESCRIBE"
        assert create(client, creation(no_describe), creation(ORDERS_READ)) == [(NONE, None)] * 2
        assert describe(client)[0] == NOT_ALLOWED
        assert delete(client, acl_filter(CLUSTER, op=Operation.DESCRIBE)) == [
            (NONE, None, [no_describe])]
        assert described_acls(client) == {me, ORDERS_READ}


# -- create, describe, delete on the wire -------------------------------------------------


@pytest.mark.parametrize("version", VERSIONS)
def test_acls_are_created_described_and_deleted(cluster_factory, version):
    cluster = cluster_factory(1, SUPER)
    with WireClient.connect(cluster.bootstrap) as client:
        before = stored(cluster).version
        assert create(client, *map(creation, SAMPLE), version=version) == [(NONE, None)] * 5
        image = stored(cluster)
        assert image.version == before + 1, "one image update per request"
        assert image.acls == SAMPLE, "in request order"

        # The same ACLs again, one of them twice: success, nothing stored twice, no update.
        assert create(client, creation(ORDERS_READ), creation(GROUP_READ),
                      creation(GROUP_READ), version=version) == [(NONE, None)] * 3
        assert stored(cluster).version == image.version
        # A new ACL twice in one request is stored once.
        extra = acl(Operation.DESCRIBE, name="orders", principal="User:carol")
        assert create(client, creation(extra), creation(extra), version=version) == [
            (NONE, None)] * 2
        assert stored(cluster).acls == (*SAMPLE, extra)

        # Grouped by resource pattern.
        code, message, described = describe(client, version)
        assert (code, message) == (NONE, None)
        assert described == {
            pattern(ORDERS_READ): {entry(ORDERS_READ), entry(extra)},
            pattern(ORD_DENY): {entry(ORD_DENY)},
            pattern(EVERYONE_DESCRIBE): {entry(EVERYONE_DESCRIBE)},
            pattern(GROUP_READ): {entry(GROUP_READ)},
            pattern(CLUSTER_ALTER): {entry(CLUSTER_ALTER)},
        }

        # Deleted filter by filter, in order; an ACL two filters match is listed by both;
        # all in one update.
        before = stored(cluster).version
        assert delete(
            client,
            acl_filter(TOPIC, "orders", LITERAL, principal="User:alice"),
            acl_filter(principal="User:bob"),
            acl_filter(TOPIC, "no-such-topic"),
            acl_filter(ANY, None, ANY, op=Operation.ALTER),
            version=version,
        ) == [
            (NONE, None, [ORDERS_READ]),
            (NONE, None, [ORD_DENY, CLUSTER_ALTER]),
            (NONE, None, []),
            (NONE, None, [CLUSTER_ALTER]),
        ]
        image = stored(cluster)
        assert image.version == before + 1
        assert image.acls == (EVERYONE_DESCRIBE, GROUP_READ, extra)
        assert described_acls(client) == {EVERYONE_DESCRIBE, GROUP_READ, extra}
        assert delete(client, acl_filter(principal="User:nobody"), version=version) == [
            (NONE, None, [])]
        assert stored(cluster).version == image.version, "nothing deleted, nothing written"


def test_describe_filters(cluster_factory):
    cluster = cluster_factory(1, SUPER)
    longer = acl(Operation.READ, name="orders-eu-", pattern=PREFIXED)
    with WireClient.connect(cluster.bootstrap) as client:
        assert create(client, *map(creation, (*SAMPLE, longer))) == [(NONE, None)] * 6

        def patterns(**filter_args: Any) -> set[tuple[int, str, int]]:
            code, message, described = describe(client, **filter_args)
            assert (code, message) == (NONE, None)
            return set(described)

        # MATCH: the ACLs that apply to a topic of that name.
        assert patterns(rtype=TOPIC, name="orders-eu-1", pattern=MATCH) == {
            pattern(ORD_DENY), pattern(EVERYONE_DESCRIBE), pattern(longer)}
        assert patterns(rtype=TOPIC, name="orders", pattern=MATCH) == {
            pattern(ORDERS_READ), pattern(ORD_DENY), pattern(EVERYONE_DESCRIBE)}
        # ANY with a name: that name exactly, '*' and prefixes not included.
        assert patterns(rtype=TOPIC, name="orders") == {pattern(ORDERS_READ)}
        assert patterns(name="*") == {pattern(EVERYONE_DESCRIBE)}
        assert patterns(rtype=TOPIC, pattern=PREFIXED) == {pattern(ORD_DENY), pattern(longer)}
        assert patterns(rtype=GROUP) == {pattern(GROUP_READ)}
        assert patterns(rtype=CLUSTER) == {pattern(CLUSTER_ALTER)}
        assert patterns(principal="User:*") == {pattern(EVERYONE_DESCRIBE)}
        assert patterns(host="10.0.0.5") == {pattern(ORD_DENY)}
        assert patterns(perm=DENY) == {pattern(ORD_DENY)}
        assert patterns(op=Operation.DESCRIBE) == {pattern(EVERYONE_DESCRIBE)}
        assert patterns(op=Operation.ALL) == set(), "no implication in filters"
        # Codes Kafka does not know parse as UNKNOWN, which matches nothing.
        assert describe(client, rtype=99) == (NONE, None, {})
        assert describe(client, op=99) == (NONE, None, {})


# -- refusals -----------------------------------------------------------------------------


def test_create_refuses_invalid_acls_one_by_one(cluster_factory):
    cluster = cluster_factory(1, SUPER)
    with WireClient.connect(cluster.bootstrap) as client:
        assert create(
            client,
            creation(acl(name="my-cluster", rtype=CLUSTER)),
            creation(acl(name="")),
            creation(ORDERS_READ),
            creation(resource_type=99),
            creation(resource_pattern_type=99),
            creation(operation=99),
            creation(permission_type=-5),
            creation(CLUSTER_ALTER),
        ) == [
            (INVALID, "The only valid name for the CLUSTER resource is kafka-cluster"),
            (INVALID, "Invalid empty resource name"),
            (NONE, None),
            (INVALID, "Invalid resourceType UNKNOWN"),
            (INVALID, "Invalid patternType UNKNOWN"),
            (INVALID, "Invalid operation UNKNOWN"),
            (INVALID, "Invalid permissionType UNKNOWN"),
            (NONE, None),
        ]
        assert stored(cluster).acls == (ORDERS_READ, CLUSTER_ALTER)


@pytest.mark.parametrize("field,code", [("resource_type", ANY),
                                        ("resource_pattern_type", ANY),
                                        ("resource_pattern_type", int(MATCH)),
                                        ("operation", ANY), ("permission_type", ANY)])
def test_create_with_an_any_value_fails_the_whole_request(cluster_factory, field, code):
    """Kafka cannot even build such an ACL: the exception fails every creation, without a
    message (UNKNOWN_SERVER_ERROR)."""
    cluster = cluster_factory(1, SUPER)
    with WireClient.connect(cluster.bootstrap) as client:
        assert create(client, creation(ORDERS_READ), creation(GROUP_READ, **{field: code})
                      ) == [(ErrorCode.unknown_server_error, None)] * 2
        assert stored(cluster).acls == ()


def test_delete_refuses_filters_with_unknown_codes(cluster_factory):
    cluster = cluster_factory(1, SUPER)
    with WireClient.connect(cluster.bootstrap) as client:
        assert create(client, creation(ORDERS_READ)) == [(NONE, None)]
        assert delete(client, acl_filter(rtype=99), acl_filter(pattern=42),
                      acl_filter(op=99), acl_filter(perm=99), acl_filter(TOPIC)) == [
            (INVALID, "Unknown patternFilter.", []),
            (INVALID, "Unknown patternFilter.", []),
            (INVALID, "Unknown entryFilter.", []),
            (INVALID, "Unknown entryFilter.", []),
            (NONE, None, [ORDERS_READ]),
        ]
        assert stored(cluster).acls == ()


@pytest.mark.parametrize("field", ["resource_type", "pattern_type", "operation",
                                   "permission_type"])
def test_code_zero_is_refused_as_an_invalid_request(cluster_factory, field):
    """Kafka's parser refuses UNKNOWN (0) in any enum and closes the connection; here the
    request is answered with INVALID_REQUEST wherever Kafka puts errors, nothing changes,
    and the connection goes on."""
    cluster = cluster_factory(1, SUPER)
    filter_field = {"resource_type": "rtype", "pattern_type": "pattern",
                    "operation": "op", "permission_type": "perm"}[field]
    creation_field = "resource_pattern_type" if field == "pattern_type" else field
    with WireClient.connect(cluster.bootstrap) as client:
        assert create(client, creation(ORDERS_READ)) == [(NONE, None)]
        before = stored(cluster)
        assert describe(client, **{filter_field: 0}) == (
            INVALID, "DescribeAclsRequest contains UNKNOWN elements", {})
        assert create(client, creation(GROUP_READ), creation(GROUP_READ, **{creation_field: 0})
                      ) == [(INVALID, "CreatableAcls contain unknown elements")] * 2
        assert delete(client, acl_filter(), acl_filter(**{filter_field: 0})) == [
            (INVALID, "Filters contain UNKNOWN elements", [])] * 2
        assert stored(cluster) == before
        assert described_acls(client) == {ORDERS_READ}, "the connection still serves"


# -- clients and tools --------------------------------------------------------------------


def test_confluent_kafka_admin_client(cluster_factory):
    cluster = cluster_factory(1, SUPER)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    topic_read = ClientAcl(ClientResourceType.TOPIC, "orders", ResourcePatternType.LITERAL,
                           "User:alice", "*", AclOperation.READ, AclPermissionType.ALLOW)
    prefixed_deny = ClientAcl(ClientResourceType.TOPIC, "ord", ResourcePatternType.PREFIXED,
                              "User:bob", "10.0.0.5", AclOperation.WRITE,
                              AclPermissionType.DENY)
    group_read = ClientAcl(ClientResourceType.GROUP, "app", ResourcePatternType.LITERAL,
                           "User:alice", "*", AclOperation.READ, AclPermissionType.ALLOW)
    cluster_alter = ClientAcl(ClientResourceType.BROKER, "kafka-cluster",
                              ResourcePatternType.LITERAL, "User:bob", "*", AclOperation.ALTER,
                              AclPermissionType.ALLOW)
    created = admin.create_acls([topic_read, prefixed_deny, group_read, cluster_alter],
                                request_timeout=10)
    for binding, future in created.items():
        assert future.result(15) is None, binding
    assert set(stored(cluster).acls) == {ORDERS_READ, ORD_DENY, GROUP_READ, CLUSTER_ALTER}

    def described(f: AclBindingFilter) -> set[ClientAcl]:
        return set(admin.describe_acls(f, request_timeout=10).result(15))

    everything = AclBindingFilter(ClientResourceType.ANY, None, ResourcePatternType.ANY, None,
                                  None, AclOperation.ANY, AclPermissionType.ANY)
    assert described(everything) == {topic_read, prefixed_deny, group_read, cluster_alter}
    assert described(AclBindingFilter(
        ClientResourceType.TOPIC, "orders", ResourcePatternType.MATCH, None, None,
        AclOperation.ANY, AclPermissionType.ANY)) == {topic_read, prefixed_deny}

    bob = AclBindingFilter(ClientResourceType.ANY, None, ResourcePatternType.ANY, "User:bob",
                           None, AclOperation.ANY, AclPermissionType.ANY)
    deleted = admin.delete_acls([bob], request_timeout=10)
    assert set(deleted[bob].result(15)) == {prefixed_deny, cluster_alter}
    assert described(everything) == {topic_read, group_read}

    bad = ClientAcl(ClientResourceType.BROKER, "my-cluster", ResourcePatternType.LITERAL,
                    "User:bob", "*", AclOperation.ALTER, AclPermissionType.ALLOW)
    with pytest.raises(KafkaException) as refused:
        admin.create_acls([bad], request_timeout=10)[bad].result(15)
    error = refused.value.args[0]
    assert error.code() == KafkaError.INVALID_REQUEST
    assert "The only valid name for the CLUSTER resource is kafka-cluster" in error.str()


def _listed(out: str) -> dict[str, set[str]]:
    """AclCommand's ``--list`` output: resource pattern -> its ACL lines."""
    listed: dict[str, set[str]] = {}
    for block in re.split(r"(?=Current ACLs for resource )", out):
        head = re.match(r"Current ACLs for resource `(.*?)`:", block)
        if head:
            listed[head[1]] = set(re.findall(r"\(principal=.*?\)", block))
    return listed


def test_kafka_acl_command_adds_lists_and_removes(kafka_tools, cluster_factory):
    cluster = cluster_factory(1, SUPER)

    def acls(*args: str) -> str:
        return kafka_tools.run(ACL_COMMAND, "--bootstrap-server", cluster.bootstrap,
                               *args).stdout

    acls("--add", "--allow-principal", "User:alice", "--operation", "Read",
         "--operation", "Describe", "--topic", "orders", "--group", "app")
    acls("--add", "--deny-principal", "User:bob", "--deny-host", "10.0.0.5", "--operation",
         "Write", "--topic", "ord", "--resource-pattern-type", "prefixed")
    acls("--add", "--allow-principal", "User:bob", "--operation", "Alter", "--cluster")
    acls("--add", "--consumer", "--allow-principal", "User:carol", "--topic", "payments",
         "--group", "billing")
    assert set(stored(cluster).acls) == {
        ORDERS_READ, acl(Operation.DESCRIBE, principal="User:alice"), GROUP_READ,
        acl(Operation.DESCRIBE, name="app", rtype=GROUP, principal="User:alice"),
        ORD_DENY, acl(Operation.ALTER, name="kafka-cluster", rtype=CLUSTER,
                      principal="User:bob"),
        acl(Operation.READ, name="payments", principal="User:carol"),
        acl(Operation.DESCRIBE, name="payments", principal="User:carol"),
        acl(Operation.READ, name="billing", rtype=GROUP, principal="User:carol"),
    }

    orders = "ResourcePattern(resourceType=TOPIC, name=orders, patternType=LITERAL)"
    ord_prefix = "ResourcePattern(resourceType=TOPIC, name=ord, patternType=PREFIXED)"
    alice_read = "(principal=User:alice, host=*, operation=READ, permissionType=ALLOW)"
    alice_describe = "(principal=User:alice, host=*, operation=DESCRIBE, permissionType=ALLOW)"
    bob_write = "(principal=User:bob, host=10.0.0.5, operation=WRITE, permissionType=DENY)"
    listed = _listed(acls("--list"))
    assert len(listed) == 6, listed
    assert listed[orders] == {alice_read, alice_describe}
    assert listed[ord_prefix] == {bob_write}
    assert listed["ResourcePattern(resourceType=CLUSTER, name=kafka-cluster, "
                  "patternType=LITERAL)"] == {
        "(principal=User:bob, host=*, operation=ALTER, permissionType=ALLOW)"}
    assert _listed(acls("--list", "--topic", "orders-eu", "--resource-pattern-type",
                        "match")) == {ord_prefix: {bob_write}}
    assert _listed(acls("--list", "--principal", "User:carol")) == {
        "ResourcePattern(resourceType=TOPIC, name=payments, patternType=LITERAL)": {
            "(principal=User:carol, host=*, operation=READ, permissionType=ALLOW)",
            "(principal=User:carol, host=*, operation=DESCRIBE, permissionType=ALLOW)"},
        "ResourcePattern(resourceType=GROUP, name=billing, patternType=LITERAL)": {
            "(principal=User:carol, host=*, operation=READ, permissionType=ALLOW)"},
    }

    acls("--remove", "--force", "--allow-principal", "User:alice", "--operation", "Describe",
         "--topic", "orders")
    assert _listed(acls("--list", "--topic", "orders")) == {orders: {alice_read}}
    acls("--remove", "--force", "--topic", "ord", "--resource-pattern-type", "prefixed")
    acls("--remove", "--force", "--cluster")
    assert _listed(acls("--list", "--topic", "ord", "--resource-pattern-type", "any")) == {}
    assert len(stored(cluster).acls) == 6


# -- a cluster ----------------------------------------------------------------------------


def test_every_broker_sees_acls_and_a_restarted_cluster_keeps_them(cluster_factory):
    cluster = cluster_factory(3, SUPER)
    clients = [WireClient.connect(b.bootstrap) for b in cluster.brokers]
    try:
        assert create(clients[0], *map(creation, SAMPLE)) == [(NONE, None)] * 5
        for i in (1, 2):
            wait_until(lambda c=clients[i]: described_acls(c) == set(SAMPLE), 10,
                       f"broker {i} to describe the new ACLs")
        assert delete(clients[2], acl_filter(principal="User:bob")) == [
            (NONE, None, [ORD_DENY, CLUSTER_ALTER])]
        remaining = {ORDERS_READ, EVERYONE_DESCRIBE, GROUP_READ}
        for i in (0, 1):
            wait_until(lambda c=clients[i]: described_acls(c) == remaining, 10,
                       f"broker {i} to see the deletion")
    finally:
        for client in clients:
            client.close()

    assert set(cluster.stop().values()) == {0}
    cluster.start()
    for broker in cluster.brokers:
        with WireClient.connect(broker.bootstrap) as client:
            assert described_acls(client) == remaining
    assert stored(cluster).acls == (ORDERS_READ, EVERYONE_DESCRIBE, GROUP_READ)
