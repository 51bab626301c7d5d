"""Members share a group's partitions (librdkafka, kafka-python, Java); a SIGKILLed
member's partitions are taken over within session.timeout.ms plus a margin, with only
its uncommitted tail read twice; cooperative-sticky rebalances incrementally; added
partitions are assigned."""

from __future__ import annotations

import time

import pytest
from confluent_kafka.admin import AdminClient, NewPartitions

from kafkube.harness.wire import WireClient
from tests.integration.groups.group_clients import (
    NO_DELAY,
    SESSION_MS,
    TAKEOVER_MARGIN_S,
    ConsumerProc,
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
from tests.integration.groups.group_requests import offset_fetch

# --------------------------------------------------------------------------- 1. shares


@pytest.mark.parametrize("client", ["confluent", "kafka-python"])
def test_three_consumers_share_six_partitions(broker_factory, consumers, client):
    broker = broker_factory(**NO_DELAY)
    topic, group = new_topic(broker.bootstrap, 6), f"share-{client}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    procs = [consumers(f"c{i}", broker.bootstrap, topic, group, "--client", client)
             for i in range(3)]
    shares = wait_settled(admin, group, procs, 6)
    assert sorted(len(s) for s in shares.values()) == [2, 2, 2], shares

    # Records produced now reach exactly the member that owns their partition, once.
    produce(broker.bootstrap, topic, 6, 10)
    total = lambda: sum(len(p.records) for p in procs)  # noqa: E731
    wait_for(lambda: total() >= 60, 20, "60 records", procs)
    for p in procs:
        assert {part for part, _, _ in p.records} <= shares[p.name], dump(procs)
        check_values(p.records)
    everything = sorted(r for p in procs for r in p.records)
    assert everything == sorted(set(everything)) and len(everything) == 60, dump(procs)
    wait_for(lambda: all(p.committed == {q: 10 for q in shares[p.name]} for p in procs), 10,
             "every member to commit its share", procs)
    for p in procs:
        p.stop()


@pytest.mark.java
def test_three_java_consumers_share_six_partitions(broker_factory, consumers):
    broker = broker_factory(**NO_DELAY)
    topic, group = new_topic(broker.bootstrap, 6), "share-java"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    procs = [consumers.java(f"j{i}", broker.bootstrap, topic, group) for i in range(3)]
    shares = wait_for(lambda: stable_partitioned(admin, group, 3, 6), 60,
                      "three Java consumers in a Stable group", procs)
    assert set(shares) == {"j0", "j1", "j2"}, shares
    assert all(len(s) == 2 for s in shares.values()), shares


# --------------------------------------------------------------------------- 2. SIGKILL


def test_killed_consumer_partitions_are_taken_over(broker_factory, consumers):
    broker = broker_factory(**NO_DELAY)
    topic, group = new_topic(broker.bootstrap, 6), "takeover"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    opts = ("--strategy", "range", "--session-ms", SESSION_MS)
    # The victim reads 20 records (committing each batch), then one more batch that it never
    # commits: the uncommitted tail that at-least-once delivery hands to the survivors.
    victim = consumers("victim", broker.bootstrap, topic, group, *opts, "--hang-after", 20)
    survivors = [consumers(f"s{i}", broker.bootstrap, topic, group, *opts) for i in range(2)]
    procs = [victim, *survivors]
    shares = wait_settled(admin, group, procs, 6)
    assert len(shares["victim"]) == 2, shares

    per_partition = 20
    produce(broker.bootstrap, topic, 6, per_partition)
    wait_for(lambda: victim.of("hang"), 20, "the victim to stop mid-batch", procs)
    for s in survivors:
        wait_for(lambda s=s: s.committed == {q: per_partition for q in shares[s.name]}, 20,
                 f"{s.name} to commit its share", procs)
    victim_committed = victim.committed
    tail = {(part, o) for part, o, _ in victim.of("records")[-1]["records"]}
    assert tail and all(o >= victim_committed.get(part, 0) for part, o in tail), dump(procs)

    victim.kill()
    killed_at = time.monotonic()

    def taken_over():
        for s in survivors:
            changes = s.of("assignment")
            if not changes or changes[-1]["at"] < killed_at:
                return None
        if sorted(p for s in survivors for p in s.assignment) != list(range(6)):
            return None
        return max(s.of("assignment")[-1]["at"] for s in survivors)

    bound = SESSION_MS / 1000 + TAKEOVER_MARGIN_S
    done_at = wait_for(taken_over, bound + 5, "the survivors to own every partition", procs)
    takeover = done_at - killed_at
    print(f"takeover after SIGKILL: {takeover:.2f}s (session.timeout.ms={SESSION_MS})")
    assert takeover <= bound, f"takeover took {takeover:.2f}s, more than {bound}s\n{dump(procs)}"
    assert stable_shares(admin, group, 2) is not None

    # The survivors finish the victim's partitions and commit them.
    everything = {q: per_partition for q in range(6)}
    with WireClient.connect(broker.bootstrap) as client:
        wait_for(lambda: offset_fetch(client, group, topic, 6) == everything, 20,
                 "every partition committed to its end", procs)

    # At-least-once: nothing lost; the only records read twice are the victim's uncommitted
    # tail; survivors resumed each victim partition exactly at the victim's last commit.
    reads: dict[tuple[int, int], int] = {}
    for p in procs:
        check_values(p.records)
        for part, o, _ in p.records:
            reads[(part, o)] = reads.get((part, o), 0) + 1
    assert set(reads) == {(q, o) for q in range(6) for o in range(per_partition)}, dump(procs)
    twice = {k for k, n in reads.items() if n > 1}
    assert twice == tail, f"read twice: {sorted(twice)}, uncommitted tail {sorted(tail)}"
    assert max(reads.values()) == 2
    for part in shares["victim"]:
        if victim_committed.get(part, 0) < per_partition:
            resumed = min(o for s in survivors for q, o, _ in s.records if q == part)
            assert resumed == victim_committed.get(part, 0), (part, resumed, victim_committed)
    for s in survivors:
        s.stop()


# --------------------------------------------------------------------------- 3. cooperative


def test_cooperative_sticky_incremental_rebalance(broker_factory, consumers):
    broker = broker_factory(**NO_DELAY)
    topic, group = new_topic(broker.bootstrap, 6), "coop"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    procs: list[ConsumerProc] = []
    for i in range(3):
        procs.append(consumers(f"c{i}", broker.bootstrap, topic, group,
                               "--strategy", "cooperative-sticky"))
        shares = wait_settled(admin, group, procs, 6)
        assert all(shares.values()), f"a member without partitions: {shares}"
    assert described(admin, group).partition_assignor == "cooperative-sticky"
    assert sorted(len(s) for s in shares.values()) == [2, 2, 2], shares

    # Incremental: a member gives up only what moves to a newcomer and keeps the rest, so
    # c0, which had all six partitions, never went back to owning nothing.
    first = procs[0].of("assignment")
    assert first[0]["partitions"] == list(range(6)), dump(procs)
    assert all(e["partitions"] for e in first), dump(procs)
    assert any(e["change"] == "revoke" and 0 < len(e["delta"]) < 6 for e in first), dump(procs)

    produce(broker.bootstrap, topic, 6, 5)
    wait_for(lambda: sum(len(p.records) for p in procs) >= 30, 20, "30 records", procs)
    everything = sorted(r for p in procs for r in p.records)
    assert len(everything) == 30 and len(set(everything)) == 30, dump(procs)
    for p in procs:
        assert {part for part, _, _ in p.records} <= shares[p.name]
        p.stop()


def test_added_partitions_are_assigned(broker_factory, consumers):
    """Partitions added to a subscribed topic reach the group: the leader notices them in
    its metadata and rejoins, and its JoinGroup rebalances a Stable group."""
    broker = broker_factory(**NO_DELAY)
    topic, group = new_topic(broker.bootstrap, 2), "growing"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    procs = [consumers(f"c{i}", broker.bootstrap, topic, group, "--metadata-refresh-ms", 500)
             for i in range(2)]
    wait_settled(admin, group, procs, 2)
    admin.create_partitions([NewPartitions(topic, 4)])[topic].result(10)
    shares = wait_settled(admin, group, procs, 4)
    assert sorted(len(s) for s in shares.values()) == [2, 2], shares
    produce(broker.bootstrap, topic, 4, 3)
    wait_for(lambda: sum(len(p.records) for p in procs) >= 12, 20, "12 records", procs)
    assert sorted(r for p in procs for r in p.records) == sorted(
        (q, i, f"{q}-{i}") for q in range(4) for i in range(3)), dump(procs)
    for p in procs:
        p.stop()
