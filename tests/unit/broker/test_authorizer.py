"""The authorizer and the ACL filters on their own (broker.security.acl), against Kafka's
StandardAuthorizer semantics: deny wins; LITERAL, ``*`` and PREFIXED patterns; ``User:*``;
hosts; the operations an ALLOW implies (and a DENY does not); super users above every DENY;
``allow.everyone.if.no.acl.found`` only for resources no ACL names; the default
``authorizeByResourceType(WRITE, TOPIC)`` for idempotent producers; Kafka's audit lines; and
DescribeAcls/DeleteAcls filters, MATCH and ANY included.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

import pytest

from broker.cluster.image import ClusterImage
from broker.security.acl import (
    CLUSTER_NAME,
    AclBinding,
    AclFilter,
    Authorizer,
    Operation,
    PatternType,
    Permission,
    ResourceType,
    parse_super_users,
)

TOPIC, GROUP, CLUSTER = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
LITERAL, PREFIXED = PatternType.LITERAL, PatternType.PREFIXED
ALLOW, DENY = Permission.ALLOW, Permission.DENY
ALICE, BOB = "User:alice", "User:bob"
HOST, OTHER_HOST = "10.0.0.5", "10.0.0.6"


def acl(op: Operation = Operation.READ, perm: Permission = ALLOW, name: str = "orders",
        pattern: PatternType = LITERAL, principal: str = ALICE, host: str = "*",
        rtype: ResourceType = TOPIC) -> AclBinding:
    return AclBinding(rtype, name, pattern, principal, host, op, perm)


def authorizer(*acls: AclBinding, super_users: Iterable[str] = (),
               allow_if_no_acl: bool = False, enabled: bool = True) -> Authorizer:
    return Authorizer(enabled, frozenset(super_users), allow_if_no_acl, lambda: acls)


def may(auth: Authorizer, op: Operation, name: str = "orders", principal: str = ALICE,
        host: str = HOST, rtype: ResourceType = TOPIC) -> bool:
    return auth.authorize(principal, host, op, rtype, name)


# -- decisions --------------------------------------------------------------------------


def test_without_acls_everything_is_denied_and_a_disabled_authorizer_allows_all():
    assert not may(authorizer(), Operation.READ)
    assert not may(authorizer(), Operation.DESCRIBE, CLUSTER_NAME, rtype=CLUSTER)
    disabled = authorizer(acl(Operation.ALL, DENY), enabled=False)
    assert may(disabled, Operation.READ), "no authorizer: Kafka allows every request"


@pytest.mark.parametrize("order", ["deny first", "allow first"])
def test_deny_wins_over_allow(order):
    allow, deny = acl(Operation.READ, ALLOW), acl(Operation.READ, DENY)
    auth = authorizer(*([deny, allow] if order == "deny first" else [allow, deny]))
    assert not may(auth, Operation.READ)


def test_deny_wins_from_any_pattern_principal_or_host():
    allow = acl(Operation.WRITE)
    assert may(authorizer(allow), Operation.WRITE)
    for deny in (acl(Operation.WRITE, DENY, name="*"),
                 acl(Operation.WRITE, DENY, name="ord", pattern=PREFIXED),
                 acl(Operation.WRITE, DENY, principal="User:*"),
                 acl(Operation.WRITE, DENY, host=HOST),
                 acl(Operation.ALL, DENY)):
        assert not may(authorizer(allow, deny), Operation.WRITE), deny
    # A deny for someone else, elsewhere, or for another operation leaves the allow alone.
    for deny in (acl(Operation.WRITE, DENY, principal=BOB),
                 acl(Operation.WRITE, DENY, host=OTHER_HOST),
                 acl(Operation.READ, DENY),
                 acl(Operation.WRITE, DENY, name="orders2"),
                 acl(Operation.WRITE, DENY, name="orders", rtype=GROUP)):
        assert may(authorizer(allow, deny), Operation.WRITE), deny


def test_literal_names_match_exactly():
    auth = authorizer(acl(name="orders"))
    assert may(auth, Operation.READ, "orders")
    for other in ("orders2", "order", "Orders", "*"):
        assert not may(auth, Operation.READ, other), other


def test_wildcard_name_matches_every_resource_of_its_type_only():
    auth = authorizer(acl(name="*"))
    for name in ("orders", "payments", "*", "x"):
        assert may(auth, Operation.READ, name), name
    assert not may(auth, Operation.READ, "orders", rtype=GROUP)


def test_prefixed_names_match_by_prefix():
    auth = authorizer(acl(name="ord", pattern=PREFIXED))
    for name in ("ord", "orders", "ord.eu"):
        assert may(auth, Operation.READ, name), name
    for name in ("or", "xorders", "Orders"):
        assert not may(auth, Operation.READ, name), name
    # A PREFIXED '*' is the one-character prefix '*', not a wildcard.
    star = authorizer(acl(name="*", pattern=PREFIXED))
    assert may(star, Operation.READ, "*-topic")
    assert not may(star, Operation.READ, "orders")


def test_user_wildcard_principal_matches_every_principal():
    auth = authorizer(acl(principal="User:*"))
    for principal in (ALICE, BOB, "User:ANONYMOUS", "User:CN=client1,O=Acme"):
        assert may(auth, Operation.READ, principal=principal), principal
    named = authorizer(acl(principal=ALICE))
    assert not may(named, Operation.READ, principal=BOB)
    assert not may(named, Operation.READ, principal="User:alice2")


def test_hosts_match_exactly_or_by_wildcard():
    auth = authorizer(acl(host=HOST))
    assert may(auth, Operation.READ, host=HOST)
    assert not may(auth, Operation.READ, host=OTHER_HOST)
    assert not may(auth, Operation.READ, host="10.0.0.50"), "exact, not a prefix"
    assert may(authorizer(acl(host="*")), Operation.READ, host=OTHER_HOST)


@pytest.mark.parametrize("granted", [Operation.READ, Operation.WRITE, Operation.DELETE,
                                     Operation.ALTER, Operation.DESCRIBE])
def test_an_allow_of_read_write_delete_or_alter_implies_describe(granted):
    auth = authorizer(acl(granted))
    assert may(auth, Operation.DESCRIBE)
    others = {Operation.READ, Operation.WRITE, Operation.DELETE, Operation.ALTER,
              Operation.CREATE, Operation.DESCRIBE_CONFIGS} - {granted}
    for op in others:
        assert not may(auth, op), f"{granted.name} must not imply {op.name}"


def test_implications_are_for_allows_only():
    # DENY READ does not deny DESCRIBE, which ALLOW READ implies.
    auth = authorizer(acl(Operation.READ, ALLOW), acl(Operation.READ, DENY))
    assert not may(auth, Operation.READ)
    assert may(auth, Operation.DESCRIBE)
    # A DENY DESCRIBE does take away what ALLOW READ implied.
    assert not may(authorizer(acl(Operation.READ), acl(Operation.DESCRIBE, DENY)),
                   Operation.DESCRIBE)
    # DENY ALTER_CONFIGS does not deny DESCRIBE_CONFIGS.
    configs = authorizer(acl(Operation.DESCRIBE_CONFIGS), acl(Operation.ALTER_CONFIGS, DENY))
    assert may(configs, Operation.DESCRIBE_CONFIGS)
    assert not may(configs, Operation.ALTER_CONFIGS)


def test_alter_configs_implies_describe_configs_only():
    auth = authorizer(acl(Operation.ALTER_CONFIGS))
    assert may(auth, Operation.ALTER_CONFIGS)
    assert may(auth, Operation.DESCRIBE_CONFIGS)
    assert not may(auth, Operation.DESCRIBE), "ALTER_CONFIGS is not ALTER"
    assert not may(authorizer(acl(Operation.DESCRIBE_CONFIGS)), Operation.ALTER_CONFIGS)
    assert not may(authorizer(acl(Operation.ALTER)), Operation.DESCRIBE_CONFIGS)


def test_exact_operations_are_never_implied_except_by_all():
    cluster = {"name": CLUSTER_NAME, "rtype": CLUSTER}
    auth = authorizer(acl(Operation.ALTER, **cluster), acl(Operation.WRITE))
    assert not may(auth, Operation.CLUSTER_ACTION, **cluster)
    assert not may(auth, Operation.IDEMPOTENT_WRITE, **cluster)
    assert not may(auth, Operation.CREATE, **cluster)
    assert not may(auth, Operation.CREATE)
    everything = authorizer(acl(Operation.ALL, **cluster))
    for op in (Operation.CLUSTER_ACTION, Operation.IDEMPOTENT_WRITE, Operation.CREATE,
               Operation.ALTER, Operation.DESCRIBE, Operation.DESCRIBE_CONFIGS):
        assert may(everything, op, **cluster), op


def test_all_allows_and_denies_every_operation():
    ops = [op for op in Operation if op > Operation.ALL]
    allow_all = authorizer(acl(Operation.ALL))
    assert all(may(allow_all, op) for op in ops)
    deny_all = authorizer(acl(Operation.READ), acl(Operation.ALL, DENY))
    assert not any(may(deny_all, op) for op in ops), "DENY ALL denies DESCRIBE too"


def test_super_users_are_allowed_everything_whatever_denies():
    users = parse_super_users(" User:admin ; User:broker;;")
    assert users == {"User:admin", "User:broker"}
    auth = authorizer(acl(Operation.ALL, DENY, principal="User:*", name="*"),
                      acl(Operation.ALL, DENY, principal="User:admin"), super_users=users)
    for op in (Operation.READ, Operation.WRITE, Operation.CLUSTER_ACTION):
        assert may(auth, op, principal="User:admin"), op
        assert may(auth, op, CLUSTER_NAME, principal="User:broker", rtype=CLUSTER), op
    assert not may(auth, Operation.READ, principal=ALICE)
    assert not may(auth, Operation.READ, principal="User:Admin"), "exact string match"


def test_allow_everyone_if_no_acl_found_applies_only_where_no_acl_names_the_resource():
    def everyone(*acls: AclBinding) -> Authorizer:
        return authorizer(*acls, allow_if_no_acl=True)

    assert may(everyone(), Operation.WRITE)
    # ACLs on other resources, or other resource types of the same name, do not count.
    unrelated = everyone(acl(name="payments"), acl(name="pay", pattern=PREFIXED),
                         acl(name="*", rtype=GROUP), acl(name="orders", rtype=GROUP))
    assert may(unrelated, Operation.WRITE, principal=BOB)
    # Any ACL that applies to the resource counts, whoever and whatever it is for.
    for applying in (acl(Operation.READ, principal=BOB), acl(host=OTHER_HOST),
                     acl(name="*"), acl(name="or", pattern=PREFIXED),
                     acl(Operation.DESCRIBE, DENY, principal=BOB)):
        auth = everyone(applying)
        assert not may(auth, Operation.WRITE, principal=ALICE), applying
    # Without the setting, no ACL means denied.
    assert not may(authorizer(acl(name="payments")), Operation.WRITE)


def test_decisions_follow_acl_changes():
    acls: list[AclBinding] = []
    auth = Authorizer(True, frozenset(), False, lambda: tuple(acls))
    assert not may(auth, Operation.READ)
    acls.append(acl(Operation.READ))
    assert may(auth, Operation.READ), "a new image of ACLs drops cached decisions"
    acls.append(acl(Operation.READ, DENY))
    assert not may(auth, Operation.READ)


def test_authorized_operations_bits():
    auth = authorizer(acl(Operation.READ), acl(Operation.ALTER_CONFIGS))
    bits = auth.authorized_operations(ALICE, HOST, TOPIC, "orders")
    expected = {Operation.READ, Operation.DESCRIBE, Operation.ALTER_CONFIGS,
                Operation.DESCRIBE_CONFIGS}
    assert bits == sum(1 << op for op in expected)
    assert auth.authorized_operations(BOB, HOST, TOPIC, "orders") == 0


# -- authorizeByResourceType(WRITE, TOPIC) -----------------------------------------------


def write(*acls: AclBinding, principal: str = ALICE, **settings: object) -> bool:
    return authorizer(*acls, **settings).may_write_some_topic(principal, HOST)


def test_may_write_some_topic_needs_a_write_or_all_allow():
    assert not write()
    assert write(acl(Operation.WRITE))
    assert write(acl(Operation.ALL, name="x", pattern=PREFIXED))
    assert write(acl(Operation.WRITE, principal="User:*"))
    assert not write(acl(Operation.READ)), "no implication: READ is not WRITE"
    assert not write(acl(Operation.WRITE, principal=BOB))
    assert not write(acl(Operation.WRITE, host=OTHER_HOST))
    assert not write(acl(Operation.WRITE, rtype=GROUP))


def test_may_write_some_topic_weighs_denies_as_kafka_does():
    allow = acl(Operation.WRITE, name="orders")
    assert not write(allow, acl(Operation.WRITE, DENY, name="orders"))
    assert not write(allow, acl(Operation.WRITE, DENY, name="ord", pattern=PREFIXED))
    assert not write(allow, acl(Operation.ALL, DENY, name="orders"))
    assert write(allow, acl(Operation.WRITE, DENY, name="payments"))
    assert write(allow, acl(Operation.WRITE, DENY, name="orders", principal=BOB))
    # A wildcard deny denies outright, even beside a wildcard allow.
    assert not write(acl(Operation.WRITE, name="*"), acl(Operation.WRITE, DENY, name="*"))
    assert write(acl(Operation.WRITE, name="*"), acl(Operation.WRITE, DENY, name="orders"))
    # A prefixed allow survives a literal deny, or a prefixed deny longer than itself.
    prefixed = acl(Operation.WRITE, name="ord", pattern=PREFIXED)
    assert write(prefixed, acl(Operation.WRITE, DENY, name="ord"))
    assert write(prefixed, acl(Operation.WRITE, DENY, name="orders", pattern=PREFIXED))
    assert not write(prefixed, acl(Operation.WRITE, DENY, name="or", pattern=PREFIXED))
    assert not write(prefixed, acl(Operation.WRITE, DENY, name="ord", pattern=PREFIXED))


def test_may_write_some_topic_for_super_users_disabled_or_open_authorizers():
    deny_all = acl(Operation.ALL, DENY, name="*", principal="User:*")
    assert write(deny_all, principal="User:admin", super_users={"User:admin"})
    assert write(deny_all, enabled=False)
    assert write(allow_if_no_acl=True), "no ACL names the topic 'hardcode': allowed"
    assert not write(acl(Operation.READ, name="*", principal=BOB), allow_if_no_acl=True)


# -- audit log --------------------------------------------------------------------------


def test_denials_are_logged_as_kafka_logs_them(caplog):
    auth = authorizer(acl(Operation.WRITE, DENY), acl(Operation.READ),
                      super_users={"User:admin"})
    caplog.set_level(logging.INFO, logger="kafka.authorizer.logger")
    assert not auth.authorize(ALICE, HOST, Operation.WRITE, TOPIC, "orders",
                              lambda: "Produce")
    assert not auth.authorize(BOB, HOST, Operation.DESCRIBE, CLUSTER, CLUSTER_NAME,
                              lambda: "DescribeAcls")
    assert auth.authorize(ALICE, HOST, Operation.READ, TOPIC, "orders", lambda: "Fetch")
    assert auth.authorize("User:admin", HOST, Operation.WRITE, TOPIC, "orders",
                          lambda: "Produce")
    assert not auth.authorize(BOB, HOST, Operation.READ, TOPIC, "orders"), "not logged"
    records = [r for r in caplog.records if r.name == "kafka.authorizer.logger"]
    assert [r.levelno for r in records] == [logging.INFO, logging.INFO]
    assert [r.getMessage() for r in records] == [
        "Principal = User:alice is Denied operation = WRITE from host = 10.0.0.5 on "
        "resource = Topic:LITERAL:orders for request = Produce with resourceRefCount = 1 "
        "based on rule MatchingAcl(acl=StandardAcl(resourceType=TOPIC, resourceName=orders, "
        "patternType=LITERAL, principal=User:alice, host=*, operation=WRITE, "
        "permissionType=DENY))",
        "Principal = User:bob is Denied operation = DESCRIBE from host = 10.0.0.5 on "
        "resource = Cluster:LITERAL:kafka-cluster for request = DescribeAcls with "
        "resourceRefCount = 1 based on rule DefaultDeny",
    ]


# -- filters ----------------------------------------------------------------------------


def flt(rtype: ResourceType = ResourceType.ANY, name: str | None = None,
        pattern: PatternType = PatternType.ANY, principal: str | None = None,
        host: str | None = None, op: Operation = Operation.ANY,
        perm: Permission = Permission.ANY) -> AclFilter:
    return AclFilter(rtype, name, pattern, principal, host, op, perm)


LITERAL_ORDERS = acl(name="orders")
WILDCARD = acl(name="*")
PREFIX_ORD = acl(name="ord", pattern=PREFIXED)
PREFIX_ORDERS = acl(name="orders", pattern=PREFIXED)
PREFIX_LONGER = acl(name="orders-eu", pattern=PREFIXED)
OTHER = acl(name="payments")
GROUP_ORDERS = acl(name="orders", rtype=GROUP)
CLUSTER_ALTER = acl(Operation.ALTER, DENY, CLUSTER_NAME, principal=BOB, host=HOST,
                    rtype=CLUSTER)
EVERY = (LITERAL_ORDERS, WILDCARD, PREFIX_ORD, PREFIX_ORDERS, PREFIX_LONGER, OTHER,
         GROUP_ORDERS, CLUSTER_ALTER)


def matching(f: AclFilter) -> set[AclBinding]:
    return {a for a in EVERY if f.matches(a)}


def test_any_filter_matches_everything():
    assert matching(flt()) == set(EVERY)


def test_filter_by_resource_type():
    assert matching(flt(GROUP)) == {GROUP_ORDERS}
    assert matching(flt(CLUSTER)) == {CLUSTER_ALTER}


def test_any_pattern_filter_with_a_name_matches_only_that_stored_name():
    assert matching(flt(TOPIC, "orders")) == {LITERAL_ORDERS, PREFIX_ORDERS}
    assert matching(flt(name="orders")) == {LITERAL_ORDERS, PREFIX_ORDERS, GROUP_ORDERS}
    assert matching(flt(TOPIC, "*")) == {WILDCARD}, "'*' is a name like any other here"


def test_literal_and_prefixed_filters_match_their_own_pattern_type():
    assert matching(flt(TOPIC, "orders", LITERAL)) == {LITERAL_ORDERS}
    assert matching(flt(TOPIC, "orders", PREFIXED)) == {PREFIX_ORDERS}
    assert matching(flt(TOPIC, None, PREFIXED)) == {PREFIX_ORD, PREFIX_ORDERS, PREFIX_LONGER}
    assert matching(flt(TOPIC, None, LITERAL)) == {LITERAL_ORDERS, WILDCARD, OTHER}
    assert matching(flt(TOPIC, "ord", LITERAL)) == set()


def test_match_filter_finds_the_acls_that_would_apply_to_a_resource():
    assert matching(flt(TOPIC, "orders", PatternType.MATCH)) == {
        LITERAL_ORDERS, WILDCARD, PREFIX_ORD, PREFIX_ORDERS}
    assert matching(flt(TOPIC, "orders-eu-1", PatternType.MATCH)) == {
        WILDCARD, PREFIX_ORD, PREFIX_ORDERS, PREFIX_LONGER}
    assert matching(flt(TOPIC, "payments", PatternType.MATCH)) == {OTHER, WILDCARD}
    assert matching(flt(ResourceType.ANY, "orders", PatternType.MATCH)) == {
        LITERAL_ORDERS, WILDCARD, PREFIX_ORD, PREFIX_ORDERS, GROUP_ORDERS}
    assert matching(flt(TOPIC, None, PatternType.MATCH)) == matching(flt(TOPIC))


def test_entry_filters_match_exactly_without_implication():
    wildcard_user = acl(principal="User:*")
    every_host = acl(host="*")
    one_host = acl(host=HOST)
    acls = (wildcard_user, every_host, one_host, acl(Operation.ALL))
    assert {a for a in acls if flt(principal="User:*").matches(a)} == {wildcard_user}
    assert {a for a in acls if flt(host="*").matches(a)} == {
        wildcard_user, every_host, acl(Operation.ALL)}
    assert {a for a in acls if flt(host=HOST).matches(a)} == {one_host}
    assert {a for a in acls if flt(op=Operation.ALL).matches(a)} == {acl(Operation.ALL)}
    assert not flt(op=Operation.DESCRIBE).matches(acl(Operation.READ))
    assert matching(flt(perm=DENY)) == {CLUSTER_ALTER}
    assert matching(flt(perm=ALLOW)) == set(EVERY) - {CLUSTER_ALTER}
    assert matching(flt(principal=BOB, host=HOST, op=Operation.ALTER)) == {CLUSTER_ALTER}


def test_unknown_filter_values_match_nothing():
    for f in (flt(ResourceType.UNKNOWN), flt(pattern=PatternType.UNKNOWN),
              flt(op=Operation.UNKNOWN), flt(perm=Permission.UNKNOWN)):
        assert matching(f) == set(), f


def test_acls_survive_the_image_round_trip():
    image = ClusterImage().with_acls(EVERY)
    assert ClusterImage.from_json(image.to_json(), 1).acls == EVERY
    assert ClusterImage.from_json(ClusterImage().to_json(), 1).acls == ()
