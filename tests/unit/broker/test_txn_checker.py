"""The transactional checker against synthetic histories: a clean one passes (partial views
while reading, unknown outcomes either way), and each rule fails a history that breaks it."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from kafkube.harness.txn_checker import (
    Drained,
    Outcome,
    Poll,
    Txn,
    TxnHistory,
    TxnReport,
    Write,
    check_transactions,
    value_of,
)

C, A, U = Outcome.COMMITTED, Outcome.ABORTED, Outcome.UNKNOWN


def txn(name: str, outcome: Outcome, *placed: tuple[int, int | None]) -> Txn:
    """A transaction whose i-th record goes to ``placed[i] = (partition, offset)``."""
    return Txn(name, tuple(Write(p, value_of(name, i, len(placed)), o)
                           for i, (p, o) in enumerate(placed)), outcome, "p0")


def v(name: str, index: int, count: int = 2) -> str:
    return value_of(name, index, count)


def clean() -> tuple[list[Txn], dict[int, Drained]]:
    """Partition 0: t1[0] at 0, aborted a1[0] at 1, t2[0] at 3 (markers between);
    partition 1: t1[1] at 0, a1[1] at 1, t2[1] at 3; u1 (unknown) committed whole at 5 and
    5, u2 (unknown) aborted and never delivered."""
    txns = [txn("t1", C, (0, 0), (1, 0)), txn("a1", A, (0, 1), (1, 1)),
            txn("t2", C, (0, 3), (1, 3)), txn("u1", U, (0, 5), (1, 5)),
            txn("u2", U, (0, None), (1, None))]
    final = {0: Drained([(0, v("t1", 0)), (3, v("t2", 0)), (5, v("u1", 0))], end=7, reached=7),
             1: Drained([(0, v("t1", 1)), (3, v("t2", 1)), (5, v("u1", 1))], end=7, reached=7)}
    return txns, final


def only(report: TxnReport, *names: str) -> None:
    """Exactly the named anomalies are found."""
    found = set(report.anomalies())
    assert found == set(names), report.summary()


def test_a_clean_history_passes_with_partial_views_while_reading() -> None:
    txns, final = clean()
    polls = [  # t2 seen in partition 0 but "not yet" in partition 1: allowed while reading
        Poll("c0", 0, [(0, v("t1", 0)), (3, v("t2", 0))], start=0),
        Poll("c0", 1, [(0, v("t1", 1))], start=0),
        Poll("c1", 1, [(3, v("t2", 1))], start=2),  # a session begun at offset 2
    ]
    report = check_transactions(txns, final, polls)
    assert report.ok(), report.summary()
    assert report.transactions == {"committed": 2, "aborted": 1, "unknown": 2}
    assert (report.unknown_committed, report.unknown_absent) == (1, 1)
    assert (report.records_written, report.records_committed) == (10, 4)
    assert (report.records_delivered, report.aborted_delivered) == (8, 2)
    assert (report.final_records, report.polled) == (6, 4)


@pytest.mark.parametrize("where", ["poll", "final"])
def test_a_record_of_an_aborted_transaction_read_is_an_aborted_read(where: str) -> None:
    txns, final = clean()
    polls = []
    if where == "poll":
        polls = [Poll("c0", 0, [(0, v("t1", 0)), (1, v("a1", 0))], start=0)]
    else:
        final[1] = Drained([(0, v("t1", 1)), (1, v("a1", 1)), (3, v("t2", 1)),
                            (5, v("u1", 1))], 7, 7)
    report = check_transactions(txns, final, polls)
    only(report, "aborted_reads")
    session = "c0" if where == "poll" else "final"
    assert report.aborted_reads == [
        (session, *(((0, 1, v("a1", 0))) if where == "poll" else (1, 1, v("a1", 1))))]


def test_a_committed_transaction_seen_in_part_and_missing_the_rest_is_torn_and_lost() -> None:
    txns, final = clean()
    final[1] = Drained([(0, v("t1", 1)), (5, v("u1", 1))], 7, 7)  # t2[1] gone
    report = check_transactions(txns, final)
    only(report, "torn", "lost")
    assert report.torn == [("t2", "committed", [v("t2", 0)], [v("t2", 1)])]
    assert [value for value, _ in report.lost] == [v("t2", 1)]
    assert "read past its offset 3" in report.lost[0][1]


def test_an_unknown_transaction_found_in_part_is_torn() -> None:
    txns, final = clean()
    final[1] = Drained([(0, v("t1", 1)), (3, v("t2", 1))], 7, 7)  # u1[1] gone, u1[0] there
    report = check_transactions(txns, final)
    only(report, "torn")  # never acknowledged nor read by a poll: not lost, but torn
    assert report.torn == [("u1", "unknown", [v("u1", 0)], [v("u1", 1)])]
    # Read by a poll before it vanished: known written, so lost as well.
    report = check_transactions(txns, final, [Poll("c0", 1, [(5, v("u1", 1))], start=4)])
    only(report, "torn", "lost")


def test_an_unknown_transaction_absent_everywhere_is_fine_seen_only_while_polling_is_not(
) -> None:
    txns, final = clean()
    final = {p: Drained([r for r in d.records if not r[1].startswith("u1")], 7, 7)
             for p, d in final.items()}
    report = check_transactions(txns, final)
    assert report.ok(), report.summary()
    assert report.unknown_absent == 2
    report = check_transactions(txns, final, [Poll("c0", 0, [(5, v("u1", 0))], start=4)])
    only(report, "torn", "lost")


def test_a_committed_transaction_missing_whole_is_lost_not_torn() -> None:
    txns, final = clean()
    final = {p: Drained([r for r in d.records if not r[1].startswith("t2")], 7, 7)
             for p, d in final.items()}
    report = check_transactions(txns, final)
    only(report, "lost")
    assert sorted(value for value, _ in report.lost) == [v("t2", 0), v("t2", 1)]


def test_a_record_the_drain_did_not_reach_is_unread_one_it_passed_is_lost() -> None:
    txns, final = clean()
    # Partition 1's drain stopped at offset 2 of 7: t2[1] (offset 3) and u1[1] not reached.
    final[1] = Drained([(0, v("t1", 1))], end=7, reached=2)
    report = check_transactions(txns, final)
    only(report, "unread")
    assert sorted(value for value, _ in report.unread) == [v("t2", 1), v("u1", 1)]
    assert "reached 2 of 7" in report.unread[0][1]
    assert report.unknown_committed == 0  # not judged whole while part of it is unread
    # Stopped at 4 instead: t2[1] at offset 3 was passed over, so it is lost.
    final[1] = Drained([(0, v("t1", 1))], end=7, reached=4)
    report = check_transactions(txns, final)
    only(report, "lost", "torn", "unread")
    assert [value for value, _ in report.lost] == [v("t2", 1)]
    # A partition not drained at all: unread, never fine.
    del final[1]
    only(check_transactions(txns, final), "unread")


def test_a_committed_record_without_an_offset_is_lost_only_after_a_complete_drain() -> None:
    txns = [txn("t1", C, (0, 0), (1, None))]
    assert set(check_transactions(txns, {0: Drained([(0, v("t1", 0))], 2, 2),
                                         1: Drained([], 2, 1)}).anomalies()) == {"unread"}
    report = check_transactions(txns, {0: Drained([(0, v("t1", 0))], 2, 2),
                                       1: Drained([], 2, 2)})
    only(report, "lost", "torn")
    assert "ends at 2" in report.lost[0][1]


def test_a_value_at_two_offsets_is_a_duplicate() -> None:
    txns, final = clean()
    final[0] = Drained([*final[0].records, (6, v("t1", 0))], 7, 7)
    report = check_transactions(txns, final)
    only(report, "duplicates")
    assert report.duplicates == [(v("t1", 0), [(0, 0), (0, 6)])]
    # A poll reading it at another offset than the final read: a duplicate as well.
    txns, final = clean()
    report = check_transactions(txns, final, [Poll("c0", 0, [(2, v("t1", 0))], start=2)])
    assert "duplicates" in report.anomalies()


def test_a_session_reading_backwards_or_twice_is_nonmonotonic() -> None:
    txns, final = clean()
    backwards = Poll("c0", 0, [(3, v("t2", 0)), (0, v("t1", 0))], start=3)
    report = check_transactions(txns, final, [backwards])
    only(report, "nonmonotonic")
    assert report.nonmonotonic == [("c0", 0, 3, 0)]
    twice = Poll("c0", 0, [(0, v("t1", 0)), (0, v("t1", 0))], start=0)
    only(check_transactions(txns, final, [twice]), "nonmonotonic")
    # Two sessions reading the same record is no anomaly.
    again = [Poll("c0", 0, [(0, v("t1", 0))], 0), Poll("c1", 0, [(0, v("t1", 0))], 0)]
    assert check_transactions(txns, final, again).ok()


def test_a_session_passing_a_committed_record_by_skipped_it() -> None:
    txns, final = clean()
    passed = Poll("c0", 0, [(0, v("t1", 0)), (5, v("u1", 0))], start=0)  # t2[0] at 3
    report = check_transactions(txns, final, [passed])
    only(report, "skipped")
    assert report.skipped == [("c0", 0, 0, 5, 3)]
    # From its start: began at 0, first read at 3, t1[0] at 0 passed by.
    late = Poll("c0", 0, [(3, v("t2", 0))], start=0)
    assert check_transactions(txns, final, [late]).skipped == [("c0", 0, -1, 3, 0)]
    # Holes the final read has too (markers, the aborted a1) are no skip.
    holes = Poll("c0", 1, [(0, v("t1", 1)), (3, v("t2", 1)), (5, v("u1", 1))], start=0)
    assert check_transactions(txns, final, [holes]).ok()


def test_one_offset_with_two_values_is_inconsistent() -> None:
    txns, final = clean()
    txns[2] = txn("t2", C, (0, 3), (1, 1))  # its report said offset 1, a1[1]'s
    report = check_transactions(txns, final)
    only(report, "inconsistent", "misplaced")
    assert report.inconsistent == [(1, 1, sorted([v("a1", 1), v("t2", 1)]))]
    txns, final = clean()
    read = Poll("c0", 0, [(3, v("t1", 1))], start=3)  # a value where t2[0] is
    assert {"inconsistent", "duplicates"} <= set(check_transactions(txns, final,
                                                                     [read]).anomalies())


def test_a_record_found_elsewhere_than_its_delivery_report_said_is_misplaced() -> None:
    txns, final = clean()
    txns[0] = txn("t1", C, (0, 0), (1, 2))  # its report said offset 2; it is at 0
    report = check_transactions(txns, final)
    only(report, "misplaced")
    assert report.misplaced == [(v("t1", 1), (1, 2), [(1, 0)])]


def test_a_value_nobody_wrote_is_unexpected() -> None:
    txns, final = clean()
    final[0] = Drained([*final[0].records, (6, "stranger")], 7, 7)
    report = check_transactions(txns, final)
    only(report, "unexpected")
    assert report.unexpected == [("stranger", [(0, 6)])]


def test_values_must_be_unique() -> None:
    with pytest.raises(ValueError, match="written twice"):
        check_transactions([txn("t1", C, (0, 0)), Txn("t9", (Write(0, v("t1", 0, 1)),), C)],
                           {})
    with pytest.raises(AssertionError):
        value_of("a/b", 0, 1)


def test_the_recorder_builds_the_history_from_threads_and_callbacks(tmp_path: Path) -> None:
    history = TxnHistory()

    def producer(n: int) -> None:
        for k in range(50):
            name = f"p{n}.{k}"
            history.begin(name, f"p{n}")
            for i, partition in enumerate((0, 1)):
                value = value_of(name, i, 2)
                history.write(name, partition, value)
                history.delivered(value, 100 * n + k)  # as a delivery callback would
            history.end(name, C if k % 2 else A, ["note"] if k == 0 else [])

    threads = [threading.Thread(target=producer, args=(n,)) for n in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    history.begin("open", "p9")
    history.write("open", 0, value_of("open", 0, 1))
    assert history.ended("p1") == {"aborted": 25, "committed": 25}
    times = history.commit_times()
    assert sorted(times) == ["p0", "p1", "p2"] and len(times["p1"]) == 25
    assert times["p1"] == sorted(times["p1"]) and abs(times["p1"][0] / 1000 - time.time()) < 60
    assert history.ended() == {"aborted": 75, "committed": 75}
    txns = {t.name: t for t in history.transactions()}
    assert len(txns) == 151
    assert txns["open"].outcome is U and txns["open"].notes == ("never ended",)
    assert txns["p2.7"].writes == (Write(0, value_of("p2.7", 0, 2), 207),
                                   Write(1, value_of("p2.7", 1, 2), 207))
    assert txns["p0.0"].notes == ("note",)
    history.session("c0", 0, 0)
    history.read("c0", 0, 207, value_of("p2.7", 0, 2))
    assert history.polls() == [Poll("c0", 0, [(207, value_of("p2.7", 0, 2))], 0)]
    history.set_final(0, Drained([], end=300, reached=0))
    report = history.check()  # partition 0 not read to its end, 1 not at all: all unread
    assert len(report.unread) == 150 and not report.lost and not report.torn
    history.dump(tmp_path / "history.json")
    dumped = json.loads((tmp_path / "history.json").read_text())
    assert len(dumped["transactions"]) == 151 and dumped["final"]["0"]["end"] == 300
    assert dumped["polls"][0]["records"] == [[207, value_of("p2.7", 0, 2)]]
