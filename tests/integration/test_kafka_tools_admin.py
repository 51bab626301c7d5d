"""The admin APIs operators use, through Apache Kafka's own tools: LogDirsCommand,
TransactionsCommand describe-producers, GroupsCommand and ConsumerGroupCommand, each
checked against what the cluster holds."""

from __future__ import annotations

import json
import re

from confluent_kafka import Consumer, Producer

from kafkube.harness.metadata import Cluster
from kafkube.harness.waiting import wait_until
from tests.support.kafka_tools import (
    CONSUMER_GROUP_COMMAND,
    GROUPS_COMMAND,
    LOG_DIRS_COMMAND,
    TRANSACTIONS_COMMAND,
)

FAST = {
    "broker.session.timeout.ms": "3000",
    "broker.heartbeat.interval.ms": "500",
    "offsets.topic.num.partitions": "3",
    "group.initial.rebalance.delay.ms": "0",
}


def produce(cluster: Cluster, topic: str, count: int, **settings: object) -> None:
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", **settings})
    for i in range(count):
        producer.produce(topic, b"value-%d" % i, key=b"k", partition=i % 2)
    assert producer.flush(30) == 0


def test_log_dirs_command_reports_every_replica(kafka_tools, cluster_factory):
    cluster = cluster_factory(3, FAST)
    cluster.create_topic("dirs", 2, 3)
    produce(cluster, "dirs", 200)
    cluster.wait_for_isr("dirs", 3)
    out = kafka_tools.run(LOG_DIRS_COMMAND, "--bootstrap-server", cluster.bootstrap,
                          "--describe", "--broker-list", "0,1,2", "--topic-list", "dirs").stdout
    report = json.loads(out.strip().splitlines()[-1])
    assert sorted(b["broker"] for b in report["brokers"]) == [0, 1, 2]
    for broker in report["brokers"]:
        (log_dir,) = broker["logDirs"]
        assert log_dir["error"] is None
        assert log_dir["logDir"] == str(cluster.brokers[broker["broker"]].log_dir.resolve())
        sizes = {p["partition"]: p["size"] for p in log_dir["partitions"]}
        assert set(sizes) == {"dirs-0", "dirs-1"}
        # Every replica holds the same bytes: the size of the leader's log, on each broker.
        for name, size in sizes.items():
            files = (cluster.brokers[broker["broker"]].log_dir / name).glob("*.log")
            assert size == sum(f.stat().st_size for f in files) > 0


def test_transactions_command_describes_producers(kafka_tools, cluster_factory):
    cluster = cluster_factory(3, FAST)
    cluster.create_topic("idem", 2, 3)
    produce(cluster, "idem", 40, **{"enable.idempotence": True, "linger.ms": 0})
    out = kafka_tools.run(TRANSACTIONS_COMMAND, "--bootstrap-server", cluster.bootstrap,
                          "describe-producers", "--topic", "idem", "--partition", "0").stdout
    rows = [line.split() for line in out.strip().splitlines()[1:]]
    assert len(rows) == 1, out  # one idempotent producer wrote to it
    producer_id, epoch, coordinator_epoch, last_sequence, last_timestamp, txn_start = rows[0]
    assert int(producer_id) >= 0 and int(epoch) == 0
    assert int(last_sequence) == 19  # 20 records to partition 0, sequences 0..19
    assert int(last_timestamp) > 0
    assert (coordinator_epoch, txn_start) == ("-1", "None"), out


def test_groups_and_consumer_group_commands(kafka_tools, cluster_factory):
    cluster = cluster_factory(3, FAST)
    cluster.create_topic("grouped", 2, 3)
    produce(cluster, "grouped", 30)
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "readers",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe(["grouped"])
    try:
        seen: list = []

        def all_read() -> bool:
            msg = consumer.poll(1)
            if msg is not None and msg.error() is None:
                seen.append(msg)
            return len(seen) >= 30
        wait_until(all_read, 60, "the 30 records")
        consumer.commit(asynchronous=False)
        b = ("--bootstrap-server", cluster.bootstrap)
        listed = kafka_tools.run(GROUPS_COMMAND, *b, "--list").stdout
        assert re.search(r"^readers\s+Classic\s+consumer\s*$", listed, re.MULTILINE), listed
        assert "readers" in kafka_tools.run(GROUPS_COMMAND, *b, "--list", "--consumer").stdout
        classic = kafka_tools.run(GROUPS_COMMAND, *b, "--list", "--group-type", "classic")
        assert "readers" in classic.stdout
        share = kafka_tools.run(GROUPS_COMMAND, *b, "--list", "--share").stdout
        assert "readers" not in share
        stable = kafka_tools.run(CONSUMER_GROUP_COMMAND, *b, "--list", "--state", "Stable")
        assert re.search(r"^readers\s+Stable\s*$", stable.stdout, re.MULTILINE), stable.stdout
        described = kafka_tools.run(CONSUMER_GROUP_COMMAND, *b, "--describe",
                                    "--group", "readers").stdout
        rows = re.findall(r"^readers\s+grouped\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)", described,
                          re.MULTILINE)
        assert sorted((int(p), int(cur), int(end), int(lag)) for p, cur, end, lag in rows) == [
            (0, 15, 15, 0), (1, 15, 15, 0)], described
    finally:
        consumer.close()
    empty = kafka_tools.run(CONSUMER_GROUP_COMMAND, "--bootstrap-server", cluster.bootstrap,
                            "--list", "--state", "Empty").stdout
    assert re.search(r"^readers\s+Empty\s*$", empty, re.MULTILINE), empty
