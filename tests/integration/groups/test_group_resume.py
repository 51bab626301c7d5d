"""Consumers resume at the committed offset, also after a broker restart (clean or
SIGKILL); a live group rides out a broker crash; a deleted topic's committed offsets
go with it; a restarted static member keeps its partitions and the generation."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import ConsumerGroupState
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.errors import ErrorCode

from kafkube.harness.metrics import scrape
from kafkube.harness.wire import WireClient
from tests.integration.groups.group_clients import (
    GROUP_TIMEOUT_S,
    NO_DELAY,
    check_values,
    described,
    dump,
    new_topic,
    produce,
    stable_partitioned,
    stable_shares,
    wait_for,
    wait_settled,
)
from tests.integration.groups.group_requests import (
    commit,
    current_generation,
    find_coordinator,
    heartbeat,
    offset_fetch,
)

# --------------------------------------------------------------------------- 4/5. resuming


@pytest.mark.parametrize("restart", ["none", "clean", "sigkill"])
def test_consumer_resumes_at_committed_offset(broker_factory, consumers, restart):
    """A consumer of the group resumes where the last one committed, not from the
    beginning and not further on; across a broker restart (SIGTERM or SIGKILL) too."""
    broker = broker_factory(**NO_DELAY)
    topic, group = new_topic(broker.bootstrap, 3), f"resume-{restart}"
    produce(broker.bootstrap, topic, 3, 30)
    first = consumers("first", broker.bootstrap, topic, group, "--max-records", 40)
    assert first.wait_exit(30) == 0, first.diagnostics()
    committed = first.committed
    assert len(first.records) == 40 and first.of("closed"), first.diagnostics()
    assert sum(committed.values()) == 40, committed

    if restart == "clean":
        assert broker.stop() == 0
        broker.start()
    elif restart == "sigkill":
        broker.kill()
        broker.start()

    with WireClient.connect(broker.bootstrap) as client:
        want = {p: committed.get(p, -1) for p in range(3)}
        assert offset_fetch(client, group, topic, 3) == want
    lag = scrape(broker.metrics_port)
    for p in range(3):
        labels = f'group="{group}",partition="{p}",topic="{topic}"'
        if p in committed:
            assert lag[f"kafka_consumergroup_lag{{{labels}}}"] == 30 - committed[p]

    second = consumers("second", broker.bootstrap, topic, group)
    wait_for(lambda: len(second.records) >= 50, 30, "the rest of the records", [second])
    for p in range(3):
        offsets = [o for q, o, _ in second.records if q == p]
        assert offsets == list(range(committed.get(p, 0), 30)), (p, offsets, committed)
    both = sorted(first.records + second.records)
    assert len(both) == 90 and len(set(both)) == 90
    check_values(both)
    wait_for(lambda: second.committed == {p: 30 for p in range(3) if committed.get(p) != 30},
             10, "the final commits", [second])
    second.stop()
    with WireClient.connect(broker.bootstrap) as client:
        assert offset_fetch(client, group, topic, 3) == {0: 30, 1: 30, 2: 30}


def test_live_group_survives_broker_sigkill(broker_factory, consumers):
    """Members and their generation are in __consumer_offsets too: consumers that ride out
    a broker crash carry on in the same group without a rebalance or a duplicate."""
    broker = broker_factory(**NO_DELAY)
    topic, group = new_topic(broker.bootstrap, 4), "live"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    procs = [consumers(f"c{i}", broker.bootstrap, topic, group, "--strategy", "range")
             for i in range(2)]
    shares = wait_settled(admin, group, procs, 4)
    produce(broker.bootstrap, topic, 4, 10)
    wait_for(lambda: all(p.committed == {q: 10 for q in shares[p.name]} for p in procs), 20,
             "every member to commit its share", procs)
    members = {m.client_id: m.member_id for m in described(admin, group).members}
    changes = {p.name: len(p.of("assignment")) for p in procs}

    broker.kill()
    broker.start()
    produce(broker.bootstrap, topic, 4, 10, start=10)
    wait_for(lambda: all(p.committed == {q: 20 for q in shares[p.name]} for p in procs), 30,
             "the members to carry on after the restart", procs)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    assert {m.client_id: m.member_id for m in described(admin, group).members} == members
    assert {p.name: len(p.of("assignment")) for p in procs} == changes, dump(procs)
    everything = sorted(r for p in procs for r in p.records)
    assert len(everything) == 80 and len(set(everything)) == 80, dump(procs)
    check_values(everything)
    for p in procs:
        p.stop()


def test_deleting_a_topic_deletes_its_committed_offsets(broker_factory, consumers):
    """Kafka drops a group's offsets for partitions that are deleted
    (GroupCoordinator.onPartitionsDeleted). Kept, they would apply to a new topic of the
    same name, and the group would skip the start of it."""
    broker = broker_factory(**NO_DELAY)
    topic, group = new_topic(broker.bootstrap, 1), "reborn"
    produce(broker.bootstrap, topic, 1, 10)
    with WireClient.connect(broker.bootstrap) as client:
        find_coordinator(client, group)
        assert commit(client, group, -1, "", topic, offset=5) == ErrorCode.none
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.delete_topics([topic])[topic].result(10)
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(10)
    produce(broker.bootstrap, topic, 1, 10)
    with WireClient.connect(broker.bootstrap) as client:
        assert offset_fetch(client, group, topic, 1) == {0: -1}
    reader = consumers("reader", broker.bootstrap, topic, group, "--max-records", 10)
    assert reader.wait_exit(30) == 0, reader.diagnostics()
    assert [o for _, o, _ in reader.records] == list(range(10)), reader.diagnostics()


# --------------------------------------------------------------------------- 7. static members


@pytest.mark.parametrize("client", ["confluent", pytest.param("java", marks=pytest.mark.java)])
def test_static_member_restart_keeps_assignment_without_rebalance(broker_factory, consumers,
                                                                   client):
    """KIP-345: a static member (group.instance.id) that comes back within its session
    replaces its old self: same partitions, same generation, the others undisturbed."""
    broker = broker_factory(**NO_DELAY)
    topic, group = new_topic(broker.bootstrap, 4), f"static-{client}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    session_ms = 15_000  # the restart must fit in it

    def start(name: str):
        if client == "java":
            return consumers.java(name, broker.bootstrap, topic, group,
                                  f"group.instance.id=static-{name}",
                                  f"session.timeout.ms={session_ms}")
        return consumers(name, broker.bootstrap, topic, group, "--strategy", "range",
                         "--session-ms", session_ms, "--instance-id", f"static-{name}")

    # One by one: "a" joins twice (alone, then with "b"), so its last JoinGroup described
    # what it owned, which its restarted process cannot know.
    a = start("a")
    wait_for(lambda: stable_partitioned(admin, group, 1, 4), GROUP_TIMEOUT_S, "a alone", [a])
    b = start("b")
    shares = wait_for(lambda: stable_partitioned(admin, group, 2, 4), GROUP_TIMEOUT_S,
                      "a and b in a Stable group", [a, b])
    before = {m.client_id: m.member_id for m in described(admin, group).members}
    with WireClient.connect(broker.bootstrap) as client_:
        generation = current_generation(client_, group, before["b"])
    b_changes = len(b.of("assignment")) if client == "confluent" else 0

    a.kill()  # a static member sends no LeaveGroup anyway; this one does not even close
    killed_at = time.monotonic()
    a2 = start("a")

    def replaced():
        desc = described(admin, group)
        ids = {m.client_id: m.member_id for m in desc.members}
        if desc.state != ConsumerGroupState.STABLE or ids.get("a") in (None, before["a"]):
            return None
        return desc

    desc = wait_for(replaced, GROUP_TIMEOUT_S, "the restarted member", [a2, b])
    assert time.monotonic() - killed_at < session_ms / 1000, "restart slower than the session"
    after = {m.client_id: m.member_id for m in desc.members}
    assert after["b"] == before["b"], (before, after)
    assert {m.group_instance_id for m in desc.members} == {"static-a", "static-b"}
    with WireClient.connect(broker.bootstrap) as client_:
        error = heartbeat(client_, group, generation, after["b"])
        now = current_generation(client_, group, after["b"])
    assert error == ErrorCode.none, (
        f"generation {generation} -> {now}: the static member's return caused a rebalance"
    )
    assert stable_shares(admin, group, 2) == shares
    if client == "confluent":
        wait_for(lambda: a2.assignment, GROUP_TIMEOUT_S, "a's assignment", [a2, b])
        assert a2.assignment == shares["a"], dump([a2, b])
        assert len(b.of("assignment")) == b_changes, f"b was rebalanced\n{dump([a2, b])}"
        produce(broker.bootstrap, topic, 4, 3)
        wait_for(lambda: len(a2.records) + len(b.records) >= 12, 20, "12 records", [a2, b])
        assert {q for q, _, _ in a2.records} == shares["a"]
        assert {q for q, _, _ in b.records} == shares["b"]
        for p in (a2, b):
            p.stop()
