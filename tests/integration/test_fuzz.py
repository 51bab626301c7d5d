"""A short structure-aware fuzz run against a live broker (bench/fuzz.py; ``make fuzz`` is
the long one): valid requests of every API and version the broker serves, with fields set
to values that break rules and frames cut or flipped. The broker answers or closes for
framing only, logs no handler failure, keeps serving a fresh client, and keeps its memory.
"""

from __future__ import annotations

from confluent_kafka import Consumer, Producer, TopicPartition

from bench.fuzz import GROUP, TOPIC, run
from kafkube.harness.procstat import rss_bytes
from kafkube.harness.waiting import wait_until
from kafkube.harness.wire import WireClient, create_topic
from tests.support.broker_log import broker_errors, log_barrier

FRAMES = 3000
MiB = 1 << 20


def test_structure_aware_fuzz(broker_factory):
    broker = broker_factory(offsets_topic_num_partitions=1, group_initial_rebalance_delay_ms=0)
    with WireClient.connect(broker.bootstrap) as setup:
        create_topic(setup, TOPIC)
        create_topic(setup, "fuzz-health")
    producer = Producer({"bootstrap.servers": broker.bootstrap, "message.timeout.ms": 20000,
                         "linger.ms": 0})
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": GROUP + "-health",
                         "enable.auto.commit": False})
    sent: list[bytes] = []

    def health() -> None:
        """A record produced now is read back now."""
        value = b"health-%d" % len(sent)
        producer.produce("fuzz-health", value, partition=0)
        assert producer.flush(20) == 0, "the broker stopped taking records"
        sent.append(value)
        consumer.assign([TopicPartition("fuzz-health", 0, len(sent) - 1)])
        msg = wait_until(lambda: consumer.poll(1), 20, "the health record back")
        assert msg.error() is None and msg.value() == value, msg.error()

    health()
    start_rss = rss_bytes(broker.proc.pid)
    try:
        stats = run(broker.bootstrap, frames=FRAMES, seconds=600, seed=20261125,
                    check_every=250, health=health, rss=lambda: rss_bytes(broker.proc.pid),
                    failures=lambda: broker_errors(broker))
    finally:
        consumer.close()
    print(stats.summary())
    assert stats.frames == FRAMES
    assert len(stats.by_api) >= 30, stats.by_api  # nearly every registered API was hit
    assert stats.answered > stats.frames // 2 and stats.closed > 0, stats.summary()
    assert stats.health_checks >= FRAMES // 250
    assert stats.peak_rss - start_rss < 150 * MiB, stats.summary()
    log_barrier(broker)
    assert broker_errors(broker) == []
