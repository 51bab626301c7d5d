"""Transactions as Apache Kafka's own tools see them: TransactionsCommand list, describe,
describe-producers and abort (the operator's remedy for a hanging transaction), and
DumpLogSegments decoding the markers in a data partition and the records of
``__transaction_state`` with Kafka's transaction-log decoder."""

from __future__ import annotations

import re

from confluent_kafka import Consumer, Producer, TopicPartition

from broker.cluster.internal_topics import partition_for
from kafkube.harness.metadata import Cluster
from kafkube.harness.waiting import wait_until
from tests.support.kafka_tools import DUMP_LOG_SEGMENTS, TRANSACTIONS_COMMAND

TXN_PARTITIONS = 3
FAST = {
    "broker.session.timeout.ms": "3000",
    "broker.heartbeat.interval.ms": "500",
    "offsets.topic.num.partitions": "3",
    "transaction.state.log.num.partitions": str(TXN_PARTITIONS),
}
TXN_ID = "tools-txn"


def _ends(cluster: Cluster, topic: str, isolation: str) -> int:
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "ends",
                         "isolation.level": isolation})
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1]
    finally:
        consumer.close()


def test_kafka_tools_read_and_mend_our_transactions(kafka_tools, cluster_factory):
    cluster = cluster_factory(3, FAST)
    cluster.create_topic("tx-tools", 1, 3)
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": TXN_ID,
                         "transaction.timeout.ms": 600000})
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(5):
        producer.produce("tx-tools", b"committed-%d" % i, partition=0)
    producer.commit_transaction(30)
    producer.begin_transaction()
    for i in range(3):
        producer.produce("tx-tools", b"open-%d" % i, partition=0)
    assert producer.flush(30) == 0
    b = cluster.bootstrap

    listed = kafka_tools.run(TRANSACTIONS_COMMAND, "--bootstrap-server", b, "list").stdout
    assert re.search(rf"^{TXN_ID}\s+\d+\s+\d+\s+Ongoing\s*$", listed, re.MULTILINE), listed
    described = kafka_tools.run(TRANSACTIONS_COMMAND, "--bootstrap-server", b, "describe",
                                "--transactional-id", TXN_ID).stdout
    assert "Ongoing" in described and "tx-tools-0" in described, described
    producers = kafka_tools.run(TRANSACTIONS_COMMAND, "--bootstrap-server", b,
                                "describe-producers", "--topic", "tx-tools",
                                "--partition", "0").stdout
    (row,) = [line.split() for line in producers.strip().splitlines()[1:]]
    # Offsets 0-4 the committed records, 5 their COMMIT marker: the open one starts at 6.
    assert row[-1] == "6" and int(row[2]) >= 0, producers
    assert (_ends(cluster, "tx-tools", "read_committed"),
            _ends(cluster, "tx-tools", "read_uncommitted")) == (6, 9)

    leader = cluster.leader_of("tx-tools", 0)
    data_dir = cluster.brokers[leader].log_dir / "tx-tools-0"
    dumped = kafka_tools.run(DUMP_LOG_SEGMENTS, "--files", ",".join(
        str(p) for p in sorted(data_dir.glob("*.log"))), "--print-data-log").stdout
    assert re.search(r"isTransactional: true", dumped), dumped
    assert re.search(r"endTxnMarker: COMMIT coordinatorEpoch: \d+", dumped), dumped

    # The operator's way out of a transaction no producer will finish: abort it by hand.
    kafka_tools.run(TRANSACTIONS_COMMAND, "--bootstrap-server", b, "abort", "--topic",
                    "tx-tools", "--partition", "0", "--start-offset", "6")
    wait_until(lambda: _ends(cluster, "tx-tools", "read_committed") == 10, 30,
               "the last stable offset past the aborted records and their marker")

    state_partition = partition_for(TXN_ID, TXN_PARTITIONS)
    state_dir = cluster.brokers[leader].log_dir / f"__transaction_state-{state_partition}"
    decoded = kafka_tools.run(DUMP_LOG_SEGMENTS, "--files", ",".join(
        str(p) for p in sorted(state_dir.glob("*.log"))), "--transaction-log-decoder").stdout
    # Kafka's decoder prints each record as JSON: our key, and every state the id went
    # through, in that order (by name since Kafka 4.2; the stored byte is Empty 0, Ongoing 1,
    # PrepareCommit 2, CompleteCommit 4).
    assert f'"transactionalId":"{TXN_ID}"' in decoded, decoded
    states = re.findall(r'"transactionStatus":"?(\w+)"?', decoded)
    assert states[:5] == ["Empty", "Ongoing", "PrepareCommit", "CompleteCommit", "Ongoing"], \
        decoded
