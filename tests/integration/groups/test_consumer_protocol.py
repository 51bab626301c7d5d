"""Kafka 4's consumer group protocol (KIP-848) with real clients: librdkafka
(``group.protocol=consumer``) and Kafka 4.4's Java consumer (VerifiableConsumer
``--group-protocol consumer``). Members share a topic's partitions, a SIGKILLed member's
partitions go to the others after the session timeout, a member that leaves hands its
partitions over at once and a new one gets a share, and every record is read, none twice
once committed."""

from __future__ import annotations

import json
import time

import pytest

from kafkube.harness.metrics import scrape
from kafkube.harness.wire import WireClient
from tests.integration.groups.group_clients import ConsumerProc, new_topic, produce, wait_for
from tests.integration.groups.group_requests import find_coordinator, offset_fetch, req
from tests.integration.test_compat_clients import topic_name
from tests.support.kafka_tools import VERIFIABLE_CONSUMER

SESSION_S = 6
MARGIN_S = 6  # on top of the session: the next heartbeats, revocation, the others' fetches
KIP848 = {"group.consumer.session.timeout.ms": str(SESSION_S * 1000),
          "group.consumer.min.session.timeout.ms": str(SESSION_S * 1000),
          "group.consumer.heartbeat.interval.ms": "500",
          "group.consumer.min.heartbeat.interval.ms": "500",
          "offsets.topic.num.partitions": "3"}
PARTITIONS = 6


def shared(assignments: list[set[int]], partitions: int = PARTITIONS) -> bool:
    """Every member has partitions, and together they hold each one once."""
    return all(assignments) and \
        sorted(p for a in assignments for p in a) == list(range(partitions))


def read_twice(procs: list[ConsumerProc]) -> list[tuple[int, int]]:
    seen: dict[tuple[int, int], int] = {}
    for p in procs:
        for part, offset, _ in p.records:
            seen[(part, offset)] = seen.get((part, offset), 0) + 1
    return sorted(k for k, n in seen.items() if n > 1)


def test_librdkafka_members_share_hand_over_and_survive_a_kill(broker_factory, consumers):
    broker = broker_factory(**KIP848)
    topic, group = new_topic(broker.bootstrap, PARTITIONS), "kip848-librdkafka"

    def member(name: str) -> ConsumerProc:
        return consumers(name, broker.bootstrap, topic, group, "--protocol", "consumer")

    procs = [member(f"c{i}") for i in range(3)]
    wait_for(lambda: shared([p.assignment for p in procs])
             and sorted(len(p.assignment) for p in procs) == [2, 2, 2], 30,
             "three members sharing six partitions, two each", procs)
    produce(broker.bootstrap, topic, PARTITIONS, 10)
    wait_for(lambda: all(p.committed == {q: 10 for q in p.assignment} for p in procs), 30,
             "every member to read and commit its share", procs)

    # SIGKILL one member: after its session, the two others share all six partitions.
    victim, survivors = procs[1], [procs[0], procs[2]]
    victim.kill()
    killed = time.monotonic()
    wait_for(lambda: shared([p.assignment for p in survivors]), SESSION_S + MARGIN_S,
             "the survivors to take the dead member's partitions", procs)
    assert time.monotonic() - killed >= SESSION_S - 1  # not before its session ran out
    produce(broker.bootstrap, topic, PARTITIONS, 10, start=10)

    # One leaves cleanly, one joins: the partitions move at once, no session to wait out.
    procs[0].stop()
    newcomer = member("c3")
    pair = [procs[2], newcomer]
    wait_for(lambda: shared([p.assignment for p in pair]), 20,
             "the newcomer to get a share from the member that stayed", [*procs, newcomer])
    produce(broker.bootstrap, topic, PARTITIONS, 10, start=20)
    everyone = [*procs, newcomer]
    wait_for(lambda: {(p, o) for c in everyone for p, o, _ in c.records}
             == {(p, o) for p in range(PARTITIONS) for o in range(30)}, 30,
             "every record of the three rounds read", everyone)
    # The victim committed everything it read before it died: nothing is read twice.
    assert read_twice(everyone) == [], read_twice(everyone)
    for p in pair:
        p.stop()


def verifiable(kafka_tools, bootstrap: str, topic: str, group: str):
    return kafka_tools.spawn(VERIFIABLE_CONSUMER, "--bootstrap-server", bootstrap, "--topic",
                             topic, "--group-id", group, "--group-protocol", "consumer",
                             "--reset-policy", "earliest", "--verbose")


def java_events(tool, name: str) -> list[dict]:
    return [e for line in list(tool.lines) if line.startswith("{")
            for e in [json.loads(line)] if e.get("name") == name]


def java_assignment(tool) -> set[int]:
    """The partitions the consumer holds, from its assigned and revoked events in order."""
    held: set[int] = set()
    for line in list(tool.lines):
        if not line.startswith("{"):
            continue
        event = json.loads(line)
        parts = {p["partition"] for p in event.get("partitions", ())}
        if event.get("name") == "partitions_assigned":
            held |= parts
        elif event.get("name") in ("partitions_revoked", "partitions_lost"):
            held -= parts
    return held


@pytest.mark.java
def test_java_consumers_share_and_survive_a_kill(broker_factory, kafka_tools):
    broker = broker_factory(**KIP848)
    topic, group = new_topic(broker.bootstrap, PARTITIONS), "kip848-java"
    produce(broker.bootstrap, topic, PARTITIONS, 10)
    with verifiable(kafka_tools, broker.bootstrap, topic, group) as j0, \
            verifiable(kafka_tools, broker.bootstrap, topic, group) as j1:
        tools = [j0, j1]
        with verifiable(kafka_tools, broker.bootstrap, topic, group) as j2:
            tools.append(j2)
            wait_for(lambda: shared([java_assignment(t) for t in tools]), 60,
                     "three Java members sharing six partitions", [])
            j2.proc.kill()  # SIGKILL, mid-stream
            j2.proc.wait(10)
        wait_for(lambda: shared([java_assignment(t) for t in (j0, j1)]),
                 SESSION_S + MARGIN_S + 10, "the two others to take its partitions", [])
        produce(broker.bootstrap, topic, PARTITIONS, 10, start=10)

        def read() -> set[tuple[int, int]]:
            return {(e["partition"], e["offset"]) for t in tools
                    for e in java_events(t, "record_data")}

        wait_for(lambda: read() == {(p, o) for p in range(PARTITIONS) for o in range(20)}, 60,
                 "every record read by the Java members", [])
        commits = [e for t in (j0, j1) for e in java_events(t, "offsets_committed")]
        assert commits and all(c["success"] for c in commits), commits[-3:]


GROUP_COMMAND = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand"


def test_kafka_consumer_groups_describes_a_consumer_group(broker_factory, consumers,
                                                           kafka_tools):
    """kafka-consumer-groups.sh on a KIP-848 group: its type, state, epochs, members with
    their current and target assignments, and their offsets."""
    broker = broker_factory(**KIP848)
    topic, group = new_topic(broker.bootstrap, 4), "kip848-described"
    member = consumers("m0", broker.bootstrap, topic, group, "--protocol", "consumer")
    produce(broker.bootstrap, topic, 4, 5)
    wait_for(lambda: member.committed == {p: 5 for p in range(4)}, 30,
             "the member to read and commit everything", [member])
    b = ("--bootstrap-server", broker.bootstrap)

    def table(*args: str) -> list[list[str]]:
        out = kafka_tools.run(GROUP_COMMAND, *b, *args).stdout
        return [line.split() for line in out.splitlines() if line.strip()]

    assert ["kip848-described", "Consumer"] in table("--list", "--type")
    header, row = table("--describe", "--group", group, "--state", "--verbose")
    assert header[-3:] == ["GROUP-EPOCH", "TARGET-ASSIGNMENT-EPOCH", "#MEMBERS"], header
    assert row[0] == group and row[3:] == ["uniform", "Stable", "1", "1", "1"], row
    header, row = table("--describe", "--group", group, "--members", "--verbose")
    assert "TARGET-ASSIGNMENT" in header
    assert row[3] == "m0" and row[-4:] == ["1", f"{topic}:0,1,2,3", "1", f"{topic}:0,1,2,3"]
    rows = table("--describe", "--group", group, "--offsets")[1:]
    assert sorted((r[2], r[3], r[5]) for r in rows) == [(str(p), "5", "0") for p in range(4)]
    metrics = scrape(broker.metrics_port)
    of = f'group="{group}"'
    assert metrics[f'kafkube_consumer_group_members{{{of},protocol="consumer"}}'] == 1
    assert metrics[f"kafkube_consumer_group_epoch{{{of}}}"] == 1
    assert metrics[f"kafkube_consumer_group_assignment_epoch_lag{{{of}}}"] == 0
    assert metrics[f"kafkube_consumer_group_rebalances_total{{{of}}}"] == 1
    member.stop()


def test_a_coordinator_killed_mid_rebalance_hands_the_group_on(cluster_factory, consumers):
    """3 brokers, the offsets topic on all three. Two members share six partitions; a third
    joins and, while the partitions move, the coordinator is SIGKILLed. The new coordinator
    (the offsets partition's next leader) rebuilds the group from __consumer_offsets: the
    members keep their ids, the hand-over completes, committed offsets hold, every record is
    read and none twice."""
    cluster = cluster_factory(3, {**KIP848, "offsets.topic.replication.factor": "3"})
    topic, group = topic_name("kip848-failover"), "kip848-failover"
    cluster.create_topic(topic, PARTITIONS, 3)
    bootstrap = cluster.bootstrap

    def member(name: str) -> ConsumerProc:
        return consumers(name, bootstrap, topic, group, "--protocol", "consumer")

    first = [member("c0"), member("c1")]
    wait_for(lambda: shared([p.assignment for p in first])
             and sorted(len(p.assignment) for p in first) == [3, 3], 30,
             "two members with three partitions each", first)
    produce(bootstrap, topic, PARTITIONS, 10)
    wait_for(lambda: all(p.committed == {q: 10 for q in p.assignment} for p in first), 30,
             "both members to read and commit their share", first)
    with WireClient.connect(cluster.brokers[0].bootstrap) as client:
        coordinator = find_coordinator(client, group).node_id
    survivor = cluster.brokers[(coordinator + 1) % 3].bootstrap

    newcomer = member("c2")
    everyone = [*first, newcomer]
    wait_for(lambda: group_epoch(cluster, coordinator, group) >= 3, 20,
             "the newcomer's join to move the group epoch", everyone)
    cluster.brokers[coordinator].kill()  # mid-rebalance: partitions are moving
    wait_for(lambda: shared([p.assignment for p in everyone])
             and sorted(len(p.assignment) for p in everyone) == [2, 2, 2], 60,
             "the hand-over to complete under the new coordinator", everyone)
    produce(bootstrap, topic, PARTITIONS, 10, start=10)
    wait_for(lambda: {(p, o) for c in everyone for p, o, _ in c.records}
             == {(p, o) for p in range(PARTITIONS) for o in range(20)}, 60,
             "every record read", everyone)
    assert read_twice(everyone) == [], read_twice(everyone)
    wait_for(lambda: all(p.committed.get(q) == 20 for p in everyone for q in p.assignment),
             30, "every member to commit to the end of its share", everyone)
    with WireClient.connect(survivor) as client:
        assert find_coordinator(client, group).node_id != coordinator
    new_coordinator = cluster.brokers[group_coordinator(survivor, group)].bootstrap
    with WireClient.connect(new_coordinator) as client:
        assert offset_fetch(client, group, topic, PARTITIONS) == {
            p: 20 for p in range(PARTITIONS)}
    for p in everyone:
        p.stop()


def group_epoch(cluster, node: int, group: str) -> int:
    with WireClient.connect(cluster.brokers[node].bootstrap) as client:
        (described,) = client.request(req(69, 1, {"group_ids": [group],
                                                   "include_authorized_operations": False})).groups
    return described.group_epoch if described.error_code == 0 else -1


def group_coordinator(bootstrap: str, group: str) -> int:
    with WireClient.connect(bootstrap) as client:
        return find_coordinator(client, group).node_id
