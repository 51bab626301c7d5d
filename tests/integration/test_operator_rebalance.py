"""A KafkaRebalance against a real kube-apiserver and three real brokers in racks a, b, c:
broker 0 holds twice the bytes of the others (a topic whose every partition has a replica
on it, filled first), the operator measures the load (DescribeLogDirs, the brokers' leader
byte counters), proposes moves (ProposalReady, with the goals before and after), and once
approved executes them as a throttled reassignment (Rebalancing, with progress) to Ready:
every broker's disk usage then within the tolerance of the mean, racks kept, the throttle
removed, and every record an acks=all producer had acknowledged read back."""

from __future__ import annotations

import time
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import ConfigResource, NewTopic
from kubernetes import client as k8s

from kafkube.harness.metadata import Cluster
from kafkube.harness.queue_checker import History
from kafkube.harness.waiting import wait_until
from kafkube_operator.kafka import KafkaAdmin
from tests.integration.test_durability import Workload, check, drain, wait_for_progress
from tests.support.operator_api import GROUP, VERSION, Resources, events_of, kafka_clusters
from tests.support.operator_process import OperatorProcess

RACKS = "abc"
CAPACITY = 48 * 1024 * 1024  # the KafkaCluster's storage.size, 48Mi: each broker's capacity
# Six partitions of two replicas, each with one on broker 0. The acks=all workload writes to
# partitions 0-2 (test_durability.py's Workload); 3-5 are filled first, so broker 0 holds
# three filled replicas, broker 1 one and broker 2 two.
ASSIGNMENT = [[0, 1], [0, 2], [0, 1], [0, 2], [0, 1], [0, 2]]
FILLED = (3, 4, 5)
FILL_PER_PARTITION = 7 * 1024 * 1024
RECORD = 64 * 1024
THROTTLE = 2 * 1024 * 1024  # bytes/s: the moves (a few MiB) take seconds, so they are seen
TOLERANCE = 0.1


def _disk_usage(bootstrap: str) -> dict[int, float]:
    """Each broker's bytes on disk over its capacity, through DescribeLogDirs."""
    admin = KafkaAdmin(bootstrap.split(","))
    try:
        answers = admin.log_dirs(range(3))
    finally:
        admin.close()
    return {b: sum(sizes.values()) / CAPACITY for b, (_, sizes) in sorted(answers.items())}


def _fill(bootstrap: str) -> None:
    """FILL_PER_PARTITION bytes into each FILLED partition of ``heavy``, acks=all."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 20,
                         "message.max.bytes": 2 * RECORD, "batch.size": 4 * RECORD})
    failed: list[str] = []
    payload = b"x" * RECORD
    for partition in FILLED:
        for _ in range(FILL_PER_PARTITION // RECORD):
            producer.produce("heavy", payload, partition=partition, on_delivery=lambda e, _m:
                             failed.append(str(e)) if e is not None else None)
            producer.poll(0)
    assert producer.flush(60) == 0 and not failed, failed[:3]


def _skewed_cluster(crd_api: k8s.ApiClient, control_plane: Any, namespace: str,
                    operators: list[OperatorProcess], cluster_factory, rebalance: dict
                    ) -> tuple[Cluster, dict[int, float]]:
    """An operator, KafkaCluster rho (``rebalance``: its spec.rebalance) and its three
    brokers in racks a, b, c, with ``heavy`` filled so broker 0 is well above the mean;
    each broker's disk usage."""
    operators.append(OperatorProcess(control_plane.kubeconfig, namespace))
    kafka_clusters(crd_api, namespace).create("rho", {"replicas": 3, "rebalance": rebalance,
                                                      "storage": {"size": "48Mi"}})
    cluster = cluster_factory(3, {
        "kafkube.coordination.backend": "kubernetes", "kafkube.cluster.name": "rho",
        "kafkube.kubernetes.namespace": namespace,
        "kafkube.kubernetes.kubeconfig": str(control_plane.kubeconfig),
        "auto.leader.rebalance.enable": "false", "offsets.topic.replication.factor": "3",
        "offsets.topic.num.partitions": "3"}, start=False)
    for i, broker in enumerate(cluster.brokers):
        broker.overrides["broker.rack"] = RACKS[i]
    cluster.start()
    new = NewTopic("heavy", num_partitions=len(ASSIGNMENT), replica_assignment=ASSIGNMENT,
                   config={"min.insync.replicas": "2"})
    cluster.admin.create_topics([new])["heavy"].result(30)
    cluster.wait_for_isr("heavy", 2, 60)
    _fill(cluster.bootstrap)
    before = _disk_usage(cluster.bootstrap)
    fill = sum(before.values()) / len(before)
    assert before[0] - fill > TOLERANCE, before  # broker 0 well above the others
    return cluster, before


def _within_tolerance(bootstrap: str) -> dict[int, float]:
    after = _disk_usage(bootstrap)
    fill = sum(after.values()) / len(after)
    return after if all(abs(u - fill) <= TOLERANCE for u in after.values()) else {}


def test_a_kafka_rebalance_evens_out_disk_usage_under_the_throttle(
        crd_api: k8s.ApiClient, control_plane: Any, namespace: str,
        operators: list[OperatorProcess], cluster_factory) -> None:
    cluster, before = _skewed_cluster(crd_api, control_plane, namespace, operators,
                                      cluster_factory, {})
    rebalances = Resources(crd_api, namespace, "KafkaRebalance", "kafkarebalances")
    history = History()
    with Workload(cluster.bootstrap, "heavy", history, idempotent=True) as workload:
        wait_for_progress(history, "before the rebalance")
        rebalances.create("even", {"cluster": "rho", "throttleBytesPerSecond": THROTTLE,
                                   "tolerances": {"diskUsage": TOLERANCE}})
        status = rebalances.status_when("even", lambda s: s.get("state") == "ProposalReady",
                                        90, "a proposal")
        proposal = status["proposal"]
        assert proposal["replicaMoves"] >= 1 and proposal["dataToMoveBytes"] > 0, proposal
        disk = next(g for g in proposal["goals"] if g["goal"] == "DiskUsage")
        assert not disk["metBefore"] and disk["metAfter"], disk
        assert all(g["metAfter"] for g in proposal["goals"] if g["goal"] == "RackAware")
        # The acks=all workload's rates, read from the brokers' counters, reached the plan.
        assert sum(b["before"]["leaderBytesIn"] for b in proposal["brokers"]) > 0, proposal

        started = time.monotonic()
        k8s.CustomObjectsApi(crd_api).patch_namespaced_custom_object(
            GROUP, VERSION, namespace, "kafkarebalances", "even",
            {"metadata": {"annotations": {"kafkube.io/rebalance": "approve"}}})
        rebalances.status_when("even", lambda s: s.get("state") in ("Rebalancing", "Ready"),
                               60, "the moves started")
        throttled = wait_until(lambda: next(iter(cluster.admin.describe_configs(
            [ConfigResource("broker", "0")]).values())).result()[
            "leader.replication.throttled.rate"].value == str(THROTTLE) or
            rebalances.get("even")["status"]["state"] == "Ready", 30, "the throttle set")
        assert throttled
        status = rebalances.status_when("even", lambda s: s.get("state") == "Ready", 240,
                                        "the rebalance done")
        took = time.monotonic() - started
        wait_for_progress(history, "after the rebalance")
    drain(cluster, "heavy", history)
    check("heavy", history, True, workload, (cluster,))

    after = _within_tolerance(cluster.bootstrap)
    assert after, (before, _disk_usage(cluster.bootstrap))
    # The copy ran under the throttle: at most THROTTLE bytes a second (with slack for the
    # first second's burst).
    assert took >= proposal["dataToMoveBytes"] / THROTTLE * 0.5, (took, proposal)
    for p, state in (cluster.partitions("heavy") or {}).items():
        assert len({RACKS[b] for b in state.replicas}) == len(state.replicas), (p, state)
    broker = next(iter(cluster.admin.describe_configs(
        [ConfigResource("broker", "0")]).values())).result()
    assert broker["leader.replication.throttled.rate"].value != str(THROTTLE)
    assert status["progress"]["partitionsDone"] == status["progress"]["partitions"]
    reasons = {reason for _, reason, _ in events_of(crd_api, namespace, "even",
                                                      "KafkaRebalance")}
    assert {"ProposalReady", "RebalanceStarted", "RebalanceDone"} <= reasons, reasons
    print(f"disk usage before {before}, after {after}; {proposal['replicaMoves']} replica "
          f"move(s), {proposal['dataToMoveBytes']} bytes, {took:.1f} s")
    cluster.stop()


def test_the_automatic_mode_rebalances_a_cluster_that_drifted(
        crd_api: k8s.ApiClient, control_plane: Any, namespace: str,
        operators: list[OperatorProcess], cluster_factory) -> None:
    """spec.rebalance.auto: the operator makes rho-auto-rebalance itself, auto-approved,
    throttled at the cluster's rate, and it ends Ready with disk usage within tolerance."""
    cluster, before = _skewed_cluster(crd_api, control_plane, namespace, operators,
                                      cluster_factory, {
                                          "throttleBytesPerSecond": THROTTLE,
                                          "auto": {"enabled": True,
                                                   "thresholds": {"diskUsage": TOLERANCE}}})
    rebalances = Resources(crd_api, namespace, "KafkaRebalance", "kafkarebalances")
    status = rebalances.status_when("rho-auto-rebalance", lambda s: s.get("state") == "Ready"
                                    and "progress" in s, 240, "the automatic rebalance done")
    made = rebalances.get("rho-auto-rebalance")
    assert made["metadata"]["ownerReferences"][0]["kind"] == "KafkaCluster"
    assert status["proposal"]["replicaMoves"] >= 1
    after = wait_until(lambda: _within_tolerance(cluster.bootstrap), 30, "disk evened out")
    reasons = {reason for _, reason, _ in events_of(crd_api, namespace, "rho")}
    assert "AutoRebalance" in reasons, reasons
    started = [m for _, r, m in events_of(crd_api, namespace, "rho-auto-rebalance",
                                          "KafkaRebalance") if r == "RebalanceStarted"]
    assert len(started) == 1 and f"throttled at {THROTTLE} B/s" in started[0], started
    print(f"auto: disk usage before {before}, after {after}")
    cluster.stop()
