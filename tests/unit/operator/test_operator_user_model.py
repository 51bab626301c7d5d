"""KafkaUser → its Secret, SCRAM credential, ACL bindings and status
(kafkube_operator.model.user): golden files for what is deterministic (a SCRAM user's Secret
given its password, the ACL bindings, the status), the rest by property. No cluster needed.

Regenerate the golden files after an intended change with
    KAFKUBE_UPDATE_GOLDEN=1 .venv/bin/pytest tests/unit/operator/test_operator_user_model.py"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from broker.security.tls import certificate_principal, parse_principal_rules
from kafkube_operator.model.certificates import KeyPair, new_ca, signed_by
from kafkube_operator.model.pki import decode
from kafkube_operator.model.user import (
    AclBinding,
    UserSpec,
    acl_bindings,
    acl_plan,
    problems,
    secret_conflict,
    user_secret,
    user_status,
)
from tests.support.golden import assert_golden

GOLDEN = Path(__file__).parent / "golden" / "users"
NOW = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
STAMP = "2026-01-01T00:00:00Z"
CLUSTER_SPEC = {"listeners": [
    {"name": "tls", "port": 9093, "tls": True, "authentication": {"type": "tls"}},
    {"name": "scram", "port": 9094, "tls": True, "authentication": {"type": "scram-sha-512"}}],
    "authorization": {"type": "simple"}}
ACLS = [
    {"resource": {"type": "topic", "name": "orders", "patternType": "literal"},
     "operations": ["Read", "Describe"], "host": "*", "type": "allow"},
    {"resource": {"type": "group", "name": "billing-", "patternType": "prefix"},
     "operations": ["Read"], "host": "*", "type": "allow"},
    {"resource": {"type": "cluster"}, "operations": ["IdempotentWrite"]},
    {"resource": {"type": "transactionalId", "name": "tx", "patternType": "literal"},
     "operations": ["Write", "DescribeConfigs"], "host": "10.0.0.1", "type": "deny"},
]


def kafka_user(name: str = "alice", authentication: str = "scram-sha-512",
               acls: list | None = None, cluster: str = "prod") -> dict:
    spec: dict = {"cluster": cluster, "authentication": {"type": authentication}}
    if acls is not None:
        spec["authorization"] = {"type": "simple", "acls": acls}
    return {"apiVersion": "kafkube.io/v1alpha1", "kind": "KafkaUser",
            "metadata": {"name": name, "namespace": "kafka", "generation": 2,
                         "uid": "6b1f3e2a-0000-4000-8000-00000000000a"},
            "spec": spec}


def golden(name: str, value: object) -> None:
    assert_golden(GOLDEN / f"{name}.yaml", yaml.safe_dump(value, sort_keys=False))


def test_a_scram_user_matches_the_golden_file() -> None:
    user = UserSpec.of(kafka_user(acls=ACLS))
    decided = user_secret(user, None, None, NOW, password=lambda: "s3cr3t-generated")
    status = user_status(user, 2, [], "ready", [], STAMP)
    golden("scram-user", {
        "secret": decided.manifest, "password": decided.password, "action": decided.action,
        "acls": [b.as_dict() for b in sorted(acl_bindings(user))], "status": status})


def test_the_acl_bindings_of_a_tls_user_match_the_golden_file() -> None:
    user = UserSpec.of(kafka_user("bob", "tls", ACLS))
    golden("tls-user-acls", [b.as_dict() for b in sorted(acl_bindings(user))])


def test_principals_match_the_brokers_mapping() -> None:
    """User:<name> after a SCRAM login; for a certificate, the subject as the brokers'
    default principal mapping makes it (broker/security/tls.py)."""
    assert UserSpec.of(kafka_user()).principal == "User:alice"
    tls_user = UserSpec.of(kafka_user("bob", "tls"))
    ca = new_ca("clients", NOW)
    decided = user_secret(tls_user, None, ca, NOW)
    data = decode(decided.manifest)
    assert data is not None
    der = x509.load_pem_x509_certificate(data["user.crt"].encode()).public_bytes(
        serialization.Encoding.DER)
    assert certificate_principal(der, parse_principal_rules("DEFAULT")) == tls_user.principal
    assert tls_user.principal == "User:CN=bob"


def test_a_password_once_generated_is_kept() -> None:
    user = UserSpec.of(kafka_user())
    first = user_secret(user, None, None, NOW, password=lambda: "one")
    data = decode(first.manifest)
    assert data is not None and data["password"] == "one"
    assert 'username="alice" password="one"' in data["sasl.jaas.config"]
    assert first.set_credential and first.recorded is not None
    recorded = first.recorded["metadata"]["annotations"]  # once the credential was set
    again = user_secret(user, data, None, NOW, password=lambda: "two", annotations=recorded)
    assert again.manifest is None and again.password == "one" and not again.set_credential
    # A Secret someone edited down to the password gets its JAAS line back, same password.
    repaired = user_secret(user, {"password": "one"}, None, NOW, password=lambda: "two")
    assert decode(repaired.manifest) == data


def test_generated_passwords_are_long_and_differ() -> None:
    user = UserSpec.of(kafka_user())
    passwords = {user_secret(user, None, None, NOW).password for _ in range(5)}
    assert len(passwords) == 5 and all(p and len(p) == 32 for p in passwords)


def test_a_tls_users_certificate_is_kept_then_issued_again() -> None:
    user = UserSpec.of(kafka_user("bob", "tls"))
    ca = new_ca("clients", NOW, validity_days=730)
    data = decode(user_secret(user, None, ca, NOW).manifest)
    assert data is not None and data["ca.crt"] == ca.certificate
    held = KeyPair(data["user.crt"], data["user.key"])
    assert signed_by(held, ca)
    assert user_secret(user, data, ca, NOW + dt.timedelta(days=300)).manifest is None
    near_end = user_secret(user, data, ca, NOW + dt.timedelta(days=340))
    assert near_end.action == "certificate issued"
    renewed_ca = new_ca("clients", NOW)
    reissued = decode(user_secret(user, data, renewed_ca, NOW).manifest)
    assert reissued is not None
    assert signed_by(KeyPair(reissued["user.crt"], reissued["user.key"]), renewed_ca)


def test_a_renewed_clients_ca_issues_again_only_once_every_broker_trusts_it() -> None:
    """Brokers load the clients CA's trust store at start: until every one has restarted
    with the renewed CA in it (the operator's roll), a certificate of the new CA would be
    refused by some; the previous CA's, still good, is kept meanwhile."""
    user = UserSpec.of(kafka_user(authentication="tls"))
    old_ca = new_ca("clients", NOW)
    data = decode(user_secret(user, None, old_ca, NOW).manifest)
    later = NOW + dt.timedelta(days=10)
    renewed_ca = new_ca("clients", later)
    trusted = renewed_ca.certificate + old_ca.certificate
    waiting = user_secret(user, data, renewed_ca, later, trusted=trusted, brokers_trust_it=False)
    assert waiting.manifest is None
    trusting = user_secret(user, data, renewed_ca, later, trusted=trusted, brokers_trust_it=True)
    issued = decode(trusting.manifest)
    assert trusting.action == "certificate issued"
    assert signed_by(KeyPair(issued["user.crt"], issued["user.key"]), renewed_ca)
    # A trust store without the previous CA (a CA brought anew): nothing to wait for.
    alone = user_secret(user, data, renewed_ca, later, trusted=renewed_ca.certificate,
                        brokers_trust_it=False)
    assert alone.action == "certificate issued"


def test_switching_authentication_replaces_the_secrets_keys() -> None:
    scram = decode(user_secret(UserSpec.of(kafka_user()), None, None, NOW).manifest)
    tls = user_secret(UserSpec.of(kafka_user(authentication="tls")), scram,
                      new_ca("clients", NOW), NOW)
    assert set(decode(tls.manifest) or {}) == {"user.crt", "user.key", "ca.crt"}
    back = user_secret(UserSpec.of(kafka_user()), decode(tls.manifest), None, NOW,
                       password=lambda: "fresh")
    assert set(decode(back.manifest) or {}) == {"password", "sasl.jaas.config"}


def test_the_acl_plan_adds_what_is_missing_and_deletes_what_is_not_listed() -> None:
    user = UserSpec.of(kafka_user(acls=ACLS[:1]))
    wanted = acl_bindings(user)
    stale = AclBinding("User:alice", "*", "WRITE", "ALLOW", "TOPIC", "orders", "LITERAL")
    kept = next(iter(sorted(wanted)))
    plan = acl_plan(wanted, {kept, stale})
    assert plan.delete == (stale,)
    assert set(plan.create) == wanted - {kept}
    assert acl_plan(wanted, wanted).empty


@pytest.mark.parametrize(("cluster", "user", "reason"), [
    (None, kafka_user(), "ClusterNotFound"),
    ({}, kafka_user(), "NoListener"),
    ({"listeners": CLUSTER_SPEC["listeners"][1:]}, kafka_user(authentication="tls"),
     "NoListener"),
    ({"listeners": CLUSTER_SPEC["listeners"]}, kafka_user(acls=ACLS), "AuthorizationDisabled"),
    (CLUSTER_SPEC, kafka_user(authentication="plain"), "UnsupportedAuthentication"),
])
def test_what_the_schema_cannot_refuse_is_a_problem(cluster: dict | None, user: dict,
                                                    reason: str) -> None:
    found = problems(UserSpec.of(user), cluster)
    assert [r for r, _ in found][:1] == [reason]
    status = user_status(UserSpec.of(user), 2, found, None, [], STAMP)
    conditions = {c["type"]: c for c in status["conditions"]}
    assert conditions["Ready"]["status"] == "False"
    assert conditions["Warning"]["status"] == "True"
    assert conditions["Warning"]["reason"] == reason and conditions["Warning"]["message"]


def test_a_good_user_has_no_problem() -> None:
    assert problems(UserSpec.of(kafka_user(acls=ACLS)), CLUSTER_SPEC) == []
    assert problems(UserSpec.of(kafka_user("bob", "tls", ACLS)), CLUSTER_SPEC) == []


def test_the_ready_condition_keeps_its_transition_time() -> None:
    user = UserSpec.of(kafka_user())
    first = user_status(user, 1, [], "ready", [], STAMP)
    later = user_status(user, 2, [], "ready", first["conditions"], "2026-02-01T00:00:00Z")
    assert later["conditions"][0]["lastTransitionTime"] == STAMP
    assert later["observedGeneration"] == 2 and later["username"] == "alice"


def test_a_password_edited_in_the_secret_becomes_the_password() -> None:
    user = UserSpec.of(kafka_user())
    data = decode(user_secret(user, None, None, NOW, password=lambda: "one").manifest)
    assert data is not None
    edited = user_secret(user, {**data, "password": "chosen"}, None, NOW)
    assert edited.password == "chosen" and edited.action == "Secret updated"
    assert 'password="chosen"' in (decode(edited.manifest) or {})["sasl.jaas.config"]


def test_a_secret_the_user_does_not_own_is_never_overwritten() -> None:
    user = UserSpec.of(kafka_user("prod-cluster-ca"))
    theirs = {"metadata": {"name": "prod-cluster-ca", "ownerReferences": [
        {"kind": "KafkaCluster", "uid": "6b1f3e2a-0000-4000-8000-000000000002"}]}}
    assert "does not belong to this KafkaUser" in (secret_conflict(user, theirs) or "")
    assert secret_conflict(user, {"metadata": {"name": "x"}}) is not None
    own = user_secret(user, None, None, NOW).manifest
    assert own is not None and secret_conflict(user, own) is None
    assert secret_conflict(user, None) is None


def test_only_the_operators_keys_are_compared_and_the_others_kept() -> None:
    user = UserSpec.of(kafka_user())
    first = user_secret(user, None, None, NOW, password=lambda: "one")
    data = {**(decode(first.manifest) or {}), "extra": "theirs"}
    recorded = (first.recorded or {})["metadata"]["annotations"]
    kept = user_secret(user, data, None, NOW, annotations=recorded)
    assert kept.manifest is None and kept.recorded is None and not kept.set_credential
    edited = user_secret(user, {**data, "password": "two"}, None, NOW, annotations=recorded)
    assert (decode(edited.manifest) or {})["extra"] == "theirs" and edited.set_credential


def test_the_secret_records_the_password_set_in_the_cluster() -> None:
    """Not recorded (the upsert failed, or an older Secret): set it, and record it."""
    from kafkube_operator.model.user import CREDENTIAL_ANNOTATION, credential_hash

    user = UserSpec.of(kafka_user())
    data = decode(user_secret(user, None, None, NOW, password=lambda: "one").manifest)
    unrecorded = user_secret(user, data, None, NOW)
    assert unrecorded.set_credential and unrecorded.password == "one"
    assert unrecorded.manifest is None and unrecorded.action is None  # the data is right
    assert unrecorded.recorded is not None and decode(unrecorded.recorded) == data
    assert unrecorded.recorded["metadata"]["annotations"] == {
        CREDENTIAL_ANNOTATION: credential_hash(user, "one")}
