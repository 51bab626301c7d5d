"""A Topic's ``spec.replicationFactor`` changed on a live topic, against a real kube-apiserver
and three real brokers in racks a, b, c: 1 → 3 → 2 while acks=all producers write and a
consumer reads. Each change is a throttled reassignment the Topic's status follows; every
partition ends with one replica per rack and its preferred leader kept; no acknowledged record
is lost; a factor below min.insync.replicas is refused with a Warning and nothing moves.
(tests/e2e does the same on kind.)"""

from __future__ import annotations

from typing import Any

from confluent_kafka.admin import ConfigResource
from kubernetes import client as k8s

from kafkube.harness.queue_checker import History
from tests.integration.test_durability import PARTITIONS, Workload, check, drain, wait_for_progress
from tests.support.operator_api import condition, events_of, kafka_clusters, topic_resources
from tests.support.operator_process import OperatorProcess

RACKS = "abc"


def test_a_replication_factor_change_is_a_throttled_move_losing_no_acknowledged_record(
        crd_api: k8s.ApiClient, control_plane: Any, namespace: str,
        operators: list[OperatorProcess], cluster_factory) -> None:
    operators.append(OperatorProcess(control_plane.kubeconfig, namespace))
    kafka_clusters(crd_api, namespace).create("zeta", {"replicas": 3})
    cluster = cluster_factory(3, {
        "kafkube.coordination.backend": "kubernetes", "kafkube.cluster.name": "zeta",
        "kafkube.kubernetes.namespace": namespace,
        "kafkube.kubernetes.kubeconfig": str(control_plane.kubeconfig),
        "auto.leader.rebalance.enable": "false"}, start=False)
    for i, broker in enumerate(cluster.brokers):
        broker.overrides["broker.rack"] = RACKS[i]
    cluster.start()
    topics = topic_resources(crd_api, namespace)
    topics.create("moving", {"cluster": "zeta", "partitions": PARTITIONS,
                             "replicationFactor": 1, "config": {"min.insync.replicas": 1}})
    topics.status_when("moving", lambda s: condition(s, "Ready").get("status") == "True", 60,
                       "moving Ready at RF 1")
    preferred = {p: s.replicas[0] for p, s in (cluster.partitions("moving") or {}).items()}
    history = History()
    with Workload(cluster.bootstrap, "moving", history, idempotent=True) as workload:
        wait_for_progress(history, "before the first change")
        for factor in (3, 2):
            topics.patch("moving", {"replicationFactor": factor})
            status = topics.status_when("moving", lambda s, f=factor: s.get(
                "replicationFactor") == f and "reassignment" not in s and
                "replicationThrottle" not in s and condition(s, "Ready").get("status")
                == "True", 120, f"replication factor {factor}, its throttle removed")
            assert condition(status, "Warning").get("status") == "False", status
            placed = cluster.partitions("moving") or {}
            for p, state in placed.items():
                assert len(state.replicas) == factor and state.replicas[0] == preferred[p]
                assert len({RACKS[b] for b in state.replicas}) == factor, placed
            wait_for_progress(history, f"at replication factor {factor}")
    drain(cluster, "moving", history)
    check("moving", history, True, workload, (cluster,))

    reasons = [(reason, message) for _, reason, message in events_of(crd_api, namespace,
                                                                      "moving", "Topic")]
    changing = sorted(m for r, m in reasons if r == "ReplicationFactorChanging")
    assert len(changing) == 2 and "to replication factor 2" in changing[0] and \
        "to replication factor 3" in changing[1], reasons
    assert all("throttled at 52428800 B/s" in m for m in changing)
    assert "ReplicationFactorChanged" in {r for r, _ in reasons}, reasons
    configs = next(iter(cluster.admin.describe_configs(
        [ConfigResource("topic", "moving")]).values())).result()
    assert configs["follower.replication.throttled.replicas"].value in ("", None)
    broker = next(iter(cluster.admin.describe_configs(
        [ConfigResource("broker", "0")]).values())).result()
    assert int(broker["leader.replication.throttled.rate"].value) > 52428800  # none set

    # Below the topic's min.insync.replicas: refused, with why, and nothing moves.
    topics.patch("moving", {"config": {"min.insync.replicas": 2}})
    topics.status_when("moving", lambda s: condition(s, "Ready").get("status") == "True", 60,
                       "min.insync.replicas 2")
    topics.patch("moving", {"replicationFactor": 1})
    status = topics.status_when("moving", lambda s: condition(s, "Warning").get("reason")
                                == "ReplicationFactorBelowMinIsr", 60, "the refusal")
    assert "below the topic's min.insync.replicas 2" in condition(status, "Warning")["message"]
    assert all(len(s.replicas) == 2 for s in (cluster.partitions("moving") or {}).values())
    assert status["replicationFactor"] == 2
    cluster.stop()
