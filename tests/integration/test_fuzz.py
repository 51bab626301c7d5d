"""A short structure-aware fuzz run against a live broker (bench/fuzz.py; ``make fuzz`` is
the long one): valid requests of every API and version the broker serves, with fields set
to values that break rules and frames cut or flipped. The broker answers or closes for
framing only, logs no handler failure, keeps serving a fresh client, and keeps its memory.
"""

from __future__ import annotations

import struct
import time

from confluent_kafka import Consumer, Producer, TopicPartition

from bench.fuzz import GROUP, TOPIC, Fuzzer, run
from kafkube.harness.procstat import rss_bytes
from kafkube.harness.waiting import wait_until
from kafkube.harness.wire import WireClient, api_versions_request, create_topic
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


def test_seed_7s_100_mb_find_coordinator_is_answered_not_hung(broker):
    """``bench fuzz --seed 7``'s frame: FindCoordinator v4 with 2,500 keys of 40,000
    characters, 100 MB, inside socket.request.max.bytes (its default, 104857600). The broker
    reads it and answers (echoing the keys: 100 MB back) in about a second; the fuzzer
    buffered that answer quadratically and reported a 30 s hang. One byte over the limit,
    the size alone is refused: the connection is closed at once, no body read."""
    from kio.schema.find_coordinator.v4.request import FindCoordinatorRequest

    from broker.protocol.codec import RequestHeader, encode_request

    request = FindCoordinatorRequest(key_type=0, coordinator_keys=("n" * 40_000,) * 2500)
    fuzzer = Fuzzer(broker.bootstrap, seed=7)
    frame = encode_request(RequestHeader(10, 4, fuzzer.correlation_id, "fuzz"), request)
    assert 100_000_000 < len(frame) - 4 <= 104_857_600
    started = time.monotonic()
    outcome = fuzzer.send(10, 4, frame, mangled=False)
    took = time.monotonic() - started
    fuzzer._drop()
    print(f"a {len(frame) / MiB:.0f} MiB FindCoordinator: {outcome} in {took:.2f} s")
    assert outcome == "answered", f"{outcome} after {took:.1f} s"
    with WireClient.connect(broker.bootstrap) as client:
        client.send_raw(struct.pack(">i", 104_857_601))
        assert client.closed_by_peer(timeout=10)  # on the size alone: no body was sent
    with WireClient.connect(broker.bootstrap) as other:
        other.request(api_versions_request())
