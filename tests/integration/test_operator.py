"""``kafkube operator`` against a real kube-apiserver (kafkube/harness/control_plane.py) and real
broker processes that coordinate through it: a KafkaCluster gets its objects, its status comes
from what its brokers register, refused config becomes a Warning condition, edits are
reconciled, deletion cleans up, and a standby operator takes over from a killed one.

The control plane has no kubelet or controller manager, so the StatefulSet makes no pods
here; the brokers run as local processes with the cluster's name, as pods would.
(tests/e2e runs the whole thing on kind.)"""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes.client.rest import ApiException

from kafkube.harness.waiting import wait_until
from tests.support.operator_api import (
    GROUP,
    VERSION,
    condition,
    events_of,
    kafka_clusters,
    topic_resources,
)
from tests.support.operator_process import OperatorProcess


def test_a_kafka_cluster_is_reconciled_from_its_spec_and_its_brokers(
        crd_api: k8s.ApiClient, control_plane: Any, namespace: str,
        operators: list[OperatorProcess], cluster_factory) -> None:
    operators.append(OperatorProcess(control_plane.kubeconfig, namespace))
    clusters = kafka_clusters(crd_api, namespace)
    core, apps = k8s.CoreV1Api(crd_api), k8s.AppsV1Api(crd_api)
    created = clusters.create("alpha", {"replicas": 3, "storage": {"size": "1Gi"},
                                        "config": {"log.retention.ms": 3_600_000,
                                                   "node.id": 7}})

    # The objects, owned by the KafkaCluster; the refused key reported, not written.
    status = clusters.status_when("alpha", lambda s: s.get("observedGeneration") == 1, 60,
                                  "a first status")
    assert status["state"] == "Warning"
    warning = condition(status, "Warning")
    assert warning["status"] == "True" and warning["reason"] == "InvalidConfig"
    assert "node.id: set by the operator" in warning["message"]
    assert condition(status, "Ready")["status"] == "False"
    assert status["bootstrapServers"] == f"alpha-bootstrap.{namespace}.svc:9092"
    properties = core.read_namespaced_config_map("alpha-config", namespace).data
    assert "log.retention.ms=3600000" in properties["server.properties"]
    assert "node.id" not in properties["server.properties"]
    sts = apps.read_namespaced_stateful_set("alpha", namespace)
    assert sts.spec.replicas == 3 and sts.spec.update_strategy.type == "OnDelete"
    assert [o.uid for o in sts.metadata.owner_references] == [created["metadata"]["uid"]]
    for name in ("alpha-brokers", "alpha-bootstrap"):
        service = core.read_namespaced_service(name, namespace)
        assert service.metadata.owner_references[0].kind == "KafkaCluster"
    rbac = k8s.RbacAuthorizationV1Api(crd_api)
    binding = rbac.read_cluster_role_binding(f"kafkube-{namespace}-alpha-nodes")
    assert binding.subjects[0].namespace == namespace

    # Real brokers register with the cluster's name: the status counts them and names the
    # controller and each broker's rack.
    cluster = cluster_factory(3, {
        "kafkube.coordination.backend": "kubernetes", "kafkube.cluster.name": "alpha",
        "kafkube.kubernetes.namespace": namespace,
        "kafkube.kubernetes.kubeconfig": str(control_plane.kubeconfig),
    }, start=False)
    for i, broker in enumerate(cluster.brokers):
        broker.overrides["broker.rack"] = "abc"[i]
    cluster.start()
    status = clusters.status_when("alpha", lambda s: s.get("readyReplicas") == 3
                                  and s.get("controller") is not None, 60, "3 brokers ready")
    assert status["controller"] in (0, 1, 2)
    assert [(b["id"], b.get("rack")) for b in status["brokers"]] == [(0, "a"), (1, "b"),
                                                                      (2, "c")]
    # Still a Warning: the bad key is still in the spec.
    assert status["state"] == "Warning" and condition(status, "Ready")["status"] == "True"

    # Fixing the spec clears the Warning; the config change reaches the ConfigMap and the
    # pod template (the StatefulSet's next revision: what a rolling restart goes by).
    old_hash = sts.spec.template.metadata.annotations["kafkube.io/config-hash"]
    clusters.patch("alpha", {"config": {"log.retention.ms": 7_200_000, "node.id": None}})
    status = clusters.status_when("alpha", lambda s: s.get("observedGeneration") == 2
                                  and s.get("state") == "Ready", 60, "Ready after the fix")
    assert condition(status, "Warning")["status"] == "False"
    assert condition(status, "Reconciling")["status"] == "False"
    properties = core.read_namespaced_config_map("alpha-config", namespace).data
    assert "log.retention.ms=7200000" in properties["server.properties"]
    sts = apps.read_namespaced_stateful_set("alpha", namespace)
    assert sts.spec.template.metadata.annotations["kafkube.io/config-hash"] != old_hash

    # Every action is an Event on the KafkaCluster, and counted in the metrics.
    wanted = {("Normal", "Created", "created StatefulSet alpha"),
              ("Normal", "Updated", "updated ConfigMap alpha-config")}
    wait_until(lambda: wanted <= set(events_of(crd_api, namespace, "alpha")), 30,
               "the Events of both actions")
    operator = operators[0]
    assert (operator.metric("kafkube_operator_reconciles_total",
                            'kind="KafkaCluster",result="ok"') or 0) >= 2
    assert operator.metric("kafkube_operator_leader") == 1.0

    # Deleting it: the brokers stop first (here, the test stops them: no kubelet), then
    # the operator removes what owner references cannot: the node-reader binding and the
    # brokers' Leases. The claims are kept (deleteClaim: false), so the cluster image and
    # its counters are kept with them.
    cluster.stop()
    clusters.delete("alpha")
    wait_until(lambda: clusters.get("alpha") is None, 60, "the KafkaCluster gone")
    leases = k8s.CoordinationV1Api(crd_api).list_namespaced_lease(
        namespace, label_selector="kafkube.io/cluster=alpha").items
    assert leases == []
    config_maps = core.list_namespaced_config_map(
        namespace, label_selector="kafkube.io/cluster=alpha").items
    # alpha-config is owned: the garbage collector's (no controller manager runs here).
    assert sorted(c.metadata.name for c in config_maps) == [
        "alpha-config", "alpha-epochs", "alpha-metadata"]
    with pytest.raises(ApiException) as gone:
        rbac.read_cluster_role_binding(f"kafkube-{namespace}-alpha-nodes")
    assert gone.value.status == 404
    with pytest.raises(ApiException) as gone:
        apps.read_namespaced_stateful_set("alpha", namespace)
    assert gone.value.status == 404


def test_a_standby_operator_takes_over_within_the_lease_duration(
        crd_api: k8s.ApiClient, control_plane: Any, namespace: str,
        operators: list[OperatorProcess]) -> None:
    first = OperatorProcess(control_plane.kubeconfig, namespace, lease_duration_s=5)
    operators.append(first)
    wait_until(lambda: first.metric("kafkube_operator_leader") == 1.0, 30, "first active")
    second = OperatorProcess(control_plane.kubeconfig, namespace, lease_duration_s=5)
    operators.append(second)
    wait_until(lambda: "standby" in second.tail(), 30, "second on standby")
    assert second.metric("kafkube_operator_leader") == 0.0

    clusters = kafka_clusters(crd_api, namespace)
    clusters.create("beta", {"replicas": 1})
    clusters.status_when("beta", lambda s: s.get("observedGeneration") == 1, 60,
                         "reconciled by the first")
    first.kill()
    wait_until(lambda: second.metric("kafkube_operator_leader") == 1.0, 20,
               "the standby active within the 5 s lease (+ its retry period)")
    clusters.patch("beta", {"config": {"log.retention.ms": 60_000}})
    clusters.status_when("beta", lambda s: s.get("observedGeneration") == 2, 60,
                         "a later edit reconciled by the second")
    properties = k8s.CoreV1Api(crd_api).read_namespaced_config_map("beta-config", namespace)
    assert "log.retention.ms=60000" in properties.data["server.properties"]


def test_topics_are_placed_changed_deleted_and_found_through_the_cluster(
        crd_api: k8s.ApiClient, control_plane: Any, namespace: str,
        operators: list[OperatorProcess], cluster_factory) -> None:
    from confluent_kafka.admin import ConfigResource, NewTopic

    operators.append(OperatorProcess(control_plane.kubeconfig, namespace))
    kafka_clusters(crd_api, namespace).create("gamma", {"replicas": 3})
    cluster = cluster_factory(3, {
        "kafkube.coordination.backend": "kubernetes", "kafkube.cluster.name": "gamma",
        "kafkube.kubernetes.namespace": namespace,
        "kafkube.kubernetes.kubeconfig": str(control_plane.kubeconfig),
    }, start=False)
    for i, broker in enumerate(cluster.brokers):
        broker.overrides["broker.rack"] = "abc"[i]
    cluster.start()
    topics = topic_resources(crd_api, namespace)

    # 12 partitions, RF 3: one replica per rack, leaders spread evenly, status per partition.
    topics.create("orders", {"cluster": "gamma", "partitions": 12, "replicationFactor": 3,
                             "config": {"retention.ms": 3_600_000}})
    status = topics.status_when("orders", lambda s: condition(s, "Ready").get("status")
                                == "True", 60, "orders Ready")
    partitions = status["partitions"]
    assert [p["partition"] for p in partitions] == list(range(12))
    assert all(sorted(p["replicas"]) == [0, 1, 2] and sorted(p["isr"]) == [0, 1, 2]
               for p in partitions)
    leaders = [p["leader"] for p in partitions]
    assert {b: leaders.count(b) for b in range(3)} == {0: 4, 1: 4, 2: 4}
    assert status["underReplicated"] == 0
    described = cluster.admin.describe_configs([ConfigResource("topic", "orders")])
    configs = next(iter(described.values())).result()
    assert configs["retention.ms"].value == "3600000"

    # More partitions and a new config value reach the running cluster.
    topics.patch("orders", {"partitions": 16, "config": {"retention.ms": 7_200_000}})
    status = topics.status_when("orders", lambda s: len(s.get("partitions", [])) == 16
                                and condition(s, "Ready").get("status") == "True", 60,
                                "16 partitions")
    assert cluster.partitions("orders") is not None and len(cluster.partitions("orders")) == 16
    configs = next(iter(cluster.admin.describe_configs(
        [ConfigResource("topic", "orders")]).values())).result()
    assert configs["retention.ms"].value == "7200000"

    # What the cluster refuses becomes a Warning with the broker's reason; nothing is lost.
    topics.patch("orders", {"config": {"retention.ms": 7_200_000, "retention.msx": 1}})
    status = topics.status_when("orders", lambda s: condition(s, "Warning").get("status")
                                == "True", 60, "a Warning for the bad key")
    warning = condition(status, "Warning")
    assert warning["reason"] == "KafkaRefused" and "retention.msx" in warning["message"]
    assert len(status["partitions"]) == 16
    topics.create("too-big", {"cluster": "gamma", "partitions": 1, "replicationFactor": 5})
    status = topics.status_when("too-big", lambda s: condition(s, "Warning").get("status")
                                == "True", 60, "a Warning for RF 5")
    assert condition(status, "Warning")["reason"] == "ReplicationFactorTooLarge"
    assert "too-big" not in cluster.admin.list_topics(timeout=10).topics

    # A topic made through the Kafka API appears as a Topic resource.
    futures = cluster.admin.create_topics([NewTopic("Made_By_Kafka", 2, 2)])
    futures["Made_By_Kafka"].result(30)

    def found() -> dict | None:
        listed = topics.custom.list_namespaced_custom_object(GROUP, VERSION, namespace,
                                                             "topics")["items"]
        return next((t for t in listed if t["spec"].get("topicName") == "Made_By_Kafka"), None)

    mirrored = wait_until(found, 60, "a Topic for Made_By_Kafka")
    assert mirrored["metadata"]["name"].startswith("made-by-kafka-")
    assert (mirrored["spec"]["partitions"], mirrored["spec"]["replicationFactor"]) == (2, 2)

    # Deleting the resource deletes the topic; deleting a found topic through Kafka deletes
    # its resource.
    topics.delete("orders")
    wait_until(lambda: topics.get("orders") is None, 60, "Topic orders gone")
    assert "orders" not in cluster.admin.list_topics(timeout=10).topics
    mirrored_name = mirrored["metadata"]["name"]
    topics.status_when(mirrored_name, lambda s: "topicId" in s, 60, "the mirror's status")
    cluster.admin.delete_topics(["Made_By_Kafka"])["Made_By_Kafka"].result(30)
    wait_until(lambda: topics.get(mirrored_name) is None, 60, "its Topic gone")
    cluster.stop()


def test_the_operator_hands_leadership_back_after_a_broker_restart(
        crd_api: k8s.ApiClient, control_plane: Any, namespace: str,
        operators: list[OperatorProcess], cluster_factory) -> None:
    """Leader rebalance is the operator's: the brokers run with auto.leader.rebalance.enable
    false (as the operator's ConfigMap says) and the operator elects preferred leaders every
    leader.imbalance.check.interval.seconds of the KafkaCluster's spec.config."""
    operators.append(OperatorProcess(control_plane.kubeconfig, namespace))
    clusters = kafka_clusters(crd_api, namespace)
    clusters.create("delta", {"replicas": 3, "config": {
        "leader.imbalance.check.interval.seconds": 2,
        "leader.imbalance.per.broker.percentage": 10}})
    properties = wait_until(lambda: _config_map(crd_api, namespace, "delta-config"), 60,
                            "the brokers' ConfigMap")
    assert "auto.leader.rebalance.enable=false" in properties
    cluster = cluster_factory(3, {
        "kafkube.coordination.backend": "kubernetes", "kafkube.cluster.name": "delta",
        "kafkube.kubernetes.namespace": namespace,
        "kafkube.kubernetes.kubeconfig": str(control_plane.kubeconfig),
        "auto.leader.rebalance.enable": "false",
    })
    topic_resources(crd_api, namespace).create("rebalanced", {"cluster": "delta", "partitions": 6,
                                                     "replicationFactor": 3})
    cluster.wait_for_isr("rebalanced", 3)
    # Broker 0 restarts: the partitions it led fail over to followers and stay there.
    cluster.restart(0)
    cluster.wait_for_isr_with("rebalanced", 0)
    states = wait_until(lambda: (s := cluster.partitions("rebalanced")) and all(
        p.leader == p.replicas[0] for p in s.values()) and s, 60,
        "every partition led by its preferred replica again")
    assert sorted(p.leader for p in states.values()) == [0, 0, 1, 1, 2, 2]
    # kopf posts Events from a queue of its own: wait for it.
    wait_until(lambda: any(reason == "LeadersRebalanced" and "preferred leaders" in message
                           for _, reason, message in events_of(crd_api, namespace, "delta")),
               30, "a LeadersRebalanced Event")
    status = clusters.status_when("delta", lambda s: sorted(
        b["leaders"] for b in s.get("brokers", [])) == [2, 2, 2], 30, "2 leaders each")
    assert status["readyReplicas"] == 3
    cluster.stop()


def _config_map(api: k8s.ApiClient, namespace: str, name: str) -> str | None:
    try:
        return k8s.CoreV1Api(api).read_namespaced_config_map(
            name, namespace).data["server.properties"]
    except ApiException as e:
        if e.status == 404:
            return None
        raise


def test_scaling_moves_partitions_onto_new_brokers_and_off_removed_ones(
        crd_api: k8s.ApiClient, control_plane: Any, namespace: str,
        operators: list[OperatorProcess], cluster_factory) -> None:
    """spec.replicas 3 → 5: once brokers 3 and 4 register, replicas move onto them; 5 → 3:
    they are drained before the StatefulSet shrinks; 3 → 1 with RF 3 topics: refused."""
    operators.append(OperatorProcess(control_plane.kubeconfig, namespace))
    clusters = kafka_clusters(crd_api, namespace)
    apps = k8s.AppsV1Api(crd_api)
    clusters.create("epsilon", {"replicas": 3})
    coordination = {
        "kafkube.coordination.backend": "kubernetes", "kafkube.cluster.name": "epsilon",
        "kafkube.kubernetes.namespace": namespace,
        "kafkube.kubernetes.kubeconfig": str(control_plane.kubeconfig),
        "auto.leader.rebalance.enable": "false"}
    cluster = cluster_factory(3, coordination)
    topic_resources(crd_api, namespace).create("spread", {"cluster": "epsilon", "partitions": 10,
                                                 "replicationFactor": 3})
    cluster.wait_for_isr("spread", 3)

    def replicas_per_broker() -> dict[int, int]:
        counts: dict[int, int] = {}
        for state in (cluster.partitions("spread") or {}).values():
            for broker in state.replicas:
                counts[broker] = counts.get(broker, 0) + 1
        return counts

    clusters.patch("epsilon", {"replicas": 5})
    wait_until(lambda: apps.read_namespaced_stateful_set("epsilon", namespace).spec.replicas
               == 5, 30, "the StatefulSet at 5")
    status = clusters.status_when("epsilon", lambda s: (s.get("scaling") or {}).get("phase")
                                  == "ScalingUp", 30, "ScalingUp")
    assert "[3, 4]" in status["scaling"]["message"]
    added = cluster_factory(2, coordination, start=False)
    for i, broker in enumerate(added.brokers):
        broker.overrides["node.id"] = str(3 + i)
    added.start()
    # (During a move Metadata lists old and new replicas together: wait for 30 in all.)
    wait_until(lambda: (c := replicas_per_broker()) and len(c) == 5 and sum(c.values()) == 30
               and max(c.values()) - min(c.values()) <= 1, 120,
               "30 replicas spread over 5 brokers")
    clusters.status_when("epsilon", lambda s: "scaling" not in s and s.get("readyReplicas")
                         == 5, 60, "the scale-up done")
    # The moves ran under Kafka's replication throttle, removed once they were done.
    wait_until(lambda: {"Reassigning", "ReassignmentDone"} <= {
        reason for _, reason, _ in events_of(crd_api, namespace, "epsilon")}, 30,
        "the Reassigning and ReassignmentDone Events")
    assert any("throttled at 52428800 B/s" in message
               for _, _, message in events_of(crd_api, namespace, "epsilon"))
    from confluent_kafka.admin import ConfigResource

    topic_configs = next(iter(cluster.admin.describe_configs(
        [ConfigResource("topic", "spread")]).values())).result()
    assert topic_configs["follower.replication.throttled.replicas"].value in ("", None)
    broker_configs = next(iter(cluster.admin.describe_configs(
        [ConfigResource("broker", "0")]).values())).result()
    assert int(broker_configs["leader.replication.throttled.rate"].value) > 52428800

    clusters.patch("epsilon", {"replicas": 3})
    wait_until(lambda: set(replicas_per_broker()) == {0, 1, 2}, 120, "brokers 3, 4 drained")
    wait_until(lambda: apps.read_namespaced_stateful_set("epsilon", namespace).spec.replicas
               == 3, 60, "the StatefulSet at 3 once drained")
    cluster.wait_for_isr("spread", 3)
    added.stop()

    # Below the replication factor: refused, and nothing moves or shrinks.
    clusters.patch("epsilon", {"replicas": 1})
    status = clusters.status_when("epsilon", lambda s: condition(s, "Warning").get("reason")
                                  == "ScaleDownRefused", 30, "ScaleDownRefused")
    assert "below the replication factor 3 of topic spread" in \
        condition(status, "Warning")["message"]
    assert apps.read_namespaced_stateful_set("epsilon", namespace).spec.replicas == 3
    assert set(replicas_per_broker()) == {0, 1, 2}
    cluster.stop()
