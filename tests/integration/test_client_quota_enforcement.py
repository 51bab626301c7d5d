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

from kafkube.harness.metadata import Cluster
from kafkube.harness.waiting import wait_until
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
