"""Full-cluster restarts: every replica back in every ISR, no acknowledged record lost.

Found with Kafka's own tools (issue 10): after a full-cluster restart the broker that became
the active controller never rejoined the ISR of the partitions it followed, and a controlled
shutdown handed leadership to a broker killed a moment before (its lease not yet expired).
Here a 3-broker cluster is stopped and started whole, in random orders, with each broker in
turn as the first to start (so the controller), with and without a SIGKILL before the stop;
after each start every partition's ISR must be whole again within ``replica.lag.time.max.ms``,
and at the end ``kafkube.harness.queue_checker`` finds every acknowledged record in the log.
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Callable

import pytest
from confluent_kafka import KafkaError, Producer

from broker.cluster.sqlite import SqliteBackend
from kafkube.harness.metadata import Cluster
from kafkube.harness.queue_checker import History
from kafkube.harness.waiting import wait_until
from tests.integration.test_durability import drain

PARTITIONS = 12
LAG_MS = 10_000
CONFIG = {
    "broker.session.timeout.ms": "3000",
    "broker.heartbeat.interval.ms": "500",
    "replica.lag.time.max.ms": str(LAG_MS),
    "default.replication.factor": "3",
    "min.insync.replicas": "2",
    "auto.leader.rebalance.enable": "false",  # leadership stays where the restart put it
}
RECORDS_PER_ROUND = 300


class Writer:
    """An idempotent acks=all producer whose every send and ack goes into a History."""

    def __init__(self, bootstrap: str, topic: str, history: History) -> None:
        self.topic = topic
        self.history = history
        self.sent = 0
        self.producer = Producer({
            "bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
            "linger.ms": 5, "message.timeout.ms": 60_000, "reconnect.backoff.max.ms": 1000,
        })

    def write(self, count: int, timeout: float = 70.0) -> None:
        """Send ``count`` records over every partition and wait for all their reports."""
        def report(err: KafkaError | None, msg) -> None:
            if err is None:
                self.history.ack(msg.value(), msg.partition(), msg.offset())
            else:
                self.history.fail(msg.value(), err)

        for _ in range(count):
            value = f"r{self.sent}".encode()
            partition = self.sent % PARTITIONS
            self.producer.produce(self.topic, value, partition=partition, on_delivery=report)
            self.history.attempt(value, partition=partition, process="writer", seq=self.sent)
            self.sent += 1
        assert self.producer.flush(timeout) == 0, "sends still outstanding"


def start_with_controller(cluster: Cluster, first: int, order: list[int]) -> None:
    """Start ``first`` alone until it is the active controller, then the rest in ``order``."""
    cluster.brokers[first].start()
    def controller() -> bool:
        metadata = cluster.metadata(3.0, node=first)
        return metadata is not None and metadata.controller_id == first

    wait_until(controller, 30, f"broker {first} as the active controller", interval=0.1)
    for i in order:
        cluster.brokers[i].start()


@pytest.mark.timeout(420)
def test_full_cluster_restarts_bring_every_isr_back(cluster_factory):
    cluster: Cluster = cluster_factory(3, CONFIG)
    topic = "restarts"
    cluster.create_topic(topic, PARTITIONS, 3)
    history = History()
    writer = Writer(cluster.bootstrap, topic, history)
    rng = random.Random(int(os.environ.get("KAFKUBE_RESTART_SEED", time.time_ns())))
    seed = rng.randrange(2**32)
    rng.seed(seed)
    print(f"seed {seed} (KAFKUBE_RESTART_SEED reruns it)")
    rounds = [(first, kill) for first in rng.sample(range(3), 3) for kill in (False, True)]
    for first, kill in rounds:
        writer.write(RECORDS_PER_ROUND)
        stopping = list(range(3))
        if kill:
            # The case: the broker that will start first (and lead the controller
            # election) dies uncleanly, the others go on taking acks=all writes without it.
            cluster.kill(first)
            stopping.remove(first)
            writer.write(RECORDS_PER_ROUND // 3)
        rng.shuffle(stopping)
        for i in stopping:
            assert cluster.brokers[i].stop() == 0, f"broker {i} did not stop cleanly"
        rest = [i for i in range(3) if i != first]
        rng.shuffle(rest)
        start_with_controller(cluster, first, rest)
        started = time.monotonic()
        cluster.wait_for_isr(topic, 3, LAG_MS / 1000, consecutive=2)
        print(f"{'SIGKILL, then ' if kill else ''}stopped {stopping}, started {first} "
              f"(controller) then {rest}: every ISR whole after "
              f"{time.monotonic() - started:.1f}s")
    writer.write(RECORDS_PER_ROUND)
    drain(cluster, topic, history, partitions=PARTITIONS)
    report = history.check()
    print(report.summary())
    assert report.acked >= len(rounds) * RECORDS_PER_ROUND, report.summary()
    assert report.ok(idempotent=True), report.summary()


def written_with_long_leases(make: Callable[..., Cluster], topic: str,
                             ) -> tuple[Cluster, History, int]:
    """3 brokers with the default 9 s leases, ``topic`` written; and the controller."""
    cluster = make(3, {**CONFIG, "broker.session.timeout.ms": "9000"})
    cluster.create_topic(topic, PARTITIONS, 3)
    history = History()
    Writer(cluster.bootstrap, topic, history).write(RECORDS_PER_ROUND)
    controller = cluster.controller_id()
    assert controller >= 0
    return cluster, history, controller


@pytest.mark.timeout(180)
def test_controlled_shutdown_never_hands_leadership_to_a_killed_broker(
        cluster_factory):
    """``kafkube dev`` stopping the survivors right after a broker died: the dead broker's
    lease is still live (9 s), but it fetches no more, so it must get no leadership."""
    topic = "handover"
    cluster, history, victim = written_with_long_leases(cluster_factory, topic)
    backend = SqliteBackend(cluster.coordination_path)
    try:
        before = backend.read_image().topics[topic].assignments
        led_before = {i for i, s in enumerate(before) if s.leader == victim}
        cluster.kill(victim)
        killed = time.monotonic()
        for i in [i for i in range(3) if i != victim]:
            assert cluster.brokers[i].stop() == 0
        assert time.monotonic() - killed < 9.0, "the lease expired first: nothing tested"
        assert victim in backend.live_brokers(), "the dead broker's lease should still run"
        after = backend.read_image().topics[topic].assignments
    finally:
        backend.close()
    led_after = {i for i, s in enumerate(after) if s.leader == victim}
    assert led_after <= led_before, (
        f"leadership moved to dead broker {victim}: {sorted(led_after - led_before)}")
    for i, state in enumerate(after):
        if i not in led_before:
            assert state.isr != (victim,), f"partition {i}: only the dead broker in the ISR"
    # And everything acknowledged is still there once all three are back.
    cluster.start()
    cluster.wait_for_isr(topic, 3, LAG_MS / 1000, consecutive=2)
    drain(cluster, topic, history, partitions=PARTITIONS)
    report = history.check()
    assert report.acked == RECORDS_PER_ROUND and report.ok(idempotent=True), report.summary()


@pytest.mark.timeout(180)
def test_a_restarted_broker_hands_leadership_only_to_brokers_renewing_leases(
        cluster_factory):
    """Two brokers SIGKILLed, one started again at once: it leads on record what it led
    before, and must hand that to the surviving broker, not to the other dead one, whose
    lease still runs for broker.session.timeout.ms."""
    topic = "rejoin"
    cluster, history, survivor = written_with_long_leases(cluster_factory, topic)
    dead, restarted = [i for i in range(3) if i != survivor]
    backend = SqliteBackend(cluster.coordination_path)
    try:
        before = backend.read_image().topics[topic].assignments
        led_by_restarted = {i for i, s in enumerate(before) if s.leader == restarted}
        assert led_by_restarted, "the restarted broker should lead something to hand over"
        cluster.kill(dead)
        cluster.kill(restarted)
        killed = time.monotonic()
        cluster.brokers[restarted].start()
        after = backend.read_image().topics[topic].assignments
        assert time.monotonic() - killed < 9.0, "the lease expired first: nothing tested"
        assert dead in backend.live_brokers(), "the dead broker's lease should still run"
    finally:
        backend.close()
    for i in led_by_restarted:
        assert after[i].leader == survivor, (
            f"partition {i}: led by {after[i].leader}, not the surviving broker {survivor}")
    cluster.brokers[dead].start()
    cluster.wait_for_isr(topic, 3, LAG_MS / 1000, consecutive=2)
    drain(cluster, topic, history, partitions=PARTITIONS)
    report = history.check()
    assert report.acked == RECORDS_PER_ROUND and report.ok(idempotent=True), report.summary()
