"""The operator end to end: `helm install` of charts/kafkube-operator, then KafkaClusters
applied with kubectl, on the suite's cluster (kind, or any cluster named by
KAFKUBE_E2E_KUBECONFIG). Each scenario asserts what a user would look at: `kubectl get`, the
conditions `kubectl wait` waits on, what is left after a delete."""

from __future__ import annotations

import contextlib
import json
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.conftest import wait_until
from tests.e2e.platform import Cluster, KubectlError

REPO = Path(__file__).resolve().parents[2]
OPERATOR_NAMESPACE = "kafkube-system"


def helm_binary() -> str:
    out = subprocess.run(["bash", str(REPO / "scripts" / "helm.sh")], capture_output=True,
                         text=True, timeout=600, check=True)
    return out.stdout.strip()


@pytest.fixture(scope="module")
def operator(kind_cluster: Cluster) -> Iterator[Cluster]:
    """The chart installed as a user would, with a short operator lease for scenario 7."""
    helm = helm_binary()
    kind_cluster.run_in_netns(
        [helm, "install", "kafkube-operator", str(REPO / "charts" / "kafkube-operator"),
         "--namespace", OPERATOR_NAMESPACE, "--create-namespace", "--wait", "--timeout", "300s",
         "--set", "leaseDurationSeconds=10"], timeout=360)
    try:
        yield kind_cluster
    finally:
        for what in ("pods", "leases"):
            with contextlib.suppress(KubectlError):
                print(kind_cluster.kubectl("-n", OPERATOR_NAMESPACE, "get", what, "-o", "wide"))
        with contextlib.suppress(KubectlError):
            for pod in kind_cluster.kubectl(
                    "-n", OPERATOR_NAMESPACE, "get", "pods", "-o", "name").split():
                print(f"--- {pod}\n" + kind_cluster.kubectl(
                    "-n", OPERATOR_NAMESPACE, "logs", pod, "--tail=60"))
        kind_cluster.run_in_netns([helm, "uninstall", "kafkube-operator", "--namespace",
                                   OPERATOR_NAMESPACE, "--wait"], timeout=180, check=False)
        kind_cluster.kubectl("delete", "namespace", OPERATOR_NAMESPACE, "--wait=false")


@pytest.fixture
def namespace(operator: Cluster) -> Iterator[str]:
    name = f"kafka-{uuid.uuid4().hex[:6]}"
    operator.kubectl("create", "namespace", name)
    try:
        yield name
    finally:
        with contextlib.suppress(KubectlError):
            print(operator.kubectl("-n", name, "get", "kafkaclusters,statefulsets,pods,pvc,"
                                   "events", "-o", "wide"))
        operator.kubectl("delete", "namespace", name, "--wait=false")


def example_cluster(name: str, replicas: int = 3) -> str:
    """examples/kafkacluster.yaml with a small claim, as a user would start from it."""
    resource = yaml.safe_load((REPO / "examples" / "kafkacluster.yaml").read_text())
    resource["metadata"]["name"] = name
    resource["spec"].update(replicas=replicas, storage={"size": "1Gi", "deleteClaim": False})
    return json.dumps(resource)


def get_table(cluster: Cluster, namespace: str, kind: str) -> list[list[str]]:
    """`kubectl get KIND` as a user sees it: the header row, then one row per object."""
    return [line.split() for line in cluster.kubectl("-n", namespace, "get", kind).splitlines()]


def status(cluster: Cluster, namespace: str, name: str) -> dict:
    return json.loads(cluster.kubectl("-n", namespace, "get", "kafkacluster", name,
                                      "-o", "json")).get("status", {})


def test_a_kafka_cluster_applied_with_kubectl_becomes_ready(operator: Cluster,
                                                            namespace: str) -> None:
    operator.apply(example_cluster("my-cluster"), namespace=namespace)
    operator.kubectl("-n", namespace, "wait", "kafkacluster/my-cluster",
                     "--for=condition=Ready", "--timeout=420s", timeout=450)
    header, row = get_table(operator, namespace, "kafkaclusters")
    assert header == ["NAME", "DESIRED", "READY", "CONTROLLER", "STATUS", "AGE"]
    assert row[:3] == ["my-cluster", "3", "3"] and row[4] == "Ready", row
    assert row[3] in {"0", "1", "2"}
    seen = status(operator, namespace, "my-cluster")
    assert seen["bootstrapServers"] == f"my-cluster-bootstrap.{namespace}.svc:9092"
    racks = {b["id"]: b.get("rack") for b in seen["brokers"]}
    assert sorted(racks) == [0, 1, 2]
    # broker.rack comes from the zone of each broker's node, and the brokers spread over them.
    assert len(set(racks.values())) == 3 and None not in racks.values(), racks
    events = operator.kubectl("-n", namespace, "get", "events", "--field-selector",
                              "involvedObject.kind=KafkaCluster", "-o",
                              "jsonpath={range .items[*]}{.reason} {.message}{'\\n'}{end}")
    assert "Created created StatefulSet my-cluster" in events


def test_deleting_a_kafka_cluster_removes_what_it_owns_and_keeps_its_claims(
        operator: Cluster, namespace: str) -> None:
    operator.apply(example_cluster("short-lived", replicas=1), namespace=namespace)
    operator.kubectl("-n", namespace, "wait", "kafkacluster/short-lived",
                     "--for=condition=Ready", "--timeout=420s", timeout=450)
    operator.kubectl("-n", namespace, "delete", "kafkacluster", "short-lived",
                     "--timeout=300s", timeout=320)

    def left() -> list[str]:
        return operator.kubectl("-n", namespace, "get",
                                "statefulsets,services,configmaps,leases,pods,pdb,roles",
                                "-l", "kafkube.io/cluster=short-lived", "-o", "name").split()

    wait_until(lambda: left() == [], 180, "the cluster's objects gone", 2.0)
    bindings = operator.kubectl("get", "clusterrolebindings", "-l",
                                f"kafkube.io/namespace={namespace}", "-o", "name")
    assert bindings.strip() == ""
    # deleteClaim: false - the broker's data stays for a cluster of the same name.
    claims = operator.kubectl("-n", namespace, "get", "pvc", "-o", "name").split()
    assert claims == ["persistentvolumeclaim/data-short-lived-0"]
