"""Scaling plans (kafkube_operator.model.scale): drains that empty the removed brokers, spreads
that fill the new ones to within one replica of the mean, both rack-aware and repeatable;
a scale-down below a topic's replication factor refused with nothing moved."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st

from kafkube_contract.image import ImageView, PartitionState, TopicMetadata
from kafkube_operator.model.scale import (
    DRAINING,
    SCALING_UP,
    cordon_changes,
    drain_moves,
    scale_decision,
    spread_moves,
    throttled_replicas,
)
from tests.support.layouts import placement

TOPIC_ID = "5f0c2e1a-8a8b-4c1e-9b5e-2b7e0c1d2a3b"


def cluster_image(topics: dict[str, list[tuple[int, ...]]],
                  adding: set[str] = frozenset()) -> ImageView:
    return ImageView({name: TopicMetadata(name, TOPIC_ID, {}, tuple(
        PartitionState(r, r, r[0], adding=(r[-1],) if name in adding else ())
        for r in replicas)) for name, replicas in topics.items()})


def racks(n: int, zones: int = 3) -> dict[int, str]:
    return {b: "abc"[b % zones] for b in range(n)}


def apply(image: ImageView, moves: dict) -> ImageView:
    topics = {name: [moves.get((name, i), s.replicas) for i, s in enumerate(t.assignments)]
              for name, t in image.topics.items()}
    return cluster_image(topics)


def cordoned(image: ImageView, *brokers: int) -> ImageView:
    return replace(image, broker_configs={**image.broker_configs, **{
        str(broker): {"cordoned.log.dirs": "*"} for broker in brokers}})


def load(image: ImageView) -> Counter[int]:
    return Counter(b for t in image.topics.values() for s in t.assignments for b in s.replicas)


@given(before=st.integers(3, 6), after=st.integers(3, 6), partitions=st.integers(1, 40))
def test_a_scale_plan_empties_or_fills_brokers_rack_aware_and_repeatably(
        before: int, after: int, partitions: int) -> None:
    image = cluster_image({"t": placement("t", racks(before), partitions, 3)})
    if after < before:
        moves = drain_moves(image, set(range(after, before)), racks(after))
    else:
        moves = spread_moves(image, racks(after))
    assert moves == (drain_moves(image, set(range(after, before)), racks(after))
                     if after < before else spread_moves(image, racks(after)))
    moved = apply(image, moves)
    counts = load(moved)
    assert set(counts) <= set(range(after))
    for state in moved.topics["t"].assignments:
        assert len(set(state.replicas)) == 3
        assert len({racks(after)[b] for b in state.replicas}) == 3  # one replica per zone
    if after > before and after % 3 == 0:
        # Zones of equal size: one replica per zone leaves room for an even spread. (With
        # unequal zones the smaller zones' brokers must hold more, as in Kafka.)
        per_broker = [counts.get(b, 0) for b in range(after)]
        assert max(per_broker) - min(per_broker) <= 1, per_broker


def test_scale_up_waits_for_the_new_brokers_then_spreads_until_balanced() -> None:
    image = cluster_image({"t": placement("t", racks(3), 12, 3)})
    waiting = scale_decision(5, 3, image, racks(3), None)
    assert (waiting.statefulset_replicas, waiting.phase) == (5, SCALING_UP)
    assert waiting.moves == {} and "[3, 4]" in waiting.waiting
    spreading = scale_decision(5, 5, image, racks(5), SCALING_UP)
    assert spreading.moves and spreading.phase == SCALING_UP
    # While the reassignment runs nothing new starts; once done, nothing is left to move.
    running = cluster_image({"t": placement("t", racks(3), 12, 3)}, adding={"t"})
    assert scale_decision(5, 5, running, racks(5), SCALING_UP).moves == {}
    done = scale_decision(5, 5, apply(image, spreading.moves), racks(5), SCALING_UP)
    assert (done.moves, done.phase) == ({}, None)


def test_scale_down_drains_first_then_shrinks() -> None:
    image = cluster_image({"t": placement("t", racks(5), 10, 3)})
    draining = scale_decision(3, 5, image, racks(5), None)
    assert draining.statefulset_replicas == 5 and draining.phase == DRAINING
    assert draining.moves and "[3, 4]" in draining.waiting
    drained = apply(image, draining.moves)
    assert set(load(drained)) == {0, 1, 2}
    # The shrink waits until the cordon of the brokers to remove shows in the image.
    assert scale_decision(3, 5, drained, racks(5), DRAINING).statefulset_replicas == 5
    assert scale_decision(3, 5, cordoned(drained, 3, 4), racks(5),
                          DRAINING).statefulset_replicas == 3


def test_scale_down_below_a_replication_factor_is_refused_and_nothing_moves() -> None:
    image = cluster_image({"orders": placement("orders", racks(3), 6, 3)})
    refused = scale_decision(1, 3, image, racks(3), None)
    assert refused.statefulset_replicas == 3 and refused.moves == {}
    assert "below the replication factor 3 of topic orders" in refused.refused


def test_every_topic_gains_the_new_brokers() -> None:
    image = cluster_image({"big": placement("big", racks(3), 30, 3),
                           "small": placement("small", racks(3), 6, 3)})
    moved = apply(image, spread_moves(image, racks(6)))
    for name in ("big", "small"):
        per_topic = Counter(b for s in moved.topics[name].assignments for b in s.replicas)
        assert set(per_topic) == set(range(6)), (name, per_topic)
        assert max(per_topic.values()) - min(per_topic.values()) <= 1, (name, per_topic)


def test_the_throttle_lists_name_the_serving_and_the_fetching_replicas() -> None:
    image = cluster_image({"t": [(0, 1, 2), (1, 2, 0)], "u": [(2, 0, 1)]})
    lists = throttled_replicas(image, {("t", 0): (3, 1, 2), ("t", 1): (1, 4, 0)})
    assert lists == {"t": {"leader.replication.throttled.replicas": "0:0,0:1,0:2,1:1,1:2,1:0",
                           "follower.replication.throttled.replicas": "0:3,1:4"}}


def test_brokers_being_drained_are_cordoned_until_they_are_gone() -> None:
    """Issue 27, item 2: a topic created during the drain must not land on the brokers it
    empties, so they are cordoned (KIP-1066) from the first drain pass to the shrink, and
    uncordoned once gone (an id that comes back later is a new, usable broker)."""
    image = cluster_image({"t": placement("t", racks(5), 10, 3)})
    draining = scale_decision(3, 5, image, racks(5), None)
    assert draining.cordon == {3, 4}
    waiting = scale_decision(3, 5, apply(image, draining.moves), racks(5), DRAINING)
    assert (waiting.statefulset_replicas, waiting.cordon) == (5, {3, 4})
    assert "cordoning brokers [3, 4]" in waiting.waiting
    shrink = scale_decision(3, 5, cordoned(apply(image, draining.moves), 3, 4), racks(5),
                            DRAINING)
    assert (shrink.statefulset_replicas, shrink.cordon) == (3, {3, 4})
    after = scale_decision(3, 3, apply(image, draining.moves), racks(3), None)
    assert after.cordon == frozenset() and after.moves == {}


def test_the_shrink_waits_for_the_cordon_of_every_removed_broker_with_a_pod() -> None:
    """A removed broker whose Lease looks lapsed may still run and place replicas: while its
    pod exists the shrink waits for its cordon too; one with no pod left is not waited on."""
    image = cluster_image({"t": placement("t", racks(5), 10, 3)})
    drained = apply(image, scale_decision(3, 5, image, racks(5), None).moves)
    half = cordoned(drained, 3)  # broker 4, judged dead, could not be cordoned yet
    judged_dead = {b: r for b, r in racks(5).items() if b != 4}
    waiting = scale_decision(3, 5, half, judged_dead, DRAINING, pods=range(5))
    assert (waiting.statefulset_replicas, waiting.cordon) == (5, {3, 4})
    assert "cordoning brokers [3, 4]" in waiting.waiting
    gone = scale_decision(3, 5, half, judged_dead, DRAINING, pods=range(4))
    assert gone.statefulset_replicas == 3


def test_a_broker_judged_dead_with_a_pod_is_cordoned_and_a_gone_one_is_not() -> None:
    """What the apply pass asks the cluster for (reconcile/cluster_apply.py): the cordon
    goes to every wanted broker that may run, live or with a pod whatever its Lease says,
    so the shrink that waits for it is not stuck; none goes to a broker with neither (it
    could not take it), and an uncordon only to a live broker."""
    wanted = frozenset({3, 4})
    live_0_to_3 = {0, 1, 2, 3}  # broker 4's Lease lapsed; its pod still exists
    cordon, uncordon = cordon_changes(wanted, frozenset(), live_0_to_3, pods={0, 1, 2, 3, 4})
    assert (cordon, uncordon) == ({3, 4}, frozenset())
    cordon, _ = cordon_changes(wanted, frozenset(), live_0_to_3, pods={0, 1, 2, 3})
    assert cordon == {3}  # broker 4 gone altogether
    cordon, _ = cordon_changes(wanted, frozenset({3}), live_0_to_3, pods={0, 1, 2, 3, 4})
    assert cordon == {4}  # only what the image does not show yet
    # The drain over: the cordons lifted on live brokers; a gone one keeps its entry.
    cordon, uncordon = cordon_changes(frozenset(), frozenset({3, 4}), {0, 1, 2, 3}, pods=())
    assert (cordon, uncordon) == (frozenset(), {3})


def test_replicas_left_on_removed_brokers_are_moved_after_the_shrink() -> None:
    """A topic created between the operator's last look and the StatefulSet's shrink (or a
    `kubectl scale statefulset`) leaves replicas on ids that no longer run: the next pass
    drains them onto the brokers left, except a partition with no leader to copy from."""
    image = cluster_image({"t": placement("t", racks(3), 6, 3),
                           "late": [(3, 0, 1), (4, 3, 2)]})
    stranded = scale_decision(3, 3, image, racks(3), None)
    assert stranded.phase == DRAINING and stranded.statefulset_replicas == 3
    assert set(stranded.moves) == {("late", 0), ("late", 1)}
    assert set(load(apply(image, stranded.moves))) == {0, 1, 2}
    offline = ImageView({"gone": TopicMetadata("gone", TOPIC_ID, {}, (
        PartitionState((4,), (4,), -1),))})
    assert scale_decision(3, 3, offline, racks(3), None).moves == {}


def test_a_drain_given_up_finishes_its_moves_then_fills_the_brokers_again() -> None:
    """5 -> 3 -> 5 while the drain moves data: the moves in flight are not cut loose from
    their throttle, and the emptied brokers get replicas back."""
    image = cluster_image({"t": placement("t", racks(5), 10, 3)})
    draining = scale_decision(3, 5, image, racks(5), None)
    drained = apply(image, draining.moves)
    moving = cluster_image({"t": [s.replicas for s in drained.topics["t"].assignments]},
                           adding={"t"})
    waiting = scale_decision(5, 5, moving, racks(5), DRAINING)
    assert (waiting.phase, waiting.moves) == (SCALING_UP, {})
    assert waiting.cordon == frozenset()
    refill = scale_decision(5, 5, drained, racks(5), SCALING_UP)
    assert {3, 4} <= set(load(apply(drained, refill.moves)))
