"""Share groups (KIP-932) over the logs that are not a plain run of records: a topic written by
transactional producers with aborted transactions among the committed ones, read by a share
group at ``share.isolation.level=read_committed`` through ``kafka-console-share-consumer``; and
a compacted topic whose cleaned segments have gaps between offsets, read by Kafka's
VerifiableShareConsumer. In both the share-partition start offset the share coordinator stores
must reach the log's end: the markers, aborted records and gaps are passed over, never
delivered, and never left as records still to deliver."""

from __future__ import annotations

import pytest
from confluent_kafka import Producer

from broker.server.log_manager import CLEANER_CHECKPOINT
from broker.server.replica_dirs import TopicPartition as TP
from broker.server.replica_dirs import read_offset_checkpoint
from kafkube.harness.waiting import wait_until
from tests.integration.test_compaction_broker import _consume_all, _produce
from tests.integration.test_share_groups import (
    SHARE_CONSUMER,
    acknowledged,
    delivered,
    share_groups_on,
    stored_start_offsets_of,
)
from tests.support.kafka_tools import CONFIG_COMMAND

pytestmark = pytest.mark.java

CONSOLE_SHARE_CONSUMER = "org.apache.kafka.tools.consumer.ConsoleShareConsumer"
ONE_BROKER = {"offsets.topic.num.partitions": "1",
              "share.coordinator.state.topic.num.partitions": "1",
              "transaction.state.log.num.partitions": "1",
              "group.share.record.lock.duration.ms": "10000"}


def _transactions(bootstrap: str, topic: str, count: int, size: int) -> tuple[list[str], int]:
    """``count`` transactions of ``size`` records on partition 0, every third aborted, then
    one record outside any transaction. The committed values in order, and the log's end."""
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "share-txn",
                         "linger.ms": 5})
    producer.init_transactions(30)
    committed: list[str] = []
    for t in range(count):
        aborted = t % 3 == 1
        producer.begin_transaction()
        values = [f"{'aborted' if aborted else 'committed'}-{t}-{i}" for i in range(size)]
        for value in values:
            producer.produce(topic, value.encode(), partition=0)
        if aborted:
            assert producer.flush(30) == 0  # written to the log, then aborted
            producer.abort_transaction(30)
        else:
            producer.commit_transaction(30)
            committed += values
    plain = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    ends: list[int] = []
    plain.produce(topic, b"last", partition=0,
                  on_delivery=lambda err, msg: ends.append(-1 if err else msg.offset() + 1))
    assert plain.flush(30) == 0 and ends and ends[0] > 0, ends
    return [*committed, "last"], ends[0]


def test_a_read_committed_share_group_never_delivers_an_aborted_record(
        cluster_factory, kafka_tools) -> None:
    cluster = cluster_factory(1, ONE_BROKER)
    bootstrap, group, topic = cluster.bootstrap, "txn-queue", "payments"
    share_groups_on(kafka_tools, bootstrap, group, topic, partitions=1, replication=1)
    kafka_tools.run(CONFIG_COMMAND, "--bootstrap-server", bootstrap, "--alter",
                    "--entity-type", "groups", "--entity-name", group,
                    "--add-config", "share.isolation.level=read_committed")
    committed, end = _transactions(bootstrap, topic, 12, 40)
    assert end == 12 * 40 + 12 + 1  # every record, a marker per transaction, the last one
    out = kafka_tools.run(CONSOLE_SHARE_CONSUMER, "--bootstrap-server", bootstrap,
                          "--topic", topic, "--group", group,
                          "--max-messages", str(len(committed)), "--timeout-ms", "60000",
                          timeout=120).stdout
    values = [line for line in out.splitlines() if line.strip()]
    # Every committed record once, in log order (one partition, one consumer); no aborted one.
    assert values == committed, [v for v in values if v.startswith("aborted")][:5] or \
        (len(values), len(committed))
    # The consumer acknowledged what it printed when it closed: the start offset is the
    # log's end, so nothing aborted is left waiting to be delivered to anyone.
    wait_until(lambda: stored_start_offsets_of(cluster, group, topic, 1) == {0: end}, 30,
               f"the stored share-partition start offset at the log's end, {end}")


def test_a_share_group_reads_a_compacted_topic_across_its_gaps(
        cluster_factory, kafka_tools) -> None:
    cluster = cluster_factory(1, {**ONE_BROKER, "log.cleaner.backoff.ms": "200",
                                  "log.segment.bytes": "4000"})
    bootstrap, group, topic = cluster.bootstrap, "compacted-queue", "prices"
    share_groups_on(kafka_tools, bootstrap, group, topic, partitions=1, replication=1,
                    config={"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.01"})
    pairs = [(b"item-%d" % (i % 20), b"price-%d" % i) for i in range(1200)]
    offsets = _produce(bootstrap, topic, pairs)
    end = offsets[-1] + 1
    log_dir = cluster.brokers[0].log_dir

    def cleaned_to_the_active_segment() -> bool:
        # The cleaner stops at the active segment, so once it got there it removes nothing
        # more: what a plain read finds next is what the share group must deliver.
        active = max(int(f.stem) for f in (log_dir / f"{topic}-0").glob("*.log"))
        return read_offset_checkpoint(log_dir / CLEANER_CHECKPOINT).get(TP(topic, 0)) == active

    wait_until(cleaned_to_the_active_segment, 60, "the cleaner to reach the active segment")
    kept = {offset for offset, _, _ in _consume_all(bootstrap, topic)}
    assert len(kept) < len(pairs) // 2, len(kept)  # gaps where older values were
    wanted = {(0, offset) for offset in kept}
    args = ("--bootstrap-server", bootstrap, "--topic", topic, "--group-id", group,
            "--acknowledgement-mode", "sync", "--verbose")
    with kafka_tools.spawn(SHARE_CONSUMER, *args) as consumer:
        wait_until(lambda: set(acknowledged(consumer)) >= wanted, 120,
                   f"the {len(wanted)} records compaction kept acknowledged")
        wait_until(lambda: stored_start_offsets_of(cluster, group, topic, 1) == {0: end}, 30,
                   f"the stored share-partition start offset at the log's end, {end}")
    got = delivered(consumer)
    assert set(got) == wanted and max(got.values()) == 1, sorted(set(got) ^ wanted)[:5]
