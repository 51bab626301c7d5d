"""The replication-factor planner (kafkube_operator.model.replication), by its properties over
generated topics and clusters: every partition ends at the factor, keeps its preferred leader,
moves only what it must, in-sync replicas kept when lowering, then one replica per rack when
racks suffice, and the same plan on every run."""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from kafkube_contract.image import PartitionState, TopicMetadata
from kafkube_operator.model.replication import replica_load, replication_moves


@st.composite
def clusters(draw: st.DrawFn) -> tuple[TopicMetadata, dict[int, str | None], int]:
    """A topic on a cluster of 1-7 brokers in 1-4 racks (or none), some of them unable to
    take replicas (dead or cordoned: not in the returned map), and a new factor."""
    brokers = draw(st.integers(1, 7))
    rack_count = draw(st.integers(0, 4))
    every = {b: (f"r{draw(st.integers(0, rack_count - 1))}" if rack_count else None)
             for b in range(brokers)}
    states = []
    for _ in range(draw(st.integers(1, 6))):
        replicas = tuple(draw(st.permutations(range(brokers)))[:draw(st.integers(1, brokers))])
        leader = draw(st.sampled_from(replicas))
        isr = tuple(b for b in replicas if draw(st.booleans()) or b == leader)
        states.append(PartitionState(replicas, isr, leader))
    healthy = {b: r for b, r in every.items() if draw(st.booleans())} or \
        {b: every[b] for b in range(brokers)}
    factor = draw(st.integers(1, len(healthy)))
    return TopicMetadata("t", "5f0c2e1a-8a8b-4c1e-9b5e-2b7e0c1d2a3b", {}, tuple(states)), \
        healthy, factor


@settings(max_examples=400, deadline=None)
@given(clusters())
def test_every_partition_ends_at_the_factor_moving_only_what_it_must(case) -> None:
    topic, racks, factor = case
    load = replica_load({"t": topic})
    moves = replication_moves(topic, factor, racks, Counter(load))
    assert moves == replication_moves(topic, factor, racks, Counter(load))  # stable
    distinct_racks = len(set(racks.values()))
    for index, state in enumerate(topic.assignments):
        current = state.replicas
        target = moves.get(("t", index), current)
        if factor >= len(current):
            assert set(current) <= set(target)  # raising only adds
            assert target[:len(current)] == current
            assert len(set(target)) == len(target) == factor
            assert set(target) - set(current) <= set(racks)  # new ones on healthy brokers
        else:
            assert set(target) <= set(current) and len(target) == factor  # only removes
            assert state.leader in target  # an in-sync replica always stays
            healthy_isr = set(state.isr) & set(racks)
            assert len(set(target) & healthy_isr) >= min(factor - (state.leader not in racks),
                                                         len(healthy_isr))
            if current[0] in healthy_isr and (factor > 1 or current[0] == state.leader) \
                    and target[0] != current[0]:
                # The preferred leader is kept and first, unless its rack stays covered by
                # another replica that had to stay (it went so that the racks spread).
                assert current[0] not in target
                assert racks.get(current[0]) in {racks.get(b) for b in target}
        used = [racks.get(b) for b in target]
        had = {racks.get(b) for b in current}
        # One replica per rack whenever the partition's own healthy, in-sync replicas allow.
        spread = (factor >= len(current) and len(had) == len(current)) or \
            (factor < len(current) and len(had) >= factor and set(current) <= set(racks) \
            and set(current) <= set(state.isr))
        if distinct_racks >= factor and None not in used and spread:
            assert len(set(used)) == factor, (current, target, racks)


def test_lowering_to_one_keeps_the_leader_not_a_lagging_preferred_replica() -> None:
    """The reviewer's case: replicas [1, 2, 3], leader 2, ISR {2, 3}, broker 1 lagging:
    RF 1 must keep broker 2 (dropping it would leave no in-sync replica)."""
    state = PartitionState((1, 2, 3), (2, 3), 2)
    topic = TopicMetadata("t", "5f0c2e1a-8a8b-4c1e-9b5e-2b7e0c1d2a3b", {}, (state,))
    racks = {1: "a", 2: "b", 3: "c"}
    assert replication_moves(topic, 1, racks, replica_load({"t": topic})) == {("t", 0): (2,)}
    # A dead broker's replica goes before a healthy in-sync one.
    assert replication_moves(topic, 2, {2: "b", 3: "c"}, replica_load({"t": topic})) == {
        ("t", 0): (2, 3)}


def test_lowering_keeps_one_replica_per_rack_before_the_preferred_leader() -> None:
    """CI's case: replicas [0, 1, 2] in racks r1, r1, r0, leader 1, RF 2. Keeping both the
    leader and the preferred leader 0 would put both replicas in rack r1; broker 0 goes."""
    state = PartitionState((0, 1, 2), (0, 1, 2), 1)
    topic = TopicMetadata("t", "5f0c2e1a-8a8b-4c1e-9b5e-2b7e0c1d2a3b", {}, (state,))
    racks = {0: "r1", 1: "r1", 2: "r0"}
    assert replication_moves(topic, 2, racks, replica_load({"t": topic})) == {
        ("t", 0): (1, 2)}


def test_a_partition_without_a_leader_is_not_planned() -> None:
    state = PartitionState((1, 2, 3), (3,), -1)
    topic = TopicMetadata("t", "5f0c2e1a-8a8b-4c1e-9b5e-2b7e0c1d2a3b", {}, (state,))
    assert replication_moves(topic, 1, {1: None, 2: None, 3: None},
                             replica_load({"t": topic})) == {}


@given(st.integers(2, 6), st.integers(1, 3))
def test_added_replicas_spread_over_the_least_loaded_brokers(brokers: int, rf: int) -> None:
    """From one replica each, raising ``rf`` on ``brokers * 2`` partitions leaves every
    broker within one replica of every other."""
    rf = min(rf, brokers)
    states = tuple(PartitionState((p % brokers,), (p % brokers,), p % brokers)
                   for p in range(brokers * 2))
    topic = TopicMetadata("t", "5f0c2e1a-8a8b-4c1e-9b5e-2b7e0c1d2a3b", {}, states)
    load = replica_load({"t": topic})
    replication_moves(topic, rf, dict.fromkeys(range(brokers)), load)
    assert max(load.values()) - min(load.values()) <= 1, load
    assert sum(load.values()) == brokers * 2 * rf
