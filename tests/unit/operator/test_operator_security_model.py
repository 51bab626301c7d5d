"""spec.listeners, spec.authorization and the certificates of a secured KafkaCluster
(kafkube_operator.model.listeners, pki, cluster_pki): a golden file for the objects, the
broker's own config and listener code reading what the model renders, and the CA and
certificate decisions over time. No cluster needed.

Regenerate the golden file after an intended change with
    KAFKUBE_UPDATE_GOLDEN=1 .venv/bin/pytest tests/unit/operator/test_operator_security_model.py"""

from __future__ import annotations

import contextlib
import copy
import datetime as dt
import socket
import ssl
import threading
from pathlib import Path

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ed25519, rsa
from cryptography.x509.oid import NameOID

from broker.config.broker_config import BrokerConfig
from broker.config.listeners import listener_plan
from broker.security.tls import certificate_principal, parse_principal_rules
from kafkube_contract.properties import parse_properties
from kafkube_operator.model.certificates import (
    KeyPair,
    dns_names,
    issue,
    new_ca,
    signed_by,
    split_pem,
    subject,
)
from kafkube_operator.model.cluster import (
    CERTIFICATES_HASH,
    CLUSTER_CA_HASH,
    ClusterRef,
    desired_cluster,
)
from kafkube_operator.model.cluster_pki import cluster_pki, secret_names
from kafkube_operator.model.listeners import (
    SecuritySpec,
    broker_subject,
    listener_status,
    super_users,
)
from kafkube_operator.model.pki import CaPolicy, ca_decision, decode
from tests.support.golden import assert_golden

GOLDEN = Path(__file__).parent / "golden"
NOW = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
DEFAULTS = {"replicas": 3, "image": "localhost/kafkube:dev",
            "storage": {"size": "10Gi", "deleteClaim": False},
            "rack": {"topologyKey": "topology.kubernetes.io/zone"}, "metrics": {"enabled": True}}
LISTENERS = [{"name": "plain", "port": 9092, "tls": False},
             {"name": "tls", "port": 9093, "tls": True, "authentication": {"type": "tls"}},
             {"name": "scram", "port": 9094, "tls": True,
              "authentication": {"type": "scram-sha-512"}}]


def secure_cluster(**extra: object) -> dict:
    return {"apiVersion": "kafkube.io/v1alpha1", "kind": "KafkaCluster",
            "metadata": {"name": "prod", "namespace": "kafka", "generation": 1,
                         "uid": "6b1f3e2a-0000-4000-8000-000000000002"},
            "spec": {**DEFAULTS, "listeners": LISTENERS,
                     "authorization": {"type": "simple", "superUsers": ["admin"]}, **extra}}


def properties(resource: dict) -> dict[str, str]:
    (config_map,) = desired_cluster(resource).by_kind("ConfigMap")
    return parse_properties(config_map["data"]["server.properties"])


def container(resource: dict) -> dict:
    (sts,) = desired_cluster(resource).by_kind("StatefulSet")
    return sts["spec"]["template"]["spec"]["containers"][0]


def test_the_secured_cluster_matches_the_golden_file() -> None:
    assert_golden(GOLDEN / "kafkacluster-secure.yaml",
                  yaml.safe_dump_all(desired_cluster(secure_cluster()).objects, sort_keys=False))


def test_no_listeners_renders_nothing_of_security() -> None:
    plain = secure_cluster()
    del plain["spec"]["listeners"], plain["spec"]["authorization"]
    assert not SecuritySpec.of(plain["spec"]).enabled
    text = yaml.safe_dump_all(desired_cluster(plain).objects, sort_keys=False)
    golden = (GOLDEN / "kafkacluster-defaults.yaml").read_text()
    assert text == golden.replace("6b1f3e2a-0000-4000-8000-000000000001",
                                  "6b1f3e2a-0000-4000-8000-000000000002")
    assert cluster_pki(plain, {}, NOW).secrets == []


def test_the_broker_accepts_the_rendered_listeners() -> None:
    """The broker's own config and listener plan read the ConfigMap plus the pod's
    advertised.listeners (the kubelet's $(POD_NAME) expanded)."""
    props = properties(secure_cluster())
    args = container(secure_cluster())["args"]
    advertised = args[args.index("--override") + 1].partition("=")[2]
    props["advertised.listeners"] = advertised.replace("$(POD_NAME)", "prod-0")
    props["node.id"] = "0"
    config = BrokerConfig.from_dict(props)
    plan = listener_plan(config)
    assert plan.inter_broker == "REPLICATION"
    protocols = {li.name: li.protocol.value for li in plan.listeners}
    assert protocols == {"REPLICATION": "SSL", "PLAIN": "PLAINTEXT", "TLS": "SSL",
                         "SCRAM": "SASL_SSL"}
    assert {a.host for a in plan.advertised} == {"prod-0.prod-brokers.kafka.svc.cluster.local"}
    assert config.for_listener("REPLICATION", "ssl.client.auth") == "required"
    assert config.for_listener("TLS", "ssl.client.auth") == "required"
    assert config.for_listener("TLS", "ssl.truststore.location") == \
        "/etc/kafkube-certs/clients-ca/ca.crt"
    assert config.for_listener("REPLICATION", "ssl.truststore.location") == \
        "/etc/kafkube-certs/cluster-ca/ca.crt"
    assert config.for_listener("SCRAM", "sasl.enabled.mechanisms") == ["SCRAM-SHA-512"]
    assert props["authorizer.class.name"].endswith("StandardAuthorizer")
    assert props["super.users"].split(";") == [
        "User:CN=prod-kafka,O=kafkube", "User:CN=kafkube-operator,O=kafkube", "User:admin"]


def test_files_the_config_names_are_mounted() -> None:
    props = properties(secure_cluster())
    mounts = {m["mountPath"] for m in container(secure_cluster())["volumeMounts"]}
    for key in ("ssl.keystore.location", "ssl.truststore.location",
                "listener.name.tls.ssl.truststore.location"):
        assert props[key].rsplit("/", 1)[0] in mounts, key
    (sts,) = desired_cluster(secure_cluster()).by_kind("StatefulSet")
    volumes = {v["name"]: v["secret"] for v in sts["spec"]["template"]["spec"]["volumes"]
               if "secret" in v}
    # The CAs' keys never reach a broker.
    assert volumes["cluster-ca"]["items"] == [{"key": "ca.crt", "path": "ca.crt"}]
    assert volumes["clients-ca"]["secretName"] == "prod-clients-ca-cert"


def test_without_tls_clients_no_clients_ca_is_mounted() -> None:
    resource = secure_cluster(listeners=[LISTENERS[0], LISTENERS[2]])
    mounts = {m["name"] for m in container(resource)["volumeMounts"]}
    assert "clients-ca" not in mounts
    assert "listener.name.tls.ssl.truststore.location" not in properties(resource)


def test_security_keys_in_spec_config_are_refused_only_when_the_operator_sets_them() -> None:
    config = {"super.users": "User:mallory", "sasl.enabled.mechanisms": "PLAIN"}
    secured = desired_cluster(secure_cluster(config=config))
    assert set(secured.refused_config) == {"super.users", "sasl.enabled.mechanisms"}
    plain = copy.deepcopy(secure_cluster(config=config))
    del plain["spec"]["listeners"], plain["spec"]["authorization"]
    assert "super.users" not in desired_cluster(plain).refused_config


def test_super_users_take_bare_names_and_keep_the_brokers_first() -> None:
    security = SecuritySpec.of({"listeners": LISTENERS, "authorization": {
        "type": "simple", "superUsers": ["alice", "User:CN=bob", "alice"]}})
    assert super_users("c", security) == ["User:CN=c-kafka,O=kafkube",
                                          "User:CN=kafkube-operator,O=kafkube",
                                          "User:alice", "User:CN=bob"]


def test_ports_follow_the_listeners() -> None:
    desired = desired_cluster(secure_cluster())
    headless, bootstrap = desired.by_kind("Service")
    assert [p["port"] for p in headless["spec"]["ports"]] == [9091, 9092, 9093, 9094]
    assert [p["name"] for p in bootstrap["spec"]["ports"]] == ["plain", "tls", "scram",
                                                               "metrics"]
    # Readiness is the broker's own /ready on its health port, whatever the listeners.
    probe = container(secure_cluster())["readinessProbe"]["httpGet"]
    assert probe == {"path": "/ready", "port": "health"}
    assert {"name": "health", "containerPort": 9405} in container(secure_cluster())["ports"]


# -- certificates -------------------------------------------------------------------------

def issued(resource: dict, now: dt.datetime,
           held: dict[str, dict[str, str] | None] | None = None) -> dict[str, dict[str, str]]:
    """One pass: the Secrets as they are after applying what cluster_pki says."""
    held = dict(held or {})
    for manifest in cluster_pki(resource, held, now).secrets:
        held[manifest["metadata"]["name"]] = decode(manifest)
    return {k: v for k, v in held.items() if v is not None}


def pair(data: dict[str, str], cert: str, key: str) -> KeyPair:
    return KeyPair(data[cert], data[key])


def test_a_secured_cluster_gets_its_cas_and_certificates() -> None:
    resource = secure_cluster()
    ref = ClusterRef.of(resource)
    secrets = issued(resource, NOW)
    assert set(secrets) == {*secret_names(ref), "prod-cluster-ca-cert", "prod-clients-ca-cert"}
    cluster_ca = pair(secrets["prod-cluster-ca"], "ca.crt", "ca.key")
    broker = pair(secrets["prod-kafka-brokers"], "broker.crt", "broker.key")
    assert signed_by(broker, cluster_ca)
    assert secrets["prod-kafka-brokers"]["broker.pem"] == broker.key + broker.certificate
    assert "*.prod-brokers.kafka.svc.cluster.local" in dns_names(broker)
    assert "prod-bootstrap.kafka.svc" in dns_names(broker)
    assert subject(broker) == broker_subject("prod")
    operator = pair(secrets["prod-operator-certs"], "operator.crt", "operator.key")
    assert signed_by(operator, cluster_ca)
    assert secrets["prod-cluster-ca-cert"] == {"ca.crt": cluster_ca.certificate}
    assert "ca.key" not in secrets["prod-clients-ca-cert"]
    # The broker's principal, as its TLS code derives it, is a super user.
    der = x509.load_pem_x509_certificate(broker.certificate.encode()).public_bytes(
        serialization.Encoding.DER)
    principal = certificate_principal(der, parse_principal_rules("DEFAULT"))
    assert principal in properties(resource)["super.users"].split(";")


def test_nothing_changes_while_the_certificates_are_valid() -> None:
    resource = secure_cluster()
    secrets = issued(resource, NOW)
    later = cluster_pki(resource, secrets, NOW + dt.timedelta(days=300))
    assert later.actions == [] and later.problems == []
    # Only the CAs' public Secrets are applied again (unchanged, so a no-op).
    assert {s["metadata"]["name"] for s in later.secrets} == {"prod-cluster-ca-cert",
                                                              "prod-clients-ca-cert"}


def test_cas_are_renewed_within_the_renewal_days_and_certificates_issued_again() -> None:
    resource = secure_cluster()
    first = issued(resource, NOW)
    renewal_time = NOW + dt.timedelta(days=340)
    pki = cluster_pki(resource, first, renewal_time)
    assert pki.actions == ["cluster-ca renewed", "clients-ca renewed",
                           "brokers' certificate issued", "operator's certificate issued"]
    second = issued(resource, renewal_time, first)
    old_ca = pair(first["prod-cluster-ca"], "ca.crt", "ca.key")
    new_ca = KeyPair(split_pem(second["prod-cluster-ca"]["ca.crt"])[0],
                     second["prod-cluster-ca"]["ca.key"])
    assert new_ca.not_after > old_ca.not_after
    # The old CA stays trusted until it expires: brokers not yet restarted still verify.
    assert split_pem(second["prod-cluster-ca-cert"]["ca.crt"]) == [new_ca.certificate,
                                                                   old_ca.certificate]
    broker = pair(second["prod-kafka-brokers"], "broker.crt", "broker.key")
    assert signed_by(broker, new_ca) and not signed_by(broker, old_ca)


def test_a_renewed_cluster_ca_takes_two_rolls_trust_first_then_certificates() -> None:
    """Brokers load certificates at start: the pod template's hashes roll them. A broker
    restarted with a certificate of the new CA would be refused by brokers that trust only
    the old one, so the certificates wait until every broker trusts the new CA."""
    resource = secure_cluster()
    first = issued(resource, NOW)
    running = cluster_pki(resource, first, NOW + dt.timedelta(days=1)).pod_annotations
    trusting_old = running[CLUSTER_CA_HASH]
    renewal_time = NOW + dt.timedelta(days=340)
    # Roll 1: the new CA joins the trust store; the old CA's certificates stay in use.
    trust = cluster_pki(resource, first, renewal_time, brokers_trust=trusting_old)
    assert trust.actions == ["cluster-ca renewed", "clients-ca renewed"]
    applied = {s["metadata"]["name"] for s in trust.secrets}
    assert not applied & {"prod-kafka-brokers", "prod-operator-certs"}, applied
    assert trust.pod_annotations[CLUSTER_CA_HASH] != trusting_old
    assert trust.pod_annotations[CERTIFICATES_HASH] != running[CERTIFICATES_HASH]
    second = {**first, **{m["metadata"]["name"]: decode(m) for m in trust.secrets}}
    # Mid-roll (pods differ) nothing more happens; the pod template stays as it is.
    mid = cluster_pki(resource, second, renewal_time, brokers_trust="")
    assert mid.actions == [] and {m["metadata"]["name"] for m in mid.secrets} == {
        "prod-cluster-ca-cert", "prod-clients-ca-cert"}
    assert mid.pod_annotations == trust.pod_annotations
    # Roll 2: every broker trusts the new CA; its certificates are issued and roll in.
    rolled = cluster_pki(resource, second, renewal_time,
                         brokers_trust=trust.pod_annotations[CLUSTER_CA_HASH])
    assert rolled.actions == ["brokers' certificate issued", "operator's certificate issued"]
    assert rolled.pod_annotations[CLUSTER_CA_HASH] == trust.pod_annotations[CLUSTER_CA_HASH]
    assert rolled.pod_annotations[CERTIFICATES_HASH] != trust.pod_annotations[CERTIFICATES_HASH]
    new_ca = KeyPair(split_pem(second["prod-cluster-ca"]["ca.crt"])[0],
                     second["prod-cluster-ca"]["ca.key"])
    broker = next(decode(m) for m in rolled.secrets
                  if m["metadata"]["name"] == "prod-kafka-brokers")
    assert signed_by(pair(broker, "broker.crt", "broker.key"), new_ca)
    # The pod template carries the hashes.
    (sts,) = desired_cluster(resource, None, rolled.pod_annotations).by_kind("StatefulSet")
    annotations = sts["spec"]["template"]["metadata"]["annotations"]
    assert rolled.pod_annotations.items() <= annotations.items()


def test_certificates_are_issued_at_once_when_no_broker_runs_or_the_old_one_expired() -> None:
    resource = secure_cluster()
    first = issued(resource, NOW)
    renewal_time = NOW + dt.timedelta(days=340)
    assert "brokers' certificate issued" in cluster_pki(resource, first, renewal_time).actions
    # Past the old certificate's end, waiting would leave the brokers with an expired one.
    expired = NOW + dt.timedelta(days=400)
    assert "brokers' certificate issued" in cluster_pki(resource, first, expired,
                                                        brokers_trust="old").actions


def test_a_kept_certificate_of_the_previous_ca_is_not_kept_past_its_end() -> None:
    """A roll that stalls (a pod that never starts) must not leave the brokers an expired
    certificate: past its end it is issued by the new CA, trusted or not."""
    resource = secure_cluster()
    first = issued(resource, NOW)
    renewal_time = NOW + dt.timedelta(days=340)
    trust = cluster_pki(resource, first, renewal_time, brokers_trust="old")
    second = {**first, **{m["metadata"]["name"]: decode(m) for m in trust.secrets}}
    assert "brokers' certificate issued" not in cluster_pki(
        resource, second, NOW + dt.timedelta(days=360), brokers_trust="old").actions
    late = cluster_pki(resource, second, NOW + dt.timedelta(days=366), brokers_trust="old")
    assert "brokers' certificate issued" in late.actions


def test_the_renewal_days_come_from_the_spec() -> None:
    resource = secure_cluster(clusterCa={"validityDays": 30, "renewalDays": 5})
    first = issued(resource, NOW)
    ca = pair(first["prod-cluster-ca"], "ca.crt", "ca.key")
    assert (ca.not_after - NOW).days == 30
    assert not cluster_pki(resource, first, NOW + dt.timedelta(days=24)).actions
    assert "cluster-ca renewed" in cluster_pki(resource, first,
                                               NOW + dt.timedelta(days=26)).actions


def test_a_users_own_ca_is_used_and_never_renewed() -> None:
    resource = secure_cluster(clusterCa={"generateCertificateAuthority": False})
    missing = cluster_pki(resource, {}, NOW)
    assert missing.operator is None
    assert any("generateCertificateAuthority is false" in p for p in missing.problems)
    assert not any(s["metadata"]["name"] == "prod-cluster-ca" for s in missing.secrets)
    own = ca_decision("cluster-ca", "prod-cluster-ca", {}, None, CaPolicy(), NOW, "mine")
    assert own.pair is not None
    theirs = {"ca.crt": own.pair.certificate, "ca.key": own.pair.key}
    expiring = NOW + dt.timedelta(days=360)
    pki = cluster_pki(resource, {"prod-cluster-ca": theirs}, expiring)
    assert not pki.problems and "cluster-ca renewed" not in pki.actions
    assert not any(s["metadata"]["name"] == "prod-cluster-ca" for s in pki.secrets)
    broker = next(decode(s) for s in pki.secrets
                  if s["metadata"]["name"] == "prod-kafka-brokers")
    assert broker is not None
    assert signed_by(pair(broker, "broker.crt", "broker.key"), own.pair)


@pytest.mark.parametrize("field", ["clusterCa", "clientsCa"])
def test_ca_policy_defaults_are_strimzis(field: str) -> None:
    assert CaPolicy.of(secure_cluster()["spec"].get(field)) == CaPolicy(True, 365, 30)


def test_the_status_lists_where_each_listener_bootstraps() -> None:
    resource = secure_cluster()
    ref = ClusterRef.of(resource)
    shown = listener_status(ref.bootstrap_service, ref.namespace, SecuritySpec.of(
        resource["spec"]))
    assert shown == [{"name": "plain", "bootstrapServers": "prod-bootstrap.kafka.svc:9092"},
                     {"name": "tls", "bootstrapServers": "prod-bootstrap.kafka.svc:9093"},
                     {"name": "scram", "bootstrapServers": "prod-bootstrap.kafka.svc:9094"}]
    assert listener_status(ref.bootstrap_service, ref.namespace, SecuritySpec()) == []


# -- review fixes: validity, brought CAs of any key, key identifiers -------------------------

def _pki_secret_names(pki: object) -> set[str]:
    return {s["metadata"]["name"] for s in pki.secrets}  # type: ignore[attr-defined]


def test_leaf_certificates_last_the_policys_validity_so_they_are_not_reissued_each_pass() -> None:
    """renewalDays may be up to validityDays - 1: with leaves of a fixed year, a renewal of
    400 days would issue the brokers' key again on every pass."""
    resource = secure_cluster(clusterCa={"validityDays": 730, "renewalDays": 400})
    first = issued(resource, NOW)
    broker = pair(first["prod-kafka-brokers"], "broker.crt", "broker.key")
    ca = pair(first["prod-cluster-ca"], "ca.crt", "ca.key")
    assert broker.not_after == ca.not_after and (broker.not_after - NOW).days == 730
    later = cluster_pki(resource, first, NOW + dt.timedelta(days=1))
    assert later.actions == []
    assert "prod-kafka-brokers" not in _pki_secret_names(later)


def test_a_leaf_never_outlives_its_ca_nor_is_issued_again_for_ending_with_it() -> None:
    ca = new_ca("mine", NOW, validity_days=10)
    leaf = issue(ca, "x", NOW, validity_days=365)
    assert leaf.not_after == ca.not_after
    # A brought CA near its end: its certificates end with it; issuing them again on every
    # pass would not make them last longer.
    resource = secure_cluster(clusterCa={"generateCertificateAuthority": False})
    theirs = {"prod-cluster-ca": {"ca.crt": ca.certificate, "ca.key": ca.key}}
    first = issued(resource, NOW, theirs)
    again = cluster_pki(resource, first, NOW + dt.timedelta(days=1))
    assert not any("issued" in a for a in again.actions), again.actions


def _rsa_ca(common_name: str = "corporate root", encrypt: bytes | None = None) -> KeyPair:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(NOW - dt.timedelta(days=1))
            .not_valid_after(NOW + dt.timedelta(days=3650))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    encryption = serialization.BestAvailableEncryption(encrypt) if encrypt \
        else serialization.NoEncryption()
    return KeyPair(cert.public_bytes(serialization.Encoding.PEM).decode(),
                   key.private_bytes(serialization.Encoding.PEM,
                                     serialization.PrivateFormat.TraditionalOpenSSL,
                                     encryption).decode())


def test_a_brought_rsa_ca_signs_the_brokers_certificate() -> None:
    ca = _rsa_ca()
    resource = secure_cluster(clusterCa={"generateCertificateAuthority": False})
    pki = cluster_pki(resource, {"prod-cluster-ca": {"ca.crt": ca.certificate,
                                                     "ca.key": ca.key}}, NOW)
    assert pki.problems == [] and "brokers' certificate issued" in pki.actions
    broker = next(decode(s) for s in pki.secrets
                  if s["metadata"]["name"] == "prod-kafka-brokers")
    assert broker is not None
    leaf = pair(broker, "broker.crt", "broker.key")
    assert signed_by(leaf, ca)
    cert = x509.load_pem_x509_certificate(leaf.certificate.encode())
    assert cert.signature_algorithm_oid == x509.SignatureAlgorithmOID.RSA_WITH_SHA256
    assert pki.operator is not None and signed_by(pki.operator, ca)


def _ed25519_ca() -> KeyPair:
    key = ed25519.Ed25519PrivateKey.generate()
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "edwards")])
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(1)
            .not_valid_before(NOW - dt.timedelta(days=1))
            .not_valid_after(NOW + dt.timedelta(days=365))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, None))
    return KeyPair(cert.public_bytes(serialization.Encoding.PEM).decode(),
                   key.private_bytes(serialization.Encoding.PEM,
                                     serialization.PrivateFormat.PKCS8,
                                     serialization.NoEncryption()).decode())


@pytest.mark.parametrize(("ca", "says"), [
    (_rsa_ca(encrypt=b"secret"), "encrypted"),
    (_ed25519_ca(), "RSA or EC keys are supported"),
    (KeyPair(_rsa_ca().certificate, _rsa_ca().key), "not the key of the certificate"),
    (KeyPair(_rsa_ca().certificate, "not a key"), "not a PEM private key"),
    (new_ca("old", NOW - dt.timedelta(days=400)), "expired"),
])
def test_an_unusable_brought_ca_is_a_problem_not_an_exception(ca: KeyPair, says: str) -> None:
    resource = secure_cluster(clusterCa={"generateCertificateAuthority": False})
    pki = cluster_pki(resource, {"prod-cluster-ca": {"ca.crt": ca.certificate,
                                                     "ca.key": ca.key}}, NOW)
    assert len(pki.problems) == 1 and says in pki.problems[0], pki.problems
    assert "prod-cluster-ca" in pki.problems[0]
    assert pki.operator is None
    assert not {"prod-kafka-brokers", "prod-operator-certs"} & _pki_secret_names(pki)


def test_cas_and_certificates_carry_key_identifiers() -> None:
    ca = new_ca("kafkube cluster-ca", NOW)
    leaf = issue(ca, "prod-kafka", NOW)
    ca_cert = x509.load_pem_x509_certificate(ca.certificate.encode())
    leaf_cert = x509.load_pem_x509_certificate(leaf.certificate.encode())
    ca_ski = ca_cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    assert ca_ski == x509.SubjectKeyIdentifier.from_public_key(ca_cert.public_key())
    aki = leaf_cert.extensions.get_extension_for_class(x509.AuthorityKeyIdentifier).value
    assert aki.key_identifier == ca_ski.digest
    leaf_ski = leaf_cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    assert leaf_ski == x509.SubjectKeyIdentifier.from_public_key(leaf_cert.public_key())
    # A brought CA's own identifier is the one named, however it was computed.
    rsa_ca = _rsa_ca()
    rsa_leaf = x509.load_pem_x509_certificate(issue(rsa_ca, "x", NOW).certificate.encode())
    rsa_aki = rsa_leaf.extensions.get_extension_for_class(x509.AuthorityKeyIdentifier).value
    assert rsa_aki.key_identifier == x509.SubjectKeyIdentifier.from_public_key(
        x509.load_pem_x509_certificate(rsa_ca.certificate.encode()).public_key()).digest


@pytest.mark.parametrize("old_first", [False, True])
def test_a_certificate_of_the_renewed_ca_verifies_whatever_the_bundles_order(
        tmp_path: Path, old_first: bool) -> None:
    """The renewed CA keeps its subject; OpenSSL tells the two apart by key identifier
    (without them it takes the first of that name, and the handshake fails)."""
    now = dt.datetime.now(dt.UTC)
    old = new_ca("kafkube cluster-ca kafka/prod", now - dt.timedelta(days=340))
    renewed = new_ca("kafkube cluster-ca kafka/prod", now)
    leaf = issue(renewed, "prod-kafka", now, dns_names=["localhost"])
    bundle = old.certificate + renewed.certificate if old_first \
        else renewed.certificate + old.certificate
    (tmp_path / "ca.crt").write_text(bundle)
    (tmp_path / "leaf.crt").write_text(leaf.certificate)
    (tmp_path / "leaf.key").write_text(leaf.key)
    client = ssl.create_default_context(cafile=str(tmp_path / "ca.crt"))
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(str(tmp_path / "leaf.crt"), str(tmp_path / "leaf.key"))
    a, b = socket.socketpair()
    a.settimeout(10)
    b.settimeout(10)

    def serve() -> None:
        with contextlib.suppress(OSError):
            server.wrap_socket(a, server_side=True).close()

    thread = threading.Thread(target=serve)
    thread.start()
    try:
        client.wrap_socket(b, server_hostname="localhost").close()
    finally:
        a.close()
        b.close()
        thread.join()
