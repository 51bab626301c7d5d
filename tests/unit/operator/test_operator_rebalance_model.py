"""A KafkaRebalance as values (kafkube_operator.model.rebalance and the rate window of
reconcile/load.py): its spec read with defaults, the planner's input built from the image,
DescribeLogDirs and the counters, the proposal's status (a golden file), staleness and
progress of an approved proposal, and rates from two readings of the brokers' counters."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from kafkube_contract.image import ImageView, PartitionState, TopicMetadata
from kafkube_operator.model.balance import GOALS, plan_balance
from kafkube_operator.model.rebalance import (
    AUTO_APPROVAL,
    NOT_READY,
    READY,
    AutoSpec,
    LogDirs,
    RebalanceSpec,
    auto_rebalance,
    auto_trigger,
    balance_input,
    counter_rates,
    disk_capacity,
    progress,
    proposal_status,
    rebalance_status,
    stale,
    stored_moves,
)
from kafkube_operator.reconcile.load import MIN_WINDOW_S, RateWindow, parse_counters
from tests.support.golden import assert_golden

GOLDEN = Path(__file__).parent / "golden"
TOPIC_ID = "5f0c2e1a-8a8b-4c1e-9b5e-2b7e0c1d2a3b"
MIB = 1024 * 1024


def _image(placement: dict[int, tuple[int, ...]], **states: PartitionState) -> ImageView:
    return ImageView({"orders": TopicMetadata("orders", TOPIC_ID, {}, tuple(
        states.get(f"p{i}", PartitionState(r, r, r[0])) for i, r in sorted(placement.items())))})


PLACEMENT = {0: (0, 1), 1: (0, 2), 2: (0, 1), 3: (0, 2), 4: (1, 2), 5: (2, 1)}
SIZES = {("orders", i): (30 if i < 4 else 5) * MIB for i in PLACEMENT}


def _log_dirs() -> dict[int, LogDirs]:
    return {b: LogDirs(10 * 1024 * MIB, {p: s for p, s in SIZES.items()
                                         if b in PLACEMENT[p[1]]}) for b in range(3)}


def test_the_spec_is_read_with_strimzi_like_defaults() -> None:
    spec = RebalanceSpec.of({"spec": {"cluster": "c"}})
    assert (spec.mode, spec.goals, spec.max_moves, spec.throttle) == ("full", GOALS, 50, None)
    spec = RebalanceSpec.of({"spec": {
        "cluster": "c", "mode": "remove-brokers", "brokers": [4, 3],
        "goals": ["ReplicaCount", "DiskUsage"], "tolerances": {"diskUsage": 0.05},
        "maxMovesPerProposal": 7, "throttleBytesPerSecond": 4096}})
    assert spec.brokers == (3, 4) and spec.goals == ("DiskUsage", "ReplicaCount")
    assert spec.tolerances.disk == 0.05 and spec.max_moves == 7 and spec.throttle == 4096


def test_capacity_is_the_claim_where_the_disk_is_larger_or_unknown() -> None:
    assert disk_capacity(100 * MIB, 10 * MIB) == 10 * MIB
    assert disk_capacity(5 * MIB, 10 * MIB) == 5 * MIB
    assert disk_capacity(-1, 10 * MIB) == 10 * MIB
    assert disk_capacity(7, None) == 7


def test_a_proposal_and_its_status() -> None:
    image = _image(PLACEMENT, p5=PartitionState((2, 1), (2, 1), 2, adding=(1,)))
    spec = RebalanceSpec.of({"spec": {"cluster": "c", "maxMovesPerProposal": 10}})
    data = balance_input(spec, image, {0: "a", 1: "b", 2: "c"}, _log_dirs(), 300 * MIB,
                         {("orders", 0): (50_000.0, 120_000.0)})
    assert data.pinned == [("orders", 5)]  # being moved: counted, not moved
    assert data.brokers[0].capacity == 300 * MIB
    assert data.load[("orders", 0)].size == 30 * MIB
    proposal = plan_balance(data)
    assert not proposal.empty and ("orders", 5) not in proposal.moves
    shown = proposal_status(proposal)
    assert_golden(GOLDEN / "rebalance" / "proposal.yaml",
                  yaml.safe_dump(shown, sort_keys=False))
    # What the status keeps is what gets executed: the moves, from and to.
    moves = stored_moves({"proposal": shown})
    assert {p: to for p, (_, to) in moves.items()} == proposal.moves
    assert stale(moves, image) == []
    moved = _image({**PLACEMENT, 0: (2, 1)})
    assert stale(moves, moved) == ([("orders", 0)] if ("orders", 0) in moves else [])


def test_progress_counts_partitions_at_their_new_replicas_and_the_leaders_to_elect() -> None:
    moves = {("orders", 0): ((0, 1), (2, 1)), ("orders", 1): ((0, 2), (2, 0))}
    during = _image({0: (2, 1, 0), 1: (0, 2)},
                    p0=PartitionState((2, 1, 0), (1, 0), 1, adding=(2,), removing=(0,)))
    assert progress(moves, during).as_status() == {"partitions": 2, "partitionsDone": 0,
                                                   "partitionsMoving": 2}
    after = _image({0: (2, 1), 1: (2, 0)}, p1=PartitionState((2, 0), (2, 0), 0))
    done = progress(moves, after)
    assert done.finished and done.unelected == (("orders", 1),)


def test_the_status_keeps_its_fields_and_shows_a_warning_when_not_ready() -> None:
    previous = {"state": READY, "proposal": {"partitions": 1}, "conditions": [
        {"type": READY, "status": "True", "lastTransitionTime": "t0"}]}
    status = rebalance_status(READY, 3, "Rebalanced", "done", previous, "t1")
    assert status["proposal"] == {"partitions": 1} and status["observedGeneration"] == 3
    assert status["conditions"][0]["lastTransitionTime"] == "t0"
    status = rebalance_status(NOT_READY, 3, "ClusterNotFound", "no cluster", previous, "t1")
    assert [c["type"] for c in status["conditions"]] == [NOT_READY, "Warning"]


METRICS = """# HELP kafkube_partition_leader_bytes_in_total Bytes produced
# TYPE kafkube_partition_leader_bytes_in_total counter
kafkube_partition_leader_bytes_in_total{topic="orders",partition="0"} 1000.0
kafkube_partition_leader_bytes_in_total{topic="orders",partition="1"} 0.0
kafkube_partition_leader_bytes_out_total{topic="orders",partition="0"} 4096.0
kafkube_partition_leader_bytes_in_created{topic="orders",partition="0"} 1.7e9
kafka_log_size_bytes{topic="orders",partition="0"} 123.0
"""


def test_counters_are_parsed_and_turned_into_rates_across_leader_changes() -> None:
    assert parse_counters(METRICS) == {("orders", 0): (1000, 4096), ("orders", 1): (0, 0)}
    then = {0: {("orders", 0): (1000, 0)}, 1: {("orders", 0): (50, 0)}}
    # Leadership went from broker 0 to broker 1; broker 2 restarted (its counter reset).
    now = {0: {("orders", 0): (1500, 0)}, 1: {("orders", 0): (550, 100)},
           2: {("orders", 1): (20, 0)}}
    then[2] = {("orders", 1): (9999, 0)}
    assert counter_rates(then, now, 10.0) == {("orders", 0): (100.0, 10.0),
                                               ("orders", 1): (2.0, 0.0)}


def test_the_rate_window_waits_for_its_minimum_length() -> None:
    window = RateWindow()
    reading = {0: {("orders", 0): (0, 0)}}
    assert window.add(100.0, reading) == (None, 0.0)
    rates, seconds = window.add(100.0 + MIN_WINDOW_S / 2, reading)
    assert rates is None and seconds == pytest.approx(MIN_WINDOW_S / 2)
    rates, seconds = window.add(100.0 + MIN_WINDOW_S, {0: {("orders", 0): (500, 0)}})
    assert seconds == MIN_WINDOW_S and rates == {("orders", 0): (500 / MIN_WINDOW_S, 0.0)}


def test_the_automatic_mode_starts_one_rebalance_beyond_its_thresholds() -> None:
    assert not AutoSpec.of({"spec": {}}).enabled
    auto = AutoSpec.of({"spec": {"rebalance": {"auto": {
        "enabled": True, "thresholds": {"diskUsage": 0.3}, "maxMovesPerProposal": 9}}}})
    assert auto.enabled and auto.thresholds.disk == 0.3 and auto.thresholds.bytes_in == 0.5
    assert auto_trigger({"DiskUsage": 0.0, "ReplicaCount": 3.0}, None) is None  # not watched
    assert auto_trigger({"DiskUsage": 0.05}, None) == \
        "DiskUsage beyond the thresholds of spec.rebalance.auto"
    assert auto_trigger({"DiskUsage": 0.05}, "manual") is None  # one at a time
    cluster = {"metadata": {"name": "c", "namespace": "ns", "uid": "u"}}
    made = auto_rebalance(cluster, auto, {"kind": "KafkaCluster", "uid": "u"})
    assert made["metadata"]["name"] == "c-auto-rebalance"
    assert made["metadata"]["annotations"] == {AUTO_APPROVAL: "true"}
    assert made["spec"] == {"cluster": "c", "maxMovesPerProposal": 9}
    assert RebalanceSpec.of(made).tolerances.disk == 0.1  # tighter than the threshold
