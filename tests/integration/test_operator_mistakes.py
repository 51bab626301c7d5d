"""Users' mistakes with kubectl against the operator and real brokers on a real API server
(issue 27): the KafkaCluster deleted and created again over its kept volumes, the cluster's
metadata ConfigMap replaced by another cluster's. Nothing is lost, and the status says what
is wrong while it is."""

from __future__ import annotations

import uuid
from typing import Any

from confluent_kafka import Consumer, Producer
from kubernetes import client as k8s

from kafkube.harness.waiting import wait_until
from kafkube_contract.objects import A_CLUSTER_ID, A_IMAGE_VERSION
from tests.support.operator_api import (
    condition,
    kafka_clusters,
    statefulset_or_none,
    topic_resources,
)
from tests.support.operator_process import OperatorProcess


def _coordination(control_plane: Any, namespace: str, name: str) -> dict[str, str]:
    """Broker configs of a cluster on the test's API server, as the operator's pods have."""
    return {"kafkube.coordination.backend": "kubernetes", "kafkube.cluster.name": name,
            "kafkube.kubernetes.namespace": namespace,
            "kafkube.kubernetes.kubeconfig": str(control_plane.kubeconfig)}


def _brokers(cluster_factory, control_plane: Any, namespace: str, name: str):
    return cluster_factory(3, {**_coordination(control_plane, namespace, name),
                               "min.insync.replicas": "2"})


def _produce(bootstrap: str, values: list[str]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all",
                         "enable.idempotence": True})
    for value in values:
        producer.produce("orders", value=value)
    assert producer.flush(60) == 0


def _read(bootstrap: str, expected: int) -> list[str]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": uuid.uuid4().hex,
                         "auto.offset.reset": "earliest"})
    consumer.subscribe(["orders"])
    values: list[str] = []

    def more() -> bool:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            values.append(message.value().decode())
        return len(values) >= expected

    try:
        wait_until(more, 60, f"{expected} records", interval=0)
    finally:
        consumer.close()
    return values


def test_a_kafka_cluster_deleted_and_created_again_keeps_its_data(
        crd_api: k8s.ApiClient, control_plane: Any, namespace: str,
        operators: list[OperatorProcess], cluster_factory) -> None:
    """Item 3: ``kubectl delete kafkacluster`` keeps the claims by default; the same
    KafkaCluster applied again finds its topics and records, under the same cluster id."""
    operators.append(OperatorProcess(control_plane.kubeconfig, namespace))
    clusters = kafka_clusters(crd_api, namespace)
    clusters.create("kept", {"replicas": 3})
    brokers = _brokers(cluster_factory, control_plane, namespace, "kept")
    brokers.create_topic("orders", 3, 3)
    first = [f"order-{i}" for i in range(500)]
    _produce(brokers.bootstrap, first)
    status = clusters.status_when("kept", lambda s: s.get("clusterId") and
                                  s.get("readyReplicas") == 3, 60, "a cluster id in status")
    cluster_id = status["clusterId"]

    brokers.stop()  # what the StatefulSet's deletion does to the pods
    clusters.delete("kept")
    wait_until(lambda: clusters.get("kept") is None, 60, "the KafkaCluster gone")
    clusters.create("kept", {"replicas": 3})
    for i in range(3):  # the pods again, on the same volumes
        brokers.restart(i)
    brokers.wait_for_brokers(3)
    status = clusters.status_when("kept", lambda s: s.get("state") == "Ready", 90,
                                  "Ready again")
    assert status["clusterId"] == cluster_id
    assert sorted(_read(brokers.bootstrap, 500)) == sorted(first)


def test_a_metadata_configmap_of_another_cluster_is_refused_and_shown(
        crd_api: k8s.ApiClient, control_plane: Any, namespace: str,
        operators: list[OperatorProcess], cluster_factory) -> None:
    """The metadata ConfigMap replaced by another cluster's (a wrong backup restored): the
    brokers keep serving their data, the KafkaCluster and its Topic say why they are not
    Ready, and nothing is created or deleted on the strength of the foreign image; deleting
    the wrong ConfigMap, as the Warning says, brings the cluster's own back."""
    operators.append(OperatorProcess(control_plane.kubeconfig, namespace))
    clusters = kafka_clusters(crd_api, namespace)
    topics = topic_resources(crd_api, namespace)
    clusters.create("own", {"replicas": 3})
    brokers = _brokers(cluster_factory, control_plane, namespace, "own")
    topics.create("orders", {"cluster": "own", "partitions": 3, "replicationFactor": 3})
    topics.status_when("orders", lambda s: condition(s, "Ready").get("status") == "True", 60,
                       "orders Ready")
    clusters.status_when("own", lambda s: s.get("clusterId"), 60, "a cluster id in status")
    first = [f"order-{i}" for i in range(300)]
    _produce(brokers.bootstrap, first)
    assert len(_read(brokers.bootstrap, 300)) == 300  # __consumer_offsets made meanwhile

    core = k8s.CoreV1Api(crd_api)
    own = core.read_namespaced_config_map("own-metadata", namespace)
    foreign = k8s.V1ConfigMap(
        metadata=k8s.V1ObjectMeta(
            name="own-metadata", labels=own.metadata.labels, resource_version=own.metadata
            .resource_version, annotations={A_CLUSTER_ID: "another-cluster",
                                            A_IMAGE_VERSION: "2"}),
        binary_data=own.binary_data)
    core.replace_namespaced_config_map("own-metadata", namespace, foreign)

    status = clusters.status_when("own", lambda s: condition(s, "Warning").get("reason")
                                  == "MetadataOfAnotherCluster", 60, "the Warning")
    assert "another-cluster" in condition(status, "Warning")["message"]
    topic = topics.status_when("orders", lambda s: condition(s, "Ready").get("status")
                               == "False", 60, "orders not Ready")
    assert condition(topic, "Warning")["reason"] == "MetadataOfAnotherCluster"
    # The brokers keep serving their own image: records written and read.
    _produce(brokers.bootstrap, ["during"])
    assert len(_read(brokers.bootstrap, 301)) == 301

    core.delete_namespaced_config_map("own-metadata", namespace)
    back = wait_until(lambda: _annotation(core, namespace), 30, "the cluster's own image back")
    assert back != "another-cluster"
    clusters.status_when("own", lambda s: condition(s, "Warning").get("status") == "False"
                         and s.get("state") == "Ready", 60, "the Warning cleared")
    topics.status_when("orders", lambda s: condition(s, "Ready").get("status") == "True", 60,
                       "orders Ready again")
    assert sorted(_read(brokers.bootstrap, 301)) == sorted([*first, "during"])


def _annotation(core: k8s.CoreV1Api, namespace: str) -> str | None:
    try:
        found = core.read_namespaced_config_map("own-metadata", namespace)
    except k8s.ApiException as e:
        if e.status == 404:
            return None
        raise
    return (found.metadata.annotations or {}).get(A_CLUSTER_ID)


class RecordedEvents:
    def __init__(self) -> None:
        self.seen: list[tuple[str, str, str]] = []

    def info(self, reason: str, message: str) -> None:
        self.seen.append(("Normal", reason, message))

    def warning(self, reason: str, message: str) -> None:
        self.seen.append(("Warning", reason, message))


def test_a_topic_created_again_outlives_the_resource_of_the_one_before(
        crd_api: k8s.ApiClient, control_plane: Any, namespace: str,
        cluster_factory) -> None:
    """Item 9: a Topic's finalizer deletes the topic its status recorded (by id), not
    whatever now has its name: a topic auto-created again by a producer after the old one was
    deleted keeps its acknowledged records. The finalizer step is called directly, so the
    re-creation lands deterministically between the resource's last look and its deletion."""
    from confluent_kafka.admin import NewTopic

    from kafkube_operator.kafka import AdminClients
    from kafkube_operator.kube import Kube
    from kafkube_operator.model.cluster import ClusterRef
    from kafkube_operator.reconcile.topic import delete_topic
    from kafkube_operator.reconcile.views import ClusterViews

    kafka_clusters(crd_api, namespace).create("ids", {"replicas": 3})
    brokers = _brokers(cluster_factory, control_plane, namespace, "ids")
    brokers.create_topic("orders", 3, 3)
    views = ClusterViews.create(str(control_plane.kubeconfig))
    admins = AdminClients()
    try:
        view = views.of(ClusterRef.of(kafka_clusters(crd_api, namespace).get("ids")))
        old_id = wait_until(lambda: (t := view.read_image().topics.get("orders")) and t.topic_id,
                            10, "the topic in the operator's view")
        brokers.admin.delete_topics(["orders"])["orders"].result(30)
        wait_until(lambda: "orders" not in view.read_image().topics, 10, "orders deleted")
        brokers.admin.create_topics([NewTopic("orders", 3, 3)])["orders"].result(30)
        brokers.wait_for_isr("orders", 3)
        kept = [f"new-{i}" for i in range(100)]
        _produce(brokers.bootstrap, kept)
        resource = {"apiVersion": "kafkube.io/v1alpha1", "kind": "Topic",
                    "metadata": {"name": "orders", "namespace": namespace},
                    "spec": {"cluster": "ids", "partitions": 3, "replicationFactor": 3},
                    "status": {"topicId": old_id}}
        events = RecordedEvents()
        assert delete_topic(Kube(crd_api), views, admins, resource, events)
        assert [e[1] for e in events.seen] == ["TopicRecreated"]
        assert view.read_image().topics["orders"].topic_id != old_id
        assert sorted(_read(brokers.bootstrap, 100)) == sorted(kept)
    finally:
        admins.close()
        views.close()



def test_growing_a_one_broker_cluster_keeps_acks_all_writes_working(
        crd_api: k8s.ApiClient, control_plane: Any, namespace: str,
        operators: list[OperatorProcess], cluster_factory) -> None:
    """Item 10: 1 -> 3 brokers. The internal topics made with one replica get three; the
    default min.insync.replicas is not raised to 2 while a user's topic has one replica and
    no min ISR of its own (its acks=all writes would all be refused), which a Warning names;
    once that topic has its own min ISR, the default rises."""
    operators.append(OperatorProcess(control_plane.kubeconfig, namespace))
    clusters, topics = kafka_clusters(crd_api, namespace), topic_resources(crd_api, namespace)
    core = k8s.CoreV1Api(crd_api)
    clusters.create("grow", {"replicas": 1})
    coordination = {**_coordination(control_plane, namespace, "grow"),
                    "auto.leader.rebalance.enable": "false"}
    first = cluster_factory(1, coordination)
    topics.create("orders", {"cluster": "grow", "partitions": 3, "replicationFactor": 1})
    topics.status_when("orders", lambda s: condition(s, "Ready").get("status") == "True", 60,
                       "orders Ready")
    _produce(first.bootstrap, ["one"])
    assert _read(first.bootstrap, 1) == ["one"]  # __consumer_offsets made, with RF 1

    def min_isr() -> str:
        text = core.read_namespaced_config_map("grow-config", namespace).data[
            "server.properties"]
        return next(line for line in text.splitlines()
                    if line.startswith("min.insync.replicas=")).split("=")[1]

    assert min_isr() == "1"
    clusters.patch("grow", {"replicas": 3})
    added = cluster_factory(2, coordination, start=False)
    for i, broker in enumerate(added.brokers):
        broker.overrides["node.id"] = str(1 + i)
    added.start()

    def internal_rf() -> set[int]:
        return {len(p.replicas) for p in (first.partitions("__consumer_offsets") or {}).values()}

    wait_until(lambda: internal_rf() == {3}, 180, "__consumer_offsets with 3 replicas")
    status = clusters.status_when("grow", lambda s: condition(s, "Warning").get("reason")
                                  == "MinInsyncReplicasHeld", 60, "the Warning")
    assert "orders" in condition(status, "Warning")["message"]
    assert min_isr() == "1"
    topics.patch("orders", {"config": {"min.insync.replicas": 1}})
    wait_until(lambda: min_isr() == "2", 60, "the default min ISR raised to 2")
    clusters.status_when("grow", lambda s: condition(s, "Warning").get("status") == "False",
                         60, "the Warning cleared")
    added.stop()


def test_a_storage_size_edit_never_freezes_thestatefulset_or_none(
        crd_api: k8s.ApiClient, control_plane: Any, namespace: str,
        operators: list[OperatorProcess]) -> None:
    """Item 5: ``storage.size`` grown where the volumes cannot expand (this API server has no
    provisioner: the claim is unbound, and resizing it is refused) is a readable Warning,
    while a config edit made with it still reaches the StatefulSet's template (before, every
    later change waited behind the refused claim template, a CA renewal included)."""
    operators.append(OperatorProcess(control_plane.kubeconfig, namespace))
    clusters = kafka_clusters(crd_api, namespace)
    apps, core = k8s.AppsV1Api(crd_api), k8s.CoreV1Api(crd_api)
    clusters.create("store", {"replicas": 1, "storage": {"size": "1Gi"}})
    sts = wait_until(lambda: statefulset_or_none(apps, namespace, "store"), 60, "the StatefulSet")
    labels = sts.spec.volume_claim_templates[0].metadata.labels
    core.create_namespaced_persistent_volume_claim(namespace, k8s.V1PersistentVolumeClaim(
        metadata=k8s.V1ObjectMeta(name="data-store-0", labels=labels),
        spec=k8s.V1PersistentVolumeClaimSpec(
            access_modes=["ReadWriteOnce"],
            resources=k8s.V1VolumeResourceRequirements(requests={"storage": "1Gi"}))))
    hash_before = sts.spec.template.metadata.annotations["kafkube.io/config-hash"]

    clusters.patch("store", {"storage": {"size": "2Gi"}, "config": {"log.retention.ms": 60000}})
    status = clusters.status_when("store", lambda s: condition(s, "Warning").get("reason")
                                  == "StorageExpansionRefused", 60, "the Warning")
    assert "storage.size 2Gi not applied" in condition(status, "Warning")["message"]
    updated = wait_until(
        lambda: (s := statefulset_or_none(apps, namespace, "store")) and s.spec.template.metadata
        .annotations["kafkube.io/config-hash"] != hash_before and s, 60,
        "the config edit in the StatefulSet's template")
    assert updated.spec.volume_claim_templates[0].spec.resources.requests["storage"] == "1Gi"
    assert core.read_namespaced_persistent_volume_claim("data-store-0", namespace) \
        .spec.resources.requests["storage"] == "1Gi"



def test_a_topic_name_two_clusters_share_breaks_neither(
        crd_api: k8s.ApiClient, control_plane: Any, namespace: str,
        operators: list[OperatorProcess], cluster_factory) -> None:
    """Item 7: a Topic ``connect-offsets`` already stands for another cluster's topic when
    this cluster's Kafka gets its own: the mirror takes another name, and the cluster's
    passes go on (before, the forced apply failed on the CRD's immutability rules, and
    every later pass raised after it had acted, its status never written again)."""
    from confluent_kafka.admin import NewTopic

    operators.append(OperatorProcess(control_plane.kubeconfig, namespace))
    clusters, topics = kafka_clusters(crd_api, namespace), topic_resources(crd_api, namespace)
    topics.create("connect-offsets", {"cluster": "other", "partitions": 1,
                                      "replicationFactor": 1})
    clusters.create("mine", {"replicas": 3})
    brokers = _brokers(cluster_factory, control_plane, namespace, "mine")
    brokers.admin.create_topics([NewTopic("connect-offsets", 1, 3)])["connect-offsets"] \
        .result(30)
    mirrored = wait_until(lambda: topics.get("mine.connect-offsets"), 60, "the mirror")
    assert mirrored["spec"]["cluster"] == "mine"
    assert topics.get("connect-offsets")["spec"]["cluster"] == "other"
    clusters.patch("mine", {"config": {"log.retention.ms": 60000}})
    clusters.status_when("mine", lambda s: s.get("observedGeneration") == 2 and
                         s.get("readyReplicas") == 3, 60, "the cluster's passes going on")
