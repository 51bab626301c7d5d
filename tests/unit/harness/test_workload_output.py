"""The e2e workload's output read into the queue checker: an output that lost its head (the
kubelet rotated the pod's log; `kubectl logs` serves the newest file only) is refused, not
judged: the records of the missing head would otherwise count as lost."""

from __future__ import annotations

import pytest

from kafkube.harness.kind.history import IncompleteOutput, read_drain, read_produce
from kafkube.harness.queue_checker import History

ACKS = [(i, i % 2, i // 2) for i in range(10)]  # record i acknowledged at partition, offset
PRODUCED = [f"A {i} {p} {o} {1000 + i}" for i, p, o in ACKS] + ["D 10 10 0"]
DRAINED = [f"R {p} {o} v-{i}" for i, p, o in sorted(ACKS, key=lambda a: a[1:])] + [
    "D 10 0:5 1:5"]


def test_whole_outputs_are_judged_and_nothing_is_lost() -> None:
    history = History()
    produced = read_produce(PRODUCED, history)
    assert read_drain(DRAINED, history) == 10
    report = history.check()
    assert (produced.acked, report.ok(idempotent=True), report.lost) == (10, True, [])


def test_a_producer_output_without_its_head_is_refused() -> None:
    with pytest.raises(IncompleteOutput, match=r"reported 10 acknowledged .* holds 4"):
        read_produce(PRODUCED[6:], History())


def test_a_drain_output_without_its_head_is_refused() -> None:
    history = History()
    read_produce(PRODUCED, history)
    with pytest.raises(IncompleteOutput, match="reported 10 records, its output holds 3"):
        read_drain(DRAINED[7:], history)


def test_failures_in_flight_at_the_end_have_no_line_of_their_own() -> None:
    # D counts 2 failed: one reported by an F line, one still in flight when the pod ended.
    lines = [*PRODUCED[:8], "F 8 _MSG_TIMED_OUT", "D 10 8 2"]
    produced = read_produce(lines, History())
    assert (produced.acked, produced.failed) == (8, 2)
