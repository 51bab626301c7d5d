"""The operator on the suite's cluster, installed as a user installs it (`helm install` of
charts/kafkube-operator), and the helpers of the scenarios that apply KafkaClusters to it
(tests/e2e/test_operator.py, tests/e2e/test_spark.py)."""

from __future__ import annotations

import contextlib
import json
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import yaml

from kafkube.harness.checkout import REPO
from kafkube.harness.kind.deployment import Brokers
from kafkube.harness.kind.platform import Cluster, KubectlError

OPERATOR_NAMESPACE = "kafkube-system"


def helm_binary() -> str:
    out = subprocess.run(["bash", str(REPO / "scripts" / "helm.sh")], capture_output=True,
                         text=True, timeout=600, check=True)
    return out.stdout.strip()


@contextlib.contextmanager
def helm_release(cluster: Cluster, release: str, chart: Path, namespace: str, *options: str,
                 show: tuple[str, ...] = ("pods",)) -> Iterator[None]:
    """`helm install RELEASE CHART` into NAMESPACE (made for it) as a user installs a chart,
    waited for; afterwards the SHOW kinds there and each pod's log printed, the release
    uninstalled and the namespace deleted, waited for too: a namespace still terminating
    refuses the next install's objects (helm's release Secret first)."""
    helm = helm_binary()
    cluster.run_in_netns(
        [helm, "install", release, str(chart), "--namespace", namespace, "--create-namespace",
         "--wait", "--timeout", "300s", *options], timeout=360)
    try:
        yield
    finally:
        for what in show:
            with contextlib.suppress(KubectlError):
                print(cluster.kubectl("-n", namespace, "get", what, "-o", "wide"))
        with contextlib.suppress(KubectlError):
            for pod in cluster.kubectl("-n", namespace, "get", "pods", "-o", "name").split():
                print(f"--- {pod}\n" + cluster.kubectl("-n", namespace, "logs", pod,
                                                      "--tail=60"))
        cluster.run_in_netns([helm, "uninstall", release, "--namespace", namespace, "--wait"],
                             timeout=180, check=False)
        cluster.kubectl("delete", "namespace", namespace, "--ignore-not-found",
                        "--timeout=180s", timeout=190)


@contextlib.contextmanager
def installed_operator(cluster: Cluster) -> Iterator[Cluster]:
    """The chart installed, with a short operator lease (the failover scenario waits on it)."""
    with helm_release(cluster, "kafkube-operator", REPO / "charts" / "kafkube-operator",
                      OPERATOR_NAMESPACE, "--set", "leaseDurationSeconds=10",
                      show=("pods", "leases")):
        yield cluster


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


def example_cluster(name: str, replicas: int = 3) -> str:
    """examples/kafkacluster.yaml with a small claim, as a user would start from it."""
    resource = yaml.safe_load((REPO / "examples" / "kafkacluster.yaml").read_text())
    resource["metadata"]["name"] = name
    resource["spec"].update(replicas=replicas, storage={"size": "1Gi", "deleteClaim": False})
    return json.dumps(resource)


@contextlib.contextmanager
def ready_cluster(cluster: Cluster, resource: dict) -> Iterator[Brokers]:
    """``resource`` (a KafkaCluster) applied in a namespace of its own and waited on until
    Ready, as a user would; its brokers."""
    name = resource["metadata"]["name"]
    with namespace_of(cluster) as namespace:
        cluster.apply(json.dumps(resource), namespace=namespace)
        cluster.kubectl("-n", namespace, "wait", f"kafkacluster/{name}",
                        "--for=condition=Ready", "--timeout=420s", timeout=450)
        yield Brokers(cluster, namespace, name)


def cluster_status(brokers: Brokers) -> dict:
    """The KafkaCluster's status, as `kubectl get -o json` shows it."""
    return json.loads(brokers.kubectl("get", "kafkacluster", brokers.name, "-o",
                                      "json")).get("status", {})
