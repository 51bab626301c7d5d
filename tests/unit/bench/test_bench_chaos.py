"""The pure parts of the fault run (bench/chaos.py): its order of faults, the gap figure, and
the split of the queue checker's missing records into lost and unread. The run itself is
tests/e2e/test_chaos.py, on kind."""

from __future__ import annotations

import itertools
import random

import pytest

from bench.chaos import Coverage, Plan, attributed_gaps, judged, longest_gap, schedule
from bench.chaos_faults import BETWEEN, FAULTS
from kafkube.harness.kind.history import read_drain, read_produce
from kafkube.harness.queue_checker import History


def test_every_kind_comes_once_before_any_twice_and_a_seed_repeats_the_order() -> None:
    plan = Plan(minutes=1, faults=20, seed=5, between_every=4)
    first = list(itertools.islice(schedule(plan, random.Random(5)), 30))
    again = list(itertools.islice(schedule(plan, random.Random(5)), 30))
    assert first == again
    proper = [k for k in first if k in FAULTS]
    assert sorted(proper[:len(FAULTS)]) == sorted(FAULTS)
    # A roll or a scale, in turn, after every 4th fault.
    assert [k for k in first if k in BETWEEN][:3] == ["roll", "scale", "roll"]
    assert first[4] == "roll" and first[9] == "scale"


def test_the_longest_gap_is_of_those_beginning_in_the_window() -> None:
    times = {0: [1000, 1100, 1200, 5200, 5300], 1: [1000, 2000, 2100]}
    assert longest_gap(times, 1.15, 1.3) == 4.0  # 1.2 -> 5.2 began in it
    assert longest_gap(times, 5.25, 6.0) == 0.1
    assert longest_gap(times, 0.0, 1.05) == 1.0  # partition 1: 1.0 -> 2.0
    # 1.2 -> 5.2 began more than a second before: the fault before's.
    assert longest_gap(times, 2.5, 6.0) == 0.1
    assert longest_gap({0: []}, 0, 10) == 0


def test_a_stall_is_the_fault_s_it_overlaps_most_never_two_faults() -> None:
    # Fault 1 [10, 20] ends as fault 2 [20.2, 40] starts; partition 0 stalls 19.9 -> 38:
    # fault 2's alone, though it began in fault 1 (and within fault 2's second of slack).
    times = {0: [9000, 9500, 10_000, 12_000, 19_900, 38_000, 38_500],
             1: [9000, 15_000, 16_000, 21_000, 22_000, 39_000]}
    assert attributed_gaps(times, [(10.0, 20.0), (20.2, 40.0)]) == pytest.approx([7.9, 18.1])
    assert attributed_gaps(times, []) == []


def history_of(acks: list[tuple[int, int, int]], drained: list[str]) -> tuple[
        History, list[str], Coverage, object]:
    lines = [f"A {i} {p} {o} {1000 + i}" for i, p, o in acks] + [
        f"D {len(acks)} {len(acks)} 0"]
    history = History()
    produced = read_produce(lines, history)
    read_drain(drained, history)
    return history, lines, Coverage.of(drained), produced


def test_a_record_the_drain_did_not_reach_is_unread_and_one_it_passed_is_lost() -> None:
    acks = [(0, 0, 0), (1, 0, 1), (2, 0, 2), (3, 1, 0), (4, 1, 1)]
    # Partition 0 read to its end without v-1; partition 1 stopped after offset 0 of 2.
    drained = ["R 0 0 v-0", "R 0 1 v-2", "R 1 0 v-3", "D 3 0:3 1:2"]
    history, lines, coverage, produced = history_of(acks, drained)
    assert not coverage.complete()
    verdict = judged(history, produced, coverage, lines)
    assert (verdict["lost"], verdict["unread"]) == (1, 1)
    assert verdict["lost_examples"] == ["v-1"] and verdict["unread_examples"] == ["v-4"]


def test_an_acknowledged_offset_past_the_partitions_end_is_lost() -> None:
    acks = [(0, 0, 0), (1, 0, 1)]
    drained = ["R 0 0 v-0", "D 1 0:1"]
    history, lines, coverage, produced = history_of(acks, drained)
    assert coverage.complete()
    verdict = judged(history, produced, coverage, lines)
    assert (verdict["lost"], verdict["unread"], verdict["out_of_order"]) == (1, 0, 0)


def test_values_out_of_send_order_are_counted() -> None:
    assert Coverage.of(["R 0 0 v-1", "R 0 1 v-0", "R 0 2 v-2", "R 1 0 v-3",
                        "D 4 0:3 1:1"]).out_of_order == 1
