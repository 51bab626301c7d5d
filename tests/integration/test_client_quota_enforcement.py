"""Client quotas end to end: set with Apache Kafka's ConfigCommand, described back, and
enforced on real producers. alice, limited to 200 KB/s, is measured within 25 % of her quota
over 10 s while bob, producing at the same time on the same broker without a quota, goes
several times faster and is never throttled; removing alice's quota describes as none."""

from __future__ import annotations

import re
import threading
import time
from dataclasses import dataclass, field

import pytest
from confluent_kafka import KafkaError, Producer
from kio.schema.describe_client_quotas.v1.request import (
    ComponentData,
    DescribeClientQuotasRequest,
)

from kafkube.harness.metadata import Cluster
from kafkube.harness.waiting import wait_until
from kafkube.harness.wire import WireClient, build_batch, produce_request
from kafkube_operator.kafka import KafkaAdmin, KafkaRefused
from tests.support.kafka_tools import CONFIG_COMMAND, KafkaTools

QUOTA = 200 * 1024  # bytes per second
SECONDS = 10.0
VALUE = b"q" * 1024
USERS = {"alice": "alice-secret", "bob": "bob-secret"}
JAAS = ("org.apache.kafka.common.security.plain.PlainLoginModule required "
        + " ".join(f'user_{u}="{p}"' for u, p in USERS.items()) + ";")
LISTENERS = {
    "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
    "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT",
    "inter.broker.listener.name": "PLAINTEXT",
    "sasl.enabled.mechanisms": "PLAIN",
    "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
}


@dataclass
class Measured:
    start: float = 0.0
    delivered: list[tuple[float, int]] = field(default_factory=list)
    throttled_ms: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def rate(self, seconds: float) -> float:
        """Payload bytes a second acknowledged in the first ``seconds`` of producing."""
        return sum(size for at, size in self.delivered if at <= self.start + seconds) / seconds


def configs(tools: KafkaTools, cluster: Cluster, *args: str) -> str:
    return tools.run(CONFIG_COMMAND, "--bootstrap-server", cluster.bootstrap,
                     "--entity-type", "users", "--entity-name", "alice", *args).stdout


def produce_for(bootstrap: str, user: str, seconds: float) -> Measured:
    """Produce 1 KiB records as fast as librdkafka takes them for ``seconds``; what was
    acknowledged when, and the throttles the broker reported."""
    measured = Measured()

    def delivered(err, msg) -> None:
        if err is not None:
            if err.code() != KafkaError._PURGE_QUEUE:  # what was left queued at the end
                measured.errors.append(str(err))
        else:
            measured.delivered.append((time.monotonic(), len(msg.value())))

    producer = Producer({
        "bootstrap.servers": bootstrap, "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanisms": "PLAIN", "sasl.username": user, "sasl.password": USERS[user],
        "client.id": f"{user}-producer", "acks": 1, "linger.ms": 5, "batch.size": 16384,
        "queue.buffering.max.messages": 2000, "message.timeout.ms": 60000,
        "throttle_cb": lambda event: measured.throttled_ms.append(event.throttle_time * 1000),
    })
    measured.start = time.monotonic()
    end = measured.start + seconds
    while time.monotonic() < end:
        try:
            producer.produce("quota", VALUE, partition=0, on_delivery=delivered)
        except BufferError:  # the local queue is full: wait for acknowledgements
            producer.poll(0.01)
            continue
        producer.poll(0)
    producer.purge(in_queue=True, in_flight=False)
    producer.flush(30)
    return measured


def test_a_user_is_held_to_its_produce_quota_and_others_are_not(
        cluster_factory, kafka_tools: KafkaTools) -> None:
    cluster = cluster_factory(1, LISTENERS)
    cluster.create_topic("quota", 1, 1)
    configs(kafka_tools, cluster, "--alter", "--add-config", f"producer_byte_rate={QUOTA}")
    described = configs(kafka_tools, cluster, "--describe")
    assert re.search(rf"producer_byte_rate={QUOTA}(\.0)?\b", described), described

    bootstrap = cluster.brokers[0].bootstrap_of("SASL_PLAINTEXT")
    results: dict[str, Measured] = {}
    threads = [threading.Thread(
        target=lambda u=user: results.__setitem__(u, produce_for(bootstrap, u, SECONDS)))
        for user in USERS]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(SECONDS + 60)
    wait_until(lambda: len(results) == 2, 5, "both producers' results")
    alice, bob = results["alice"], results["bob"]
    assert not alice.errors and not bob.errors, (alice.errors[:3], bob.errors[:3])
    alice_rate, bob_rate = alice.rate(SECONDS), bob.rate(SECONDS)
    print(f"alice {alice_rate / 1024:.0f} KiB/s against a quota of {QUOTA / 1024:.0f} KiB/s "
          f"(throttled {len(alice.throttled_ms)} times); bob {bob_rate / 1024:.0f} KiB/s")
    assert 0.75 * QUOTA <= alice_rate <= 1.25 * QUOTA, alice_rate
    assert alice.throttled_ms, "the broker never reported alice's throttle"
    assert bob_rate > 2 * QUOTA, bob_rate
    assert not bob.throttled_ms

    configs(kafka_tools, cluster, "--alter", "--delete-config", "producer_byte_rate")
    assert "producer_byte_rate" not in configs(kafka_tools, cluster, "--describe")


def quota_on(bootstrap: str, client_id: str) -> bool:
    """Whether the broker at ``bootstrap`` knows a quota of ``client_id`` (its answer comes
    from its own copy of the cluster's metadata)."""
    with WireClient.connect(bootstrap) as client:
        response = client.request(DescribeClientQuotasRequest(components=(ComponentData(
            entity_type="client-id", match_type=0, match=client_id),), strict=False))
    return bool(response.entries)


def test_requests_pipelined_behind_a_throttled_produce_wait_out_its_throttle(
        cluster_factory, kafka_tools: KafkaTools) -> None:
    """KIP-219: no request after a throttled one is read until its throttle is over, even
    when the client sent them all at once and the throttled produce (acks=all) is still
    waiting for its follower. A bug admitted them all while the first waited: librdkafka,
    with its unbounded requests in flight, got 270 KiB at a time past a 100 KiB/s quota."""
    cluster = cluster_factory(2)
    cluster.create_topic("piped", 1, 2)
    kafka_tools.run(CONFIG_COMMAND, "--bootstrap-server", cluster.bootstrap, "--alter",
                    "--entity-type", "clients", "--entity-name", "piped",
                    "--add-config", "producer_byte_rate=10240")
    leader = cluster.brokers[cluster.leader_of("piped", 0)].bootstrap
    cluster.wait_for_isr("piped", 2)
    wait_until(lambda: quota_on(leader, "piped"), 30, "the quota on the partition's leader")
    value = b"p" * 8192
    with WireClient.connect(leader, timeout=60) as client:
        client.client_id = "piped"
        # 240 KiB at once against 10 KiB/s over a 10 s window: throttled after ~100 KiB.
        sent = [client.send(produce_request("piped", build_batch(
            [(None, value, (), 0)], int(time.time() * 1000)), acks=-1)) for _ in range(30)]
        version = produce_request("piped", None).__version__
        answered: list[tuple[float, int]] = []
        for correlation_id in sent:
            response = client.receive(0, version, correlation_id)
            ((partition,),) = (t.partition_responses for t in response.responses)
            assert partition.error_code == 0, partition
            answered.append((time.monotonic(), round(
                response.throttle_time.total_seconds() * 1000)))
    throttled = next((i for i, (_, ms) in enumerate(answered) if ms > 0), None)
    assert throttled is not None and throttled < len(answered) - 1, answered
    at, ms = answered[throttled]
    after = answered[throttled + 1][0] - at
    print(f"request {throttled} throttled {ms} ms; the next answered {after * 1000:.0f} ms "
          "after it")
    assert after >= 0.9 * ms / 1000, answered


def test_the_operators_admin_client_sets_and_reads_a_users_quotas(cluster_factory,
                                                                  kafka_tools: KafkaTools
                                                                  ) -> None:
    """What reconcile/user.py sends (kafka.py's alter_quotas and quotas_of), against the
    broker, and read back by ConfigCommand."""
    cluster = cluster_factory(1)
    admin = KafkaAdmin([cluster.bootstrap])
    try:
        admin.alter_quotas("alice", [("producer_byte_rate", 1024.0),
                                     ("controller_mutation_rate", 2.5)], [])
        assert admin.quotas_of(["alice", "bob"]) == {
            "alice": {"producer_byte_rate": 1024.0, "controller_mutation_rate": 2.5}}
        assert "controller_mutation_rate=2.5" in configs(kafka_tools, cluster, "--describe")
        admin.alter_quotas("alice", [], ["producer_byte_rate"])
        assert admin.quotas_of(["alice"]) == {"alice": {"controller_mutation_rate": 2.5}}
        with pytest.raises(KafkaRefused, match="must be greater than 0"):
            admin.alter_quotas("alice", [("consumer_byte_rate", 0.0)], [])
    finally:
        admin.close()
