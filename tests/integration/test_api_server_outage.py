"""An outage of the API server is not an outage of Kafka.

Three broker processes coordinate through a real kube-apiserver. It is paused (SIGSTOP), then
killed and restarted, 30 s in all, far past ``broker.session.timeout.ms``, while two producers
write (acks=1, and acks=all with min.insync.replicas=2). The brokers go on serving the
partitions they lead throughout; once the API server is back no broker is fenced or
re-registers, no leader moves, and every acknowledged record is read back.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from kubernetes import client as k8s

from broker.cluster.kubernetes import KubernetesSettings
from kafkube.harness.waiting import wait_until
from kafkube_contract.objects import A_EPOCH, CLUSTER_LABEL, ROLE_LABEL, api_client

TOPIC = "through-the-outage"
PARTITIONS = 6
SESSION_MS = 6000
PAUSED_S = 15.0
OUTAGE_S = 30.0
MAX_RECORDS = 1_000_000  # per producer: a bound on the load, beyond what 2 cores write here


@dataclass
class Acked:
    """Deliveries of one producer: when each was acknowledged, and where."""
    times: list[float] = field(default_factory=list)
    offsets: dict[int, set[int]] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def during(self, start: float, end: float) -> int:
        with self.lock:
            return sum(1 for t in self.times if start <= t < end)


def produce_until(stop: threading.Event, bootstrap: str, acks: str, acked: Acked) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": acks, "linger.ms": 5,
                         "message.timeout.ms": 60_000})

    def delivered(err: Any, msg: Any) -> None:
        with acked.lock:
            if err is not None:
                acked.errors.append(str(err))
                return
            acked.times.append(time.monotonic())
            acked.offsets.setdefault(msg.partition(), set()).add(msg.offset())

    for i in range(MAX_RECORDS):
        if stop.is_set():
            break
        while True:
            try:
                producer.produce(TOPIC, value=b"%s-%d" % (acks.encode(), i), on_delivery=delivered)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
        if i % 20 == 0:
            stop.wait(0.01)  # at most 2,000 records a second: load, not a flood
    assert producer.flush(60) == 0


def broker_leases(kube: Any, settings: KubernetesSettings) -> dict[str, Any]:
    selector = f"{CLUSTER_LABEL}={settings.cluster},{ROLE_LABEL}=broker"
    found = kube.list_namespaced_lease(settings.namespace, label_selector=selector)
    return {lease.metadata.name: lease for lease in found.items}


@pytest.mark.timeout(300)
def test_brokers_serve_through_an_api_server_outage(
        cluster_factory, control_plane: Any, settings: KubernetesSettings) -> None:
    cluster = cluster_factory(3, {
        "kafkube.coordination.backend": "kubernetes",
        "kafkube.cluster.name": settings.cluster,
        "kafkube.kubernetes.namespace": settings.namespace,
        "kafkube.kubernetes.kubeconfig": settings.kubeconfig,
        "broker.session.timeout.ms": str(SESSION_MS),
        "broker.heartbeat.interval.ms": "1000",
        "min.insync.replicas": "2",
    })
    kube = k8s.CoordinationV1Api(api_client(settings.kubeconfig))
    cluster.create_topic(TOPIC, PARTITIONS, 3)
    before = cluster.wait_for_isr(TOPIC, 3, 60)
    epochs = {name: lease.metadata.annotations[A_EPOCH]
              for name, lease in broker_leases(kube, settings).items()}
    assert len(epochs) == 3
    controller = cluster.controller_id()

    stop = threading.Event()
    acked = {"1": Acked(), "all": Acked()}
    producers = [threading.Thread(target=produce_until, args=(stop, cluster.bootstrap, a, acked[a]))
                 for a in acked]
    for thread in producers:
        thread.start()
    try:
        wait_until(lambda: all(a.during(0, time.monotonic()) > 100 for a in acked.values()), 30,
                   "both producers to be acknowledged before the outage")
        paused = time.monotonic()
        control_plane.pause()
        try:
            wait_until(lambda: time.monotonic() - paused >= PAUSED_S, PAUSED_S + 5,
                       "the paused part of the outage")
        finally:
            control_plane.kill_apiserver()
        wait_until(lambda: time.monotonic() - paused >= OUTAGE_S, OUTAGE_S, "the outage's end")
        control_plane.start_apiserver()
        back = time.monotonic()
        # Every broker renews its own lease again, and goes on renewing past the grace (one
        # session after the API server answered), when a lapse would have been acted on.
        grace_over = time.time() + 2 * SESSION_MS / 1000
        wait_until(lambda: all(lease.spec.renew_time.timestamp() > grace_over
                               for lease in broker_leases(kube, settings).values()), 60,
                   "every broker lease renewed two sessions after the API server returned")
    finally:
        stop.set()
        for thread in producers:
            thread.join(90)

    lapsed_after = paused + SESSION_MS / 1000 + 2  # every lease had lapsed by the clock
    for acks, a in acked.items():
        during = a.during(lapsed_after, back)
        print(f"acks={acks}: {during} records acknowledged while every lease looked lapsed "
              f"({back - lapsed_after:.0f} s), {len(a.times)} in all, errors {a.errors[:3]}")
        assert during > 1000, f"acks={acks}: the brokers stopped serving during the outage"
        assert not a.errors, f"acks={acks}: deliveries failed: {a.errors[:5]}"

    after = cluster.wait_for_isr(TOPIC, 3, 30)
    assert {p: s.leader for p, s in after.items()} == {p: s.leader for p, s in before.items()}, \
        "a leader moved"
    assert {name: lease.metadata.annotations[A_EPOCH]
            for name, lease in broker_leases(kube, settings).items()} == epochs, \
        "a broker re-registered (it was fenced)"
    assert cluster.controller_id() == controller
    for broker in cluster.brokers:
        text = "".join(broker.output)
        assert "lease lapsed" not in text and "lost the controller lease" not in text

    # Every acknowledged record is there, at the offset it was acknowledged at.
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "outage-check",
                         "enable.auto.commit": False})
    wanted = {p: set() for p in range(PARTITIONS)}
    for a in acked.values():
        for p, offsets in a.offsets.items():
            wanted[p] |= offsets
    consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
    seen: dict[int, set[int]] = {p: set() for p in range(PARTITIONS)}
    deadline = time.monotonic() + 120
    while any(not wanted[p] <= seen[p] for p in wanted):
        assert time.monotonic() < deadline, "acknowledged records missing"
        for message in consumer.consume(10_000, 1):
            if message.error() is None:
                seen[message.partition()].add(message.offset())
    consumer.close()
