"""The load balancer (kafkube_operator.model.balance), by its properties over generated
clusters: the hard rack goal always holds, goals are met within their tolerances when a
placement that meets them exists, every move improves a violated goal (minimal), the same
input gives the same proposal whatever its order (stable), the bound holds, and a balanced
cluster gets no move."""

from __future__ import annotations

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from kafkube_operator.model.balance import (
    BYTES_IN,
    DISK,
    EPSILON,
    GOALS,
    RACK,
    REMOVED,
    BalanceInput,
    Broker,
    PartitionLoad,
    Tolerances,
    plan_balance,
)

CAPACITY = 10_000


@st.composite
def clusters(draw: st.DrawFn, racks: bool = True, max_rf: int = 3) -> BalanceInput:
    """1-6 brokers in up to 4 racks (or none), up to 24 partitions of RF 1..3, sizes and
    rates as drawn."""
    n = draw(st.integers(1, 6))
    rack_count = draw(st.integers(0, 4)) if racks else 0
    brokers = {b: Broker(f"r{draw(st.integers(0, rack_count - 1))}" if rack_count else None,
                         CAPACITY) for b in range(n)}
    placement, load = {}, {}
    for i in range(draw(st.integers(0, 24))):
        rf = draw(st.integers(1, min(n, max_rf)))
        placement[("t", i)] = tuple(draw(st.permutations(range(n)))[:rf])
        load[("t", i)] = PartitionLoad(draw(st.integers(0, 3000)),
                                       float(draw(st.integers(0, 50_000))),
                                       float(draw(st.integers(0, 50_000))))
    return BalanceInput(placement, load, brokers, max_moves=draw(st.integers(0, 40)))


def _rack_ok(data: BalanceInput, replicas: tuple[int, ...]) -> bool:
    racks = {data.brokers[b].rack for b in data.brokers}
    if None in racks:
        return True
    used = [data.brokers[b].rack for b in replicas]
    return len(racks) < len(replicas) or len(set(used)) == len(used)


@settings(max_examples=120, deadline=None)
@given(clusters())
def test_moves_are_bounded_stable_minimal_and_keep_racks(data: BalanceInput) -> None:
    proposal = plan_balance(data)
    # Stable: the same proposal again, and from the mappings in another order.
    assert plan_balance(data) == proposal
    reordered = BalanceInput(dict(reversed(list(data.placement.items()))),
                             dict(reversed(list(data.load.items()))),
                             dict(reversed(list(data.brokers.items()))),
                             max_moves=data.max_moves)
    assert plan_balance(reordered).moves == proposal.moves
    # Bounded.
    assert len(proposal.steps) <= data.max_moves
    assert proposal.replica_moves <= data.max_moves
    for p, replicas in proposal.moves.items():
        assert len(replicas) == len(data.placement[p]) and len(set(replicas)) == len(replicas)
        assert set(replicas) <= set(data.brokers)
    # The hard goal: never a partition that met it put in a rack twice, and never worse.
    rack = next(g for g in proposal.goals if g.goal == RACK)
    assert rack.violation_after <= rack.violation_before
    for p, replicas in proposal.moves.items():
        if _rack_ok(data, data.placement[p]):
            assert _rack_ok(data, replicas), (data.placement[p], replicas)
    # Minimal: each step improved a goal that was violated when it was taken, and left the
    # goals above it no worse (so the vector of violations fell at every step).
    goals = {g.goal: g for g in proposal.goals}
    for step in proposal.steps:
        assert step.violation > EPSILON and step.improvement > EPSILON, step
    violations = [goals[g].violation_before for g in GOALS if g in goals]
    after = [goals[g].violation_after for g in GOALS if g in goals]
    assert [round(v, 6) for v in after] <= [round(v, 6) for v in violations]
    # Nothing to do when every goal is met.
    if all(g.met_before for g in proposal.goals):
        assert proposal.empty and not proposal.steps
    # A balanced cluster stays: planning from the result proposes nothing more when the
    # search ended with every goal met.
    if proposal.stopped is None:
        placement = {**data.placement, **proposal.moves}
        again = plan_balance(BalanceInput(placement, data.load, data.brokers,
                                          max_moves=data.max_moves))
        assert again.empty, again.steps


@st.composite
def fillable(draw: st.DrawFn) -> BalanceInput:
    """Disk feasible: 2-5 brokers without racks, equal capacities, RF 1, many partitions each
    at most half the tolerance band, all of it on a few brokers to begin with."""
    n = draw(st.integers(2, 5))
    brokers = {b: Broker(None, CAPACITY) for b in range(n)}
    tol = Tolerances(disk=0.1)
    full = draw(st.integers(0, n - 2))
    placement, load = {}, {}
    for i in range(draw(st.integers(1, 40))):
        placement[("t", i)] = (draw(st.integers(0, full)),)
        load[("t", i)] = PartitionLoad(draw(st.integers(1, int(tol.disk * CAPACITY / 2))))
    return BalanceInput(placement, load, brokers, tol, max_moves=200)


@settings(max_examples=150, deadline=None)
@given(fillable())
def test_disk_usage_ends_within_its_tolerance_when_it_can(data: BalanceInput) -> None:
    proposal = plan_balance(data)
    fill = sum(data.load[p].size for p in data.placement) / (CAPACITY * len(data.brokers))
    for broker in proposal.after:
        assert abs(broker.disk - fill) <= data.tolerances.disk + EPSILON, proposal.after
    assert next(g for g in proposal.goals if g.goal == DISK).met_after
    assert proposal.leadership_changes == 0  # RF 1: every move is a copy


@st.composite
def leadable(draw: st.DrawFn) -> BalanceInput:
    """Bytes-in feasible by leadership alone: every broker holds every partition (disk and
    counts balanced already), each partition's rate within half the band (20% of the mean
    each way), so some assignment of leaders meets it. (13 partitions of 1,000 B/s on 4
    brokers cannot: one broker leads 4, 23% above the mean.)"""
    n = draw(st.integers(2, 4))
    brokers = {b: Broker(None, CAPACITY) for b in range(n)}
    placement, load = {}, {}
    for i in range(draw(st.integers(n * 3, 60))):
        first = draw(st.integers(0, min(1, n - 1)))  # leaders piled on brokers 0 and 1
        placement[("t", i)] = (first, *[b for b in range(n) if b != first])
        load[("t", i)] = PartitionLoad(100, float(draw(st.integers(1000, 3000))))
    rates = [partition.bytes_in for partition in load.values()]
    assume(max(rates) <= 0.2 * sum(rates) / n)
    return BalanceInput(placement, load, brokers, Tolerances(bytes_in=0.2, min_rate=1.0),
                        max_moves=200)


@settings(max_examples=100, deadline=None)
@given(leadable())
def test_leader_bytes_in_balances_by_leadership_changes_only(data: BalanceInput) -> None:
    proposal = plan_balance(data)
    goal = next(g for g in proposal.goals if g.goal == BYTES_IN)
    assert goal.met_after, (goal, proposal.after)
    assert proposal.replica_moves == 0 and proposal.data_to_move == 0
    for p, replicas in proposal.moves.items():
        assert set(replicas) == set(data.placement[p])


@settings(max_examples=100, deadline=None)
@given(clusters(racks=False))
def test_removed_brokers_are_emptied(data: BalanceInput) -> None:
    if len(data.brokers) < 2:
        return
    removed = max(data.brokers)
    rf = max((len(r) for r in data.placement.values()), default=1)
    if rf >= len(data.brokers):
        return  # no placement without the removed broker
    proposal = plan_balance(BalanceInput(data.placement, data.load, data.brokers,
                                         max_moves=500, remove=[removed]))
    assert next(g for g in proposal.goals if g.goal == REMOVED).met_after
    placement = {**data.placement, **proposal.moves}
    assert all(removed not in r for r in placement.values())


def test_pinned_partitions_and_the_add_brokers_mode_limit_the_moves() -> None:
    brokers = {b: Broker(None, 1000) for b in range(3)}
    placement = {("t", i): (0,) for i in range(6)}
    load = {p: PartitionLoad(100) for p in placement}
    proposal = plan_balance(BalanceInput(placement, load, brokers, only_onto=[2],
                                         pinned=[("t", 0)]))
    assert proposal.moves and all(r == (2,) for r in proposal.moves.values())
    assert ("t", 0) not in proposal.moves
    assert plan_balance(BalanceInput(placement, load, brokers, max_moves=0)).stopped == \
        "maxMovesPerProposal (0) reached"
