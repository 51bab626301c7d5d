"""The Spark pipeline (spark/kafkube_spark) against a 3-broker kafkube cluster, in local mode,
with Spark's own Kafka source and sink (spark-sql-kafka-0-10 from Maven Central): the totals
equal what plain Python computes from the same events, over an offset range, a time range, a
killed and restarted job, and a broker SIGKILLed under the job."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from kafkube.harness.waiting import wait_until
from kafkube_spark.events import WINDOW_MS, Delivered, Total, expected_totals, orders, produce
from tests.support.spark_jobs import SparkJob, committed_batches, read_totals

# One Spark job at a time on the machine: with pytest-xdist these run on one worker. Each
# test runs three to five Spark jobs (each bounded by SparkJob's own timeout); on 2 cores
# beside the tier's two other workers they take 2-5x what they take alone (the batch test:
# 64 s alone, 115 and 295 s in two tier runs of 2026-12-02), past pytest's 300 s default.
pytestmark = [pytest.mark.xdist_group("spark"), pytest.mark.timeout(600)]

TOPIC, RESULTS = "orders", "order-totals"
PARTITIONS = 4
WATERMARK_MS = 10 * 60_000  # the stream job's default --watermark


@pytest.fixture
def cluster(cluster_factory):
    cluster = cluster_factory(3, {"min.insync.replicas": "2",
                                  "offsets.topic.replication.factor": "3"})
    cluster.create_topic(TOPIC, PARTITIONS, 3)
    cluster.create_topic(RESULTS, 2, 3, {"cleanup.policy": "compact"})
    return cluster


def latest_results(bootstrap: str) -> dict[str, dict]:
    """The result topic read to its end: the last value per key (as compaction keeps it)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "results-check",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        ends = {}
        for p in range(2):
            _, high = consumer.get_watermark_offsets(TopicPartition(RESULTS, p), timeout=10)
            ends[p] = high
        consumer.assign([TopicPartition(RESULTS, p, 0) for p in ends])
        latest: dict[str, dict] = {}
        done = {p for p, high in ends.items() if high == 0}
        while len(done) < len(ends):
            msg = consumer.poll(10)
            assert msg is not None, "the result topic stopped short of its end"
            assert msg.error() is None, msg.error()
            latest[msg.key().decode()] = json.loads(msg.value())
            if msg.offset() + 1 >= ends[msg.partition()]:
                done.add(msg.partition())
        return latest
    finally:
        consumer.close()


def stream_args(bootstrap: str, output: Path, checkpoint: Path, per_batch: int) -> list[str]:
    return ["--bootstrap-servers", bootstrap, "--topic", TOPIC, "--output", str(output),
            "--checkpoint", str(checkpoint), "--result-topic", RESULTS,
            "--max-offsets-per-trigger", str(per_batch)]


def closed_totals(delivered: list[Delivered]) -> list[Total]:
    """What the stream has emitted once every event is read: the windows its final watermark
    (latest event time minus 10 minutes) has closed."""
    events = [d.order for d in delivered]
    return expected_totals(events, closed_before=max(e.ts for e in events) - WATERMARK_MS)


def test_the_batch_job_totals_an_offset_range_and_a_time_range_exactly(
        cluster, tmp_path: Path) -> None:
    delivered = produce(cluster.bootstrap, TOPIC, orders(4000))
    # Values that are no order (bad input) are skipped, not fatal, and count nowhere.
    garbage = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    for value in (b"not json", b"{}", b'{"ts": "yesterday", "category": "books"}', b"\xff"):
        garbage.produce(TOPIC, value=value, partition=0)
    assert garbage.flush(30) == 0

    # Offsets: each partition up to the middle of what it holds.
    ends = {p: max(d.offset for d in delivered if d.partition == p) // 2
            for p in range(PARTITIONS)}
    output = tmp_path / "by-offsets"
    SparkJob("batch", "--bootstrap-servers", cluster.bootstrap, "--topic", TOPIC,
             "--output", str(output), "--ending-offsets",
             json.dumps({TOPIC: {str(p): end for p, end in ends.items()}})).succeed()
    expected = expected_totals(d.order for d in delivered if d.offset < ends[d.partition])
    assert read_totals(output, tmp_path) == expected

    # Time: ListOffsets by timestamp picks the records of minutes 3 to 7 of event time.
    first = min(d.order.ts for d in delivered)
    since = first - first % WINDOW_MS + 3 * WINDOW_MS
    until = since + 4 * WINDOW_MS
    output = tmp_path / "by-time"
    SparkJob("batch", "--bootstrap-servers", cluster.bootstrap, "--topic", TOPIC,
             "--output", str(output), "--starting-timestamp", str(since),
             "--ending-timestamp", str(until)).succeed()
    in_range = expected_totals(d.order for d in delivered if since <= d.order.ts < until)
    assert len(in_range) >= 15
    assert read_totals(output, tmp_path) == in_range


def test_a_stream_killed_mid_way_resumes_from_its_checkpoint_without_duplicate_or_gap(
        cluster, tmp_path: Path) -> None:
    delivered = produce(cluster.bootstrap, TOPIC, orders(8000))
    output, checkpoint = tmp_path / "totals", tmp_path / "checkpoint"
    args = stream_args(cluster.bootstrap, output, checkpoint, per_batch=400)

    first = SparkJob("stream", *args)
    wait_until(lambda: committed_batches(checkpoint / "parquet") >= 3 or first.proc.poll()
               is not None, 180, "three committed micro-batches")
    assert first.proc.poll() is None, f"the job ended before it was killed:\n{first.tail()}"
    first.kill()
    killed_at = committed_batches(checkpoint / "parquet")

    SparkJob("stream", *args).succeed()
    assert committed_batches(checkpoint / "parquet") > killed_at
    expected = closed_totals(delivered)
    assert len(expected) > 100
    assert read_totals(output, tmp_path) == expected  # each total once, none missing
    results = latest_results(cluster.bootstrap)
    assert sorted(Total(**v) for v in results.values()) == expected


def test_a_broker_killed_under_a_running_stream_changes_no_total(
        cluster, tmp_path: Path) -> None:
    delivered = produce(cluster.bootstrap, TOPIC, orders(8000))
    output, checkpoint = tmp_path / "totals", tmp_path / "checkpoint"
    job = SparkJob("stream", *stream_args(cluster.bootstrap, output, checkpoint,
                                          per_batch=400))
    wait_until(lambda: committed_batches(checkpoint / "parquet") >= 2 or job.proc.poll()
               is not None, 180, "two committed micro-batches")
    assert job.proc.poll() is None, f"the job ended before the kill:\n{job.tail()}"
    victim = cluster.leader_of(TOPIC, 0)
    cluster.kill(victim)
    job.succeed()
    cluster.restart(victim)
    assert read_totals(output, tmp_path) == closed_totals(delivered)
