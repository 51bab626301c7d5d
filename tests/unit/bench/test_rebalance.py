"""`bench rebalance`'s arithmetic: when a group counts as balanced, the join time and the
unowned partition-seconds replayed from rebalance callbacks, and the longest gap in a
partition's reads. The figures hang on these, and a live run cannot show them wrong."""

from __future__ import annotations

import pytest

from bench.rebalance import Change, balanced, longest_gap, replay


def test_balanced_needs_disjoint_cover_with_floor_or_ceiling_each() -> None:
    assert balanced({"a": {0, 1}, "b": {2}}, 3)
    assert not balanced({"a": {0, 1, 2}, "b": set()}, 3)  # covered, not even
    assert not balanced({"a": {0, 1}, "b": {1}}, 3)  # 2 is nobody's, 1 twice
    assert not balanced({}, 3)


def test_replay_times_the_last_move_to_balance_and_sums_unowned_time() -> None:
    changes = [Change(0.0, "a", (0, 1, 2, 3), True),  # before the join: a owns all
               Change(10.0, "a", (2, 3), False),  # the newcomer b joined at 9.0
               Change(11.5, "b", (2,), True),
               Change(12.0, "b", (3,), True)]
    seconds, unowned = replay(changes, ["a", "b"], 4, start=9.0)
    assert seconds == pytest.approx(3.0)
    assert unowned == pytest.approx(1.5 + 2.0)


def test_replay_says_none_when_the_end_is_not_balanced() -> None:
    changes = [Change(0.0, "a", (0, 1), True), Change(2.0, "a", (1,), False)]
    assert replay(changes, ["a", "b"], 2, start=1.0)[0] is None


def test_longest_gap_counts_from_the_last_read_before_the_window_to_its_end() -> None:
    times = [1.0, 2.0, 2.1, 5.0]
    assert longest_gap(times, 2.05, 6.0) == pytest.approx(2.9)  # 2.1 -> 5.0
    assert longest_gap(times, 1.5, 9.0) == pytest.approx(4.0)  # 5.0 -> the end
    assert longest_gap([], 3.0, 4.0) == pytest.approx(1.0)
