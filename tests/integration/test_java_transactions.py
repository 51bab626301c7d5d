"""Exactly-once with Apache Kafka's Java client and Kafka Streams (from Maven Central) against
a 3-broker kafkube cluster, brokers SIGKILLed and restarted under them.

The programs are tests/clients/java-txn (TxnCheck, WordCount), driven through
tests/support/txn_programs.py; each prints one JSON object that these tests check against what
Python computes independently (the copied values' digest, the word counts).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from broker.cluster.internal_topics import partition_for
from kafkube.harness.metadata import Cluster
from kafkube.harness.waiting import wait_until
from tests.support import txn_programs as java

pytestmark = pytest.mark.java

TXN_PARTITIONS = 5
OFFSETS_PARTITIONS = 5
SETTINGS = {
    "min.insync.replicas": "2",
    "transaction.state.log.num.partitions": str(TXN_PARTITIONS),
    "offsets.topic.num.partitions": str(OFFSETS_PARTITIONS),
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000",
    "group.initial.rebalance.delay.ms": "0",
    "broker.session.timeout.ms": "4000",
    "broker.heartbeat.interval.ms": "500",
}


def _fill(cluster: Cluster, topic: str, values: list[str], partitions: int = 3) -> None:
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "enable.idempotence": True,
                         "linger.ms": 20})
    for i, value in enumerate(values):
        producer.produce(topic, value.encode(), key=f"k{i}".encode(), partition=i % partitions)
        if i % 10_000 == 0:
            producer.poll(0)
    assert producer.flush(60) == 0


def _committed(cluster: Cluster, group: str, topic: str, partitions: int = 3) -> int:
    """The group's committed offsets summed (without joining the group)."""
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group})
    try:
        found = consumer.committed([TopicPartition(topic, p) for p in range(partitions)],
                                   timeout=10)
        return sum(max(tp.offset, 0) for tp in found)
    except Exception:  # a coordinator being killed: no answer this time
        return -1
    finally:
        consumer.close()


def _kill_and_restart(cluster: Cluster, victim: int, down_s: float = 3.0) -> None:
    cluster.kill(victim)
    time.sleep(down_s)  # the fault itself: how long the broker stays down
    cluster.restart(victim)


Victim = Callable[[], int]


def _kill_at(cluster: Cluster, progress: Callable[[], int], marks: list[tuple[int, Victim]],
             deadline: float, done: Callable[[], bool]) -> list[int]:
    """For each (progress mark, victim chooser): once ``progress()`` passes the mark, SIGKILL
    the broker the chooser names and restart it. Returns the brokers killed, in order."""
    killed = []
    for mark, choose in marks:
        wait_until(lambda m=mark: done() or progress() >= m, max(1.0, deadline - time.monotonic()),
                   f"progress to {mark}", interval=0.5)
        if done():
            break
        victim = choose()
        _kill_and_restart(cluster, victim)
        killed.append(victim)
    return killed


def test_java_copy_loop_is_exactly_once_while_coordinators_are_killed(cluster_factory):
    total = 100_000
    cluster = cluster_factory(3, SETTINGS)
    cluster.create_topic("java-in", 3, 3)
    cluster.create_topic("java-out", 3, 3)
    values = [f"v{i}" for i in range(total)]
    _fill(cluster, "java-in", values)
    txn_id, group = "java-copier", "java-copy-group"
    copier = java.start_copy(cluster.bootstrap, "java-in", "java-out", group, txn_id,
                             expected=total, timeout_s=540, commit_every=500)
    deadline = time.monotonic() + 540
    killed = _kill_at(
        cluster, lambda: _committed(cluster, group, "java-in"),
        [(total // 5, lambda: cluster.leader_of(
            "__transaction_state", partition_for(txn_id, TXN_PARTITIONS))),
         (total // 2, lambda: cluster.leader_of(
             "__consumer_offsets", partition_for(group, OFFSETS_PARTITIONS))),
         (total * 7 // 10, lambda: cluster.leader_of("java-out", 1))],
        deadline, lambda: not copier.alive)
    result = copier.wait()
    print(f"copy: brokers killed {killed}; " + ", ".join(
        f"{k} {result.data.get(k)}" for k in ("transactions_committed", "transactions_aborted",
                                              "producer_recreations", "records_copied",
                                              "elapsed_ms", "errors")))
    assert len(killed) == 3, f"killed {killed} before the copy ended: {result.describe()}"
    for i in range(cluster.size):
        wait_until(lambda i=i: cluster.alive(i), 60, f"broker {i} running")
    out = java.read(cluster.bootstrap, "java-out", "read_committed", timeout_s=180)
    assert out.data["count"] == total and out.data["duplicates"] == 0, out.describe()
    assert out.data["values_sha1"] == java.values_sha1(java.copied_value(v) for v in values)
    raw = java.read(cluster.bootstrap, "java-out", "read_uncommitted", timeout_s=180)
    # What aborted transactions wrote is visible only to read_uncommitted.
    aborted = result.data["transactions_aborted"] + result.data["producer_recreations"]
    assert raw.data["count"] >= total and (raw.data["count"] > total or aborted == 0), (
        raw.describe(), result.describe())


@pytest.mark.parametrize("transaction_version", [1, 2])
def test_java_read_committed_never_sees_aborted_records(cluster_factory,
                                                        transaction_version):
    cluster = cluster_factory(3, SETTINGS)
    if transaction_version != 2:
        cluster.finalize_feature("transaction.version", transaction_version)
    cluster.create_topic("java-mixed", 3, 3)
    made = java.produce(cluster.bootstrap, "java-mixed", "java-producer", transactions=30,
                        per_transaction=100, abort_every=3)
    assert (made.data["records_committed"], made.data["records_aborted"]) == (2000, 1000)
    committed = java.read(cluster.bootstrap, "java-mixed", "read_committed")
    assert committed.data["prefixes"] == {"committed": 2000}, committed.describe()
    assert committed.data["duplicates"] == 0
    everything = java.read(cluster.bootstrap, "java-mixed", "read_uncommitted")
    assert everything.data["prefixes"] == {"committed": 2000, "aborted": 1000}
    # A new cluster finalizes transaction.version 2, and the Java 4.4 producer speaks it:
    # EndTxn v5 (its epoch bumped by each), Produce v12 adding the partitions, no
    # AddPartitionsToTxn from the client (v3 and below). At level 1 it speaks the older one.
    end_txn = cluster.requests_served("EndTxn")
    client_adds = {v for v in cluster.requests_served("AddPartitionsToTxn") if v <= 3}
    assert sum(end_txn.values()) >= 30
    if transaction_version == 2:
        assert set(end_txn) == {5} and 12 in cluster.requests_served("Produce")
        assert not client_adds
    else:
        assert max(end_txn) <= 4 and max(cluster.requests_served("Produce")) <= 11
        assert client_adds


def test_java_zombie_producer_is_fenced(cluster_factory):
    cluster = cluster_factory(3, SETTINGS)
    cluster.create_topic("java-fence", 1, 3)
    result = java.fence(cluster.bootstrap, "java-fence", "java-zombie")
    assert result.data["older_exception"].rsplit(".", 1)[-1] in (
        "ProducerFencedException", "InvalidProducerEpochException"), result.describe()
    assert result.data["newer_committed"] and not result.data["older_committed"]
    seen = java.read(cluster.bootstrap, "java-fence", "read_committed")
    assert seen.data["values"] == ["fence-newer-1"], seen.describe()


def test_kafka_streams_word_count_is_exact_after_a_broker_kill(cluster_factory,
                                                              tmp_path: Path):
    cluster = cluster_factory(3, SETTINGS)
    cluster.create_topic("lines", 3, 3)
    cluster.create_topic("word-counts", 3, 3)
    words = [f"w{i}" for i in range(200)]
    lines = [" ".join(words[(i * 7 + j * 13) % len(words)] for j in range(1 + i % 9))
             for i in range(6000)]
    expected = java.count_words(lines)
    total_words = sum(expected.values())
    _fill(cluster, "lines", lines[:3000])
    app = java.start_wordcount(cluster.bootstrap, "lines", "word-counts", "wc-app",
                               tmp_path / "streams-state", timeout_s=420,
                               expected_words=total_words, replication_factor=3,
                               commit_interval_ms=100)
    # Kill a broker while the application is working: the one that leads the input's first
    # partition, once the output shows counting has begun.
    counted = lambda: sum(java.read_word_counts(  # noqa: E731
        cluster.bootstrap, "word-counts", timeout_s=60, ok=None).values())
    wait_until(lambda: counted() > 0 or not app.alive, 240, "the first counts", interval=2.0)
    victim = cluster.leader_of("lines", 0)
    _kill_and_restart(cluster, victim)
    _fill(cluster, "lines", lines[3000:])
    result = app.wait()
    assert result.data["reached"], result.describe()
    counts = java.read_word_counts(cluster.bootstrap, "word-counts", timeout_s=120)
    assert counts == expected, (
        f"{sum(counts.values())} words counted of {total_words}; "
        f"wrong: {sorted(w for w in expected if counts.get(w) != expected[w])[:10]}")
