"""Moving a live group between the classic protocol and KIP-848's with real clients, as a team
rolls its consumers: classic librdkafka members (cooperative-sticky) replaced one by one by
``group.protocol=consumer`` ones (the group upgraded online when the first arrives, classic and
consumer members sharing it meanwhile), rolled back (downgraded when the last consumer-protocol
member leaves), then stopped and started again on the other protocol (offline migration).
Every record is read, and none twice: each member commits what it read before it gives a
partition up."""

from __future__ import annotations

import pytest
from kio.schema.errors import ErrorCode

from kafkube.harness.wire import WireClient
from tests.integration.groups.group_clients import ConsumerProc, new_topic, produce, wait_for
from tests.integration.groups.group_requests import LIST_GROUPS, find_coordinator, req
from tests.integration.groups.test_consumer_protocol import (
    KIP848,
    PARTITIONS,
    java_assignment,
    java_events,
    read_twice,
    shared,
)
from tests.support.kafka_tools import VERIFIABLE_CONSUMER

SETTINGS = {**KIP848, "group.initial.rebalance.delay.ms": "0"}
COOPERATIVE = ("--strategy", "cooperative-sticky")


def group_type(bootstrap: str, group: str) -> str | None:
    """The group's type as ListGroups v5 says it: "classic", "consumer", or None."""
    with WireClient.connect(bootstrap) as client:
        find_coordinator(client, group)
        answer = client.request(req(LIST_GROUPS, 5, {"states_filter": [], "types_filter": []}))
    assert answer.error_code == ErrorCode.none
    return next((g.group_type for g in answer.groups if g.group_id == group), None)


def test_librdkafka_members_roll_from_classic_to_consumer_and_back(broker_factory, consumers):
    broker = broker_factory(**SETTINGS)
    topic, group = new_topic(broker.bootstrap, PARTITIONS), "migrating"
    rounds = 0

    def classic(name: str) -> ConsumerProc:
        return consumers(name, broker.bootstrap, topic, group, *COOPERATIVE)

    def consumer(name: str) -> ConsumerProc:
        return consumers(name, broker.bootstrap, topic, group, "--protocol", "consumer")

    everyone: list[ConsumerProc] = []

    def round_read(live: list[ConsumerProc], what: str) -> None:
        nonlocal rounds
        wait_for(lambda: shared([p.assignment for p in live]), 40,
                 f"{what}: the live members sharing every partition", everyone)
        produce(broker.bootstrap, topic, PARTITIONS, 10, start=10 * rounds)
        rounds += 1
        expected = {(p, o) for p in range(PARTITIONS) for o in range(10 * rounds)}
        wait_for(lambda: {(p, o) for c in everyone for p, o, _ in c.records} == expected, 40,
                 f"{what}: every record so far read", everyone)
        wait_for(lambda: all(c.committed.get(q) == 10 * rounds
                             for c in live for q in c.assignment), 30,
                 f"{what}: the live members committed their share", everyone)

    c = [classic(f"c{i}") for i in range(3)]
    everyone += c
    round_read(c, "three classic members")
    assert group_type(broker.bootstrap, group) == "classic"

    # Online upgrade: one classic member at a time replaced by a consumer-protocol one.
    c[0].stop()
    k0 = consumer("k0")
    everyone.append(k0)
    round_read([c[1], c[2], k0], "two classic members and a consumer one")
    assert group_type(broker.bootstrap, group) == "consumer"
    c[1].stop()
    k1 = consumer("k1")
    c3 = classic("c3")  # a new classic process while the group is mixed (JoinGroup v5)
    everyone += [k1, c3]
    round_read([c[2], c3, k0, k1], "two classic members and two consumer ones")

    # Online downgrade: the consumer-protocol members leave; the classic ones remain.
    k1.stop()
    k0.stop()
    round_read([c[2], c3], "downgraded: two classic members")
    assert group_type(broker.bootstrap, group) == "classic"

    # Offline migration: everyone stops; consumer-protocol members start on the empty group
    # and go on from the committed offsets.
    c[2].stop()
    c3.stop()
    k2, k3 = consumer("k2"), consumer("k3")
    everyone += [k2, k3]
    round_read([k2, k3], "offline: two consumer members on the old group")
    assert group_type(broker.bootstrap, group) == "consumer"
    assert read_twice(everyone) == [], read_twice(everyone)
    for p in (k2, k3):
        p.stop()


@pytest.mark.java
def test_java_classic_and_consumer_members_share_a_group(broker_factory, kafka_tools):
    """Kafka 4.4's Java consumers, two classic (cooperative-sticky) and then one with
    group.protocol=consumer joining them: the group is upgraded, the three share it, and
    when the consumer-protocol member leaves the two classic ones take everything back."""
    broker = broker_factory(**SETTINGS)
    topic, group = new_topic(broker.bootstrap, PARTITIONS), "migrating-java"
    produce(broker.bootstrap, topic, PARTITIONS, 10)

    def member(protocol: str, *extra: str):
        return kafka_tools.spawn(
            VERIFIABLE_CONSUMER, "--bootstrap-server", broker.bootstrap, "--topic", topic,
            "--group-id", group, "--group-protocol", protocol, "--reset-policy", "earliest",
            "--verbose", *extra)

    cooperative = ("--assignment-strategy",
                   "org.apache.kafka.clients.consumer.CooperativeStickyAssignor")
    with member("classic", *cooperative) as j0, member("classic", *cooperative) as j1:
        wait_for(lambda: shared([java_assignment(t) for t in (j0, j1)]), 60,
                 "two classic Java members sharing the topic", [])
        assert group_type(broker.bootstrap, group) == "classic"
        with member("consumer") as j2:
            wait_for(lambda: shared([java_assignment(t) for t in (j0, j1, j2)]), 60,
                     "the consumer-protocol member getting a share", [])
            assert group_type(broker.bootstrap, group) == "consumer"
            produce(broker.bootstrap, topic, PARTITIONS, 10, start=10)
            tools = (j0, j1, j2)

            def read() -> set[tuple[int, int]]:
                return {(e["partition"], e["offset"]) for t in tools
                        for e in java_events(t, "record_data")}

            wait_for(lambda: read() == {(p, o) for p in range(PARTITIONS) for o in range(20)},
                     60, "every record read by the mixed group", [])
        wait_for(lambda: group_type(broker.bootstrap, group) == "classic"
                 and shared([java_assignment(t) for t in (j0, j1)]), 60,
                 "downgraded: the classic members holding everything again", [])
        commits = [e for t in (j0, j1) for e in java_events(t, "offsets_committed")]
        assert commits and all(e["success"] for e in commits), commits[-3:]
