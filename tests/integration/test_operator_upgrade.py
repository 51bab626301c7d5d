"""An upgrade of kafkube itself against a real kube-apiserver (kafkube/harness/control_plane.py)
and a real broker: a new spec.image on a cluster that finalized kafkube.metadata.version 2
is probed before it reaches the StatefulSet, while every other change of the spec is
applied; changed back, the probe goes.

The control plane has no kubelet: the probe pod is made and never runs, which is the
Probing phase exactly (what a probe finds, and the roll and the level change that follow,
are the unit tests' and tests/e2e's)."""

from __future__ import annotations

from typing import Any

from kubernetes import client as k8s
from kubernetes.client.rest import ApiException

from kafkube.harness.waiting import wait_until
from tests.support.operator_api import condition, events_of, kafka_clusters
from tests.support.operator_process import OperatorProcess

DEFAULT_IMAGE = "localhost/kafkube:dev"
NEW_IMAGE = "localhost/kafkube:next"


def _probe(core: k8s.CoreV1Api, namespace: str) -> Any | None:
    try:
        return core.read_namespaced_pod("up-image-probe", namespace)
    except ApiException as e:
        if e.status == 404:
            return None
        raise


def _broker_image(apps: k8s.AppsV1Api, namespace: str) -> str:
    sts = apps.read_namespaced_stateful_set("up", namespace)
    return next(c.image for c in sts.spec.template.spec.containers if c.name == "broker")


def test_a_new_image_is_probed_before_the_statefulset_gets_it(
        crd_api: k8s.ApiClient, control_plane: Any, namespace: str,
        operators: list[OperatorProcess], cluster_factory) -> None:
    operators.append(OperatorProcess(control_plane.kubeconfig, namespace))
    clusters = kafka_clusters(crd_api, namespace)
    core, apps = k8s.CoreV1Api(crd_api), k8s.AppsV1Api(crd_api)
    created = clusters.create("up", {"replicas": 1, "storage": {"size": "1Gi"}})
    clusters.status_when("up", lambda s: s.get("observedGeneration") == 1, 60, "a status")
    cluster_factory(1, {
        "kafkube.coordination.backend": "kubernetes", "kafkube.cluster.name": "up",
        "kafkube.kubernetes.namespace": namespace,
        "kafkube.kubernetes.kubeconfig": str(control_plane.kubeconfig)})
    # A new cluster starts at the newest level, which an older kafkube cannot read.
    status = clusters.status_when("up", lambda s: s.get("finalizedMetadataVersion") == 2, 60,
                                  "kafkube.metadata.version 2 in the status")
    assert status.get("upgrade") is None

    # A new image with another change: the change is applied, the image waits for its probe.
    clusters.patch("up", {"image": NEW_IMAGE, "config": {"log.retention.ms": 60_000}})
    status = clusters.status_when("up", lambda s: (s.get("upgrade") or {}).get("phase")
                                  == "Probing", 60, "the new image probed")
    assert status["upgrade"]["image"] == NEW_IMAGE
    assert "the brokers keep localhost/kafkube:dev" in status["upgrade"]["message"]
    assert condition(status, "Ready")["status"] == "False"
    probe = wait_until(lambda: _probe(core, namespace), 30, "the probe pod")
    assert probe.metadata.annotations["kafkube.io/probed-image"] == NEW_IMAGE
    assert [o.uid for o in probe.metadata.owner_references] == [created["metadata"]["uid"]]
    assert probe.metadata.labels["kafkube.io/cluster"] == "up"
    assert probe.metadata.labels["app.kubernetes.io/name"] == "kafkube-image-probe"
    assert probe.spec.restart_policy == "Never"
    (container,) = probe.spec.containers
    assert container.image == NEW_IMAGE
    assert container.args == ["features", "--termination-log", "/dev/termination-log"]
    assert probe.spec.service_account_name == "up-broker"
    assert _broker_image(apps, namespace) == DEFAULT_IMAGE
    properties = core.read_namespaced_config_map("up-config", namespace).data
    assert "log.retention.ms=60000" in properties["server.properties"]
    sts = apps.read_namespaced_stateful_set("up", namespace)
    assert sts.spec.template.spec.containers[0].termination_message_policy == \
        "FallbackToLogsOnError"
    # The probe is no broker: the brokers' pods are still none (no kubelet, no pods).
    assert core.list_namespaced_pod(
        namespace, label_selector="app.kubernetes.io/name=kafkube").items == []
    wait_until(lambda: any(reason == "ImageProbing" for _, reason, _ in
                           events_of(crd_api, namespace, "up")), 30, "an ImageProbing event")

    # Changed back before the probe answered: the probe goes, nothing is under way.
    clusters.patch("up", {"image": DEFAULT_IMAGE})
    clusters.status_when("up", lambda s: s.get("observedGeneration") == 3
                         and s.get("upgrade") is None, 60, "no upgrade under way")
    wait_until(lambda: _probe(core, namespace) is None, 30, "the probe pod deleted")
    assert _broker_image(apps, namespace) == DEFAULT_IMAGE
