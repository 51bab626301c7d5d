"""Transactions in the log layer, on temporary directories with no broker: markers, producer
state, the aborted-transaction index, reloads, truncation and follower copies.

Time is controlled by the ``now_ms`` the cleaner functions take, never by sleeping. A model
(``Workload``, tests/support/txn_logs.py) says independently which transactions are open
and which aborts the index must hold, with which last stable offsets.
"""

from __future__ import annotations

import logging
import os
import random
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode

from broker.protocol.batch_codec import Record, encode_batch, read_records
from broker.protocol.records import ATTR_CONTROL, ATTR_TRANSACTIONAL, parse_header, split_batches
from broker.storage.log import AbortedTxn, Log
from broker.storage.txn_index import ENTRY_SIZE, TxnIndexEntry, read_marker
from tests.support.txn_logs import (
    TS,
    Workload,
    brute_force,
    config,
    data_batch,
    entries,
    file_entries,
    log_bytes,
    marker,
    produce,
    producer_summary,
    state_of,
)

# -- markers and producer state ------------------------------------------------------------


def test_commit_and_abort_markers_end_transactions_and_index_aborts(tmp_path: Path):
    log = Log(tmp_path / "t-0", config(segment_bytes=1 << 20))
    assert log.first_unstable_offset is None
    produce(log, data_batch([(b"a", b"1")] * 3, pid=1, seq=0))  # 0-2
    assert (log.first_unstable_offset, log.producer_state.ongoing_transactions()) == (0, {1: 0})
    produce(log, data_batch([(b"n", b"1")], transactional=False))  # 3
    produce(log, data_batch([(b"b", b"1")], pid=2, seq=0))  # 4
    assert log.first_unstable_offset == 0

    commit = marker(log, 1, commit=True, coordinator_epoch=7)
    assert (commit.first_offset, commit.last_offset) == (5, 5)
    assert log.first_unstable_offset == 4
    entry = log.producer_state.producers[1]
    assert (entry.current_txn_first_offset, entry.coordinator_epoch) == (-1, 7)
    assert entries(log) == []  # commits are not indexed

    produce(log, data_batch([(b"c", b"1")], pid=3, seq=0))  # 6
    produce(log, data_batch([(b"d", b"1")], pid=4, seq=0))  # 7
    assert marker(log, 2, commit=False).first_offset == 8
    assert marker(log, 4, commit=False).first_offset == 9
    # An abort's LSO: the oldest transaction still open, else the marker's next offset.
    assert entries(log) == [TxnIndexEntry(2, 4, 8, 6), TxnIndexEntry(4, 7, 9, 6)]
    assert file_entries(log) == entries(log)
    assert log.producer_state.ongoing_transactions() == {3: 6}
    marker(log, 3, commit=False)  # 10
    assert log.first_unstable_offset is None
    assert entries(log)[-1] == TxnIndexEntry(3, 6, 10, 11)
    assert log.segments[0].txn_index.path.name == "00000000000000000000.txnindex"
    assert log.segments[0].txn_index.path.stat().st_size == 3 * ENTRY_SIZE

    # The marker on disk is Kafka's: one control record, base sequence -1.
    raw = log_bytes(log)
    headers = split_batches(raw)
    control = [h for h in headers if h.is_control]
    assert [h.base_offset for h in control] == [5, 8, 9, 10]
    position = sum(h.size for h in headers[: headers.index(control[0])])
    first = raw[position : position + control[0].size]
    header = parse_header(first)
    assert header.attributes & (ATTR_CONTROL | ATTR_TRANSACTIONAL) == 0x30
    assert (header.producer_id, header.base_sequence, header.record_count) == (1, -1, 1)
    [record] = read_records(first)
    assert (record.key, record.value) == (b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x07")

    assert log.collect_aborted_transactions(0, 11) == [
        AbortedTxn(2, 4), AbortedTxn(4, 7), AbortedTxn(3, 6)]
    assert log.collect_aborted_transactions(0, 4) == []  # none began before 4
    assert log.collect_aborted_transactions(9, 11) == [AbortedTxn(4, 7), AbortedTxn(3, 6)]
    assert log.collect_aborted_transactions(11, 12) == []


def test_marker_and_data_fencing(tmp_path: Path):
    log = Log(tmp_path / "t-0", config())
    state = log.producer_state
    assert state.check_marker(9, 0, 0) is None  # unknown producer: nothing to fence
    produce(log, data_batch([(b"a", b"1")], pid=1, epoch=2, seq=0))
    marker(log, 1, commit=True, epoch=2, coordinator_epoch=5)
    assert state.check_marker(1, 1, 5) == ErrorCode.invalid_producer_epoch
    assert state.check_marker(1, 2, 4) == ErrorCode.transaction_coordinator_fenced
    assert state.check_marker(1, 2, 5) is None

    # The transaction is open again; a non-transactional write meanwhile is refused.
    produce(log, data_batch([(b"a", b"2")], pid=1, epoch=2, seq=1))
    [plain] = split_batches(data_batch([(b"a", b"3")], pid=1, epoch=2, seq=2,
                                       transactional=False))
    assert state.check(plain) == ErrorCode.invalid_txn_state

    # A coordinator aborts under a bumped epoch: that fences the zombie at epoch 2.
    marker(log, 1, commit=False, epoch=3, coordinator_epoch=6)
    assert log.first_unstable_offset is None
    entry = state.producers[1]
    assert (entry.epoch, entry.coordinator_epoch) == (3, 6)
    zombie = split_batches(data_batch([(b"z", b"1")], pid=1, epoch=2, seq=2))[0]
    assert state.check(zombie) == ErrorCode.invalid_producer_epoch
    assert state.check_marker(1, 2, 6) == ErrorCode.invalid_producer_epoch
    # The new epoch starts its sequences at 0.
    gap = split_batches(data_batch([(b"a", b"1")], pid=1, epoch=3, seq=2))[0]
    assert state.check(gap) == ErrorCode.out_of_order_sequence_number
    fresh = split_batches(data_batch([(b"a", b"1")], pid=1, epoch=3, seq=0))[0]
    assert state.check(fresh) is None


def test_a_marker_without_an_open_transaction_is_written_and_moves_epochs(tmp_path: Path):
    log = Log(tmp_path / "t-0", config())
    result = marker(log, 5, commit=False, epoch=4, coordinator_epoch=3)
    assert (result.first_offset, log.log_end_offset) == (0, 1)
    assert entries(log) == [] and log.first_unstable_offset is None
    entry = log.producer_state.producers[5]
    assert (entry.epoch, entry.coordinator_epoch) == (4, 3)
    assert log.producer_state.check_marker(5, 4, 2) == ErrorCode.transaction_coordinator_fenced
    log.close()
    reopened = Log(tmp_path / "t-0", config())
    assert producer_summary(reopened) == {5: (4, 3, -1, -1)}


# -- the index across segments, reloads and replicas ---------------------------------------


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_collect_aborted_transactions_matches_the_model(tmp_path: Path, seed: int):
    log = Log(tmp_path / "t-0", config())
    work = Workload(log, random.Random(seed))
    work.run(300)
    assert len(log.segments) > 10
    assert entries(log) == work.aborted and file_entries(log) == work.aborted
    assert log.producer_state.ongoing_transactions() == work.ongoing
    # Some abort's marker lies in a later segment than the records it aborted.
    spans = [(log._segment_for(e.first_offset), log._segment_for(e.last_offset))
             for e in work.aborted]
    assert any(a < b for a, b in spans)
    end = log.log_end_offset
    rng = random.Random(seed)
    for _ in range(400):
        start = rng.randrange(end)
        upper = rng.randrange(start, end + 1)
        assert log.collect_aborted_transactions(start, upper) == brute_force(
            work.aborted, start, upper), (start, upper)


def test_a_log_without_transactions_has_nothing_to_collect(tmp_path: Path):
    log = Log(tmp_path / "t-0", config())
    for _ in range(50):
        produce(log, data_batch([(b"p", b"x" * 50)], transactional=False))
    assert log._txn_segments == []
    assert log.collect_aborted_transactions(0, log.log_end_offset) == []
    # As in Kafka, a segment's .txnindex is made by its first abort: none here.
    assert not any(s.txn_index.path.exists() for s in log.segments)
    log.close()
    assert Log(tmp_path / "t-0", config()).collect_aborted_transactions(0, 10**9) == []
    assert not list((tmp_path / "t-0").glob("*.txnindex"))


def test_reopening_restores_transactions_and_rebuilds_missing_indexes(tmp_path: Path):
    directory = tmp_path / "t-0"
    log = Log(directory, config())
    work = Workload(log, random.Random(7))
    work.run(250)
    assert work.ongoing and work.aborted
    before = state_of(log)
    log.close()

    clean = Log(directory, config())
    assert state_of(clean) == before
    clean.close()

    # Old logs have no .txnindex files: a clean load rebuilds them from the batches.
    for path in directory.glob("*.txnindex"):
        path.unlink()
    rebuilt = Log(directory, config())
    assert state_of(rebuilt) == before
    assert file_entries(rebuilt) == work.aborted
    rebuilt.close()

    # A torn index is cut to whole entries, with a warning.
    index = next(p for p in sorted(directory.glob("*.txnindex")) if p.stat().st_size)
    good = index.read_bytes()
    index.write_bytes(good + b"\x00\x01\x02")
    reopened = Log(directory, config())
    assert index.read_bytes() == good
    assert state_of(reopened) == before


def test_a_torn_abort_marker_reopens_its_transaction_on_recovery(tmp_path: Path):
    directory = tmp_path / "t-0"
    log = Log(directory, config())
    work = Workload(log, random.Random(11))
    work.run(120)
    pid = 3
    if pid not in work.ongoing:
        work.data(pid)
    before = state_of(log)
    first = work.ongoing[pid]
    work.end(pid, commit=False)
    assert entries(log)[-1].last_offset == log.log_end_offset - 1
    log.close()
    # The crash tore the marker's batch; its index entry had already reached the file.
    last = sorted(directory.glob("*.log"))[-1]
    os.truncate(last, last.stat().st_size - 5)
    recovered = Log(directory, config(), recovery_point=0, clean_shutdown=False)
    assert state_of(recovered) == before
    assert recovered.producer_state.ongoing_transactions()[pid] == first
    assert file_entries(recovered) == before[2]


def test_truncation_before_a_marker_reopens_the_transaction(tmp_path: Path):
    log = Log(tmp_path / "t-0", config())
    produce(log, data_batch([(b"a", b"1")], pid=1, epoch=0, seq=0))  # 0
    produce(log, data_batch([(b"b", b"1")], pid=2, epoch=0, seq=0))  # 1
    marker(log, 1, commit=True, epoch=0, coordinator_epoch=1)  # 2
    marker(log, 2, commit=False, epoch=1, coordinator_epoch=1)  # 3: bumps pid 2 to epoch 1
    produce(log, data_batch([(b"c", b"1")], pid=1, epoch=0, seq=1))  # 4
    assert entries(log) == [TxnIndexEntry(2, 1, 3, 4)]
    assert log.producer_state.ongoing_transactions() == {1: 4}

    log.truncate_to(3)
    assert log.producer_state.ongoing_transactions() == {2: 1}
    assert log.first_unstable_offset == 1
    assert entries(log) == [] and file_entries(log) == []
    assert log.collect_aborted_transactions(0, 3) == []
    # The abort's epoch bump and coordinator epoch are undone with it.
    assert producer_summary(log)[2] == (0, -1, 1, 0)
    retry = split_batches(data_batch([(b"b", b"2")], pid=2, epoch=0, seq=1))[0]
    assert log.producer_state.check(retry) is None

    log.truncate_to(2)
    assert log.producer_state.ongoing_transactions() == {1: 0, 2: 1}
    assert log.first_unstable_offset == 0
    log.truncate_to(0)
    assert log.producer_state.ongoing_transactions() == {}


def test_a_follower_copying_the_leader_ends_in_the_same_state(tmp_path: Path):
    leader = Log(tmp_path / "l-0", config())
    work = Workload(leader, random.Random(5))
    work.run(250)
    follower = Log(tmp_path / "f-0", config())
    raw = log_bytes(leader)
    headers = split_batches(raw)
    position, i = 0, 0
    rng = random.Random(5)
    while i < len(headers):  # fetches of a few batches each
        n = rng.randint(1, 6)
        size = sum(h.size for h in headers[i : i + n])
        follower.append_as_follower(raw[position : position + size])
        position, i = position + size, i + n
    assert log_bytes(follower) == raw
    assert state_of(follower) == state_of(leader)
    assert file_entries(follower) == work.aborted
    end = leader.log_end_offset
    for start in range(0, end, 7):
        assert follower.collect_aborted_transactions(start, end) == brute_force(
            work.aborted, start, end)


def test_retention_takes_the_index_with_its_segment(tmp_path: Path):
    directory = tmp_path / "t-0"
    log = Log(directory, config(retention_bytes=2048, cleanup_policy=("delete",)))
    work = Workload(log, random.Random(3))
    work.run(200)
    indexes_before = {p.name for p in directory.glob("*.txnindex")}
    doomed = log.delete_old_segments(now_ms=TS)
    assert doomed > 0
    assert {p.name for p in directory.glob("*.txnindex")} == {
        s.txn_index.path.name for s in log.segments} != indexes_before
    start = log.log_start_offset
    assert log.collect_aborted_transactions(start, log.log_end_offset) == brute_force(
        [e for e in work.aborted if e.last_offset >= log.segments[0].base_offset],
        start, log.log_end_offset)


def test_read_marker_ignores_other_control_records():
    other = encode_batch([Record(0, TS, b"\x00\x00\x00\x05", b"")], 0, producer_id=1,
                         producer_epoch=0, attributes=ATTR_CONTROL | ATTR_TRANSACTIONAL)
    assert read_marker(other) is None


def test_a_torn_txn_index_is_logged(tmp_path: Path, caplog):
    directory = tmp_path / "t-0"
    log = Log(directory, config())
    produce(log, data_batch([(b"a", b"1")], pid=1, seq=0))
    marker(log, 1, commit=False)
    log.close()
    index = directory / f"{0:020d}.txnindex"
    index.write_bytes(index.read_bytes() + b"\x00" * 10)
    with caplog.at_level(logging.WARNING):
        reopened = Log(directory, config())
    assert "not whole 34-byte entries" in caplog.text
    assert entries(reopened) == [TxnIndexEntry(1, 0, 1, 2)]
    assert index.stat().st_size == ENTRY_SIZE
