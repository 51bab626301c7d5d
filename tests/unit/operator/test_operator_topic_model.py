"""Topic resource + cluster image → plan and status (kafkube_operator.model.topic): plans in
counts (the brokers place replicas) that only add, a changed replication factor as a
reassignment; refusals with Kafka's reasons; names for topics found in Kafka."""

from __future__ import annotations

from collections import Counter

import pytest

from kafkube_contract.image import PartitionState, TopicMetadata
from kafkube_operator.model.topic import (
    Placement,
    TopicSpec,
    deleted_through_kafka,
    mirrored_topic,
    resource_name,
    topic_plan,
    topic_status,
)
from tests.support.layouts import placement

NOW = "2026-11-25T12:00:00Z"


def spec(partitions: int = 12, rf: int = 3, config: dict | None = None,
         name: str = "orders") -> TopicSpec:
    return TopicSpec("prod", name, partitions, rf, {k: str(v) for k, v in (config or {}).items()})


def existing(replicas: list[tuple[int, ...]], configs: dict | None = None,
             isr: list[tuple[int, ...]] | None = None) -> TopicMetadata:
    states = tuple(PartitionState(r, (isr or replicas)[i], r[0]) for i, r in enumerate(replicas))
    return TopicMetadata("orders", "5f0c2e1a-8a8b-4c1e-9b5e-2b7e0c1d2a3b", configs or {}, states)


def test_a_new_topic_is_created_with_counts_and_the_brokers_place_it() -> None:
    """CreateTopics(partitions, replication factor), as `kafka-topics --create` sends it: the
    brokers' controller places the replicas, rack-aware and off cordoned brokers."""
    plan = topic_plan(spec(), None, 3)
    assert plan.create and not plan.add_partitions and not plan.refused


def test_a_replication_factor_above_the_brokers_is_refused_and_nothing_is_created() -> None:
    plan = topic_plan(spec(rf=3), None, 2)
    assert plan.empty
    ((reason, message),) = plan.refused
    assert reason == "ReplicationFactorTooLarge"
    assert "replicationFactor 3 is above the 2 live broker(s) of cluster prod" in message


def test_more_partitions_are_a_count_to_add_and_configs_are_diffed() -> None:
    brokers = {0: "a", 1: "b", 2: "c"}
    current = existing(placement("orders", brokers, 6, 3),
                       {"retention.ms": "1000", "cleanup.policy": "compact"})
    plan = topic_plan(spec(12, 3, {"retention.ms": 2000, "segment.bytes": "1048576"}), current,
                      len(brokers))
    assert plan.add_partitions == 6 and not plan.create  # CreatePartitions(12)
    assert plan.set_configs == {"retention.ms": "2000", "segment.bytes": "1048576"}
    assert plan.delete_configs == ["cleanup.policy"]
    assert not plan.refused
    # Applied: nothing left to do.
    done = existing(placement("orders", brokers, 12, 3),
                    {"retention.ms": "2000", "segment.bytes": "1048576"})
    assert topic_plan(spec(12, 3, {"retention.ms": 2000, "segment.bytes": "1048576"}), done,
                      len(brokers)).empty


def test_fewer_partitions_are_refused_with_why() -> None:
    current = existing(placement("orders", {0: None, 1: None, 2: None}, 6, 3))
    plan = topic_plan(spec(3, 3), current, 3)
    assert [r for r, _ in plan.refused] == ["PartitionsDecrease"]
    assert plan.empty


RACKS = {0: "a", 1: "b", 2: "c", 3: "a"}


def cluster(min_isr: int = 1, busy: str | None = None, racks: dict | None = None
            ) -> Placement:
    racks = RACKS if racks is None else racks
    return Placement(racks, Counter({b: 1 for b in racks}), min_isr, busy)


def test_a_changed_replication_factor_is_a_reassignment_of_every_partition() -> None:
    current = existing(placement("orders", {0: "a", 1: "b", 2: "c"}, 3, 1))
    plan = topic_plan(spec(3, 3), current, 4, cluster())
    assert sorted(plan.reassign) == [("orders", 0), ("orders", 1), ("orders", 2)]
    for (_, index), target in plan.reassign.items():
        first = current.assignments[index].replicas[0]
        assert target[0] == first and len(set(target)) == 3  # the leader stays first
        assert len({RACKS[b] for b in target}) == 3  # one per rack
    assert not plan.refused and not plan.empty
    # Down again to 2, keeping the preferred leader.
    three = existing([plan.reassign[("orders", i)] for i in range(3)])
    down = topic_plan(spec(3, 2), three, 4, cluster())
    assert all(len(t) == 2 and t[0] == three.assignments[i].replicas[0]
               for (_, i), t in down.reassign.items())
    assert len(down.reassign) == 3


@pytest.mark.parametrize(("rf", "brokers", "min_isr", "reason"), [
    (4, 3, 1, "ReplicationFactorTooLarge"), (1, 4, 2, "ReplicationFactorBelowMinIsr")])
def test_a_replication_factor_that_cannot_hold_is_refused_with_why(
        rf: int, brokers: int, min_isr: int, reason: str) -> None:
    current = existing(placement("orders", {0: "a", 1: "b", 2: "c"}, 3, 2))
    plan = topic_plan(spec(3, rf), current, brokers, cluster(min_isr))
    assert [r for r, _ in plan.refused] == [reason]
    assert plan.empty


def test_a_replication_factor_change_waits_for_moves_under_way() -> None:
    current = existing(placement("orders", {0: "a", 1: "b", 2: "c"}, 3, 1))
    busy = topic_plan(spec(3, 2), current, 3, cluster(busy="the cluster is scaling"))
    assert busy.empty and busy.waiting == "the cluster is scaling" and not busy.refused
    moving = TopicMetadata(current.name, current.topic_id, {}, (
        PartitionState((0, 1), (0,), 0, adding=(1,)), *current.assignments[1:]))
    plan = topic_plan(spec(3, 2), moving, 3, cluster())
    assert plan.empty and plan.waiting == "1 partition(s) of the topic are being moved"
    status = topic_status(spec(3, 2), moving, 2, [], [], NOW, plan.waiting)
    assert status["reassignment"] == {"targetReplicationFactor": 2, "partitionsDone": 0,
                                      "partitions": 3, "partitionsMoving": 1,
                                      "waiting": plan.waiting}
    (ready, _) = status["conditions"]
    assert (ready["status"], ready["reason"]) == ("False", "Reassigning")
    assert "moving to 2: 0 of 3 partition(s) done" in ready["message"]


def test_status_lists_every_partition_and_counts_the_under_replicated() -> None:
    replicas = [(0, 1, 2), (1, 2, 0), (2, 0, 1)]
    current = existing(replicas, isr=[(0, 1, 2), (1, 2), (2, 0, 1)])
    status = topic_status(spec(3), current, 4, [], [], NOW)
    assert status["underReplicated"] == 1
    assert status["partitions"][1] == {"partition": 1, "leader": 1, "replicas": [1, 2, 0],
                                       "isr": [1, 2]}
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "True" and status["observedGeneration"] == 4
    missing = topic_status(spec(3), None, 1, [("ReplicationFactorTooLarge", "too few")], [],
                           NOW)
    assert [c["status"] for c in missing["conditions"]] == ["False", "True"]


def test_a_topic_with_an_offline_partition_is_not_ready() -> None:
    """A partition with no leader (no in-sync replica alive, none outside elected) holds no
    readable data: the Topic says so instead of Ready."""
    current = existing([(0, 1, 2), (1, 2, 0)])
    offline = TopicMetadata(current.name, current.topic_id, {}, (
        current.assignments[0], PartitionState((1, 2, 0), (1,), -1)))
    status = topic_status(spec(2), offline, 4, [], [], NOW)
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "PartitionsOffline")
    assert "1 offline" in ready["message"]


@pytest.mark.parametrize(("topic", "expected"), [
    ("orders", "orders"), ("orders.v2", "orders.v2"),
    ("Orders_V2", "orders-v2-"), ("__weird__", "weird-")])
def test_topics_found_in_kafka_get_a_kubernetes_name(topic: str, expected: str) -> None:
    name = resource_name(topic)
    assert name.startswith(expected)
    assert resource_name(topic) == name
    if name != topic:
        assert resource_name(topic.upper() + "x") != name


def test_a_mirrored_topic_keeps_what_kafka_has() -> None:
    current = existing([(0, 1), (1, 0)], {"retention.ms": "5"})
    resource = mirrored_topic("prod", "kafka", current)
    assert resource["spec"] == {"cluster": "prod", "topicName": "orders", "partitions": 2,
                                "replicationFactor": 2, "config": {"retention.ms": "5"}}
    assert resource["metadata"]["annotations"] == {"kafkube.io/origin": "kafka"}
    # Its own spec, read back, plans nothing.
    assert topic_plan(TopicSpec.of(resource), current, 2).empty


def test_only_a_seen_mirror_goes_with_its_topic_and_a_users_topic_is_made_again() -> None:
    current = existing([(0, 1)])
    mirror = mirrored_topic("prod", "kafka", current)
    seen = {**mirror, "status": {"topicId": current.topic_id}}
    assert deleted_through_kafka(seen, exists=False)
    assert not deleted_through_kafka(seen, exists=True)
    assert not deleted_through_kafka(mirror, exists=False)  # never seen: not yet in the image
    terminating = {**seen, "metadata": {**seen["metadata"], "deletionTimestamp": NOW}}
    assert not deleted_through_kafka(terminating, exists=False)
    users = {**seen, "metadata": {"name": "orders", "namespace": "kafka"}}
    assert not deleted_through_kafka(users, exists=False)
    assert topic_plan(TopicSpec.of(users), None, 2).create


def test_a_mirror_never_takes_a_name_another_topic_stands_for() -> None:
    """Issue 27, item 7: two clusters in one namespace both have connect-offsets."""
    from kafkube_operator.model.topic import mirror_name

    assert mirror_name("a", "connect-offsets", {}) == "connect-offsets"
    assert mirror_name("a", "connect-offsets",
                       {"connect-offsets": ("a", "connect-offsets")}) == "connect-offsets"
    taken = {"connect-offsets": ("b", "connect-offsets")}
    assert mirror_name("a", "connect-offsets", taken) == "a.connect-offsets"
    taken["a.connect-offsets"] = ("a", "other")  # a user's Topic of that name
    third = mirror_name("a", "connect-offsets", taken)
    assert third.startswith("a.connect-offsets-") and third not in taken


def test_of_two_topics_for_one_kafka_topic_the_first_rules() -> None:
    from kafkube_operator.model.topic import owner_of

    def topic(name: str, created: str, topic_name: str = "orders",
              cluster: str = "prod") -> dict:
        return {"metadata": {"name": name, "creationTimestamp": created},
                "spec": {"cluster": cluster, "topicName": topic_name, "partitions": 1}}

    first, second = topic("orders", "2026-01-01T00:00:00Z"), topic("o2", "2026-01-02T00:00:00Z")
    other = topic("elsewhere", "2025-01-01T00:00:00Z", cluster="dev")
    assert owner_of(first, [first, second, other]) is None
    assert owner_of(second, [first, second, other])["metadata"]["name"] == "orders"
