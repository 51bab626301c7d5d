"""Node pools against a real kube-apiserver and real brokers (model/pools.py): a pool added
to a running KafkaCluster gets its own StatefulSet (node ids from its firstNodeId, its own
resources and placement) and, once its brokers register, a share of the replicas; the default
pool scaled to 0 is drained onto it before its StatefulSet shrinks, so every broker has moved
to the new pool, under acks=all producers whose every acknowledged record is read back.

As in every operator test of this tier the API server has no kubelets: the operator's
StatefulSets get no pods, and the brokers are processes started as those pods would be."""

from __future__ import annotations

from typing import Any

from kubernetes import client as k8s

from kafkube.harness.queue_checker import History
from kafkube.harness.waiting import wait_until
from tests.integration.test_durability import Workload, check, drain, wait_for_progress
from tests.support.operator_api import (
    events_of,
    kafka_clusters,
    statefulset_or_none,
    topic_resources,
)
from tests.support.operator_process import OperatorProcess

BIG = {"name": "big", "replicas": 3, "firstNodeId": 100,
       "resources": {"requests": {"cpu": "2", "memory": "4Gi"}},
       "nodeSelector": {"disk": "nvme"},
       "tolerations": [{"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}]}


def test_every_broker_moves_to_a_new_pool_by_draining_the_default_one(
        crd_api: k8s.ApiClient, control_plane: Any, namespace: str,
        operators: list[OperatorProcess], cluster_factory) -> None:
    operators.append(OperatorProcess(control_plane.kubeconfig, namespace))
    clusters = kafka_clusters(crd_api, namespace)
    apps = k8s.AppsV1Api(crd_api)
    clusters.create("pi", {"replicas": 3})
    coordination = {
        "kafkube.coordination.backend": "kubernetes", "kafkube.cluster.name": "pi",
        "kafkube.kubernetes.namespace": namespace,
        "kafkube.kubernetes.kubeconfig": str(control_plane.kubeconfig),
        "auto.leader.rebalance.enable": "false"}
    first = cluster_factory(3, coordination)
    topic_resources(crd_api, namespace).create("moved", {"cluster": "pi", "partitions": 3,
                                                          "replicationFactor": 3})
    first.wait_for_isr("moved", 3)

    def replicas_per_broker() -> dict[int, int]:
        counts: dict[int, int] = {}
        for state in (first.partitions("moved") or {}).values():
            for broker in state.replicas:
                counts[broker] = counts.get(broker, 0) + 1
        return counts

    history = History()
    with Workload(first.bootstrap, "moved", history, idempotent=True) as workload:
        wait_for_progress(history, "before the pool")
        clusters.patch("pi", {"pools": [BIG]})
        sts = wait_until(lambda: statefulset_or_none(apps, namespace, "pi-big"), 30, "pi-big")
        template = sts.spec.template
        assert sts.spec.replicas == 3 and sts.spec.selector.match_labels["kafkube.io/pool"] == \
            "big"
        assert template.metadata.annotations["kafkube.io/node-id-offset"] == "100"
        assert template.spec.node_selector == {"disk": "nvme"}
        assert template.spec.tolerations[0].key == "dedicated"
        assert template.spec.containers[0].resources.requests == {"cpu": "2", "memory": "4Gi"}
        assert {"name": "KAFKUBE_NODE_ID_OFFSET", "value": "100"} in [
            {"name": e.name, "value": e.value} for e in template.spec.containers[0].env]
        assert apps.read_namespaced_stateful_set("pi", namespace).spec.replicas == 3
        status = clusters.status_when("pi", lambda s: len(s.get("pools") or ()) == 2, 30,
                                      "the pools in the status")
        assert [(p["name"], p["nodeIds"]) for p in status["pools"]] == [
            ("default", [0, 1, 2]), ("big", [100, 101, 102])]
        added = cluster_factory(3, coordination, start=False)
        for i, broker in enumerate(added.brokers):
            broker.overrides["node.id"] = str(100 + i)
        added.start()
        wait_until(lambda: (c := replicas_per_broker()) and len(c) == 6 and sum(c.values())
                   == 9 and max(c.values()) - min(c.values()) <= 1, 120,
                   "9 replicas over the 6 brokers of both pools")
        wait_for_progress(history, "with both pools")

        # Every broker to pool big: the default pool drained, then its StatefulSet at 0.
        clusters.patch("pi", {"replicas": 0})
        wait_until(lambda: set(replicas_per_broker()) == {100, 101, 102}, 180,
                   "the default pool's brokers drained onto pool big")
        wait_until(lambda: apps.read_namespaced_stateful_set("pi", namespace).spec.replicas
                   == 0, 60, "the default pool's StatefulSet at 0 once drained")
        assert apps.read_namespaced_stateful_set("pi-big", namespace).spec.replicas == 3
        added.wait_for_isr("moved", 3)
        wait_for_progress(history, "on pool big alone")
    first.stop()
    drain(added, "moved", history)
    check("moved", history, True, workload, (first, added))
    reasons = [message for _, reason, message in events_of(crd_api, namespace, "pi")
               if reason == "Scaling"]
    assert "StatefulSet pi: 3 → 0 brokers" in reasons, reasons
    assert "StatefulSet pi-big: 3" not in " ".join(reasons)  # made at 3, never resized
