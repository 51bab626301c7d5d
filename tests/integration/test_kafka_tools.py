"""Apache Kafka's own command-line tools against a 3-broker kafkube cluster.

Each test asserts what the tool printed or did, not only that it exited 0.
"""

from __future__ import annotations

import json
import re
from collections import Counter

from kafkube.harness.waiting import wait_until
from tests.support.kafka_tools import (
    LEADER_ELECTION_COMMAND,
    TOPIC_COMMAND,
    VERIFIABLE_CONSUMER,
    VERIFIABLE_PRODUCER,
)

FAST = {
    "broker.session.timeout.ms": "3000",
    "broker.heartbeat.interval.ms": "500",
    "offsets.topic.num.partitions": "3",
}


def test_topic_command_create_describe_list_delete(kafka_tools, cluster_factory):
    cluster = cluster_factory(3)
    b = ("--bootstrap-server", cluster.bootstrap)
    kafka_tools.run(TOPIC_COMMAND, *b, "--create", "--topic", "tools-topics",
                    "--partitions", "6", "--replication-factor", "3",
                    "--config", "retention.ms=3600000")
    cluster.wait_for_isr("tools-topics", 3)
    listed = kafka_tools.run(TOPIC_COMMAND, *b, "--list").stdout.split()
    assert "tools-topics" in listed
    described = kafka_tools.run(TOPIC_COMMAND, *b, "--describe", "--topic", "tools-topics").stdout
    assert re.search(r"PartitionCount:\s*6\s+ReplicationFactor:\s*3", described), described
    assert "retention.ms=3600000" in described
    rows = re.findall(r"Partition: (\d+)\s+Leader: (\d+)\s+Replicas: ([\d,]+)\s+Isr: ([\d,]+)",
                      described)
    assert sorted(int(r[0]) for r in rows) == list(range(6)), described
    for _, leader, replicas, isr in rows:
        assert sorted(replicas.split(",")) == ["0", "1", "2"]
        assert sorted(isr.split(",")) == ["0", "1", "2"]
        assert leader in replicas.split(",")
    under = kafka_tools.run(TOPIC_COMMAND, *b, "--describe", "--under-replicated-partitions")
    assert "tools-topics" not in under.stdout, under.stdout
    kafka_tools.run(TOPIC_COMMAND, *b, "--alter", "--topic", "tools-topics", "--partitions", "8")
    wait_until(lambda: len(cluster.partitions("tools-topics") or ()) == 8, 30,
               "8 partitions in the metadata")
    kafka_tools.run(TOPIC_COMMAND, *b, "--delete", "--topic", "tools-topics")
    listed = kafka_tools.run(TOPIC_COMMAND, *b, "--list").stdout.split()
    assert "tools-topics" not in listed


def test_leader_election_command_restores_preferred_leaders(kafka_tools, cluster_factory):
    cluster = cluster_factory(3, FAST)
    b = ("--bootstrap-server", cluster.bootstrap)
    cluster.create_topic("elected", 6, 3)
    # Restart one broker: the partitions it led move away and stay away when it is back.
    victim = cluster.partitions("elected")[0].replicas[0]
    cluster.restart(victim)
    cluster.wait_for_brokers(3)
    cluster.wait_for_isr("elected", 3)
    moved = {p for p, s in cluster.partitions("elected").items()
             if s.replicas[0] == victim and s.leader != victim}
    assert moved, cluster.partitions("elected")
    out = kafka_tools.run(LEADER_ELECTION_COMMAND, *b, "--election-type", "preferred",
                          "--all-topic-partitions").stdout
    elected = set(re.findall(r"elected-(\d+)", out.split("Successfully completed")[1]
                             .split("\n")[0]))
    assert {int(p) for p in elected} == moved, out
    wait_until(lambda: all(s.leader == s.replicas[0]
                           for s in cluster.partitions("elected").values()), 30,
               "every partition led by its preferred replica")
    # Nothing left to elect: the tool says so rather than failing.
    again = kafka_tools.run(LEADER_ELECTION_COMMAND, *b, "--election-type", "preferred",
                            "--topic", "elected", "--partition", "0")
    assert "Valid replica already elected for partitions elected-0" in again.stdout, again


def test_verifiable_producer_and_consumer_lose_nothing_across_a_kill(
        kafka_tools, cluster_factory):
    cluster = cluster_factory(3, FAST)
    cluster.create_topic("verified", 3, 3, {"min.insync.replicas": 2})
    b = ("--bootstrap-server", cluster.bootstrap)
    # 10 s at 1,500/s: partition 0 is leaderless for about broker.session.timeout.ms (3 s)
    # after the kill, well inside the stream (at 4 s, the stream could end first).
    total = 15000
    with kafka_tools.spawn(VERIFIABLE_PRODUCER, *b, "--topic", "verified",
                           "--max-messages", str(total), "--throughput", "1500",
                           "--acks", "-1") as producer:
        wait_until(lambda: _count(producer.lines, "producer_send_success") > total // 4, 60,
                   "a quarter of the records acknowledged")
        leader = cluster.leader_of("verified", 0)
        cluster.kill(leader)  # SIGKILL, mid-stream
        acked_before = _acked_in(producer.lines, 0)
        wait_until(lambda: _count(producer.lines, "producer_send_success") > total // 2, 60,
                   "half acknowledged with a broker dead")
        # VerifiableProducer sets retries=0, so a record sent to the restarted broker while the
        # producer still takes it for the leader fails (NOT_LEADER_OR_FOLLOWER), as with Kafka.
        # Restart it the way an operator does: once the partition is served by its new leader.
        try:
            wait_until(lambda: _acked_in(producer.lines, 0) > acked_before, 60,
                       "partition 0 acknowledging again under its new leader")
        except AssertionError as e:  # what the producer and the cluster saw, to tell why
            errors = [(x.get("partition"), x.get("exception"), x.get("message")) for x in
                      _events(producer.lines, "producer_send_error")][-5:]
            raise AssertionError(f"{e}; last send errors {errors}; partitions "
                                 f"{cluster.partitions('verified')}; producer stderr "
                                 f"{producer.errors[-10:]}") from None
        assert cluster.leader_of("verified", 0) != leader
        cluster.restart(leader)
        assert producer.wait(120) == 0, producer.errors[-20:]
    acked = {e["value"] for e in _events(producer.lines, "producer_send_success")}
    failures = Counter(e.get("exception") for e in _events(producer.lines, "producer_send_error"))
    # retries=0: what went to partition 0 while it had no leader failed (a third of ~3 s).
    assert len(acked) > total * 0.75, f"only {len(acked)} of {total} acknowledged: {failures}"
    cluster.wait_for_isr("verified", 3)
    with kafka_tools.spawn(VERIFIABLE_CONSUMER, *b, "--topic", "verified",
                           "--group-id", "verifier", "--verbose",
                           "--reset-policy", "earliest") as consumer:
        wait_until(lambda: acked <= {e["value"] for e in _events(consumer.lines, "record_data")},
                   90, "every acknowledged record consumed")
        consumer.stop()
    records = _events(consumer.lines, "record_data")
    positions = [(e["partition"], e["offset"]) for e in records]
    assert len(set(positions)) == len(positions), "a record delivered twice in one session"
    commits = _events(consumer.lines, "offsets_committed")
    assert commits and all(c["success"] for c in commits), commits[-3:]


def _events(lines: list[str], name: str) -> list[dict]:
    events = []
    for line in list(lines):
        if line.startswith("{") and f'"name":"{name}"' in line.replace(" ", ""):
            events.append(json.loads(line))
    return events


def _count(lines: list[str], name: str) -> int:
    return len(_events(lines, name))


def _acked_in(lines: list[str], partition: int) -> int:
    return sum(e["partition"] == partition for e in _events(lines, "producer_send_success"))
