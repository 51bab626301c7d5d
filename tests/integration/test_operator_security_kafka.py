"""The operator's Kafka admin client (kafkube_operator/kafka.py) on a real broker configured
the way the model configures a secured KafkaCluster (model/listeners.py, model/cluster_pki.py):
the replication listener with mutual TLS, the authorizer with the brokers and the operator as
super users. The operator logs in with its own certificate and sets a user's SCRAM
credential and ACLs, which then let that user in, and only as far as the ACLs say.

(The brokers listen on 127.0.0.1 here, so their certificate also names that address; the
rest is the model's own output.)"""

from __future__ import annotations

import datetime as dt
from dataclasses import astuple
from pathlib import Path

from kafka import KafkaConsumer
from kafka.admin import NewTopic

from kafkube_operator.kafka import AdminSecurity, KafkaAdmin, acl_fields, make_acl
from kafkube_operator.model.certificates import KeyPair, issue
from kafkube_operator.model.cluster_pki import cluster_pki
from kafkube_operator.model.listeners import ORGANIZATION, SecuritySpec, security_properties
from kafkube_operator.model.pki import decode
from kafkube_operator.model.user import UserSpec, acl_bindings
from tests.unit.operator.test_operator_security_model import secure_cluster
from tests.unit.operator.test_operator_user_model import kafka_user

NOW = dt.datetime.now(dt.UTC)
LISTENERS = [{"name": "plain", "port": 9092},
             {"name": "scram", "port": 9094, "tls": True,
              "authentication": {"type": "scram-sha-512"}}]


def broker_config(root: Path) -> tuple[dict[str, str], AdminSecurity, str]:
    """The model's broker properties with its files written under ``root`` and its
    listeners on 127.0.0.1; the operator's login; the cluster CA's certificate file."""
    resource = secure_cluster(listeners=LISTENERS)
    secrets: dict[str, dict[str, str] | None] = {}
    for manifest in cluster_pki(resource, {}, NOW).secrets:
        secrets[manifest["metadata"]["name"]] = decode(manifest)
    cluster_ca, operator = secrets["prod-cluster-ca"], secrets["prod-operator-certs"]
    assert cluster_ca is not None and operator is not None
    kept = cluster_pki(resource, secrets, NOW).operator  # a second pass issues nothing
    assert kept is not None and kept.certificate == operator["operator.crt"]
    signer = KeyPair(cluster_ca["ca.crt"], cluster_ca["ca.key"])
    broker = issue(signer, "prod-kafka", NOW, organization=ORGANIZATION,
                   ip_addresses=["127.0.0.1"], dns_names=["localhost"])
    (root / "broker.pem").write_text(broker.keystore)
    (root / "ca.crt").write_text(cluster_ca["ca.crt"])
    props = security_properties("prod", SecuritySpec.of(resource["spec"]))
    props.update({
        # The test cluster's first listener is how it checks its brokers: PLAINTEXT first.
        "listeners": "PLAIN://127.0.0.1:0,REPLICATION://127.0.0.1:0,SCRAM://127.0.0.1:0",
        "ssl.keystore.location": str(root / "broker.pem"),
        "ssl.truststore.location": str(root / "ca.crt"),
        "connection.failed.authentication.delay.ms": "10",
    })
    login = AdminSecurity(cluster_ca["ca.crt"], operator["operator.crt"], operator["operator.key"])
    return props, login, str(root / "ca.crt")


def test_the_operator_sets_a_users_credential_and_acls(cluster_factory,
                                                       tmp_path: Path) -> None:
    props, login, ca_file = broker_config(tmp_path)
    cluster = cluster_factory(1, props)
    broker = cluster.brokers[0]
    admin = KafkaAdmin([broker.bootstrap_of("REPLICATION")], login)
    try:
        admin._client.create_topics([NewTopic("orders", 1, 1), NewTopic("secret", 1, 1)])
        user = UserSpec.of(kafka_user("alice", acls=[
            {"resource": {"type": "topic", "name": "orders"}, "operations": ["Read", "Describe"]},
            {"resource": {"type": "group", "name": "alice-", "patternType": "prefix"},
             "operations": ["Read"]}]))
        assert admin.scram_users(["alice"]) == set()
        admin.upsert_scram("alice", "alice-password")
        assert admin.scram_users(["alice"]) == {"alice"}
        wanted = acl_bindings(user)
        admin.create_acls([make_acl(*astuple(b)) for b in sorted(wanted)])
        assert {acl_fields(a) for a in admin.acls_of("User:alice")} == \
            {astuple(b) for b in wanted}

        def topics_alice_sees(password: str) -> set[str]:
            consumer = KafkaConsumer(
                bootstrap_servers=broker.bootstrap_of("SCRAM"), security_protocol="SASL_SSL",
                sasl_mechanism="SCRAM-SHA-512", sasl_plain_username="alice",
                sasl_plain_password=password, ssl_cafile=ca_file, ssl_check_hostname=False,
                request_timeout_ms=10_000)
            try:
                return set(consumer.topics())
            finally:
                consumer.close()

        assert topics_alice_sees("alice-password") == {"orders"}
        admin.delete_acls([make_acl(*astuple(b)) for b in sorted(wanted)])
        assert admin.acls_of("User:alice") == []
        assert topics_alice_sees("alice-password") == set()
        admin.delete_scram("alice")
        assert admin.scram_users(["alice"]) == set()
    finally:
        admin.close()
