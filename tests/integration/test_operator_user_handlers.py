"""The KafkaUser and certificate handlers in a running operator (``kafkube operator``) against
a real kube-apiserver (kafkube/harness/control_plane.py), without brokers: a secured
KafkaCluster gets its CA and certificate Secrets and its listeners in the status; a KafkaUser's
bad spec is a Warning condition; a SCRAM user gets its Secret, and a Warning while no broker is
there to take its credential. (The credential and ACLs on real brokers:
test_operator_security_kafka.)"""

from __future__ import annotations

from typing import Any

from kubernetes import client as k8s

from kafkube.harness.waiting import wait_until
from tests.support.operator_api import Resources, condition, kafka_clusters
from tests.support.operator_process import OperatorProcess
from tests.unit.operator.test_operator_security_model import LISTENERS


def test_users_and_certificates_are_reconciled(
        crd_api: k8s.ApiClient, control_plane: Any, namespace: str,
        operators: list[OperatorProcess]) -> None:
    operators.append(OperatorProcess(control_plane.kubeconfig, namespace))
    clusters = kafka_clusters(crd_api, namespace)
    users = Resources(crd_api, namespace, "KafkaUser", "kafkausers")
    core = k8s.CoreV1Api(crd_api)
    clusters.create("sec", {"replicas": 1, "listeners": LISTENERS,
                            "authorization": {"type": "simple"}})
    status = clusters.status_when("sec", lambda s: s.get("observedGeneration") == 1, 60,
                                  "a first status")
    assert [li["name"] for li in status["listeners"]] == ["plain", "tls", "scram"]
    assert status["bootstrapServers"] == f"sec-bootstrap.{namespace}.svc:9092"
    for name in ("sec-cluster-ca", "sec-cluster-ca-cert", "sec-clients-ca",
                 "sec-clients-ca-cert", "sec-kafka-brokers", "sec-operator-certs"):
        secret = core.read_namespaced_secret(name, namespace)
        assert secret.metadata.owner_references[0].kind == "KafkaCluster", name
    assert set(core.read_namespaced_secret("sec-cluster-ca-cert", namespace).data) == {"ca.crt"}

    users.create("lost", {"cluster": "nope", "authentication": {"type": "scram-sha-512"}})
    status = users.status_when("lost", lambda s: bool(s.get("conditions")), 60, "a status")
    assert condition(status, "Ready")["status"] == "False"
    assert condition(status, "Warning")["reason"] == "ClusterNotFound"
    assert "no KafkaCluster nope" in condition(status, "Warning")["message"]

    users.create("alice", {"cluster": "sec", "authentication": {"type": "scram-sha-512"}})
    status = users.status_when("alice", lambda s: bool(s.get("conditions")), 60, "a status")
    assert condition(status, "Warning")["reason"] == "KafkaRefused"  # no broker yet
    secret = core.read_namespaced_secret("alice", namespace)
    assert set(secret.data) == {"password", "sasl.jaas.config"}
    assert secret.metadata.owner_references[0].kind == "KafkaUser"

    users.delete("lost")  # nothing to remove from a cluster that does not exist
    wait_until(lambda: users.get("lost") is None, 30, "the user deleted")
