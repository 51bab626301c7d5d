"""Offsets and log files with Apache Kafka's own tools: GetOffsetShell's special times and a
timestamp, DeleteRecordsCommand (followers, a new leader and a restart keep the new start),
and DumpLogSegments reading kafkube's .log, .index and .timeindex files with its checks."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition

from kafkube.harness.metadata import Cluster
from kafkube.harness.waiting import wait_until
from tests.support.kafka_tools import (
    DELETE_RECORDS_COMMAND,
    DUMP_LOG_SEGMENTS,
    GET_OFFSET_SHELL,
    KafkaTools,
)

TS = 1_700_000_000_000
FAST = {
    "broker.session.timeout.ms": "3000",
    "broker.heartbeat.interval.ms": "500",
    "offsets.topic.num.partitions": "3",
}


def produce_with_timestamps(cluster: Cluster, topic: str, batches: list[list[int]]) -> None:
    """One produce request per inner list (flushed between), records at TS + delta."""
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all",
                         "linger.ms": 50, "enable.idempotence": False})
    for deltas in batches:
        for i, delta in enumerate(deltas):
            producer.produce(topic, b"x" * 200, key=b"k%d" % i, partition=0,
                             timestamp=TS + delta)
        assert producer.flush(30) == 0


def offsets(tools: KafkaTools, cluster: Cluster, topic: str, time: str) -> dict[int, int]:
    """GetOffsetShell --time: partition -> offset, as it prints them (topic:partition:offset)."""
    out = tools.run(GET_OFFSET_SHELL, "--bootstrap-server", cluster.bootstrap,
                    "--topic", topic, "--time", time).stdout
    return {int(p): int(o) for p, o in re.findall(rf"^{topic}:(\d+):(-?\d+)$", out, re.MULTILINE)}


def earliest(cluster: Cluster, topic: str, node: int | None = None) -> int:
    """The log start offset as a consumer sees it (from the current leader)."""
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "earliest"})
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[0]
    finally:
        consumer.close()


def test_get_offset_shell_special_times_and_a_timestamp(kafka_tools, cluster_factory):
    cluster = cluster_factory(3, FAST)
    cluster.create_topic("times", 1, 3)
    # offsets 0-2 at +0,+1,+2; 3-5 at +1000,+3000,+2000; 6-7 at +100,+200
    produce_with_timestamps(cluster, "times", [[0, 1, 2], [1000, 3000, 2000], [100, 200]])
    assert offsets(kafka_tools, cluster, "times", "-1") == {0: 8}  # latest
    assert offsets(kafka_tools, cluster, "times", "-2") == {0: 0}  # earliest
    assert offsets(kafka_tools, cluster, "times", "-3") == {0: 4}  # the record at +3000
    assert offsets(kafka_tools, cluster, "times", "-4") == {0: 0}  # earliest local
    # Latest tiered: with no remote tier the broker answers -1, as Kafka's does, and the
    # tool leaves unknown offsets out.
    assert offsets(kafka_tools, cluster, "times", "-5") == {}
    assert offsets(kafka_tools, cluster, "times", str(TS + 150)) == {0: 3}
    assert offsets(kafka_tools, cluster, "times", str(TS + 2500)) == {0: 4}
    assert offsets(kafka_tools, cluster, "times", str(TS + 9999)) == {}  # none so late


def test_delete_records_command_moves_every_replica(
        kafka_tools, cluster_factory, tmp_path: Path):
    cluster = cluster_factory(3, {**FAST, "log.retention.check.interval.ms": "300"})
    cluster.create_topic("trimmed", 1, 3)
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    for i in range(1000):
        producer.produce("trimmed", b"r%d" % i, partition=0)
    assert producer.flush(30) == 0
    plan = tmp_path / "delete.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": "trimmed", "partition": 0, "offset": 600}]}))
    out = kafka_tools.run(DELETE_RECORDS_COMMAND, "--bootstrap-server", cluster.bootstrap,
                          "--offset-json-file", str(plan)).stdout
    # The answer comes once every replica dropped them: the low watermark of all three.
    assert re.search(r"partition: trimmed-0\s+low_watermark: 600", out), out
    assert earliest(cluster, "trimmed") == 600

    # A new leader has the same start (it learnt it as a follower), and so does a broker
    # restarted (the start is inside a segment, so only the checkpoint knows it).
    leader = cluster.leader_of("trimmed", 0)
    cluster.restart(leader)
    cluster.wait_for_brokers(3)
    wait_until(lambda: cluster.leader_of("trimmed", 0) != leader or earliest(
        cluster, "trimmed") == 600, 30, "a leader after the restart")
    assert earliest(cluster, "trimmed") == 600
    cluster.wait_for_isr("trimmed", 3)
    for broker in range(3):
        cluster.restart(broker)
    cluster.wait_for_brokers(3)
    cluster.wait_for_isr("trimmed", 3)
    assert earliest(cluster, "trimmed") == 600
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "from-start",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.assign([TopicPartition("trimmed", 0)])
    seen: list[int] = []
    try:
        def all_read() -> bool:
            msg = consumer.poll(1)
            if msg is not None and msg.error() is None:
                seen.append(msg.offset())
            return len(seen) >= 400
        wait_until(all_read, 30, "the 400 records left")
    finally:
        consumer.close()
    assert seen == list(range(600, 1000))

    # Past the high watermark: the tool reports the error per partition.
    plan.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": "trimmed", "partition": 0, "offset": 5000}]}))
    refused = kafka_tools.run(DELETE_RECORDS_COMMAND, "--bootstrap-server", cluster.bootstrap,
                              "--offset-json-file", str(plan), check=False)
    assert "OffsetOutOfRangeException" in refused.stdout + refused.stderr, refused
    assert earliest(cluster, "trimmed") == 600


def test_dump_log_segments_accepts_kafkubes_files(kafka_tools, cluster_factory):
    cluster = cluster_factory(3, FAST)
    # Small segments and a dense index: several segments with many index entries each.
    # (Set at creation: a change made later reaches each broker a poll later, and this
    # producer is faster than that.)
    cluster.create_topic("dumped", 1, 3, {"segment.bytes": 65536, "index.interval.bytes": 512})
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all",
                         "linger.ms": 2, "batch.size": 4096, "compression.type": "lz4"})
    for i in range(3000):
        # Timestamps out of order inside batches, as real producers' clocks allow.
        producer.produce("dumped", os.urandom(100), key=b"k%d" % (i % 97),
                         partition=0, timestamp=TS + i * 10 + (i % 7) * 3)
        producer.poll(0)
    assert producer.flush(30) == 0
    cluster.wait_for_isr("dumped", 3)
    cluster.stop()  # every broker's files as a clean shutdown leaves them

    for broker in range(3):
        logs = _segment_files(cluster, broker, "dumped", ".log")
        assert len(logs) >= 3, logs
        files = []
        for log_file in logs:
            files += [log_file, log_file.with_suffix(".index"), log_file.with_suffix(".timeindex")]
        names = ",".join(str(f) for f in files)
        sane = kafka_tools.run(DUMP_LOG_SEGMENTS, "--files", names, "--index-sanity-check").stdout
        # (an offset index with no entry yet is "empty", which the check does not judge)
        assert sane.count("passed sanity check") + sane.count("is empty.") == 2 * len(logs), sane
        verified = kafka_tools.run(DUMP_LOG_SEGMENTS, "--files", names, "--verify-index-only")
        out = verified.stdout + verified.stderr
        for complaint in ("Mismatches in", "not found in the log", "timestamp mismatch",
                          "out of order", "Non-consecutive", "invalid bytes", "Exception"):
            assert complaint not in out, out
        records = kafka_tools.run(DUMP_LOG_SEGMENTS, "--files", ",".join(map(str, logs)),
                                  "--deep-iteration").stdout
        offsets = [int(o) for o in re.findall(r"^\| offset: (\d+)", records, re.MULTILINE)]
        assert offsets == list(range(3000)), f"broker {broker}: {len(offsets)} records"


def _segment_files(cluster: Cluster, broker: int, topic: str, suffix: str) -> list[Path]:
    return sorted((cluster.brokers[broker].log_dir / f"{topic}-0").glob(f"*{suffix}"))
