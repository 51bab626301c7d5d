"""Configs changed at run time with Apache Kafka's own tools: ConfigCommand for topics and
brokers, and ReassignPartitionsCommand's --throttle and --verify, which set and clear them.

Each test checks what the change did (records deleted, a write refused, a move slowed, a
broker restarted still applying it), not only what the tools printed.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from kafkube.harness.metadata import Cluster
from kafkube.harness.waiting import wait_until
from tests.support.kafka_tools import (
    CONFIG_COMMAND,
    REASSIGN_PARTITIONS_COMMAND,
    TOPIC_COMMAND,
    KafkaTools,
)

FAST = {
    "broker.session.timeout.ms": "3000",
    "broker.heartbeat.interval.ms": "500",
    "offsets.topic.num.partitions": "3",
    "log.retention.check.interval.ms": "300",
    "log.segment.delete.delay.ms": "0",
}


def configs_of(tools: KafkaTools, cluster: Cluster, entity: tuple[str, ...]) -> dict[str, str]:
    """``ConfigCommand --describe`` of one entity: the dynamic configs it lists, by name."""
    out = tools.run(CONFIG_COMMAND, "--bootstrap-server", cluster.bootstrap, "--describe",
                    *entity).stdout
    return dict(re.findall(r"^\s+([\w.]+)=(\S*) sensitive=", out, re.MULTILINE))


def alter(tools: KafkaTools, cluster: Cluster, entity: tuple[str, ...], *args: str,
          check: bool = True):
    return tools.run(CONFIG_COMMAND, "--bootstrap-server", cluster.bootstrap, "--alter",
                     *entity, *args, check=check)


def produce(cluster: Cluster, topic: str, count: int, size: int, partition: int = 0,
            **settings: object) -> list:
    """Send ``count`` records; the delivery errors, if any (small batches, as for segments)."""
    errors: list = []
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all",
                         "batch.size": 16384, "linger.ms": 5, "message.timeout.ms": 20000,
                         **settings})
    value = b"v" * size
    for _ in range(count):
        producer.produce(topic, value, partition=partition,
                         on_delivery=lambda err, _msg: err and errors.append(err))
        producer.poll(0)
    assert producer.flush(30) == 0
    return errors


def low_watermark(cluster: Cluster, topic: str, partition: int = 0) -> int:
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "watermarks"})
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)[0]
    finally:
        consumer.close()


def test_config_command_changes_topic_configs_at_run_time(kafka_tools, cluster_factory):
    cluster = cluster_factory(3, FAST)
    cluster.create_topic("cfg-topic", 1, 3)
    topic = ("--entity-type", "topics", "--entity-name", "cfg-topic")
    alter(kafka_tools, cluster, topic, "--add-config", "segment.bytes=16384")
    assert produce(cluster, "cfg-topic", 400, 500) == []
    assert low_watermark(cluster, "cfg-topic") == 0

    # Retention: a second is long past for every closed segment, so they go.
    alter(kafka_tools, cluster, topic, "--add-config", "retention.ms=1000")
    assert configs_of(kafka_tools, cluster, topic) == {"segment.bytes": "16384",
                                                       "retention.ms": "1000"}
    wait_until(lambda: low_watermark(cluster, "cfg-topic") > 0, 30,
               "retention.ms=1000 to delete the old segments")

    # min.insync.replicas above the replication factor: acks=all writes are refused...
    alter(kafka_tools, cluster, topic, "--add-config", "min.insync.replicas=4")

    def refused() -> bool:
        # The leader applies the change when it takes up the new metadata (within a poll).
        errors = produce(cluster, "cfg-topic", 1, 10, retries=0)  # the error, not a retry
        assert [e.code() for e in errors] in ([], [KafkaError.NOT_ENOUGH_REPLICAS]), errors
        return bool(errors)

    wait_until(refused, 10, "acks=all writes to be refused under min.insync.replicas=4")
    # ...until the setting is deleted again.
    alter(kafka_tools, cluster, topic, "--delete-config", "min.insync.replicas,retention.ms")
    assert configs_of(kafka_tools, cluster, topic) == {"segment.bytes": "16384"}
    assert produce(cluster, "cfg-topic", 1, 10) == []

    # A bad value names its key, and nothing that was stored changes.
    bad = alter(kafka_tools, cluster, topic, "--add-config",
                "segment.bytes=32768,retention.ms=soon", check=False)
    assert bad.returncode != 0
    assert "InvalidConfigurationException: retention.ms: expected an integer" in bad.stderr
    assert configs_of(kafka_tools, cluster, topic) == {"segment.bytes": "16384"}


def test_config_command_changes_broker_configs_per_broker_and_by_default(
        kafka_tools, cluster_factory):
    cluster = cluster_factory(3, FAST)
    broker_1 = ("--entity-type", "brokers", "--entity-name", "1")
    default = ("--entity-type", "brokers", "--entity-default")
    alter(kafka_tools, cluster, broker_1, "--add-config",
          "log.cleaner.backoff.ms=1234,log.retention.ms=1000")
    alter(kafka_tools, cluster, default, "--add-config", "log.retention.ms=7200000")
    assert configs_of(kafka_tools, cluster, broker_1) == {
        "log.cleaner.backoff.ms": "1234", "log.retention.ms": "1000"}
    assert configs_of(kafka_tools, cluster, default) == {"log.retention.ms": "7200000"}

    # Partition p lives on broker p only: broker 1 keeps a second, the others two hours.
    kafka_tools.run(TOPIC_COMMAND, "--bootstrap-server", cluster.bootstrap, "--create",
                    "--topic", "cfg-brokers", "--replica-assignment", "0,1,2")
    cluster.wait_for_isr("cfg-brokers", 1)
    # (TopicCommand itself refuses segments under 1 MiB, as Kafka 4 brokers do; kafkube's
    # brokers allow small ones, which keep this test small.)
    alter(kafka_tools, cluster, ("--entity-type", "topics", "--entity-name", "cfg-brokers"),
          "--add-config", "segment.bytes=16384")
    for p in range(3):
        assert produce(cluster, "cfg-brokers", 200, 500, partition=p) == []
    wait_until(lambda: low_watermark(cluster, "cfg-brokers", 1) > 0, 30,
               "broker 1's log.retention.ms=1000 to delete its old segments")
    assert [low_watermark(cluster, "cfg-brokers", p) for p in (0, 2)] == [0, 0]

    # A restarted broker applies what is stored: its next segments go the same way.
    cluster.restart(1)  # SIGTERM, then start again
    cluster.wait_for_brokers(3)
    cluster.wait_for_isr("cfg-brokers", 1)
    before = low_watermark(cluster, "cfg-brokers", 1)
    assert produce(cluster, "cfg-brokers", 200, 500, partition=1) == []
    wait_until(lambda: low_watermark(cluster, "cfg-brokers", 1) > before, 30,
               "the restarted broker 1 to apply log.retention.ms=1000 again")
    assert [low_watermark(cluster, "cfg-brokers", p) for p in (0, 2)] == [0, 0]
    described = kafka_tools.run(
        CONFIG_COMMAND, "--bootstrap-server", cluster.bootstrap, "--describe",
        *broker_1, "--all").stdout
    assert re.search(r"^\s+log\.retention\.ms=1000 sensitive=false synonyms=\{"
                     r"DYNAMIC_BROKER_CONFIG:log\.retention\.ms=1000, "
                     r"DYNAMIC_DEFAULT_BROKER_CONFIG:log\.retention\.ms=7200000", described,
                     re.MULTILINE), described
    broker_0 = kafka_tools.run(
        CONFIG_COMMAND, "--bootstrap-server", cluster.bootstrap, "--describe",
        "--entity-type", "brokers", "--entity-name", "0", "--all").stdout
    assert re.search(r"^\s+log\.retention\.ms=7200000 sensitive=false synonyms=\{"
                     r"DYNAMIC_DEFAULT_BROKER_CONFIG", broker_0, re.MULTILINE), broker_0

    # --delete-config, and what cannot change at run time is refused by name.
    alter(kafka_tools, cluster, broker_1, "--delete-config", "log.retention.ms")
    assert configs_of(kafka_tools, cluster, broker_1) == {"log.cleaner.backoff.ms": "1234"}
    refused = alter(kafka_tools, cluster, broker_1, "--add-config", "node.id=7", check=False)
    assert refused.returncode != 0
    assert "Cannot update these configs dynamically: node.id" in refused.stderr
    refused = alter(kafka_tools, cluster, default, "--add-config", "log.retention.ms=-5",
                    check=False)
    assert "log.retention.ms: -5 is below the minimum -1" in refused.stderr
    assert configs_of(kafka_tools, cluster, default) == {"log.retention.ms": "7200000"}


def test_reassignment_with_throttle_then_verify_clears_it(
        kafka_tools, cluster_factory, tmp_path: Path):
    cluster = cluster_factory(3, FAST)
    cluster.create_topic("moved", 1, 2)
    before = cluster.partitions("moved")[0].replicas
    target = [b for b in range(3) if b not in before] + [before[1]]
    assert produce(cluster, "moved", 600, 1000) == []  # ~600 kB to copy
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": "moved", "partition": 0, "replicas": target}]}))
    rate = 150_000
    started = time.monotonic()
    executed = kafka_tools.run(
        REASSIGN_PARTITIONS_COMMAND, "--bootstrap-server", cluster.bootstrap, "--execute",
        "--reassignment-json-file", str(plan), "--throttle", str(rate)).stdout
    assert "Successfully started partition reassignment for moved-0" in executed, executed
    # The throttle is set where Kafka sets it: rates on the brokers, replicas on the topic.
    topic_throttles = configs_of(kafka_tools, cluster,
                                 ("--entity-type", "topics", "--entity-name", "moved"))
    assert topic_throttles["follower.replication.throttled.replicas"] == f"0:{target[0]}"
    assert set(topic_throttles["leader.replication.throttled.replicas"].split(",")) == {
        f"0:{b}" for b in before}
    leader_broker = ("--entity-type", "brokers", "--entity-name", str(before[0]))
    assert configs_of(kafka_tools, cluster, leader_broker)[
        "leader.replication.throttled.rate"] == str(rate)

    wait_until(lambda: cluster.partitions("moved")[0].replicas == tuple(target), 60,
               "the reassignment to complete")
    elapsed = time.monotonic() - started
    verified = kafka_tools.run(
        REASSIGN_PARTITIONS_COMMAND, "--bootstrap-server", cluster.bootstrap, "--verify",
        "--reassignment-json-file", str(plan))
    assert "Reassignment of partition moved-0 is completed." in verified.stdout, verified
    assert "Clearing broker-level throttles on brokers" in verified.stdout
    assert "Clearing topic-level throttles on topic moved" in verified.stdout
    assert verified.returncode == 0
    for broker in range(3):
        assert configs_of(kafka_tools, cluster, (
            "--entity-type", "brokers", "--entity-name", str(broker))) == {}
    assert configs_of(kafka_tools, cluster,
                      ("--entity-type", "topics", "--entity-name", "moved")) == {}
    # ~600 kB at 150 kB/s: the new replica was held back for seconds, not milliseconds.
    print(f"throttled move of ~600 kB at {rate} B/s: {elapsed:.1f} s")
    assert elapsed > 2.0, f"the move took {elapsed:.2f}s: the throttle did not apply"
    assert set(cluster.partitions("moved")[0].isr) == set(target)
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "moved-check",
                         "auto.offset.reset": "earliest"})
    try:
        assert consumer.get_watermark_offsets(TopicPartition("moved", 0), timeout=10) == (0, 600)
    except KafkaException as e:  # pragma: no cover - the assertion message is the point
        raise AssertionError(f"watermarks after the move: {e}") from e
    finally:
        consumer.close()
