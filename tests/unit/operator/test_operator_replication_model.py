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
    """A topic on a cluster of 1-7 brokers in 1-4 racks (or none), and a new factor."""
    brokers = draw(st.integers(1, 7))
    rack_count = draw(st.integers(0, 4))
    racks = {b: (f"r{draw(st.integers(0, rack_count - 1))}" if rack_count else None)
             for b in range(brokers)}
    states = []
    for _ in range(draw(st.integers(1, 6))):
        replicas = tuple(draw(st.permutations(range(brokers)))[:draw(st.integers(1, brokers))])
        isr = tuple(b for b in replicas if draw(st.booleans()) or b == replicas[0])
        states.append(PartitionState(replicas, isr, replicas[0]))
    factor = draw(st.integers(1, brokers))
    return TopicMetadata("t", "5f0c2e1a-8a8b-4c1e-9b5e-2b7e0c1d2a3b", {}, tuple(states)), \
        racks, factor


@settings(max_examples=300, deadline=None)
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
        assert len(target) == factor and len(set(target)) == factor
        assert target[0] == current[0]  # the preferred leader stays, and first
        if factor >= len(current):
            assert set(current) <= set(target)  # raising only adds
        else:
            assert set(target) <= set(current)  # lowering only removes
            in_sync = [b for b in current if b in state.isr]
            assert len(set(target) & set(state.isr)) >= min(factor, len(in_sync))
        used = {racks[b] for b in target}
        had = {racks[b] for b in current}
        # One replica per rack whenever the partition's own replicas allow it (keeping
        # in-sync replicas comes first when lowering).
        spread = (factor >= len(current) and len(had) == len(current)) or \
            (factor < len(current) and len(had) >= factor and set(current) <= set(state.isr))
        if distinct_racks >= factor and None not in used and spread:
            assert len(used) == factor, (current, target, racks)


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
