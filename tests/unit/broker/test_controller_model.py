"""Unit tests for the controller's pure decisions: replica placement and leader rebalance.

No broker, no I/O: inputs are plain mappings and ClusterImage values. The two fixed layouts
are the expectations of Kafka's own AdminTest / AdminRackAwareTest, so a drift from Kafka's
placement shows up here.
"""

from __future__ import annotations

import random
import uuid
from collections import Counter
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.cluster.image import ClusterImage
from broker.controller.elections import elect_preferred, start_reassignment, step_reassignment
from broker.controller.placement import PlacementError, assign_replicas, rack_alternated_brokers
from kafkube_contract.image import NO_LEADER, PartitionState, TopicMetadata
from kafkube_contract.leadership import leader_imbalance, preferred_leader_moves

# -- placement -------------------------------------------------------------------------------

KAFKA_RACKS = {0: "rack1", 1: "rack3", 2: "rack3", 3: "rack2", 4: "rack2", 5: "rack1"}


def no_racks(*ids: int) -> dict[int, str | None]:
    return dict.fromkeys(ids)


@st.composite
def unracked(draw: st.DrawFn) -> tuple[dict[int, str | None], int, int, int]:
    """Broker ids (not necessarily contiguous), partitions, replication factor, seed."""
    ids = draw(st.sets(st.integers(0, 1000), min_size=1, max_size=12))
    rf = draw(st.integers(1, len(ids)))
    partitions = draw(st.integers(0, 60))
    return dict.fromkeys(ids), partitions, rf, draw(st.integers(0, 2**32))


@st.composite
def racked(draw: st.DrawFn) -> tuple[dict[int, str | None], int, int, int]:
    ids = draw(st.sets(st.integers(0, 1000), min_size=1, max_size=12))
    rack_names = draw(st.integers(1, 5))
    brokers: dict[int, str | None] = {
        b: f"rack-{draw(st.integers(0, rack_names - 1))}" for b in sorted(ids)
    }
    rf = draw(st.integers(1, len(ids)))
    partitions = draw(st.integers(0, 60))
    return brokers, partitions, rf, draw(st.integers(0, 2**32))


def test_rack_unaware_matches_kafka_layout() -> None:
    layout = assign_replicas(no_racks(0, 1, 2, 3, 4), 10, 3, random.Random(), fixed_start_index=0)
    assert layout == [
        (0, 1, 2), (1, 2, 3), (2, 3, 4), (3, 4, 0), (4, 0, 1),
        (0, 2, 3), (1, 3, 4), (2, 4, 0), (3, 0, 1), (4, 1, 2),
    ]


def test_rack_alternated_broker_list_matches_kafka() -> None:
    assert rack_alternated_brokers(KAFKA_RACKS) == (0, 3, 1, 5, 4, 2)
    without_5 = {b: r for b, r in KAFKA_RACKS.items() if b != 5}
    assert rack_alternated_brokers(without_5) == (0, 3, 1, 4, 2)


def test_rack_aware_matches_kafka_layout() -> None:
    layout = assign_replicas(KAFKA_RACKS, 7, 3, random.Random(), fixed_start_index=0)
    assert layout == [
        (0, 3, 1), (3, 1, 5), (1, 5, 4), (5, 4, 2), (4, 2, 0), (2, 0, 3), (0, 4, 2),
    ]


def test_broker_ids_are_sorted_not_taken_in_mapping_order() -> None:
    rng = random.Random()
    shuffled = assign_replicas(no_racks(4, 2, 0, 3, 1), 10, 3, rng, fixed_start_index=0)
    assert shuffled == assign_replicas(no_racks(0, 1, 2, 3, 4), 10, 3, rng, fixed_start_index=0)


def test_new_partitions_continue_the_stripe() -> None:
    brokers = no_racks(0, 1, 2, 3, 4)
    rng = random.Random()
    whole = assign_replicas(brokers, 10, 3, rng, fixed_start_index=2)
    first = assign_replicas(brokers, 4, 3, rng, fixed_start_index=2)
    rest = assign_replicas(brokers, 6, 3, rng, start_partition=4, fixed_start_index=2)
    assert first + rest == whole


def test_single_broker() -> None:
    assert assign_replicas(no_racks(7), 3, 1, random.Random(1)) == [(7,), (7,), (7,)]


def test_zero_partitions() -> None:
    assert assign_replicas(no_racks(0, 1), 0, 2, random.Random(1)) == []


def test_replication_factor_above_broker_count() -> None:
    with pytest.raises(PlacementError) as err:
        assign_replicas(no_racks(0, 1, 2), 1, 4, random.Random())
    assert err.value.message == (
        "Unable to replicate the partition 4 time(s): The target replication factor of 4 "
        "cannot be reached because only 3 broker(s) are registered."
    )
    assert str(err.value) == err.value.message


@pytest.mark.parametrize("rf", [0, -1])
def test_replication_factor_below_one(rf: int) -> None:
    with pytest.raises(PlacementError, match="replication factor must be positive"):
        assign_replicas(no_racks(0, 1, 2), 1, rf, random.Random())


def test_no_brokers() -> None:
    with pytest.raises(PlacementError, match="Unable to replicate the partition 1 time"):
        assign_replicas({}, 1, 1, random.Random())


def test_some_brokers_without_rack() -> None:
    with pytest.raises(PlacementError) as err:
        assign_replicas({0: "a", 1: None, 2: "b"}, 3, 2, random.Random())
    assert err.value.message == (
        "Not all brokers have rack information for replica rack aware assignment."
    )


@pytest.mark.parametrize(
    "kwargs", [{"partitions": -1}, {"start_partition": -1}, {"fixed_start_index": -1}]
)
def test_negative_arguments_are_bugs(kwargs: dict[str, int]) -> None:
    args = {"partitions": 1, **kwargs}
    with pytest.raises(ValueError):
        assign_replicas(no_racks(0, 1), replication_factor=1, rng=random.Random(), **args)


def test_balance_is_per_lap_of_brokers() -> None:
    """Kafka's placement balances whole laps; a partial lap can be off by more than one.

    4 brokers, 2 partitions, rf 2: 4 replicas over 4 brokers, yet Kafka gives (0,1),(1,2).
    """
    layout = assign_replicas(no_racks(0, 1, 2, 3), 2, 2, random.Random(), fixed_start_index=0)
    assert layout == [(0, 1), (1, 2)]


@settings(max_examples=200, deadline=None)
@given(unracked() | racked())
def test_every_partition_has_rf_distinct_live_replicas(
    case: tuple[dict[int, str | None], int, int, int],
) -> None:
    brokers, partitions, rf, seed = case
    layout = assign_replicas(brokers, partitions, rf, random.Random(seed))
    assert len(layout) == partitions
    for replicas in layout:
        assert len(replicas) == rf
        assert len(set(replicas)) == rf
        assert set(replicas) <= brokers.keys()


@settings(max_examples=200, deadline=None)
@given(unracked() | racked(), st.integers(0, 50))
def test_leaders_are_spread_evenly(
    case: tuple[dict[int, str | None], int, int, int], start_partition: int
) -> None:
    """Leaders go round-robin, so any count of partitions differs by at most one per broker."""
    brokers, partitions, rf, seed = case
    layout = assign_replicas(brokers, partitions, rf, random.Random(seed), start_partition)
    leaders = Counter(replicas[0] for replicas in layout)
    counts = [leaders[b] for b in brokers]
    assert max(counts) - min(counts) <= 1
    if partitions % len(brokers) == 0:
        assert set(counts) == {partitions // len(brokers)}


@settings(max_examples=200, deadline=None)
@given(racked())
def test_rack_aware_spans_as_many_racks_as_possible(
    case: tuple[dict[int, str | None], int, int, int],
) -> None:
    brokers, partitions, rf, seed = case
    racks = len(set(brokers.values()))
    for replicas in assign_replicas(brokers, partitions, rf, random.Random(seed)):
        assert len({brokers[b] for b in replicas}) == min(rf, racks)


@settings(max_examples=200, deadline=None)
@given(unracked(), st.integers(0, 5), st.integers(1, 4))
def test_replicas_balanced_over_whole_laps(
    case: tuple[dict[int, str | None], int, int, int], start_lap: int, laps: int
) -> None:
    """Over whole laps of brokers every broker holds exactly partitions * rf / n replicas."""
    brokers, _, rf, seed = case
    n = len(brokers)
    layout = assign_replicas(brokers, laps * n, rf, random.Random(seed), start_lap * n)
    held = Counter(b for replicas in layout for b in replicas)
    assert {held[b] for b in brokers} == {laps * rf}


@settings(max_examples=200, deadline=None)
@given(unracked())
def test_replicas_per_broker_differ_by_at_most_rf(
    case: tuple[dict[int, str | None], int, int, int],
) -> None:
    brokers, partitions, rf, seed = case
    held = Counter(
        b for replicas in assign_replicas(brokers, partitions, rf, random.Random(seed))
        for b in replicas
    )
    counts = [held[b] for b in brokers]
    assert max(counts) - min(counts) <= rf


@settings(max_examples=100, deadline=None)
@given(unracked() | racked())
def test_seeded_rng_is_deterministic(case: tuple[dict[int, str | None], int, int, int]) -> None:
    brokers, partitions, rf, seed = case
    first = assign_replicas(brokers, partitions, rf, random.Random(seed))
    assert assign_replicas(brokers, partitions, rf, random.Random(seed)) == first


def test_fixed_start_index_does_not_consume_rng() -> None:
    rng = random.Random(5)
    assign_replicas(no_racks(0, 1, 2), 3, 2, rng, fixed_start_index=1)
    assert rng.random() == random.Random(5).random()


# -- rebalance -------------------------------------------------------------------------------


def image_of(**topics: list[PartitionState]) -> ClusterImage:
    image = ClusterImage()
    for name, states in topics.items():
        image = image.with_topic(TopicMetadata(name, str(uuid.uuid4()), {}, tuple(states)))
    return image


def led(
    replicas: tuple[int, ...],
    leader: int,
    isr: tuple[int, ...] | None = None,
    **extra: tuple[int, ...],
) -> PartitionState:
    return PartitionState(replicas, replicas if isr is None else isr, leader, 3, 5, **extra)


def broker_2_restarted() -> ClusterImage:
    """Three brokers, six partitions; broker 2 came back and leads nothing."""
    return image_of(
        orders=[led((0, 1, 2), 0), led((1, 2, 0), 1), led((2, 0, 1), 0)],
        events=[led((0, 2, 1), 0), led((1, 0, 2), 1), led((2, 1, 0), 1)],
    )


def test_imbalance_of_broker_that_lost_all_leaderships() -> None:
    assert leader_imbalance(broker_2_restarted()) == {0: 0.0, 1: 0.0, 2: 100.0}


def test_moves_for_broker_that_lost_all_leaderships() -> None:
    moves = preferred_leader_moves(broker_2_restarted(), {0, 1, 2}, 10)
    assert moves == [("events", 2), ("orders", 2)]


def test_applying_moves_removes_the_imbalance() -> None:
    image = broker_2_restarted()
    for topic, index in preferred_leader_moves(image, {0, 1, 2}, 10):
        state = image.partition(topic, index)
        assert state is not None
        image = image.with_partition(topic, index, elect_preferred(state))
    assert leader_imbalance(image) == {0: 0.0, 1: 0.0, 2: 0.0}
    assert image.leaders() == {0: 2, 1: 2, 2: 2}
    assert preferred_leader_moves(image, {0, 1, 2}, 0) == []


def ten_preferred_by_0(off_preferred: int) -> ClusterImage:
    states = [led((0, 1), 1 if i < off_preferred else 0) for i in range(10)]
    return image_of(t=states)


def test_ratio_equal_to_threshold_does_not_move() -> None:
    image = ten_preferred_by_0(1)
    assert leader_imbalance(image) == {0: 10.0}
    assert preferred_leader_moves(image, {0, 1}, 10) == []


def test_ratio_above_threshold_moves() -> None:
    assert preferred_leader_moves(ten_preferred_by_0(1), {0, 1}, 9) == [("t", 0)]
    assert preferred_leader_moves(ten_preferred_by_0(2), {0, 1}, 10) == [("t", 0), ("t", 1)]


def test_preferred_not_in_isr_does_not_move() -> None:
    image = image_of(t=[led((2, 0), 0, isr=(0,)), led((2, 0), 0)])
    assert preferred_leader_moves(image, {0, 2}, 10) == [("t", 1)]


def test_preferred_not_live_does_not_move() -> None:
    assert preferred_leader_moves(broker_2_restarted(), {0, 1}, 10) == []


def test_partitions_under_reassignment_are_skipped() -> None:
    image = image_of(t=[
        led((2, 0, 1), 0, adding=(1,)),
        led((2, 0, 1), 0, removing=(1,)),
        led((2, 0), 0),
    ])
    assert leader_imbalance(image) == {2: 100.0}
    assert preferred_leader_moves(image, {0, 1, 2}, 10) == [("t", 2)]


def test_leaderless_partition_counts_as_imbalanced() -> None:
    image = image_of(t=[led((0, 1), NO_LEADER), led((0, 1), 0)])
    assert leader_imbalance(image) == {0: 50.0}
    assert preferred_leader_moves(image, {0, 1}, 10) == [("t", 0)]


def test_empty_cluster() -> None:
    empty = image_of(t=[PartitionState((), (), NO_LEADER)])
    assert leader_imbalance(empty) == {}
    assert preferred_leader_moves(empty, {0}, 10) == []


def test_elect_preferred_bumps_epochs_by_one() -> None:
    state = led((2, 0, 1), 0)
    elected = elect_preferred(state)
    assert elected.leader == 2
    assert elected.leader_epoch == state.leader_epoch + 1
    assert elected.partition_epoch == state.partition_epoch + 1
    assert (elected.replicas, elected.isr) == (state.replicas, state.isr)


def test_elect_preferred_outside_isr_is_refused() -> None:
    with pytest.raises(ValueError, match="not in the ISR"):
        elect_preferred(led((2, 0, 1), 0, isr=(0, 1)))


def test_a_reassignment_that_would_leave_no_in_sync_replica_is_not_finished() -> None:
    """Replicas [1, 2, 3] moving to [1]: broker 1 never caught up (ISR {2, 3}). Finishing
    would drop every replica with the acknowledged records; the move waits instead (a
    second reassignment, or broker 1 joining the ISR, ends it)."""
    state = start_reassignment(PartitionState((1, 2, 3), (2, 3), 2), (1,))
    assert step_reassignment(state, {1, 2, 3}) == state
    caught_up = step_reassignment(replace(state, isr=(1, 2, 3)), {1, 2, 3})
    assert (caught_up.replicas, caught_up.isr, caught_up.removing) == ((1,), (1,), ())
