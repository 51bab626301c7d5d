"""A broker out of file descriptors: a mistake of sizing, not a failed disk.

Every hosted segment keeps its file open, so a broker given more partitions than its
``ulimit -n`` allows runs out of descriptors while opening them. Kafka treats the EMFILE
like a disk error: the log dir goes offline, and with one dir the broker stops, taking every
partition it had with it. Here the partitions that could not be opened are refused
(KAFKA_STORAGE_ERROR, logged as the limit it is), the ones it had keep serving, and once
descriptors are free (the limit raised, here) the rest open at the broker's next retry,
without a restart.

The (soft) limit is lowered from outside on the running broker (``prlimit``), as an
operator's smaller ``nofile`` would leave it: the clients connect first, since a new
connection needs a descriptor too.
"""

from __future__ import annotations

import os
import resource
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import NewTopic

from kafkube.harness.metrics import scrape
from kafkube.harness.waiting import wait_until

MANY = 200  # partitions of the topic that outgrows the limit
SPARE = 40  # descriptors left to the broker when the limit is lowered


def open_descriptors(pid: int) -> int:
    return len(os.listdir(Path("/proc") / str(pid) / "fd"))


def produce(producer: Producer, topic: str, partitions: range, tag: str) -> list[str]:
    """One record to each partition; the delivery errors (empty when all were acked)."""
    errors: list[str] = []

    def report(error, message) -> None:  # librdkafka's delivery callback
        if error is not None:
            errors.append(f"{message.partition()}: {error}")

    for p in partitions:
        producer.produce(topic, f"{tag}-{p}".encode(), partition=p, on_delivery=report)
    assert producer.flush(60) == 0, "records still in flight after 60 s"
    return errors


def test_partitions_past_the_open_files_limit_are_refused_and_the_rest_keep_serving(
        cluster_factory) -> None:
    cluster = cluster_factory(1, {"min.insync.replicas": "1"})
    broker = cluster.brokers[0]
    cluster.create_topic("kept", 2, 1)
    admin = cluster.admin
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all",
                         "delivery.timeout.ms": 60000, "linger.ms": 0})
    assert produce(producer, "kept", range(2), "before") == []
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "reader",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition("kept", p, 0) for p in range(2)])
    read: list[bytes] = []

    def read_more(count: int) -> bool:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            read.append(message.value())
        return len(read) >= count

    wait_until(lambda: read_more(2), 30, "the two first records read")

    soft, hard = resource.prlimit(broker.pid, resource.RLIMIT_NOFILE)
    # The soft limit only: raising a hard limit back needs CAP_SYS_RESOURCE.
    resource.prlimit(broker.pid, resource.RLIMIT_NOFILE,
                     (open_descriptors(broker.pid) + SPARE, hard))
    try:
        admin.create_topics([NewTopic("many", num_partitions=MANY, replication_factor=1)])[
            "many"].result(30)
        wait_until(lambda: any("out of file descriptors" in line for line in broker.output),
                   30, "the broker to report running out of descriptors")
        # Not a disk failure: the broker is up and its partitions still take writes and
        # serve reads, on the connections the clients had.
        assert broker.alive(), broker.tail(30)
        assert produce(producer, "kept", range(2), "at-the-limit") == []
        wait_until(lambda: read_more(4), 30, "the records written at the limit read")
    finally:
        resource.prlimit(broker.pid, resource.RLIMIT_NOFILE, (soft, hard))

    # Descriptors to spare again: the broker's retry opens what was refused, with no
    # metadata change to prompt it.
    assert produce(producer, "many", range(MANY), "after") == []
    assert sorted(read) == sorted([b"before-0", b"before-1", b"at-the-limit-0",
                                   b"at-the-limit-1"])
    consumer.close()
    metrics = scrape(broker.metrics_port)
    assert metrics["kafkube_open_files_exhausted_total"] > 0, metrics
    assert metrics["kafka_log_logmanager_offlinelogdirectorycount"] == 0, metrics
    assert not any("is offline" in line for line in broker.output), broker.tail(30)
