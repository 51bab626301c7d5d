"""The KafkaUser and certificate reconcile steps (reconcile/user.py, reconcile/security.py)
against in-memory fakes of the Kubernetes API and of the operator's Kafka admin client: what
is applied, what is sent to Kafka, which Events and which status. No cluster needed; the
steps' Kafka requests are kafka-python's own objects (kafka.py builds them), checked here to
round-trip."""

from __future__ import annotations

import base64
import copy
import datetime as dt
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import astuple
from typing import Any

import pytest
from kafka.admin import ACL

from kafkube_operator.kafka import (
    AdminClients,
    AdminSecurity,
    KafkaAdmin,
    KafkaRefused,
    acl_fields,
    make_acl,
)
from kafkube_operator.kube import ApplyError
from kafkube_operator.model.certificates import KeyPair, signed_by
from kafkube_operator.model.cluster import CERTIFICATES_HASH, CLUSTER_CA_HASH
from kafkube_operator.model.pki import decode
from kafkube_operator.model.user import AclBinding, jaas_config
from kafkube_operator.reconcile.security import admin_security, apply_cluster_pki
from kafkube_operator.reconcile.user import delete_user, reconcile_user
from tests.unit.operator.test_operator_security_model import _rsa_ca, secure_cluster
from tests.unit.operator.test_operator_user_model import ACLS, kafka_user

NOW = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


class FakeKube:
    """Objects by (kind, namespace, name); apply replaces (as server-side apply of the whole
    object the model renders does for the fields it owns)."""

    def __init__(self, *objects: Mapping) -> None:
        self.objects: dict[tuple[str, str | None, str], dict] = {}
        self.applied: list[str] = []
        for obj in objects:
            self.apply(obj)
        self.applied.clear()

    def get(self, api_version: str, kind: str, name: str,
            namespace: str | None = None) -> dict | None:
        found = self.objects.get((kind, namespace, name))
        return copy.deepcopy(found) if found is not None else None

    def apply(self, manifest: Mapping, dry_run: bool = False) -> dict:
        meta = manifest["metadata"]
        self.objects[(manifest["kind"], meta.get("namespace"), meta["name"])] = \
            copy.deepcopy(dict(manifest))
        self.applied.append(f"{manifest['kind']}/{meta['name']}")
        return copy.deepcopy(dict(manifest))

    def list(self, api_version: str, kind: str, namespace: str | None = None,
             labels: Mapping[str, str] | None = None) -> list[dict]:
        return [copy.deepcopy(o) for (k, ns, _), o in sorted(self.objects.items())
                if k == kind and ns == namespace and (labels or {}).items()
                <= ((o.get("metadata") or {}).get("labels") or {}).items()]

    def secret(self, name: str) -> dict[str, str] | None:
        return decode(self.get("v1", "Secret", name, "kafka"))


class FakeAdmin:
    """The operator's KafkaAdmin as far as users go: SCRAM credentials and ACLs."""

    def __init__(self) -> None:
        self.credentials: dict[str, str] = {}
        self.acls: set[tuple[str, ...]] = set()
        self.refuse: str | None = None
        self.refuse_upsert: str | None = None
        self.upserts = 0
        self.quotas: dict[str, dict[str, float]] = {}  # client quotas by user entity
        self.refuse_quotas: str | None = None

    def _check(self) -> None:
        if self.refuse:
            raise KafkaRefused("test", self.refuse)

    def scram_users(self, users: Iterable[str]) -> set[str]:
        self._check()
        return {u for u in users if u in self.credentials}

    def upsert_scram(self, user: str, password: str) -> None:
        self._check()
        if self.refuse_upsert:
            raise KafkaRefused("setting the SCRAM credential", self.refuse_upsert)
        self.upserts += 1
        self.credentials[user] = password

    def delete_scram(self, user: str) -> None:
        self.credentials.pop(user, None)

    def quotas_of(self, users: Iterable[str]) -> dict[str, dict[str, float]]:
        self._check()
        return {u: dict(self.quotas[u]) for u in users if u in self.quotas}

    def alter_quotas(self, user: str, set_values: Iterable[tuple[str, float]],
                     remove: Iterable[str]) -> None:
        if self.refuse_quotas:
            raise KafkaRefused("altering the client quotas", self.refuse_quotas)
        values = {**self.quotas.get(user, {}), **dict(set_values)}
        for key in remove:
            values.pop(key, None)
        self.quotas = {**self.quotas, user: values} if values else {
            u: v for u, v in self.quotas.items() if u != user}

    def acls_of(self, principal: str) -> list[ACL]:
        self._check()
        return [make_acl(*a) for a in sorted(self.acls) if a[0] == principal]

    def create_acls(self, acls: Sequence[ACL]) -> None:
        self.acls |= {acl_fields(a) for a in acls}

    def delete_acls(self, acls: Sequence[ACL]) -> None:
        self.acls -= {acl_fields(a) for a in acls}


class FakeAdmins:
    def __init__(self, admin: FakeAdmin) -> None:
        self.admin, self.dropped = admin, 0

    def of(self, key: tuple[str, str], bootstrap: Callable[[], Sequence[str]],
           listener: str | None = None) -> FakeAdmin:
        return self.admin

    def drop(self, key: tuple[str, str], client: FakeAdmin | None = None) -> None:
        self.dropped += 1


class FakeViews:
    def of(self, ref: Any) -> Any:
        return self

    def live_brokers(self) -> dict:
        return {}


class Events:
    def __init__(self) -> None:
        self.infos: list[str] = []
        self.warnings: list[str] = []

    def info(self, reason: str, message: str) -> None:
        self.infos.append(reason)

    def warning(self, reason: str, message: str) -> None:
        self.warnings.append(reason)


def cluster_with_pki() -> FakeKube:
    cluster = secure_cluster()
    kube = FakeKube(cluster)
    apply_cluster_pki(kube, cluster, Events(), NOW)  # type: ignore[arg-type]
    return kube


def reconcile(kube: FakeKube, admin: FakeAdmin, user: dict,
              events: Events | None = None) -> dict:
    return reconcile_user(kube, FakeViews(), FakeAdmins(admin), user,  # type: ignore[arg-type]
                          events or Events(), NOW)


def conditions(status: dict) -> dict[str, dict]:
    return {c["type"]: c for c in status["conditions"]}


def test_a_scram_user_gets_its_secret_credential_and_acls() -> None:
    kube, admin, events = cluster_with_pki(), FakeAdmin(), Events()
    user = kafka_user(acls=ACLS)
    status = reconcile(kube, admin, user, events)
    assert conditions(status)["Ready"]["status"] == "True", status
    secret = kube.secret("alice")
    assert secret is not None and admin.credentials == {"alice": secret["password"]}
    assert len(admin.acls) == 6 and {a[0] for a in admin.acls} == {"User:alice"}
    assert events.infos == ["UserSecret", "CredentialSet", "AclsChanged"]
    # A second pass changes nothing.
    again = Events()
    kube.applied.clear()
    reconcile(kube, admin, {**user, "status": status}, again)
    assert again.infos == [] and kube.applied == []
    assert admin.credentials == {"alice": secret["password"]}


def test_a_credential_lost_from_the_cluster_is_set_again_with_the_same_password() -> None:
    kube, admin = cluster_with_pki(), FakeAdmin()
    reconcile(kube, admin, kafka_user())
    password = admin.credentials.pop("alice")
    reconcile(kube, admin, kafka_user())
    assert admin.credentials == {"alice": password}


def test_acls_the_spec_no_longer_lists_are_deleted_and_hand_made_ones_too() -> None:
    kube, admin = cluster_with_pki(), FakeAdmin()
    reconcile(kube, admin, kafka_user(acls=ACLS))
    by_hand = AclBinding("User:alice", "*", "ALTER", "ALLOW", "TOPIC", "x", "LITERAL")
    admin.acls.add(astuple(by_hand))
    someone_else = ("User:bob", "*", "READ", "ALLOW", "TOPIC", "x", "LITERAL")
    admin.acls.add(someone_else)
    reconcile(kube, admin, kafka_user(acls=ACLS[:1]))
    assert admin.acls == {("User:alice", "*", op, "ALLOW", "TOPIC", "orders", "LITERAL")
                          for op in ("READ", "DESCRIBE")} | {someone_else}


def test_a_tls_user_gets_a_certificate_of_the_clients_ca_and_no_scram_credential() -> None:
    kube, admin = cluster_with_pki(), FakeAdmin()
    admin.credentials["bob"] = "left from when bob used SCRAM"
    status = reconcile(kube, admin, kafka_user("bob", "tls", ACLS[:1]))
    assert conditions(status)["Ready"]["status"] == "True"
    assert status["username"] == "CN=bob"
    secret = kube.secret("bob")
    clients_ca = kube.secret("prod-clients-ca")
    assert secret is not None and clients_ca is not None
    assert secret["ca.crt"] == clients_ca["ca.crt"]
    assert admin.credentials == {}
    assert {a[0] for a in admin.acls} == {"User:CN=bob"}


@pytest.mark.parametrize(("user", "reason"), [
    (kafka_user(cluster="nope"), "ClusterNotFound"),
    (kafka_user(authentication="gssapi"), "UnsupportedAuthentication"),
])
def test_bad_specs_are_warnings_and_nothing_is_applied(user: dict, reason: str) -> None:
    kube, admin = cluster_with_pki(), FakeAdmin()
    kube.applied.clear()
    status = reconcile(kube, admin, user)
    assert conditions(status)["Warning"]["reason"] == reason
    assert conditions(status)["Ready"]["status"] == "False"
    assert kube.applied == [] and admin.credentials == {}


def test_a_user_named_after_a_clusters_secret_cannot_take_it() -> None:
    kube, admin = cluster_with_pki(), FakeAdmin()
    before = kube.secret("prod-cluster-ca")
    kube.applied.clear()
    status = reconcile(kube, admin, kafka_user("prod-cluster-ca"))
    assert conditions(status)["Warning"]["reason"] == "SecretConflict"
    assert kube.applied == [] and kube.secret("prod-cluster-ca") == before


def test_a_password_edited_in_the_secret_is_set_in_the_cluster() -> None:
    kube, admin = cluster_with_pki(), FakeAdmin()
    reconcile(kube, admin, kafka_user())
    secret = kube.get("v1", "Secret", "alice", "kafka")
    assert secret is not None
    secret["data"]["password"] = base64.b64encode(b"chosen").decode()
    kube.apply(secret)
    reconcile(kube, admin, kafka_user())
    assert admin.credentials == {"alice": "chosen"}
    assert 'password="chosen"' in (kube.secret("alice") or {})["sasl.jaas.config"]


def test_a_kafka_refusal_is_a_warning_and_the_client_is_dropped() -> None:
    kube, admin, events = cluster_with_pki(), FakeAdmin(), Events()
    admin.refuse = "[Error 7] RequestTimedOutError"
    admins = FakeAdmins(admin)
    status = reconcile_user(kube, FakeViews(), admins, kafka_user(), events,  # type: ignore
                            NOW)
    assert conditions(status)["Warning"]["reason"] == "KafkaRefused"
    assert events.warnings == ["KafkaRefused"] and admins.dropped == 1


def test_deleting_a_user_removes_its_credential_and_acls() -> None:
    kube, admin = cluster_with_pki(), FakeAdmin()
    reconcile(kube, admin, kafka_user(acls=ACLS))
    other = ("User:bob", "*", "READ", "ALLOW", "TOPIC", "x", "LITERAL")
    admin.acls.add(other)
    assert delete_user(kube, FakeViews(), FakeAdmins(admin), kafka_user(),  # type: ignore
                       Events())
    assert admin.credentials == {} and admin.acls == {other}
    # A user whose cluster is gone is deleted at once.
    assert delete_user(FakeKube(), FakeViews(), FakeAdmins(admin), kafka_user(),  # type: ignore
                       Events())


def test_the_operator_logs_in_with_its_own_certificate() -> None:
    kube = cluster_with_pki()
    security = admin_security(kube)(("kafka", "prod"))  # type: ignore[arg-type]
    assert isinstance(security, AdminSecurity)
    certs = kube.secret("prod-operator-certs")
    assert certs is not None and security.certificate == certs["operator.crt"]
    plain = FakeKube({**secure_cluster(), "spec": {}})
    assert admin_security(plain)(("kafka", "prod")) is None  # type: ignore[arg-type]
    with pytest.raises(KafkaRefused, match="not issued yet"):
        admin_security(FakeKube(secure_cluster()))(("kafka", "prod"))  # type: ignore


def test_certificates_are_applied_once_and_kept() -> None:
    cluster = secure_cluster()
    kube, events = FakeKube(cluster), Events()
    _, warnings = apply_cluster_pki(kube, cluster, events, NOW)  # type: ignore[arg-type]
    assert warnings == [] and events.infos == ["Certificates"] * 4
    assert set(kube.applied) == {"Secret/prod-cluster-ca", "Secret/prod-cluster-ca-cert",
                                 "Secret/prod-clients-ca", "Secret/prod-clients-ca-cert",
                                 "Secret/prod-kafka-brokers", "Secret/prod-operator-certs"}
    before = kube.secret("prod-kafka-brokers")
    again = Events()
    apply_cluster_pki(kube, cluster, again, NOW + dt.timedelta(days=1))  # type: ignore
    assert again.infos == [] and kube.secret("prod-kafka-brokers") == before


def test_kafka_pythons_acl_objects_round_trip_every_binding() -> None:
    from kafkube_operator.model.user import UserSpec, acl_bindings

    for binding in acl_bindings(UserSpec.of(kafka_user(acls=ACLS))):
        assert acl_fields(make_acl(*astuple(binding))) == astuple(binding)


# -- review fixes -------------------------------------------------------------------------

class FailingKube(FakeKube):
    """Refuses to apply the objects named in ``refuse``."""

    def __init__(self, *objects: Mapping, refuse: set[str]) -> None:
        self.refuse: set[str] = set()
        super().__init__(*objects)
        self.refuse = refuse

    def apply(self, manifest: Mapping, dry_run: bool = False) -> dict:
        if manifest["metadata"]["name"] in self.refuse:
            raise ApplyError(manifest, 500, "etcd is having a bad day")
        return super().apply(manifest, dry_run)


@pytest.mark.parametrize("refused", ["prod-cluster-ca", "prod-cluster-ca-cert",
                                     "prod-clients-ca"])
def test_certificate_secrets_stop_at_the_first_that_fails(refused: str) -> None:
    """CA Secrets first, and nothing after one fails: no broker gets a certificate of a CA
    that no Secret holds."""
    cluster = secure_cluster()
    running = {"apiVersion": "apps/v1", "kind": "StatefulSet",
               "metadata": {"name": "prod", "namespace": "kafka"},
               "spec": {"template": {"metadata": {"annotations": {
                   CERTIFICATES_HASH: "before", CLUSTER_CA_HASH: "before"}}}}}
    kube, events = FailingKube(cluster, running, refuse={refused}), Events()
    pki, warnings = apply_cluster_pki(kube, cluster, events, NOW)  # type: ignore[arg-type]
    # The pods keep the hashes they have: none of Secrets that were not stored.
    assert pki.pod_annotations == {CERTIFICATES_HASH: "before", CLUSTER_CA_HASH: "before"}
    assert [w.reason for w in warnings] == ["ApplyFailed"]
    assert events.warnings == ["ApplyFailed"] and events.infos == []
    assert kube.secret("prod-kafka-brokers") is None
    assert kube.secret("prod-operator-certs") is None
    # The next pass, once the API server takes it, stores it all, consistently.
    kube.refuse = set()
    apply_cluster_pki(kube, cluster, Events(), NOW)  # type: ignore[arg-type]
    ca, brokers = kube.secret("prod-cluster-ca"), kube.secret("prod-kafka-brokers")
    assert ca is not None and brokers is not None
    assert signed_by(KeyPair(brokers["broker.crt"], brokers["broker.key"]),
                     KeyPair(ca["ca.crt"], ca["ca.key"]))


def test_an_encrypted_brought_ca_is_a_warning_not_a_crash() -> None:
    ca = _rsa_ca(encrypt=b"secret")
    cluster = secure_cluster(clusterCa={"generateCertificateAuthority": False})
    theirs = {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
              "metadata": {"name": "prod-cluster-ca", "namespace": "kafka"},
              "data": {"ca.crt": base64.b64encode(ca.certificate.encode()).decode(),
                       "ca.key": base64.b64encode(ca.key.encode()).decode()}}
    kube, events = FakeKube(cluster, theirs), Events()
    pki, warnings = apply_cluster_pki(kube, cluster, events, NOW)  # type: ignore[arg-type]
    assert pki.pod_annotations == {}  # no StatefulSet yet: nothing to keep, nothing to roll
    assert [w.reason for w in warnings] == ["CertificateAuthority"]
    assert "encrypted" in warnings[0].message
    assert "CertificateAuthority" in events.warnings
    assert kube.secret("prod-kafka-brokers") is None


def test_a_tls_user_of_an_unusable_clients_ca_gets_a_warning() -> None:
    kube, admin = cluster_with_pki(), FakeAdmin()
    ca = _rsa_ca(encrypt=b"secret")
    held = kube.get("v1", "Secret", "prod-clients-ca", "kafka")
    assert held is not None
    held["data"] = {"ca.crt": base64.b64encode(ca.certificate.encode()).decode(),
                    "ca.key": base64.b64encode(ca.key.encode()).decode()}
    kube.apply(held)
    status = reconcile(kube, admin, kafka_user("bob", "tls"))
    assert conditions(status)["Warning"]["reason"] == "CaUnusable"
    assert "encrypted" in conditions(status)["Warning"]["message"]
    assert kube.secret("bob") is None


def test_a_tls_user_of_a_brought_rsa_clients_ca_gets_its_certificate() -> None:
    kube, admin = cluster_with_pki(), FakeAdmin()
    ca = _rsa_ca()
    held = kube.get("v1", "Secret", "prod-clients-ca", "kafka")
    assert held is not None
    held["data"] = {"ca.crt": base64.b64encode(ca.certificate.encode()).decode(),
                    "ca.key": base64.b64encode(ca.key.encode()).decode()}
    kube.apply(held)
    status = reconcile(kube, admin, kafka_user("bob", "tls"))
    assert conditions(status)["Ready"]["status"] == "True", status
    secret = kube.secret("bob")
    assert secret is not None and signed_by(KeyPair(secret["user.crt"], secret["user.key"]), ca)


def test_a_changed_password_is_set_again_after_the_cluster_refused_it() -> None:
    kube, admin = cluster_with_pki(), FakeAdmin()
    reconcile(kube, admin, kafka_user())
    secret = kube.get("v1", "Secret", "alice", "kafka")
    assert secret is not None
    secret["data"]["password"] = base64.b64encode(b"chosen").decode()
    kube.apply(secret)
    admin.refuse_upsert = "[Error 7] RequestTimedOutError"
    refused = reconcile(kube, admin, kafka_user())
    assert conditions(refused)["Warning"]["reason"] == "KafkaRefused"
    admin.refuse_upsert = None
    status = reconcile(kube, admin, kafka_user())
    assert conditions(status)["Ready"]["status"] == "True"
    assert admin.credentials == {"alice": "chosen"}
    assert 'password="chosen"' in (kube.secret("alice") or {})["sasl.jaas.config"]


def test_a_password_and_jaas_line_edited_together_are_set_in_the_cluster() -> None:
    kube, admin = cluster_with_pki(), FakeAdmin()
    reconcile(kube, admin, kafka_user())
    secret = kube.get("v1", "Secret", "alice", "kafka")
    assert secret is not None
    secret["data"]["password"] = base64.b64encode(b"chosen").decode()
    secret["data"]["sasl.jaas.config"] = base64.b64encode(
        jaas_config("alice", "chosen").encode()).decode()
    kube.apply(secret)
    reconcile(kube, admin, kafka_user())
    assert admin.credentials == {"alice": "chosen"}


def test_a_new_users_password_is_set_once_the_cluster_takes_it() -> None:
    kube, admin = cluster_with_pki(), FakeAdmin()
    admin.refuse_upsert = "[Error 7] RequestTimedOutError"
    reconcile(kube, admin, kafka_user())
    stored = kube.get("v1", "Secret", "alice", "kafka")
    assert stored is not None and "annotations" not in stored["metadata"]  # not set yet
    admin.refuse_upsert = None
    reconcile(kube, admin, kafka_user())
    secret = kube.secret("alice")
    assert secret is not None and admin.credentials == {"alice": secret["password"]}
    # Recorded: the next pass neither writes nor sets anything.
    kube.applied.clear()
    upserts = admin.upserts
    reconcile(kube, admin, kafka_user())
    assert kube.applied == [] and admin.upserts == upserts


@pytest.mark.parametrize("authentication", ["scram-sha-512", "tls"])
def test_a_key_someone_else_added_to_the_users_secret_is_kept_and_causes_no_churn(
        authentication: str) -> None:
    kube, admin = cluster_with_pki(), FakeAdmin()
    user = kafka_user("carol", authentication)
    reconcile(kube, admin, user)
    secret = kube.get("v1", "Secret", "carol", "kafka")
    assert secret is not None
    secret["data"]["bootstrap.servers"] = base64.b64encode(b"prod-bootstrap:9094").decode()
    kube.apply(secret)
    upserts, events = admin.upserts, Events()
    kube.applied.clear()
    for _ in range(3):
        reconcile(kube, admin, user, events)
    assert kube.applied == [] and events.infos == [] and admin.upserts == upserts
    # Written again (a renewed clients CA, a new password), the Secret keeps the key.
    if authentication == "tls":
        apply_cluster_pki(kube, secure_cluster(), Events(),  # type: ignore[arg-type]
                          NOW + dt.timedelta(days=340))
        reconcile_user(kube, FakeViews(), FakeAdmins(admin), user,  # type: ignore[arg-type]
                       Events(), NOW + dt.timedelta(days=340))
        assert set(kube.secret("carol") or {}) == {"user.crt", "user.key", "ca.crt",
                                                   "bootstrap.servers"}
    else:
        edited = kube.get("v1", "Secret", "carol", "kafka")
        assert edited is not None
        edited["data"]["password"] = base64.b64encode(b"chosen").decode()
        kube.apply(edited)
        reconcile(kube, admin, user)
        assert admin.credentials["carol"] == "chosen"
        assert (kube.secret("carol") or {})["bootstrap.servers"] == "prod-bootstrap:9094"


# -- the admin clients shared by the handlers' threads ---------------------------------------

class SlowClient:
    """kafka-python's admin client as far as the lock goes: counts requests under way at
    once, and can hold one until told."""

    def __init__(self) -> None:
        self.running = self.most = 0
        self.closed = False
        self.count_lock = threading.Lock()
        self.entered, self.release = threading.Event(), threading.Event()
        self.release.set()

    def describe_user_scram_credentials(self, users: list[str]) -> dict:
        with self.count_lock:
            self.running += 1
            self.most = max(self.most, self.running)
        self.entered.set()
        assert not self.closed, "a request on a closed client"
        time.sleep(0.01)
        self.release.wait(10)
        with self.count_lock:
            self.running -= 1
        return {}

    def close(self) -> None:
        self.closed = True


def slow_admin(client: SlowClient) -> KafkaAdmin:
    return KafkaAdmin(["127.0.0.1:1"], connect=lambda **options: client)


def test_one_request_at_a_time_on_a_shared_admin_client() -> None:
    client = SlowClient()
    admin = slow_admin(client)
    threads = [threading.Thread(target=admin.scram_users, args=(["u"],)) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert client.most == 1


def test_dropping_a_client_waits_for_the_request_under_way_and_refuses_later_ones() -> None:
    client = SlowClient()
    admins = AdminClients(make=lambda servers, security: slow_admin(client))
    key = ("kafka", "prod")
    admin = admins.of(key, lambda: ["127.0.0.1:1"])
    client.release.clear()
    user = threading.Thread(target=admin.scram_users, args=(["u"],))
    user.start()
    assert client.entered.wait(10)
    dropping = threading.Thread(target=admins.drop, args=(key, admin))
    dropping.start()
    dropping.join(0.2)
    assert dropping.is_alive() and not client.closed  # the request under way finishes first
    client.release.set()
    user.join(10)
    dropping.join(10)
    assert client.closed
    with pytest.raises(KafkaRefused, match="closed"):
        admin.scram_users(["u"])


def test_a_stale_client_is_not_dropped_in_place_of_a_new_one() -> None:
    made: list[SlowClient] = []

    def make(servers: Sequence[str], security: AdminSecurity | None) -> KafkaAdmin:
        made.append(SlowClient())
        return slow_admin(made[-1])

    admins = AdminClients(make=make)
    key = ("kafka", "prod")
    first = admins.of(key, lambda: ["127.0.0.1:1"])
    admins.drop(key, first)
    second = admins.of(key, lambda: ["127.0.0.1:1"])
    assert second is not first and made[0].closed
    admins.drop(key, first)  # a thread still holding the first one failed late
    assert admins.of(key, lambda: ["127.0.0.1:1"]) is second and not made[1].closed


def test_a_tls_users_certificate_lasts_the_clients_cas_validity() -> None:
    """renewalDays 400 of 730: a certificate of a fixed year would be issued every 30 s."""
    cluster = secure_cluster(clientsCa={"validityDays": 730, "renewalDays": 400})
    kube, admin = FakeKube(cluster), FakeAdmin()
    apply_cluster_pki(kube, cluster, Events(), NOW)  # type: ignore[arg-type]
    reconcile(kube, admin, kafka_user("bob", "tls"))
    secret = kube.secret("bob")
    assert secret is not None
    assert (KeyPair(secret["user.crt"], secret["user.key"]).not_after - NOW).days == 730
    kube.applied.clear()
    events = Events()
    reconcile(kube, admin, kafka_user("bob", "tls"), events)
    assert kube.applied == [] and events.infos == []
