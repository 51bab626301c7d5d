"""The queue checker against synthetic histories: each anomaly is found, a clean one passes."""

from __future__ import annotations

import threading

import pytest

from kafkube.harness.queue_checker import History, Read, Send, check_queue


def clean_history() -> tuple[list[Send], dict[int, list[tuple[int, str]]]]:
    """Two partitions, two producers, one failed send that never landed."""
    sends = [
        Send("a0", 0, 0, process="a", seq=0),
        Send("b0", 1, 0, process="b", seq=0),
        Send("a1", 0, 1, process="a", seq=1),
        Send("b1", 1, 1, process="b", seq=1),
        Send("a2", 0, None, acked=False, process="a", seq=2),
        Send("b2", 0, 2, process="b", seq=2),
    ]
    final = {0: [(0, "a0"), (1, "a1"), (2, "b2")], 1: [(0, "b0"), (1, "b1")]}
    return sends, final


def test_clean_history_is_ok():
    sends, final = clean_history()
    report = check_queue(sends, final, [Read(0, [(1, "a1"), (2, "b2")], "c1")])
    assert report.ok(idempotent=True), report.summary()
    assert (report.attempted, report.acked, report.consumed, report.reads) == (6, 5, 5, 2)
    assert report.unacked_seen == 0


def test_unacked_value_that_landed_is_not_an_anomaly():
    sends, final = clean_history()
    final[0].append((3, "a2"))  # the failed send was written after all (indeterminate)
    report = check_queue(sends, final)
    assert report.ok(idempotent=True), report.summary()
    assert report.unacked_seen == 1


def test_lost_acked_write():
    sends, final = clean_history()
    final[1] = [(0, "b0")]  # b1 acked at 1/1, gone
    report = check_queue(sends, final)
    assert [v for v, _ in report.lost] == ["b1"]
    assert not report.ok(idempotent=False)
    assert "lost" in report.anomalies(idempotent=False)


def test_lost_write_that_a_consumer_had_read():
    sends, final = clean_history()
    final[0].append((3, "a2"))
    poll = Read(0, [(2, "b2"), (3, "a2")], "c1")
    truncated = {0: final[0][:3], 1: final[1]}  # a2 was read, then truncated away
    assert check_queue(sends, final, [poll]).ok(idempotent=True)
    report = check_queue(sends, truncated, [poll])
    assert [v for v, _ in report.lost] == ["a2"]
    assert "not acked" in report.lost[0][1]


def test_duplicate_fails_only_the_idempotent_case():
    sends, final = clean_history()
    final[0].append((3, "a1"))  # a retried batch written twice
    report = check_queue(sends, final)
    assert report.duplicates == [("a1", [(0, 1), (0, 3)])]
    assert report.ok(idempotent=False), report.summary()
    assert not report.ok(idempotent=True)
    assert list(report.anomalies(idempotent=True)) == ["duplicates"]


def test_duplicate_across_partitions():
    sends, final = clean_history()
    final[1].append((2, "a0"))
    report = check_queue(sends, final)
    assert report.duplicates == [("a0", [(0, 0), (1, 2)])]


def test_inconsistent_offsets_across_reads():
    sends, final = clean_history()
    # A consumer saw offset 2 holding x during the run (never sent by anyone: unexpected too)
    # and offset 1 holding b2; the final log disagrees at both.
    poll = Read(0, [(1, "b2"), (2, "x")], "c1")
    report = check_queue([*sends, Send("x", 0, None, acked=False)], final, [poll])
    assert [(p, o) for p, o, _ in report.inconsistent] == [(0, 1), (0, 2)]
    assert report.inconsistent[0][2] == ["a1", "b2"]
    assert not report.ok(idempotent=False)


def test_inconsistent_offsets_between_ack_and_read():
    sends, final = clean_history()
    final[0][1] = (1, "zz")  # offset 0/1 acked for a1 but holds zz; a1 gone
    report = check_queue([*sends, Send("zz", 0, None, acked=False)], final)
    assert report.inconsistent == [(0, 1, ["a1", "zz"])]
    assert [v for v, _ in report.lost] == ["a1"]


def test_acked_offset_differs_from_the_consumed_offset():
    sends, _ = clean_history()
    # Same values, but a1 and b2 swapped places: the acks said 0/1 and 0/2.
    final = {0: [(0, "a0"), (1, "b2"), (2, "a1")], 1: [(0, "b0"), (1, "b1")]}
    report = check_queue(sends, final)
    assert report.misplaced == [("a1", (0, 1), [(0, 2)]), ("b2", (0, 2), [(0, 1)])]
    assert len(report.inconsistent) == 2
    assert not report.ok(idempotent=False)


def test_misplaced_without_a_conflicting_value():
    # The ack names an offset nobody read; the value sits elsewhere.
    sends = [Send("v", 0, 7)]
    report = check_queue(sends, {0: [(0, "v")]})
    assert report.misplaced == [("v", (0, 7), [(0, 0)])]
    assert not report.inconsistent
    assert not report.ok(idempotent=False)


def test_nonmonotonic_offsets_in_a_read():
    sends, final = clean_history()
    final[1] = [(1, "b1"), (0, "b0")]
    report = check_queue(sends, final)
    assert report.nonmonotonic == [("final", 1, 1, 0)]
    poll = Read(0, [(0, "a0"), (1, "a1"), (1, "a1")], "c1")  # redelivered offset
    report = check_queue(sends, clean_history()[1], [poll])
    assert report.nonmonotonic == [("c1", 0, 1, 1)]
    assert not report.ok(idempotent=False)


def test_skipped_offsets():
    sends, final = clean_history()
    final[0] = [(0, "a0"), (2, "b2")]  # a1 missing, and a hole at 1
    report = check_queue(sends, final)
    assert report.skipped == [("final", 0, 0, 2)]
    assert [v for v, _ in report.lost] == ["a1"]
    # A hole alone (e.g. an unacked value lost from the middle) is still an anomaly ...
    sends2 = [Send("u", 0, None, acked=False), Send("w", 0, 1)]
    assert check_queue(sends2, {0: [(1, "w")]}).ok(idempotent=True)  # read starts at 1: fine
    report = check_queue([Send("u0", 0, 0), *sends2], {0: [(0, "u0"), (2, "w")]})
    assert report.skipped == [("final", 0, 0, 2)]
    assert report.misplaced  # w acked at 1, read at 2
    # ... unless the log may have holes (compaction, transactions).
    report = check_queue([Send("u0", 0, 0), Send("w", 0, 2)], {0: [(0, "u0"), (2, "w")]},
                         contiguous=False)
    assert report.ok(idempotent=True), report.summary()


def test_value_never_sent():
    sends, final = clean_history()
    final[1].append((2, "ghost"))
    report = check_queue(sends, final)
    assert report.unexpected == [("ghost", [(1, 2)])]
    assert not report.ok(idempotent=False)


def test_nonmonotonic_send_fails_only_the_idempotent_case():
    sends = [Send("a0", 0, 1, process="a", seq=0), Send("a1", 0, 0, process="a", seq=1)]
    final = {0: [(0, "a1"), (1, "a0")]}
    report = check_queue(sends, final)
    assert report.nonmonotonic_send == [("a", 0, (0, 1), (1, 0))]
    assert report.ok(idempotent=False), report.summary()
    assert list(report.anomalies(idempotent=True)) == ["nonmonotonic_send"]


def test_values_must_be_unique():
    with pytest.raises(ValueError, match="sent twice"):
        check_queue([Send("a", 0, 0), Send("a", 0, 1)], {})


def test_summary_names_every_anomaly():
    sends, final = clean_history()
    final[1].append((2, "ghost"))
    text = check_queue(sends, final).summary()
    assert "unexpected=1 e.g. [('ghost', [(1, 2)])]" in text
    assert "lost=0" in text and "duplicates=0" in text


def test_history_recorder_from_threads():
    history = History()

    def producer(name: str) -> None:
        for seq in range(200):
            value = f"{name}-{seq}".encode()
            history.attempt(value, partition=seq % 2, process=name, seq=seq)
            if seq % 10 == 9:
                history.fail(value, "timed out")
            else:
                history.ack(value, seq % 2, -1)  # offsets are fixed up below

    threads = [threading.Thread(target=producer, args=(n,)) for n in ("p0", "p1")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    counts = history.counts()
    assert counts == {"attempted": 400, "acked": 360, "failed": 40, "polled": 0}
    assert history.acked_count(0) + history.acked_count(1) == 360

    # Rebuild with real offsets: the recorder's log order per partition.
    history = History()
    logs: dict[int, list[tuple[int, bytes]]] = {0: [], 1: []}
    for seq in range(100):
        for name in ("p0", "p1"):
            value = f"{name}-{seq}".encode()
            partition = seq % 2
            history.attempt(value, partition=partition, process=name, seq=seq)
            offset = len(logs[partition])
            logs[partition].append((offset, value))
            history.ack(value, partition, offset)
            history.read("c1", partition, offset, value)
    for partition, records in logs.items():
        history.set_final(partition, records)
    report = history.check()
    assert report.ok(idempotent=True), report.summary()
    assert (report.acked, report.consumed, report.reads) == (200, 200, 200)

    history.attempt(b"p0-0")
    with pytest.raises(ValueError, match="attempted twice"):
        history.check()


def test_history_tolerates_an_ack_recorded_before_its_attempt():
    history = History()
    history.ack("v", 0, 0)
    history.attempt("v", partition=0, process="p", seq=0)
    history.set_final(0, [(0, "v")])
    report = history.check()
    assert report.ok(idempotent=True) and report.acked == 1, report.summary()
