"""Compaction of logs with transactions, on temporary directories with no broker: aborted
data and then markers dropped, each producer's last batch kept, the first unstable offset
never passed, the committed view kept (against tests/support/txn_logs.py's model)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode

from broker.protocol.records import InvalidRecordError, split_batches
from broker.storage.cleaner import clean_log, cleanable_range, execute_plan, plan_cleaning
from broker.storage.log import AbortedTxn, Log
from broker.storage.segment import SWAP_SUFFIX
from broker.storage.txn_index import TxnIndexEntry
from tests.support.txn_logs import (
    NOW,
    Workload,
    compact_config,
    data_batch,
    entries,
    file_entries,
    latest,
    log_bytes,
    marker,
    markers_in,
    produce,
    producer_summary,
    read_committed,
    visible,
)


def test_cleaning_drops_aborted_data_and_then_markers_after_delete_retention(tmp_path: Path):
    log = Log(tmp_path / "t-0", compact_config())
    produce(log, data_batch([(b"k1", b"a")], pid=1, seq=0))  # 0
    marker(log, 1, commit=True)  # 1
    produce(log, data_batch([(b"k1", b"c")], pid=1, seq=1))  # 2
    marker(log, 1, commit=True)  # 3
    produce(log, data_batch([(b"k1", b"bad"), (b"k2", b"bad")], pid=2, seq=0))  # 4-5
    marker(log, 2, commit=False)  # 6
    produce(log, data_batch([(b"k3", b"ok")], pid=2, seq=2))  # 7
    marker(log, 2, commit=True)  # 8
    log.roll()
    produce(log, data_batch([(b"z", b"z")], transactional=False))  # 9
    assert entries(log) == [TxnIndexEntry(2, 4, 6, 7)]

    first = clean_log(log, None, NOW)
    assert first is not None and first.stats.aborted_batches_dropped == 1
    # The aborted k1 hid nothing: the committed k1=c stays; the abort's records are gone.
    assert visible(log) == [(2, b"k1", b"c"), (7, b"k3", b"ok"), (9, b"z", b"z")]
    # Markers whose transactions had records in this pass stay; the abort keeps its entry.
    assert markers_in(log) == [1, 3, 6, 8]
    assert entries(log) == [TxnIndexEntry(2, 4, 6, 7)]
    assert first.tombstone_expiry_ms == NOW + 60_000  # the cleaner comes back for them

    second = clean_log(log, first.end_offset, NOW + 60_000)
    assert second is not None and second.stats.markers_dropped == 0
    assert markers_in(log) == [1, 3, 6, 8]

    third = clean_log(log, first.end_offset, NOW + 60_001)
    assert third is not None and third.stats.markers_dropped == 2
    # Markers of transactions with records left (and each producer's last) stay for good.
    assert markers_in(log) == [3, 8]
    assert entries(log) == [] and file_entries(log) == []
    assert visible(log) == [(2, b"k1", b"c"), (7, b"k3", b"ok"), (9, b"z", b"z")]
    log.close()
    reopened = Log(tmp_path / "t-0", compact_config(), clean_shutdown=False)
    assert reopened.producer_state.ongoing_transactions() == {}
    assert visible(reopened) == visible(log)


def test_cleaning_keeps_each_producers_last_batch_as_an_empty_header(tmp_path: Path):
    directory = tmp_path / "t-0"
    log = Log(directory, compact_config())
    produce(log, data_batch([(b"a", b"1")], pid=42, seq=0, transactional=False))  # 0
    retried = data_batch([(b"a", b"2"), (b"b", b"2")], pid=42, seq=1, transactional=False)
    produce(log, retried)  # 1-2
    produce(log, data_batch([(b"a", b"3"), (b"b", b"3")], transactional=False))  # 3-4
    log.roll()
    produce(log, data_batch([(b"z", b"z")], transactional=False))  # 5

    clean_log(log, None, NOW)
    headers = split_batches(log.segments[0].log_path.read_bytes(), allow_empty=True)
    kept = headers[0]
    assert (kept.base_offset, kept.last_offset_delta, kept.record_count) == (1, 1, 0)
    assert (kept.producer_id, kept.producer_epoch, kept.base_sequence) == (42, 0, 1)
    assert [h.base_offset for h in headers] == [1, 3]
    with pytest.raises(InvalidRecordError):
        split_batches(log.segments[0].log_path.read_bytes())  # a producer may not send one
    assert visible(log) == [(3, b"a", b"3"), (4, b"b", b"3"), (5, b"z", b"z")]
    # A second pass leaves the empty header as it is.
    clean_log(log, log.active_segment.base_offset, NOW)
    assert split_batches(log.segments[0].log_path.read_bytes(), allow_empty=True)[0] == kept
    log.close()

    # After a restart with recovery the retry is still known, and the sequence continues.
    reopened = Log(directory, compact_config(), recovery_point=0, clean_shutdown=False)
    [header] = split_batches(retried)
    duplicate = reopened.producer_state.find_duplicate(header)
    assert duplicate is not None and (duplicate.first_offset, duplicate.last_offset) == (1, 2)
    following = split_batches(data_batch([(b"c", b"1")], pid=42, seq=3, transactional=False))
    assert reopened.producer_state.check(following[0]) is None
    skipping = split_batches(data_batch([(b"c", b"1")], pid=42, seq=4, transactional=False))
    assert reopened.producer_state.check(skipping[0]) == ErrorCode.out_of_order_sequence_number

    # A follower copies the empty header too.
    follower = Log(tmp_path / "f-0", compact_config())
    follower.append_as_follower(log_bytes(reopened))
    assert log_bytes(follower) == log_bytes(reopened)
    assert follower.producer_state.find_duplicate(header) is not None


def test_an_aborted_producers_last_batch_keeps_its_header_and_its_marker(tmp_path: Path):
    log = Log(tmp_path / "t-0", compact_config())
    produce(log, data_batch([(b"a", b"x"), (b"b", b"x")], pid=7, epoch=1, seq=0))  # 0-1
    marker(log, 7, commit=False, epoch=1, coordinator_epoch=2)  # 2
    log.roll()
    produce(log, data_batch([(b"z", b"z")], transactional=False))  # 3
    for now in (NOW, NOW + 10**9, NOW + 2 * 10**9):
        result = clean_log(log, log.active_segment.base_offset if now > NOW else None, now)
        assert result is not None
        assert visible(log) == [(3, b"z", b"z")]
        assert markers_in(log) == [2]
        assert entries(log) == [TxnIndexEntry(7, 0, 2, 3)]
    log.close()
    reopened = Log(tmp_path / "t-0", compact_config(), clean_shutdown=False)
    assert producer_summary(reopened) == {7: (1, 2, -1, 1)}
    assert reopened.collect_aborted_transactions(0, 4) == [AbortedTxn(7, 0)]


def test_cleaning_never_passes_the_first_unstable_offset(tmp_path: Path):
    log = Log(tmp_path / "t-0", compact_config(segment_bytes=300))
    for i in range(12):
        produce(log, data_batch([(b"k", b"%d" % i)], transactional=False))
    open_at = produce(log, data_batch([(b"k", b"open")], pid=1, seq=0)).first_offset
    for i in range(12):
        produce(log, data_batch([(b"k", b"late-%d" % i)], transactional=False))
    log.roll()
    assert len(log.segments) > 5
    holding = log.segments[log._segment_for(open_at)]
    found = cleanable_range(log, None, NOW)
    assert found.first_uncleanable == holding.base_offset
    before = [r for r in visible(log) if r[0] >= holding.base_offset]
    clean_log(log, None, NOW)
    assert [r for r in visible(log) if r[0] >= holding.base_offset] == before
    assert (open_at, b"k", b"open") in visible(log)

    marker(log, 1, commit=True)
    clean_log(log, found.first_uncleanable, NOW)
    values = [r[2] for r in visible(log)]
    assert b"open" not in values and values[-1] == b"late-11"


def test_an_aborted_transaction_whose_marker_is_not_cleanable_still_loses_its_data(
        tmp_path: Path):
    log = Log(tmp_path / "t-0", compact_config())
    produce(log, data_batch([(b"k", b"committed")], transactional=False))  # 0
    produce(log, data_batch([(b"k", b"aborted")], pid=3, seq=0))  # 1
    produce(log, data_batch([(b"x", b"x")], pid=4, seq=0, transactional=False))  # 2
    log.roll()
    marker(log, 3, commit=False)  # 3, in the active segment
    produce(log, data_batch([(b"y", b"y")], pid=3, epoch=1, seq=0))  # 4
    marker(log, 3, commit=True, epoch=1)  # 5
    clean_log(log, None, NOW)
    assert visible(log) == [(0, b"k", b"committed"), (2, b"x", b"x"), (4, b"y", b"y")]
    assert markers_in(log) == [3, 5]
    assert log.collect_aborted_transactions(0, 6) == [AbortedTxn(3, 1)]


def _finished_workload(log: Log, seed: int, steps: int, roll_every: int = 0) -> Workload:
    work = Workload(log, random.Random(seed))
    for _ in range(steps // roll_every if roll_every else 1):
        work.run(roll_every or steps)
        log.roll()
    for pid in list(work.ongoing):
        work.end(pid, commit=pid % 2 == 0)
    log.roll()
    produce(log, data_batch([(b"tail", b"t")], transactional=False))
    return work


def _check_cleaned(cleaned: Log, committed: list) -> None:
    """Cleaning only removes records, never a key's latest committed value, and every
    aborted record is gone even for read_uncommitted consumers."""
    assert set(visible(cleaned)) <= set(committed)
    assert latest(read_committed(cleaned)) == latest(committed)


@pytest.mark.parametrize("seed", [1, 2])
def test_compaction_keeps_the_committed_view(tmp_path: Path, seed: int):
    log = Log(tmp_path / "t-0", compact_config())
    work = _finished_workload(log, seed, 300)
    committed = read_committed(log)
    assert len(committed) < len(visible(log))  # some records were aborted
    assert work.aborted
    checkpoint = None
    for now in (NOW, NOW + 30_000, NOW + 10**6, NOW + 10**7):
        result = clean_log(log, checkpoint, now)
        assert result is not None
        checkpoint = result.end_offset
        _check_cleaned(log, committed)
    # An abort stays indexed only while its producer's last batch, emptied, is left of it.
    assert len(entries(log)) < len(work.aborted)
    headers = split_batches(log_bytes(log), allow_empty=True)
    for entry in entries(log):
        assert [h.record_count for h in headers if h.producer_id == entry.producer_id
                and not h.is_control
                and entry.first_offset <= h.base_offset < entry.last_offset] == [0]
    log.close()
    reopened = Log(tmp_path / "t-0", compact_config(), clean_shutdown=False)
    _check_cleaned(reopened, committed)
    assert reopened.producer_state.ongoing_transactions() == {}


def test_a_swap_interrupted_by_a_crash_rebuilds_its_index(tmp_path: Path):
    directory = tmp_path / "t-0"
    log = Log(directory, compact_config(segment_bytes=1 << 20))
    _finished_workload(log, 4, 200, roll_every=10)  # small segments: a pass merges them
    committed = read_committed(log)
    plan = plan_cleaning(log, cleanable_range(log, None, NOW), NOW)
    assert plan is not None
    staged = execute_plan(plan)
    swapped = next(s for s in staged if s.new is not None and s.new.txn_index.entries)
    assert len(swapped.old) > 1
    swapped.new.change_suffix(SWAP_SUFFIX)
    assert swapped.new.txn_index.path.name.endswith(".txnindex.swap")
    for item in staged:
        if item.new is not None:
            item.new.close()
    log.close()

    reopened = Log(directory, compact_config())
    names = {p.name for p in directory.iterdir()}
    assert not [n for n in names if n.endswith((".swap", ".cleaned", ".tmp"))]
    aborting = [s for s in reopened.segments if s.txn_index.entries]
    assert aborting and names >= {s.txn_index.path.name for s in aborting}
    assert len([n for n in names if n.endswith(".txnindex")]) == len(aborting)
    # The part swapped in is clean, the rest not yet: no aborted record is visible to
    # read_committed, nor any committed one lost.
    seen = read_committed(reopened)
    assert set(seen) <= set(committed) and latest(seen) == latest(committed)
    clean_log(reopened, None, NOW)
    _check_cleaned(reopened, committed)
