"""The Kubernetes coordination backend against a real kube-apiserver
(kafkube/harness/control_plane.py): races between brokers, the watch cache across an API server
restart, the image's size limit, and broker processes coordinated through Leases. The rules
both backends share are tested on both in test_coordination.py."""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import random
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from kubernetes import client as k8s
from kubernetes.client.rest import ApiException

from broker.cluster.kubernetes import ClusterImageTooLarge, KubernetesBackend, KubernetesSettings
from broker.cluster.pod_liveness import PodRef
from kafkube.harness.waiting import wait_until
from kafkube_contract.image import PartitionState, TopicMetadata
from kafkube_contract.objects import CLUSTER_LABEL, api_client
from kafkube_contract.registration import BrokerRegistration
from tests.support.in_process import new_cluster


@pytest.fixture
def settings(control_plane: Any) -> KubernetesSettings:
    return KubernetesSettings("default", f"k{uuid.uuid4().hex[:10]}", str(control_plane.kubeconfig))


@pytest.fixture
def open_backend(settings: KubernetesSettings) -> Iterator:
    opened: list[KubernetesBackend] = []

    def make() -> KubernetesBackend:
        opened.append(new_cluster(KubernetesBackend(settings)))
        return opened[-1]

    yield make
    for backend in opened:
        backend.close()


def reg(node: int) -> BrokerRegistration:
    return BrokerRegistration(node, "127.0.0.1", 9092 + node, f"zone-{node}")


def topic(name: str, partitions: int, replicas: tuple[int, ...] = (0, 1, 2)) -> TopicMetadata:
    states = tuple(PartitionState(replicas[i % 3:] + replicas[:i % 3],
                                  replicas[i % 3:] + replicas[:i % 3], replicas[i % 3])
                   for i in range(partitions))
    return TopicMetadata(name, str(uuid.uuid4()), {}, states)


def test_racing_controllers_one_holder_per_term_and_epochs_grow(open_backend) -> None:
    """Three brokers, each with its own backend (own cache and watch), try for the controller
    lease at once, over and over, while the holder resigns: never two holders of one term,
    and each new term's epoch is above every earlier one."""
    backends = [open_backend() for _ in range(3)]
    epochs = [b.register_broker(reg(i), 60_000) for i, b in enumerate(backends)]
    terms: dict[int, set[int]] = {}

    def attempt(i: int, barrier: threading.Barrier, won: list[tuple[int, int]]) -> None:
        barrier.wait()
        epoch = backends[i].acquire_controller(i, epochs[i], 60_000)
        if epoch is not None:
            won.append((i, epoch))

    def everyone_sees(holder: int) -> bool:
        return all((c := b.controller()) is not None and c.holder == holder for b in backends)

    for _ in range(5):
        won: list[tuple[int, int]] = []
        barrier = threading.Barrier(3)
        threads = [threading.Thread(target=attempt, args=(i, barrier, won)) for i in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert len(won) == 1, won
        holder, epoch = won[0]
        assert all(epoch > e for e in terms), (epoch, terms)
        terms.setdefault(epoch, set()).add(holder)
        wait_until(lambda h=holder: everyone_sees(h), 10, "every cache to see the holder")
        backends[holder].resign_controller(holder)
        wait_until(lambda: all(b.controller() is None for b in backends), 10,
                   "every cache to see the lease gone")
    assert len(terms) == 5


def test_concurrent_image_writes_only_one_wins(open_backend) -> None:
    one, two = open_backend(), open_backend()
    base = one.read_image()
    wait_until(lambda: two.image_version() == base.version, 10, "both at the same version")
    results: list[bool] = []
    barrier = threading.Barrier(2)

    def write(backend: KubernetesBackend, name: str) -> None:
        barrier.wait()
        results.append(backend.write_image(base.with_topic(topic(name, 3))))

    threads = [threading.Thread(target=write, args=(b, n)) for b, n in ((one, "a"), (two, "b"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert sorted(results) == [False, True]
    final = wait_until(lambda: (i := two.read_image()).version == base.version + 1 and i, 10,
                       "the winner's image everywhere")
    assert len(final.topics) == 1
    # The loser's retry from the new version goes through.
    loser = one if "b" in final.topics else two
    retry = wait_until(lambda: (i := loser.read_image()).version == final.version and i, 10,
                       "the loser to see the winner's image")
    assert loser.write_image(retry.with_topic(topic("c", 1)))


def test_a_stale_holder_is_fenced_and_its_lease_taken_over(open_backend) -> None:
    one, two = open_backend(), open_backend()
    first = one.register_broker(reg(1), 400)
    e2 = two.register_broker(reg(2), 60_000)
    assert one.acquire_controller(1, first, 400) is not None
    assert two.acquire_controller(2, e2, 60_000) is None
    # Broker 1 stops renewing (paused): its leases lapse while broker 2 goes on renewing its
    # own (so the store is seen answering), and broker 2 takes the controller.
    won = wait_until(lambda: two.renew_broker(2, e2, 60_000)
                     and two.acquire_controller(2, e2, 60_000), 10, "the takeover")
    assert not one.renew_broker(1, first, 400)  # the paused broker learns it was fenced
    assert one.acquire_controller(1, first, 400) is None
    assert wait_until(lambda: one.controller(), 10, "broker 1 to see the new controller") \
        .holder == 2
    assert set(two.live_brokers()) == {2}
    assert won > 0


def test_watches_resume_after_an_api_server_restart(control_plane: Any, open_backend) -> None:
    writer, reader = open_backend(), open_backend()
    control_plane.kill_apiserver()
    # Reads are answered from the cache while the API server is gone.
    assert reader.image_version() == writer.image_version()
    control_plane.start_apiserver()
    image = writer.read_image()
    assert writer.write_image(image.with_topic(topic("after-restart", 2)))
    wait_until(lambda: "after-restart" in reader.read_image().topics, 30,
               "the reader's watch to deliver the write made after the restart")
    epoch = writer.register_broker(reg(7), 60_000)
    wait_until(lambda: 7 in reader.live_brokers(), 30, "the new broker lease in the reader")
    assert reader.live_brokers()[7] == BrokerRegistration(7, "127.0.0.1", 9099, "zone-7", epoch)


def test_changes_arrive_by_watch_events_not_by_listing_again(open_backend) -> None:
    """Each write reaches the other broker's cache as a watch event, so at once: listing
    again (after an error) would also converge, seconds later, and hide a broken watch."""
    writer, reader = open_backend(), open_backend()
    caches = (reader._leases, reader._config_maps)
    for n in range(5):
        image = writer.read_image()
        started = time.monotonic()
        assert writer.write_image(image.with_topic(topic(f"watched-{n}", 1)))
        wait_until(lambda n=n: f"watched-{n}" in reader.read_image().topics, 10,
                   "the reader to see the write")
        assert time.monotonic() - started < 2, "the change came by a relist, not the watch"
        writer.register_broker(reg(n), 60_000)
        wait_until(lambda n=n: n in reader.live_brokers(), 10, "the reader to see the lease")
    assert [c.lists for c in caches] == [1, 1], "a watch failed and the cache listed again"
    assert reader._contact.outage is None


def _broker_pod(core: k8s.CoreV1Api, settings: KubernetesSettings, name: str) -> PodRef:
    """A pod object in the real API server, labelled as the cluster's (no kubelet runs it:
    the test writes its status, as a kubelet would)."""
    with contextlib.suppress(ApiException):  # no controller-manager here makes it
        core.create_namespaced_service_account(
            settings.namespace, k8s.V1ServiceAccount(metadata=k8s.V1ObjectMeta(name="default")))
    body = k8s.V1Pod(
        metadata=k8s.V1ObjectMeta(name=name, labels={CLUSTER_LABEL: settings.cluster}),
        spec=k8s.V1PodSpec(containers=[k8s.V1Container(name="broker", image="kafkube")]))
    created = core.create_namespaced_pod(settings.namespace, body)
    return PodRef(name, created.metadata.uid, "broker")


def _container_ended(core: k8s.CoreV1Api, settings: KubernetesSettings,
                     ref: PodRef) -> dt.datetime:
    """Report the broker container killed now, as the kubelet does (finishedAt in whole
    seconds: the next one, so it is after the registration)."""
    at = dt.datetime.now(dt.UTC).replace(microsecond=0) + dt.timedelta(seconds=1)
    state = k8s.V1ContainerState(terminated=k8s.V1ContainerStateTerminated(
        exit_code=137, reason="Error", finished_at=at))
    core.patch_namespaced_pod_status(ref.name, settings.namespace, {"status": {
        "phase": "Running", "containerStatuses": [core.api_client.sanitize_for_serialization(
            k8s.V1ContainerStatus(name="broker", image="kafkube", image_id="", ready=False,
                                  restart_count=0, state=state))]}})
    return at


def test_a_broker_whose_pod_shows_it_dead_is_fenced_before_its_lease_expires(
        settings: KubernetesSettings) -> None:
    """Leases of 60 s; the pods' watch fences a broker within seconds of its container's end
    or its pod's deletion, the controller lease with it; a broker fenced wrongly is only
    refused its renewal, and registering again makes it live."""
    ttl = 60_000
    with api_client(settings.kubeconfig) as api:
        core = k8s.CoreV1Api(api)
        refs = [_broker_pod(core, settings, f"{settings.cluster}-{i}") for i in range(2)]
        backends = [KubernetesBackend(dataclasses.replace(settings, pod=ref)) for ref in refs]
        try:
            observer = backends[1]
            epochs = [b.register_broker(reg(i), ttl) for i, b in enumerate(backends)]
            assert backends[0].acquire_controller(0, epochs[0], ttl) is not None
            wait_until(lambda: set(observer.live_brokers()) == {0, 1}, 10, "both brokers live")
            assert observer.acquire_controller(1, epochs[1], ttl) is None

            started = time.monotonic()
            ended_at = _container_ended(core, settings, refs[0])
            wait_until(lambda: set(observer.live_brokers()) == {1}, 10, "broker 0 fenced")
            assert time.monotonic() - started < 5  # its lease had a minute left
            assert observer.controller() is None  # the controller's process is the one gone
            assert observer.acquire_controller(1, epochs[1], ttl) is not None
            wait_until(lambda: not backends[0].renew_broker(0, epochs[0], ttl), 10,
                       "broker 0 refused its renewal")
            # A process registering after that end (were it fenced wrongly, or the
            # container's next one) gets a new epoch and is live again.
            wait_until(lambda: dt.datetime.now(dt.UTC) > ended_at, 3, "the reported end")
            again = backends[0].register_broker(reg(0), ttl)
            assert again > epochs[0]
            wait_until(lambda: observer.live_brokers().get(0, reg(0)).broker_epoch == again, 10,
                       "broker 0 live with its new epoch")

            core.delete_namespaced_pod(refs[1].name, settings.namespace, grace_period_seconds=0)
            wait_until(lambda: 1 not in backends[0].live_brokers(), 10,
                       "broker 1 fenced when its pod is deleted")
            assert backends[0].controller() is None
        finally:
            for backend in backends:
                backend.close()
            for ref in refs:
                with contextlib.suppress(ApiException):
                    core.delete_namespaced_pod(ref.name, settings.namespace,
                                               grace_period_seconds=0)


def placed_at_random(name: str, partitions: int, rng: random.Random) -> TopicMetadata:
    """A topic as a cluster of 12 brokers holds it: 3 replicas each, a leader epoch that
    moved on, now and then a follower out of the ISR. Less regular than ``topic``, so it
    compresses as a real image does (about 10 bytes a partition, not 1)."""
    states = []
    for _ in range(partitions):
        replicas = tuple(rng.sample(range(12), 3))
        isr = tuple(r for r in replicas if rng.random() < 0.9) or replicas[:1]
        states.append(PartitionState(replicas, isr, isr[0], rng.randrange(1000)))
    return TopicMetadata(name, str(uuid.UUID(int=rng.getrandbits(128))),
                         {"retention.ms": "86400000"}, tuple(states))


def test_an_image_of_5000_partitions_and_the_size_limit(open_backend, capsys) -> None:
    one, two = open_backend(), open_backend()
    rng = random.Random(5000)
    image = one.read_image()
    big = image
    for t in range(50):
        big = big.with_topic(placed_at_random(f"topic-{t:03d}", 100, rng))
    started = time.monotonic()
    assert one.write_image(big)
    took = time.monotonic() - started
    seen = wait_until(lambda: (i := two.read_image()).version == big.version + 1 and i, 30,
                      "the 5000-partition image in the other broker")
    assert sum(len(t.assignments) for t in seen.topics.values()) == 5000
    stored = two._config_maps.get(two.metadata_name)
    size = len(stored.binary_data["image.json.gz"]) * 3 // 4
    with capsys.disabled():
        print(f"\n5000 partitions: {size} bytes compressed in the ConfigMap, "
              f"written in {took * 1000:.0f} ms")
    # Far beyond what fits: refused with a message that says why, nothing written.
    huge = seen
    for t in range(150):
        huge = huge.with_topic(placed_at_random(f"more-{t:03d}", 1000, rng))
    with pytest.raises(ClusterImageTooLarge, match="bytes one ConfigMap can hold"):
        one.write_image(huge)
    assert two.read_image().version == seen.version


def test_brokers_coordinate_through_leases(cluster_factory, control_plane: Any,
                                           settings: KubernetesSettings) -> None:
    """Three broker processes with kafkube.coordination.backend=kubernetes: a controller
    Lease and three broker Leases with their holders, and records round-trip with acks=all."""
    cluster = cluster_factory(3, {
        "kafkube.coordination.backend": "kubernetes",
        "kafkube.cluster.name": settings.cluster,
        "kafkube.kubernetes.namespace": settings.namespace,
        "kafkube.kubernetes.kubeconfig": settings.kubeconfig,
        "min.insync.replicas": "2",
    })
    leases = k8s.CoordinationV1Api(api_client(settings.kubeconfig))

    def holders() -> dict[str, str]:
        found = leases.list_namespaced_lease(
            settings.namespace, label_selector=f"{CLUSTER_LABEL}={settings.cluster}")
        return {lease.metadata.name: lease.spec.holder_identity for lease in found.items}

    names = wait_until(lambda: len(h := holders()) == 4 and h, 30, "four leases")
    assert {names[f"{settings.cluster}-broker-{i}"] for i in range(3)} == {"0", "1", "2"}
    assert names[f"{settings.cluster}-controller"] in {"0", "1", "2"}

    cluster.create_topic("orders", 3, 3)
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    for i in range(1000):
        producer.produce("orders", key=str(i % 10), value=f"order-{i}")
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "g",
                         "auto.offset.reset": "earliest"})
    consumer.subscribe(["orders"])
    values: set[str] = set()
    deadline = time.monotonic() + 60
    while len(values) < 1000 and time.monotonic() < deadline:
        message = consumer.poll(1)
        if message is not None and message.error() is None:
            values.add(message.value().decode())
    consumer.close()
    assert values == {f"order-{i}" for i in range(1000)}


def test_a_lease_renewed_on_a_whole_second_is_accepted(open_backend, monkeypatch) -> None:
    """MicroTime needs six fractional digits even when they are zeros (a renewal falling on
    a whole second was refused with 400 once in a thousand)."""
    import broker.cluster.kubernetes as kube

    backend = open_backend()
    whole = (kube.now_ms() // 1000 + 1) * 1000
    monkeypatch.setattr(kube, "now_ms", lambda: whole)
    epoch = backend.register_broker(reg(3), 60_000)
    assert backend.renew_broker(3, epoch, 60_000)
    lease = backend._leases.get(backend.broker_lease_name(3))
    assert int(lease.spec.renew_time.timestamp() * 1000) == whole


def test_a_pod_that_loses_its_cluster_label_is_not_taken_for_dead(
        settings: KubernetesSettings) -> None:
    """Issue 27: ``kubectl label pod <broker> kafkube.io/cluster-`` makes the watch send a
    DELETED event (the pod no longer matches), which used to count as the pod's deletion and
    fence its live broker for good, every new registration included."""
    ttl = 60_000
    with api_client(settings.kubeconfig) as api:
        core = k8s.CoreV1Api(api)
        ref = _broker_pod(core, settings, f"{settings.cluster}-0")
        broker = KubernetesBackend(dataclasses.replace(settings, pod=ref))
        observer = KubernetesBackend(dataclasses.replace(
            settings, pod=_broker_pod(core, settings, f"{settings.cluster}-1")))
        try:
            epoch = broker.register_broker(reg(0), ttl)
            wait_until(lambda: 0 in observer.live_brokers(), 10, "broker 0 live")
            core.patch_namespaced_pod(ref.name, settings.namespace,
                                      {"metadata": {"labels": {CLUSTER_LABEL: None}}})
            wait_until(lambda: observer._pods.get(ref.name) is None, 10, "the label's removal seen")
            assert 0 in observer.live_brokers()
            assert broker.renew_broker(0, epoch, ttl)
        finally:
            broker.close()
            observer.close()
            for i in range(2):
                with contextlib.suppress(ApiException):
                    core.delete_namespaced_pod(f"{settings.cluster}-{i}", settings.namespace,
                                               grace_period_seconds=0)
