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
from tests.e2e.deployment import Brokers
from tests.e2e.history import read_drain, read_produce
from tests.e2e.platform import Cluster, KubectlError
from tests.queue_checker import History

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


@contextlib.contextmanager
def namespace_of(cluster: Cluster) -> Iterator[str]:
    """A namespace of the scenario's own; what was in it printed, then deleted."""
    name = f"kafka-{uuid.uuid4().hex[:6]}"
    cluster.kubectl("create", "namespace", name)
    try:
        yield name
    finally:
        with contextlib.suppress(KubectlError):
            print(cluster.kubectl("-n", name, "get", "kafkaclusters,topics,statefulsets,pods,"
                                  "pvc,events", "-o", "wide"))
        cluster.kubectl("delete", "namespace", name, "--wait=false")


@pytest.fixture(scope="module")
def my_cluster(operator: Cluster) -> Iterator[Brokers]:
    """examples/kafkacluster.yaml applied with kubectl, waited on as a user would."""
    with namespace_of(operator) as namespace:
        operator.apply(example_cluster("my-cluster"), namespace=namespace)
        operator.kubectl("-n", namespace, "wait", "kafkacluster/my-cluster",
                         "--for=condition=Ready", "--timeout=420s", timeout=450)
        yield Brokers(operator, namespace, "my-cluster")


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


def test_a_kafka_cluster_applied_with_kubectl_becomes_ready(my_cluster: Brokers) -> None:
    operator, namespace = my_cluster.cluster, my_cluster.namespace
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
        operator: Cluster) -> None:
    with namespace_of(operator) as namespace:
        deleted_with_its_objects(operator, namespace)


def deleted_with_its_objects(operator: Cluster, namespace: str) -> None:
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


def test_a_topic_of_12_partitions_spreads_its_leaders_and_carries_100000_records(
        my_cluster: Brokers) -> None:
    operator, namespace = my_cluster.cluster, my_cluster.namespace
    operator.apply((REPO / "examples" / "topic.yaml").read_text(), namespace=namespace)
    operator.kubectl("-n", namespace, "wait", "topic/orders", "--for=condition=Ready",
                     "--timeout=120s", timeout=150)
    seen = json.loads(operator.kubectl("-n", namespace, "get", "topic", "orders", "-o",
                                       "json"))["status"]
    racks = {b["id"]: b["rack"] for b in status(operator, namespace, "my-cluster")["brokers"]}
    leaders = [p["leader"] for p in seen["partitions"]]
    assert {b: leaders.count(b) for b in racks} == {0: 4, 1: 4, 2: 4}, leaders
    assert {racks[b] for b in leaders} == set(racks.values())  # leaders in every zone
    for p in seen["partitions"]:
        assert len({racks[r] for r in p["replicas"]}) == 3, p  # one replica per zone
        assert sorted(p["isr"]) == sorted(p["replicas"]), p
    header, row = get_table(operator, namespace, "topics")
    assert header[:6] == ["NAME", "CLUSTER", "PARTITIONS", "RF", "UNDER-REPLICATED", "READY"]
    assert row[:6] == ["orders", "my-cluster", "12", "3", "0", "True"], row

    history = History()
    produced = read_produce(my_cluster.run("produce", my_cluster.bootstrap, "orders",
                                           "--count", "100000", "--acks", "all",
                                           timeout=600), history)
    drained = read_drain(my_cluster.run("drain", my_cluster.bootstrap, "orders", timeout=600),
                         history)
    report = history.check()
    assert produced.acked == 100_000 and drained == 100_000
    assert report.ok(idempotent=True), report.summary()

    # A topic made through the Kafka API (a client's CreateTopics) appears as a Topic.
    my_cluster.create_topic("Made_By_Client", 3)

    def mirrored() -> list[str] | None:
        rows = get_table(operator, namespace, "topics")[1:]
        found = [r for r in rows if r[0].startswith("made-by-client-")]
        return found[0] if found else None

    row = wait_until(mirrored, 60, "a Topic for Made_By_Client", 2.0)
    assert row[1:4] == ["my-cluster", "3", "3"], row
