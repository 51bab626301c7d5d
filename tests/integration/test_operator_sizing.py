"""spec.autoSizing against a real kube-apiserver (model/sizing.py): the operator lists the
nodes, gives each pool's brokers the resources its smallest node allows, says in the status
how many brokers such a node has room for, and keeps the default (with a Warning) for a pool
no node can host. A reserve that is no quantity is refused at admission.

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

SIZES = {"big": ("16", "64Gi"), "mid": ("8", "32Gi")}


@pytest.fixture
def nodes(crd_api: k8s.ApiClient, namespace: str) -> Iterator[str]:
    """Three nodes labelled for this test only (nodes are cluster-wide; the label keeps
    other tests' nodes out of its pools): two of 16 cores, one of 8."""
    core = k8s.CoreV1Api(crd_api)
    label = f"sizing-{namespace}"
    names = []
    for i, size in enumerate(("big", "big", "mid")):
        name = f"{label}-{i}"
        cpu, memory = SIZES[size]
        core.create_node(k8s.V1Node(metadata=k8s.V1ObjectMeta(
            name=name, labels={"kafkube.test/sizing": label, "kubernetes.io/hostname": name})))
        names.append(name)
        capacity = {"cpu": cpu, "memory": memory, "pods": "110"}
        core.patch_node_status(name, {"status": {"capacity": capacity,
                                                 "allocatable": capacity}})
    try:
        yield label
    finally:
        for name in names:
            core.delete_node(name)


def _resources(apps: k8s.AppsV1Api, namespace: str, name: str, what: str,
               ready: Any = bool) -> Any:
    def found() -> Any:
        sts = statefulset_or_none(apps, namespace, name)
        resources = sts and sts.spec.template.spec.containers[0].resources
        return resources if resources is not None and ready(resources) else None
    return wait_until(found, 60, what)


def test_brokers_are_sized_from_the_smallest_node_their_pool_may_use(
        crd_api: k8s.ApiClient, control_plane: Any, namespace: str, nodes: str,
        operators: list[OperatorProcess]) -> None:
    operators.append(OperatorProcess(control_plane.kubeconfig, namespace))
    clusters = kafka_clusters(crd_api, namespace)
    apps = k8s.AppsV1Api(crd_api)
    clusters.create("sized", {
        "replicas": 3, "autoSizing": {"enabled": True},
        "nodeSelector": {"kafkube.test/sizing": nodes},
        "pools": [{"name": "nowhere", "replicas": 1, "firstNodeId": 100,
                   "nodeSelector": {"kafkube.test/sizing": "no-such-node"}},
                  {"name": "own", "replicas": 1, "firstNodeId": 200,
                   "resources": {"requests": {"cpu": "3", "memory": "5Gi"}}}]})

    resources = _resources(apps, namespace, "sized", "the derived resources",
                           lambda r: (r.requests or {}).get("cpu") == "1")
    # The 8-core node decides: (32 - 2) GiB over its 7 cores left after the 1-core reserve.
    assert resources.requests == {"cpu": "1", "memory": "512Mi"}
    assert resources.limits == {"memory": "4388Mi"}
    assert resources.limits.get("cpu") is None  # a throttled event loop stalls every client
    status = clusters.status_when("sized", lambda s: len(s.get("sizing") or ()) == 2, 60,
                                  "status.sizing")
    default = next(s for s in status["sizing"] if s["pool"] == "default")
    assert (default["node"], default["nodes"], default["brokersPerNode"]) == \
        (f"{nodes}-2", 3, 7)
    assert "room for 7 broker(s), 21 on the 3 node(s)" in default["message"]
    warning = condition(status, "Warning")
    assert warning.get("reason") == "AutoSizingSkipped", status
    assert "no node matches nodeSelector" in warning["message"]
    nowhere = _resources(apps, namespace, "sized-nowhere", "the pool no node can host")
    assert nowhere.requests == {"cpu": "100m", "memory": "256Mi"}
    own = _resources(apps, namespace, "sized-own", "the pool with resources of its own")
    assert own.requests == {"cpu": "3", "memory": "5Gi"}

    # A larger reserve: less memory per core (the request stays a core, the node has 8).
    clusters.patch("sized", {"autoSizing": {"enabled": True, "reservedMemory": "16Gi"}})
    resources = _resources(apps, namespace, "sized", "the resources of the new reserve",
                           lambda r: (r.limits or {}).get("memory") != "4388Mi")
    assert resources.limits == {"memory": "2340Mi"}  # (32 - 16) GiB / 7


def test_a_reserve_that_is_no_quantity_is_refused_at_admission(
        crd_api: k8s.ApiClient, namespace: str) -> None:
    clusters = kafka_clusters(crd_api, namespace)
    for field, value in (("reservedCpu", "lots"), ("reservedMemory", "-1Gi")):
        with pytest.raises(ApiException) as refused:
            clusters.create(f"bad-{field.lower()}", {
                "replicas": 1, "autoSizing": {"enabled": True, field: value}})
        assert refused.value.status == 422
        assert f"autoSizing.{field} must be a" in refused.value.body
