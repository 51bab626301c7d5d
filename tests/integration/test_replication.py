"""Replication features on a real 3-broker cluster: min.insync.replicas, controlled shutdown,
preferred-leader rebalance, ElectLeaders, reassignment with throttling, and the metrics.

Short leases (``broker.session.timeout.ms`` 3 s) keep failovers quick; the durability of
acknowledged writes under faults is ``test_durability.py``'s subject.
"""

from __future__ import annotations

import time
import urllib.request
from datetime import timedelta
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from kio.index import load_request_schema
from kio.schema.errors import ErrorCode

from broker.protocol.messages import build
from kafkube.harness.metadata import Cluster
from kafkube.harness.waiting import wait_until
from kafkube.harness.wire import WireClient, produce_request, simple_batch

FAST = {
    "broker.session.timeout.ms": "3000",
    "broker.heartbeat.interval.ms": "500",
    "offsets.topic.num.partitions": "3",
}


def states(cluster: Cluster, topic: str) -> dict[int, Any]:
    """The partitions' metadata, from whichever broker answers first with the topic (a
    broker learns of a new topic within its next metadata poll)."""
    return wait_until(lambda: cluster.partitions(topic), 10, f"metadata of {topic}")


def req(api_key: int, version: int, values: dict[str, Any]) -> Any:
    return build(load_request_schema(api_key, version), values)


def leader_client(cluster: Cluster, topic: str, partition: int = 0) -> WireClient:
    leader = cluster.leader_of(topic, partition)
    return WireClient.connect(cluster.brokers[leader].bootstrap)


def produce_code(client: WireClient, topic: str, acks: int, value: bytes = b"v") -> ErrorCode:
    """One produce's error; UNKNOWN_TOPIC_OR_PARTITION is retried for a few seconds, as
    clients do, while the broker has not yet polled the image that holds the topic."""
    def attempt() -> tuple[ErrorCode] | None:
        response = client.request(produce_request(topic, simple_batch([value]), acks=acks))
        code = response.responses[0].partition_responses[0].error_code
        return None if code == ErrorCode.unknown_topic_or_partition else (code,)
    return wait_until(attempt, 5, f"{topic} to be known to the broker", interval=0.1)[0]


def consume_all(cluster: Cluster, topic: str, partitions: int, expected: int) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "check",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    values: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(values) < expected and time.monotonic() < deadline:
        for m in consumer.consume(1000, 0.5):
            if m.error() is None:
                values.append(m.value())
    consumer.close()
    return values


def metric(cluster: Cluster, node: int, name: str) -> float:
    port = cluster.brokers[node].metrics_port
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        for line in response.read().decode().splitlines():
            if line.startswith(name + " ") or line.startswith(name + "{"):
                return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"no metric {name} on broker {node}")


def test_acks_all_needs_min_insync_replicas(cluster_factory):
    cluster = cluster_factory(3, FAST)
    cluster.create_topic("strict", 1, 3, {"min.insync.replicas": "3"})
    with leader_client(cluster, "strict") as client:
        assert produce_code(client, "strict", acks=-1) == ErrorCode.none
    leader = cluster.leader_of("strict", 0)
    follower = next(i for i in range(3) if i != leader)
    cluster.kill(follower)
    cluster.wait_for_isr_without("strict", follower)
    # The leader's own view, which may trail the metadata other brokers serve by a poll: a
    # produce in between is appended and then fails NOT_ENOUGH_REPLICAS_AFTER_APPEND.
    wait_until(lambda: metric(cluster, leader,
                              "kafka_server_replicamanager_underreplicatedpartitions") >= 1,
               10, "the leader to report an under-replicated partition")
    with leader_client(cluster, "strict") as client:
        assert produce_code(client, "strict", acks=-1) == ErrorCode.not_enough_replicas
        assert produce_code(client, "strict", acks=1) == ErrorCode.none  # acks=1 unaffected
    assert metric(cluster, leader, "kafka_server_replicamanager_isrshrinks_total") == 0  # fenced
    cluster.restart(follower)
    cluster.wait_for_isr_with("strict", follower)
    assert metric(cluster, leader, "kafka_server_replicamanager_isrexpands_total") >= 1
    with leader_client(cluster, "strict") as client:
        assert produce_code(client, "strict", acks=-1) == ErrorCode.none
    values = consume_all(cluster, "strict", 1, 3)
    assert len(values) == 3


def test_non_leader_refuses_produce_and_fetch(cluster_factory):
    cluster = cluster_factory(3, FAST)
    cluster.create_topic("led", 1, 2)
    state = states(cluster, "led")[0]
    outsider = next(i for i in range(3) if i not in state.replicas)
    follower = next(r for r in state.replicas if r != state.leader)
    for node in (outsider, follower):
        with WireClient.connect(cluster.brokers[node].bootstrap) as client:
            assert produce_code(client, "led", acks=1) == ErrorCode.not_leader_or_follower


def test_controlled_shutdown_moves_leadership_before_exit(cluster_factory):
    cluster = cluster_factory(3, FAST)
    cluster.create_topic("moving", 3, 3, {"min.insync.replicas": "2"})
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all",
                         "linger.ms": 5})
    acked: list[float] = []
    leader = cluster.leader_of("moving", 0)
    sent = 0
    for _ in range(200):
        producer.produce("moving", b"before", partition=0,
                         on_delivery=lambda e, m: e is None and acked.append(time.monotonic()))
        sent += 1
    producer.flush(10)
    assert len(acked) == sent
    assert cluster.brokers[leader].stop() == 0  # SIGTERM: controlled shutdown, exit 0
    stopped = time.monotonic()
    # The broker handed its leaderships over before exiting: no lease has to expire (other
    # brokers see the change within one metadata poll, well inside the 3 s lease).
    wait_until(lambda: all(p.leader not in (leader, -1) and leader not in p.isr
                           for p in states(cluster, "moving").values()),
               1.5, "the other brokers to lead without the stopped broker")
    before = len(acked)
    producer.produce("moving", b"after", partition=0,
                     on_delivery=lambda e, m: e is None and acked.append(time.monotonic()))
    producer.flush(10)
    assert len(acked) == before + 1
    assert acked[-1] - stopped < 3.0, f"unavailable for {acked[-1] - stopped:.2f}s after exit"
    cluster.restart(leader)
    cluster.wait_for_isr_with("moving", leader)


def test_leadership_returns_to_preferred_replicas(cluster_factory):
    cluster = cluster_factory(3, {**FAST, "leader.imbalance.check.interval.seconds": "2"})
    cluster.create_topic("balanced", 6, 3)
    preferred = {i: p.replicas[0] for i, p in states(cluster, "balanced").items()}
    assert all(p.leader == preferred[i] for i, p in states(cluster, "balanced").items())
    cluster.kill(1)
    wait_until(lambda: all(p.leader not in (1, -1)
                           for p in (cluster.partitions("balanced") or {}).values()),
               20, "leadership to move off the killed broker")
    cluster.restart(1)
    cluster.wait_for_isr_with("balanced", 1)
    wait_until(lambda: all(p.leader == preferred[i]
                           for i, p in (cluster.partitions("balanced") or {}).items()),
               30, "the controller to hand leadership back to the preferred replicas")


def test_elect_leaders_preferred(cluster_factory):
    cluster = cluster_factory(3, {**FAST, "auto.leader.rebalance.enable": "false"})
    cluster.create_topic("elect", 2, 3)
    preferred = {i: p.replicas[0] for i, p in states(cluster, "elect").items()}
    victim = preferred[0]
    cluster.kill(victim)
    wait_until(lambda: (cluster.partitions("elect") or {0: None})[0].leader not in (victim, -1),
               20, "a new leader for partition 0")
    cluster.restart(victim)
    cluster.wait_for_isr_with("elect", victim)
    assert states(cluster, "elect")[0].leader != victim  # no automatic rebalance
    with WireClient.connect(cluster.bootstrap.split(",")[0]) as client:
        response = client.request(req(43, 2, {
            "election_type": 0, "timeout": timedelta(seconds=10),
            "topic_partitions": [{"topic": "elect", "partitions": [0, 1, 7]},
                                 {"topic": "nope", "partitions": [0]}],
        }))
    codes = {(r.topic, p.partition_id): p.error_code
             for r in response.replica_election_results for p in r.partition_result}
    assert codes[("elect", 0)] == ErrorCode.none
    expected_1 = (ErrorCode.none if victim == preferred[1] else ErrorCode.election_not_needed)
    assert codes[("elect", 1)] == expected_1
    assert codes[("elect", 7)] == ErrorCode.unknown_topic_or_partition
    assert codes[("nope", 0)] == ErrorCode.unknown_topic_or_partition
    wait_until(lambda: states(cluster, "elect")[0].leader == victim, 5,
               "the preferred replica to lead again")


def test_reassignment_moves_data_under_a_throttle(cluster_factory):
    rate = 200_000  # bytes/s to the replica being added
    cluster = cluster_factory(3, {**FAST, "leader.replication.throttled.rate": str(rate)})
    with WireClient.connect(cluster.bootstrap.split(",")[0]) as client:
        response = client.request(req(19, 7, {
            "timeout": timedelta(seconds=10), "validate_only": False, "topics": [{
            "name": "moved", "num_partitions": -1, "replication_factor": -1,
            "assignments": [{"partition_index": 0, "broker_ids": [0, 1]}],
            # As ReassignPartitionsCommand --throttle marks them: the leader holds back
            # whichever of this topic's replicas are out of sync.
            "configs": [{"name": "leader.replication.throttled.replicas", "value": "*"}],
        }]}))
        assert response.topics[0].error_code == ErrorCode.none, response
    cluster.wait_for_isr("moved", 2)
    # Small batches: a throttle paces whole batches, and one 600 kB batch would go at once.
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all",
                         "batch.size": 16384, "linger.ms": 0})
    value = b"x" * 1000
    for _ in range(600):
        producer.produce("moved", value, partition=0)
        producer.poll(0)
    assert producer.flush(30) == 0
    with WireClient.connect(cluster.bootstrap.split(",")[0]) as client:
        bad = client.request(req(45, 0, {"timeout": timedelta(seconds=10), "topics": [
            {"name": "moved", "partitions": [{"partition_index": 0, "replicas": [1, 1]}]}]}))
        assert bad.responses[0].partitions[0].error_code == ErrorCode.invalid_replica_assignment
        none = client.request(req(45, 0, {"timeout": timedelta(seconds=10), "topics": [
            {"name": "moved", "partitions": [{"partition_index": 0, "replicas": None}]}]}))
        assert none.responses[0].partitions[0].error_code == (
            ErrorCode.no_reassignment_in_progress)
        started = time.monotonic()
        moved = client.request(req(45, 0, {"timeout": timedelta(seconds=10), "topics": [
            {"name": "moved", "partitions": [{"partition_index": 0, "replicas": [2, 1]}]}]}))
        assert moved.responses[0].partitions[0].error_code == ErrorCode.none
        listed = client.request(req(46, 0, {"timeout": timedelta(seconds=10), "topics": None}))
        ongoing = [(t.name, p.adding_replicas, p.removing_replicas)
                   for t in listed.topics for p in t.partitions]
        assert ongoing == [("moved", (2,), (0,))], ongoing

        def done() -> bool:
            listed = client.request(req(46, 0, {"timeout": timedelta(seconds=10), "topics": None}))
            return not listed.topics
        wait_until(done, 60, "the reassignment to complete")
        elapsed = time.monotonic() - started
    # Another broker may answer from the image before the last step for up to a poll.
    state = wait_until(lambda: (s := states(cluster, "moved")[0]).replicas == (2, 1) and s,
                       10, "every broker to see the reassignment completed")
    assert set(state.isr) == {1, 2}
    # ~600 kB at 200 kB/s: the throttle held the new replica back for seconds, not ms.
    assert elapsed > 1.5, f"reassignment took {elapsed:.2f}s, the throttle did not apply"
    assert len(consume_all(cluster, "moved", 1, 600)) == 600


@pytest.mark.parametrize("brokers", [1])
def test_single_broker_cluster_serves_everything(cluster_factory, brokers):
    """The embedded default: one broker is its own controller and sole ISR."""
    cluster = cluster_factory(brokers, FAST)
    assert cluster.controller_id() == 0
    cluster.create_topic("solo", 2, 1)
    with leader_client(cluster, "solo") as client:
        assert produce_code(client, "solo", acks=-1) == ErrorCode.none
    assert metric(cluster, 0, "kafka_controller_kafkacontroller_activecontrollercount") == 1
