"""spec.autoSizing against a real kube-apiserver (model/sizing.py): the operator lists the
nodes, gives each pool's brokers the resources its smallest node allows, says in the status
how many brokers such a node has room for, sizes a pool from the nodes its required node
affinity allows, and keeps the default (with a Warning) for a pool no node can host. A
reserve that is no quantity is refused at admission.

This tier's API server has no kubelets: the nodes are registered by the test, as a kubelet
would register them (the object, then its allocatable in the status)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes.client.rest import ApiException

from kafkube.harness.waiting import wait_until
from tests.support.operator_api import condition, kafka_clusters, statefulset_or_none
from tests.support.operator_process import OperatorProcess


class Nodes:
    """Nodes labelled for one test only (nodes are cluster-wide; the label keeps other
    tests' nodes out of its pools), registered as a kubelet would: the object, then its
    allocatable in the status."""

    def __init__(self, core: k8s.CoreV1Api, namespace: str) -> None:
        self.core = core
        self.label = f"sizing-{namespace}"
        self.names: list[str] = []

    def add(self, cpu: str, memory: str) -> str:
        name = f"{self.label}-{len(self.names)}"
        self.core.create_node(k8s.V1Node(metadata=k8s.V1ObjectMeta(
            name=name, labels={"kafkube.test/sizing": self.label,
                               "kubernetes.io/hostname": name})))
        self.names.append(name)
        capacity = {"cpu": cpu, "memory": memory, "pods": "110"}
        self.core.patch_node_status(name, {"status": {"capacity": capacity,
                                                      "allocatable": capacity}})
        return name


@pytest.fixture
def nodes(crd_api: k8s.ApiClient, namespace: str) -> Iterator[Nodes]:
    """Two nodes of 16 cores and 64 GiB, one of 8 and 32 GiB."""
    made = Nodes(k8s.CoreV1Api(crd_api), namespace)
    try:
        for cpu, memory in (("16", "64Gi"), ("16", "64Gi"), ("8", "32Gi")):
            made.add(cpu, memory)
        yield made
    finally:
        for name in made.names:
            made.core.delete_node(name)


def _resources(apps: k8s.AppsV1Api, namespace: str, name: str, what: str,
               ready: Any = bool) -> Any:
    def found() -> Any:
        sts = statefulset_or_none(apps, namespace, name)
        resources = sts and sts.spec.template.spec.containers[0].resources
        return resources if resources is not None and ready(resources) else None
    return wait_until(found, 60, what)


def test_brokers_are_sized_from_their_nodes_at_each_change_of_the_spec(
        crd_api: k8s.ApiClient, control_plane: Any, namespace: str, nodes: Nodes,
        operators: list[OperatorProcess]) -> None:
    operators.append(OperatorProcess(control_plane.kubeconfig, namespace))
    clusters = kafka_clusters(crd_api, namespace)
    apps = k8s.AppsV1Api(crd_api)
    clusters.create("sized", {
        "replicas": 3, "autoSizing": {"enabled": True},
        "nodeSelector": {"kafkube.test/sizing": nodes.label},
        "pools": [{"name": "nowhere", "replicas": 1, "firstNodeId": 100,
                   "nodeSelector": {"kafkube.test/sizing": "no-such-node"}},
                  {"name": "own", "replicas": 1, "firstNodeId": 200,
                   "resources": {"requests": {"cpu": "3", "memory": "5Gi"}}},
                  {"name": "pinned", "replicas": 1, "firstNodeId": 300,
                   "affinity": {"nodeAffinity": {
                       "requiredDuringSchedulingIgnoredDuringExecution": {
                           "nodeSelectorTerms": [{"matchExpressions": [
                               {"key": "kubernetes.io/hostname", "operator": "In",
                                "values": [nodes.names[0]]}]}]}}}}]})

    resources = _resources(apps, namespace, "sized", "the derived resources",
                           lambda r: (r.requests or {}).get("cpu") == "1")
    # A core each; memory: the least per core, (64 - 2) GiB over the 15 cores left of the
    # 16-core nodes, times one core, in 256 MiB steps.
    assert resources.requests == {"cpu": "1", "memory": "512Mi"}
    assert resources.limits == {"memory": "4Gi"}
    assert resources.limits.get("cpu") is None  # a throttled event loop stalls every client
    sts = statefulset_or_none(apps, namespace, "sized")
    assert sts.metadata.annotations["kafkube.io/sized-generation"] == "1"
    status = clusters.status_when("sized", lambda s: len(s.get("sizing") or ()) == 3, 60,
                                  "status.sizing")
    default = next(s for s in status["sizing"] if s["pool"] == "default")
    assert (default["node"], default["nodes"], default["brokersPerNode"]) == \
        (nodes.names[2], 3, 7)  # the 8-core node: 7 cores once its reserve is kept
    assert "each has room for at least 7 such broker(s); the pool has 3" in default["message"]
    warning = condition(status, "Warning")
    assert warning.get("reason") == "AutoSizingSkipped", status
    assert "no node matches nodeSelector" in warning["message"]
    nowhere = _resources(apps, namespace, "sized-nowhere", "the pool no node can host")
    assert nowhere.requests == {"cpu": "100m", "memory": "256Mi"}
    # The pool whose required node affinity allows one 16-core node only: sized from it.
    pinned = next(s for s in status["sizing"] if s["pool"] == "pinned")
    assert (pinned["node"], pinned["nodes"], pinned["brokersPerNode"]) == (nodes.names[0], 1, 15)
    assert _resources(apps, namespace, "sized-pinned", "the pinned pool's resources",
                      lambda r: (r.requests or {}).get("cpu") == "1").limits == {"memory": "4Gi"}
    own = _resources(apps, namespace, "sized-own", "the pool with resources of its own")
    assert own.requests == {"cpu": "3", "memory": "5Gi"}

    # A smaller node joins: no roll for it (the brokers keep what they have), the status
    # says what the next change of the spec will apply.
    nodes.add("4", "8Gi")
    status = clusters.status_when(
        "sized", lambda s: "next change of the spec" in str(s.get("sizing")), 120,
        "status.sizing to tell of the smaller node")
    assert _resources(apps, namespace, "sized", "the resources").limits == {"memory": "4Gi"}
    # The spec changes (another reserve): sized again, from the 4-core node now,
    # (8 - 4) GiB over its 3 cores left.
    clusters.patch("sized", {"autoSizing": {"enabled": True, "reservedMemory": "4Gi"}})
    resources = _resources(apps, namespace, "sized", "the resources of the new spec",
                           lambda r: (r.limits or {}).get("memory") != "4Gi")
    assert resources.limits == {"memory": "1280Mi"} and resources.requests["cpu"] == "1"
    assert statefulset_or_none(apps, namespace, "sized").metadata.annotations[
        "kafkube.io/sized-generation"] == "2"


def test_a_reserve_that_is_no_quantity_is_refused_at_admission(
        crd_api: k8s.ApiClient, namespace: str) -> None:
    clusters = kafka_clusters(crd_api, namespace)
    for field, value in (("reservedCpu", "lots"), ("reservedMemory", "-1Gi")):
        with pytest.raises(ApiException) as refused:
            clusters.create(f"bad-{field.lower()}", {
                "replicas": 1, "autoSizing": {"enabled": True, field: value}})
        assert refused.value.status == 422
        assert f"autoSizing.{field} must be a" in refused.value.body
