"""The contract with a real API server (kafkube/harness/control_plane.py): what the brokers'
Kubernetes backend writes (broker registrations, the controller lease, the cluster image),
the operator's own view (operator/kafkube_operator/cluster_view.py, the contract's readers,
no broker code) reads back identically; and an image ConfigMap written by brokers from
before the contract, or by a later revision of format 1, is read by both today."""

from __future__ import annotations

import base64
import gzip
import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s

from broker.cluster.image import ClusterImage
from broker.cluster.kubernetes import KubernetesBackend, KubernetesSettings
from kafkube.harness.waiting import wait_until
from kafkube_contract.image import DEFAULT_BROKER, ImageFormatError, PartitionState, TopicMetadata
from kafkube_contract.objects import (
    A_CLUSTER_ID,
    A_IMAGE_VERSION,
    CLUSTER_LABEL,
    IMAGE_KEY,
    ROLE_LABEL,
    api_client,
    metadata_name,
)
from kafkube_contract.registration import BrokerRegistration
from kafkube_operator.cluster_view import ClusterView, MetadataMissing

GOLDEN = Path(__file__).parents[1] / "unit" / "contract" / "golden"


@pytest.fixture
def settings(control_plane: Any) -> KubernetesSettings:
    return KubernetesSettings("default", f"c{uuid.uuid4().hex[:10]}",
                              str(control_plane.kubeconfig))


@pytest.fixture
def client(settings: KubernetesSettings) -> Any:
    opened = api_client(settings.kubeconfig)
    yield opened
    opened.close()


def test_what_brokers_write_the_operator_reads_back_identically(
        settings: KubernetesSettings, client: Any) -> None:
    view = ClusterView(client, settings.namespace, settings.cluster)
    assert view.stored_identity() is None and view.stored_image() is None
    assert not view.has_history() and view.live_brokers() == {} and view.controller() is None
    with pytest.raises(MetadataMissing):
        view.read_image()
    backend = KubernetesBackend(settings)
    try:
        assert backend.create_image("compat-cluster-id", ClusterImage())
        registrations = {
            0: BrokerRegistration(0, "b0.example", 9091, "zone-a",
                                  listeners="REPLICATION://b0.example:9091,PLAIN://b0:9092"),
            1: BrokerRegistration(1, "b1.example", 9091, None),
            2: BrokerRegistration(2, "b2.example", 9091, "zone-c")}
        epochs = {n: backend.register_broker(r, 30_000) for n, r in registrations.items()}
        controller_epoch = backend.acquire_controller(1, epochs[1], 30_000)
        assert controller_epoch is not None
        image = backend.read_image()
        topic = TopicMetadata("orders", str(uuid.uuid4()), {"retention.ms": "1000"}, (
            PartitionState((0, 1, 2), (0, 1, 2), 0, 2, 3),
            PartitionState((1, 2, 0), (1, 2), 1, 1, 1, adding=(0,), removing=(2,))))
        image = image.with_topic(topic).with_broker_configs(
            "2", {"cordoned.log.dirs": "*"}).with_broker_configs(
            DEFAULT_BROKER, {"min.insync.replicas": "2"}).with_feature("transaction.version", 2)
        assert backend.write_image(image)
        written = backend.read_image()

        assert view.stored_identity() == backend.stored_identity()
        assert view.has_history()
        seen = view.read_image()
        assert (seen.version, seen.topics, seen.broker_configs, seen.features) == (
            written.version, written.topics, written.broker_configs, written.features)
        assert seen.cordoned() == written.cordoned() == frozenset({2})
        assert seen.leaders() == written.leaders()
        assert view.live_brokers() == backend.live_brokers()
        assert {n: r.broker_epoch for n, r in view.live_brokers().items()} == epochs
        assert view.controller() == backend.controller()
        assert view.controller().epoch == controller_epoch  # type: ignore[union-attr]

        # A broker that leaves, and the controller resigning, are gone for both.
        backend.unregister_broker(2, epochs[2])
        backend.resign_controller(1)
        wait_until(lambda: backend.controller() is None and 2 not in backend.live_brokers(),
                   10, "the backend's watch to see it")
        assert sorted(view.live_brokers()) == [0, 1] and view.controller() is None
    finally:
        backend.close()


def test_a_lapsed_lease_is_not_live_for_the_operator(settings: KubernetesSettings,
                                                      client: Any) -> None:
    """A broker whose Lease is not renewed (killed) leaves the operator's live brokers one
    lease duration after its last renewal, as Kubernetes leader election judges a lease."""
    backend = KubernetesBackend(settings)
    try:
        backend.create_image("compat-cluster-id", ClusterImage())
        backend.register_broker(BrokerRegistration(0, "b0", 9091), 1_500)
        backend.register_broker(BrokerRegistration(1, "b1", 9091), 60_000)
        view = ClusterView(client, settings.namespace, settings.cluster)
        assert sorted(view.live_brokers()) == [0, 1]
        wait_until(lambda: sorted(view.live_brokers()) == [1], 10, "broker 0's lease to lapse")
        assert view.has_history()
    finally:
        backend.close()


def _store(client: Any, settings: KubernetesSettings, doc_text: str, version: int) -> None:
    """An image ConfigMap as brokers of another version would have written it."""
    packed = gzip.compress(doc_text.encode(), mtime=0)
    k8s.CoreV1Api(client).create_namespaced_config_map(settings.namespace, k8s.V1ConfigMap(
        metadata=k8s.V1ObjectMeta(
            name=metadata_name(settings.cluster),
            labels={CLUSTER_LABEL: settings.cluster, ROLE_LABEL: "metadata"},
            annotations={A_IMAGE_VERSION: str(version), A_CLUSTER_ID: "older-brokers"}),
        binary_data={IMAGE_KEY: base64.b64encode(packed).decode()}))


@pytest.mark.parametrize("golden", ["image-format-1.json", "image-format-1-later.json"])
def test_an_image_of_an_older_or_later_revision_is_read_by_both(
        settings: KubernetesSettings, client: Any, golden: str) -> None:
    _store(client, settings, (GOLDEN / golden).read_text(), 42)
    view = ClusterView(client, settings.namespace, settings.cluster)
    backend = KubernetesBackend(settings)
    try:
        image = backend.read_image()
        seen = view.read_image()
        assert (seen.version, seen.topics, seen.broker_configs, seen.features) == (
            image.version, image.topics, image.broker_configs, image.features)
        assert sorted(seen.topics) == ["__consumer_offsets", "orders"]
        # The brokers write on top of it in format 1, which the operator reads.
        assert backend.write_image(image.with_feature("metadata.version", 22))
        stored = k8s.CoreV1Api(client).read_namespaced_config_map(
            metadata_name(settings.cluster), settings.namespace)
        doc = json.loads(gzip.decompress(base64.b64decode(stored.binary_data[IMAGE_KEY])))
        assert doc["format"] == 1
        assert view.read_image().feature("metadata.version") == 22
    finally:
        backend.close()


def test_an_image_of_a_newer_format_is_refused_by_the_operator(
        settings: KubernetesSettings, client: Any) -> None:
    _store(client, settings, (GOLDEN / "image-format-3.json").read_text(), 42)
    view = ClusterView(client, settings.namespace, settings.cluster)
    with pytest.raises(ImageFormatError, match="format 3, newer than format 2"):
        view.read_image()
