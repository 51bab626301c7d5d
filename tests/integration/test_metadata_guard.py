"""The cluster metadata only moves forward (broker/cluster/guard.py): a deleted, older or
foreign image is never applied, a lost one is rebuilt from what the brokers hold, and only an
empty broker of a new cluster creates one. On both backends, and with broker processes on a
real API server doing what a user did on kind (issue 27): ``kubectl delete configmap
<cluster>-metadata``, then a broker restart."""

from __future__ import annotations

import asyncio
import base64
import gzip
import json
import logging
import sqlite3
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from kubernetes import client as k8s

from broker.cluster.backend import CoordinationBackend
from broker.cluster.guard import Verdict, judge
from broker.cluster.image import ClusterImage
from broker.cluster.kubernetes import KubernetesBackend, KubernetesSettings
from broker.cluster.local_copy import IMAGE_COPY
from broker.cluster.metadata import ClusterMetadata, MetadataUnavailable
from broker.cluster.sqlite import SqliteBackend
from kafkube.harness.waiting import wait_until
from kafkube_contract.image import IMAGE_FORMAT, PartitionState, StoredIdentity, TopicMetadata
from kafkube_contract.objects import A_CLUSTER_ID, A_IMAGE_VERSION, IMAGE_KEY, api_client
from kafkube_contract.registration import BrokerRegistration
from tests.support.clients import read_values
from tests.support.in_process import new_cluster


def test_verdicts() -> None:
    assert judge(None, "a", 3) is Verdict.MISSING
    assert judge(StoredIdentity("b", 9), "a", 3) is Verdict.FOREIGN
    assert judge(StoredIdentity("a", 2), "a", 3) is Verdict.BEHIND
    assert judge(StoredIdentity("a", 3), "a", 3) is Verdict.TRUSTED
    assert judge(StoredIdentity("a", 4), "a", 3) is Verdict.TRUSTED


class Store:
    """One cluster's store on either backend, and the hands of a user or a tool that change
    it behind the brokers' back."""

    def __init__(self, kind: str, tmp_path: Path, control_plane: Any = None) -> None:
        self.kind = kind
        self.path = tmp_path / "cluster.db"
        self.opened: list[CoordinationBackend] = []
        if kind == "kubernetes":
            self.settings = KubernetesSettings("default", f"g{uuid.uuid4().hex[:10]}",
                                               str(control_plane.kubeconfig))
            self.core = k8s.CoreV1Api(api_client(self.settings.kubeconfig))

    def open(self) -> CoordinationBackend:
        backend: CoordinationBackend = (
            SqliteBackend(self.path) if self.kind == "sqlite"
            else KubernetesBackend(self.settings))
        self.opened.append(backend)
        return backend

    def saved(self) -> Any:
        """A copy of the stored image as it is now (a backup)."""
        if self.kind == "sqlite":
            with sqlite3.connect(self.path) as db:
                return db.execute("SELECT cluster_id, image, version FROM cluster").fetchone()
        return self.core.read_namespaced_config_map(f"{self.settings.cluster}-metadata",
                                                    "default")

    def delete(self) -> None:
        if self.kind == "sqlite":
            with sqlite3.connect(self.path) as db:
                db.execute("DELETE FROM cluster")
            return
        self.core.delete_namespaced_config_map(f"{self.settings.cluster}-metadata", "default")

    def put_back(self, saved: Any) -> None:
        """Restore a backup over whatever is there now."""
        if self.kind == "sqlite":
            with sqlite3.connect(self.path) as db:
                db.execute("UPDATE cluster SET cluster_id = ?, image = ?, version = ?", saved)
            return
        current = self.saved()
        saved.metadata.resource_version = current.metadata.resource_version
        self.core.replace_namespaced_config_map(saved.metadata.name, "default", saved)

    def garble(self, text: str, version: str | None = None) -> StoredIdentity:
        """What a hand edit or a broken tool leaves: an image no broker wrote (``text``) one
        version on (or a version annotation that is not a number); the identity it bears."""
        if self.kind == "sqlite":
            with sqlite3.connect(self.path) as db:
                db.execute("UPDATE cluster SET image = ?, version = version + 1", (text,))
                cluster_id, stored = db.execute("SELECT cluster_id, version FROM cluster"
                                                ).fetchone()
            return StoredIdentity(cluster_id, stored)
        current = self.saved()
        annotations = current.metadata.annotations
        stored = int(annotations[A_IMAGE_VERSION]) + 1
        annotations[A_IMAGE_VERSION] = version if version is not None else str(stored)
        current.binary_data = {IMAGE_KEY: base64.b64encode(gzip.compress(text.encode()))
                               .decode()}
        self.core.replace_namespaced_config_map(current.metadata.name, "default", current)
        return StoredIdentity(annotations[A_CLUSTER_ID], stored)

    def replace_with_another_cluster(self) -> None:
        """What restoring the wrong backup, or another broker making a new cluster, leaves."""
        self.delete()
        wait_until(lambda: all(b.stored_identity() is None for b in self.opened), 10,
                   "the deletion seen")
        assert new_cluster(self.open()).stored_identity() is not None

    def close(self) -> None:
        for backend in self.opened:
            backend.close()


@pytest.fixture(params=["sqlite", "kubernetes"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    plane = request.getfixturevalue("control_plane") if request.param == "kubernetes" else None
    opened = Store(request.param, tmp_path, plane)
    yield opened
    opened.close()


def topic(name: str) -> TopicMetadata:
    return TopicMetadata(name, str(uuid.uuid4()), {}, (PartitionState((0,), (0,), 0),))


def add_topic(metadata: ClusterMetadata, name: str) -> ClusterImage:
    return asyncio.run(metadata.update(lambda image: image.with_topic(topic(name))))


def seen(backend: CoordinationBackend, stored: StoredIdentity | None) -> None:
    """The store's change reached this backend (the Kubernetes one learns it by watch)."""
    wait_until(lambda: backend.stored_identity() == stored, 10, f"the store at {stored}")


def test_a_deleted_image_is_never_applied_and_is_put_back(store: Store, tmp_path: Path) -> None:
    broker = ClusterMetadata(store.open(), [tmp_path / "b0"], 0)
    add_topic(broker, "orders")
    before = broker.backend.stored_identity()
    store.delete()
    seen(broker.backend, None)
    broker.refresh()
    assert "orders" in broker.image.topics
    assert "missing" in (broker.backend.fault or "")
    assert asyncio.run(broker.repair())
    assert broker.backend.stored_identity() == before
    other = ClusterMetadata(store.open(), [tmp_path / "b1"], 1)
    assert other.cluster_id == broker.cluster_id and "orders" in other.image.topics
    add_topic(broker, "payments")  # writes go on
    assert broker.backend.fault is None


def test_an_older_image_is_not_applied_and_the_newer_one_put_back(store: Store,
                                                                   tmp_path: Path) -> None:
    broker = ClusterMetadata(store.open(), [tmp_path / "b0"], 0)
    add_topic(broker, "orders")
    backup = store.saved()
    add_topic(broker, "payments")
    newest = broker.backend.stored_identity()
    store.put_back(backup)
    seen(broker.backend, StoredIdentity(broker.cluster_id, newest.version - 1))
    broker.refresh()
    assert {"orders", "payments"} <= set(broker.image.topics)
    assert "went back" in (broker.backend.fault or "")
    assert asyncio.run(broker.repair())
    assert broker.backend.stored_identity() == newest
    restarted = ClusterMetadata(store.open(), [tmp_path / "b1"], 1)
    assert "payments" in restarted.image.topics


def test_an_image_of_another_cluster_is_refused_and_changes_stop(store: Store,
                                                                 tmp_path: Path) -> None:
    broker = ClusterMetadata(store.open(), [tmp_path / "b0"], 0)
    image = add_topic(broker, "orders")
    store.replace_with_another_cluster()
    foreign = store.opened[-1].stored_identity()
    seen(broker.backend, foreign)
    broker.refresh()
    assert broker.image.version == image.version and "orders" in broker.image.topics
    with pytest.raises(MetadataUnavailable, match=f"belongs to cluster {foreign.cluster_id}"):
        add_topic(broker, "payments")
    assert not asyncio.run(broker.repair())  # another cluster's image is never overwritten
    assert broker.backend.stored_identity() == foreign
    store.delete()  # what the message says to do
    seen(broker.backend, None)
    broker.refresh()
    assert asyncio.run(broker.repair())
    assert broker.backend.stored_identity() == StoredIdentity(broker.cluster_id, image.version)


@pytest.mark.parametrize("text", ["", "{}", '{"format": 1, "features": {}}', "{garbled"])
def test_an_unreadable_image_is_never_applied_nor_overwritten(store: Store, tmp_path: Path,
                                                              text: str, caplog) -> None:
    """An image no broker wrote (empty, without topics, not JSON) is not an empty image: the
    broker keeps serving its last good one, changes nothing, and says to delete it; a broker
    starting on it waits, saying so; deleted, it is put back as a missing one is."""
    broker = ClusterMetadata(store.open(), [tmp_path / "b0"], 0)
    image = add_topic(broker, "orders")
    garbled = store.garble(text)
    seen(broker.backend, garbled)
    with caplog.at_level(logging.ERROR):
        broker.refresh()
    assert broker.image.version == image.version and "orders" in broker.image.topics
    assert "cannot be read" in (broker.backend.fault or "")
    assert "delete it" in caplog.text
    with pytest.raises(MetadataUnavailable, match="cannot be read"):
        add_topic(broker, "payments")
    assert not asyncio.run(broker.repair())  # not overwritten: it may be a newer one damaged
    assert broker.backend.stored_identity() == garbled
    waits: list[float] = []

    def wait(seconds: float) -> None:
        waits.append(seconds)
        if len(waits) == 2:
            raise TimeoutError("still waiting")

    caplog.clear()
    with caplog.at_level(logging.ERROR), pytest.raises(TimeoutError):
        ClusterMetadata(store.open(), [tmp_path / "b1"], 1, wait=wait)
    assert "cannot be read" in caplog.text
    store.delete()  # what the message says to do
    seen(broker.backend, None)
    broker.refresh()
    assert asyncio.run(broker.repair())
    assert broker.backend.stored_identity() == StoredIdentity(broker.cluster_id, image.version)
    add_topic(broker, "payments")  # writes go on
    assert broker.backend.fault is None


def test_an_image_of_a_newer_format_is_never_applied_nor_written_over(
        store: Store, tmp_path: Path) -> None:
    """A newer kafkube finalized a level past this broker's and wrote a format it cannot
    read: the broker keeps its last image and writes nothing on top (it would drop what it
    cannot read), saying which format it met."""
    broker = ClusterMetadata(store.open(), [tmp_path / "b0"], 0)
    image = add_topic(broker, "orders")
    newer = store.garble(json.dumps({"format": IMAGE_FORMAT + 1, "topics": []}))
    seen(broker.backend, newer)
    broker.refresh()
    assert broker.image.version == image.version and "orders" in broker.image.topics
    assert f"format {IMAGE_FORMAT + 1}, newer than format {IMAGE_FORMAT}" in (
        broker.backend.fault or "")
    with pytest.raises(MetadataUnavailable):
        add_topic(broker, "payments")
    assert broker.backend.stored_identity() == newer


def test_a_version_that_is_not_a_number_is_unreadable(control_plane: Any,
                                                      tmp_path: Path) -> None:
    store = Store("kubernetes", tmp_path, control_plane)
    try:
        broker = ClusterMetadata(store.open(), [tmp_path / "b0"], 0)
        image = add_topic(broker, "orders")
        store.garble('{"format": 1, "topics": []}', version="forty-two")
        wait_until(lambda: "cannot be read" in (broker.backend.fault or "")
                   or (broker.refresh() and False), 10, "the unreadable image judged")
        assert broker.image.version == image.version and "orders" in broker.image.topics
        with pytest.raises(MetadataUnavailable, match="not a number"):
            add_topic(broker, "payments")
    finally:
        store.close()


def test_a_broker_with_data_starts_from_its_copy_when_the_image_is_gone(store: Store,
                                                                        tmp_path: Path) -> None:
    """Every broker down (a KafkaCluster deleted over kept volumes, say), the image deleted:
    the first broker back restores it from the copy in its log dir."""
    log_dirs = [tmp_path / "b0"]
    broker = ClusterMetadata(store.open(), log_dirs, 0)
    image = add_topic(broker, "orders")
    asyncio.run(broker.keep_copy(force=True))
    assert (log_dirs[0] / IMAGE_COPY).exists()
    broker.close()
    store.delete()
    restarted = ClusterMetadata(store.open(), log_dirs, 0)
    assert restarted.cluster_id == broker.cluster_id
    assert restarted.image.version == image.version and "orders" in restarted.image.topics


def test_an_empty_broker_waits_where_a_cluster_ran_before(store: Store, tmp_path: Path,
                                                          caplog) -> None:
    """The image gone and no broker holding a copy yet: a broker with no data (a new pod, a
    replaced volume) must not create a new cluster, which the others would have to refuse."""
    first = ClusterMetadata(store.open(), [tmp_path / "b0"], 0)
    first.backend.register_broker(BrokerRegistration(0, "127.0.0.1", 9092), 60_000)
    store.delete()
    seen(first.backend, None)
    waits: list[float] = []

    def wait(seconds: float) -> None:
        waits.append(seconds)
        if len(waits) == 3:
            raise TimeoutError("still waiting")

    with caplog.at_level(logging.ERROR), pytest.raises(TimeoutError):
        ClusterMetadata(store.open(), [tmp_path / "b1"], 1, wait=wait)
    assert "brokers of this cluster ran before" in caplog.text
    assert first.backend.stored_identity() is None
    assert not (tmp_path / "b1" / "meta.properties").exists()


def test_a_log_dir_of_another_cluster_never_takes_this_image(store: Store, tmp_path: Path,
                                                             caplog) -> None:
    ClusterMetadata(store.open(), [tmp_path / "b0"], 0)
    (tmp_path / "b1").mkdir()
    (tmp_path / "b1" / "meta.properties").write_text("version=1\ncluster.id=elsewhere\nnode.id=1\n")
    attempts = iter(range(2))

    def wait(_: float) -> None:
        if next(attempts, None) is None:
            raise TimeoutError("still waiting")

    with caplog.at_level(logging.ERROR), pytest.raises(TimeoutError):
        ClusterMetadata(store.open(), [tmp_path / "b1"], 1, wait=wait)
    assert "not to cluster elsewhere whose data this broker holds" in caplog.text


def _produce(bootstrap: str, topic_name: str, values: list[str]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all",
                         "enable.idempotence": True})
    for value in values:
        producer.produce(topic_name, key=value[-1:], value=value)
    assert producer.flush(60) == 0


def test_deleting_the_metadata_configmaps_and_restarting_a_broker_loses_nothing(
        cluster_factory, control_plane: Any) -> None:
    """Issue 27's first finding, as the user did it: ``kubectl delete configmap`` of the
    cluster's metadata (and of its counters), then a broker restart. Before the guard the
    restarted broker made a new empty cluster and every broker deleted every log."""
    name = f"d{uuid.uuid4().hex[:10]}"
    cluster = cluster_factory(3, {
        "kafkube.coordination.backend": "kubernetes", "kafkube.cluster.name": name,
        "kafkube.kubernetes.namespace": "default",
        "kafkube.kubernetes.kubeconfig": str(control_plane.kubeconfig),
        "min.insync.replicas": "2",
    })
    core = k8s.CoreV1Api(api_client(str(control_plane.kubeconfig)))
    cluster.create_topic("orders", 6, 3)
    first = [f"order-{i}" for i in range(1000)]
    _produce(cluster.bootstrap, "orders", first)
    cluster_id = core.read_namespaced_config_map(f"{name}-metadata", "default") \
        .metadata.annotations[A_CLUSTER_ID]

    core.delete_namespaced_config_map(f"{name}-metadata", "default")
    core.delete_namespaced_config_map(f"{name}-epochs", "default")
    back = wait_until(lambda: _config_map(core, f"{name}-metadata"), 30, "the image put back")
    assert back.metadata.annotations[A_CLUSTER_ID] == cluster_id
    cluster.kill(1)
    cluster.restart(1)
    cluster.wait_for_brokers(3)
    cluster.wait_for_isr("orders", 3)
    assert _config_map(core, f"{name}-metadata").metadata.annotations[A_CLUSTER_ID] == cluster_id
    second = [f"order-{i}" for i in range(1000, 1500)]
    _produce(cluster.bootstrap, "orders", second)
    assert sorted(read_values(cluster.bootstrap, "orders", 1500)) == sorted(first + second)
    for broker in cluster.brokers:
        assert len(list(broker.log_dir.glob("orders-*"))) == 6, broker.log_dir


def _config_map(core: k8s.CoreV1Api, name: str) -> Any:
    try:
        return core.read_namespaced_config_map(name, "default")
    except k8s.ApiException as e:
        if e.status == 404:
            return None
        raise


def test_counters_never_hand_out_a_value_twice(control_plane: Any) -> None:
    """The counters ConfigMap deleted, or put back from an older copy: broker epochs and
    producer ids still only grow (one given twice would let a fenced broker or an old
    producer pass for a new one)."""
    settings = KubernetesSettings("default", f"n{uuid.uuid4().hex[:10]}",
                                  str(control_plane.kubeconfig))
    core = k8s.CoreV1Api(api_client(settings.kubeconfig))
    backend = new_cluster(KubernetesBackend(settings))
    try:
        epochs = [backend.register_broker(BrokerRegistration(0, "127.0.0.1", 9092), 60_000)
                  for _ in range(3)]
        ids = backend.allocate_producer_ids(1000)
        old = core.read_namespaced_config_map(f"{settings.cluster}-epochs", "default")
        more = backend.allocate_producer_ids(1000)
        assert more >= ids + 1000
        # Put back the older copy: values below ones handed out are skipped past.
        current = core.read_namespaced_config_map(f"{settings.cluster}-epochs", "default")
        old.metadata.resource_version = current.metadata.resource_version
        core.replace_namespaced_config_map(old.metadata.name, "default", old)
        assert backend.allocate_producer_ids(1000) >= more + 1000
        # Deleted: recreated past every value seen.
        core.delete_namespaced_config_map(f"{settings.cluster}-epochs", "default")
        epoch = backend.register_broker(BrokerRegistration(0, "127.0.0.1", 9092), 60_000)
        assert epoch > max(epochs)
        assert backend.allocate_producer_ids(1000) > more + 1000
    finally:
        backend.close()


def test_a_starting_broker_leaves_an_older_image_to_the_running_ones_for_a_while(
        tmp_path: Path) -> None:
    """The store went back while brokers run: a broker starting with a newer copy waits
    RESTORE_WAIT_S for them to put back theirs (newer still, perhaps), then puts back its
    own, never one older than the store's."""
    from broker.cluster.guard import RESTORE_WAIT_S, bootstrap

    store = Store("sqlite", tmp_path)
    try:
        log_dirs = [tmp_path / "b0"]
        first = ClusterMetadata(store.open(), log_dirs, 0)
        add_topic(first, "orders")
        backup = store.saved()
        add_topic(first, "payments")
        copy = first.image
        first.backend.register_broker(BrokerRegistration(1, "127.0.0.1", 9093), 60_000)
        store.put_back(backup)
        now = [0.0]

        def wait(seconds: float) -> None:
            now[0] += seconds
            assert now[0] < 3 * RESTORE_WAIT_S, "never restored"

        cluster_id, image = bootstrap(store.open(), first.cluster_id, copy, "the store", wait,
                                      clock=lambda: now[0])
        assert now[0] >= RESTORE_WAIT_S  # it waited for the running broker first
        assert cluster_id == first.cluster_id and image.version == copy.version
        assert "payments" in image.topics
    finally:
        store.close()


def test_opening_a_view_creates_nothing(control_plane: Any) -> None:
    """The operator's view of a cluster (and a Topic pass during the cluster's deletion)
    used to create the metadata ConfigMaps, with a new cluster id, just by opening it."""
    settings = KubernetesSettings("default", f"v{uuid.uuid4().hex[:10]}",
                                  str(control_plane.kubeconfig))
    view = KubernetesBackend(settings)
    try:
        assert view.stored_identity() is None and not view.has_history()
        core = k8s.CoreV1Api(api_client(settings.kubeconfig))
        assert core.list_namespaced_config_map(
            "default", label_selector=f"kafkube.io/cluster={settings.cluster}").items == []
    finally:
        view.close()
