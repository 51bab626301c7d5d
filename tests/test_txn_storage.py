"""Transactions in the log layer, on temporary directories with no broker: markers, producer
state, the aborted-transaction index, reloads, truncation, follower copies and compaction.

Time is controlled by the ``now_ms`` the cleaner functions take, never by sleeping. A model
written here (``Workload``) says independently which transactions are open and which aborts
the index must hold, with which last stable offsets.
"""

from __future__ import annotations

import logging
import os
import random
import struct
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode

from broker.protocol.batch_codec import Record, encode_batch, read_records
from broker.protocol.records import (
    ATTR_CONTROL,
    ATTR_TRANSACTIONAL,
    InvalidRecordError,
    parse_header,
    split_batches,
)
from broker.storage.cleaner import clean_log, cleanable_range, execute_plan, plan_cleaning
from broker.storage.log import AbortedTxn, AppendResult, Log, LogConfig
from broker.storage.segment import SWAP_SUFFIX
from broker.storage.txn_index import ENTRY_SIZE, TxnIndexEntry, read_marker

TS = 1_700_000_000_000
NOW = TS + 3_600_000
Pair = tuple[bytes | None, bytes | None]


# -- helpers -------------------------------------------------------------------------------


def data_batch(pairs: list[Pair], pid: int = -1, epoch: int = 0, seq: int = -1,
               transactional: bool = True, ts: int = TS) -> bytes:
    records = [Record(i, ts + i, k, v) for i, (k, v) in enumerate(pairs)]
    return encode_batch(
        records, 0, producer_id=pid, producer_epoch=epoch if pid >= 0 else -1,
        base_sequence=seq, attributes=ATTR_TRANSACTIONAL if transactional else 0,
    )


def produce(log: Log, data: bytes) -> AppendResult:
    """Append as the partition does: duplicates answered, refused batches refused."""
    [header] = split_batches(data)
    state = log.producer_state
    assert state.find_duplicate(header) is None
    assert state.check(header) is None
    return log.append_as_leader(data, header, 0)


def marker(log: Log, pid: int, commit: bool, epoch: int = 0, coordinator_epoch: int = 0
           ) -> AppendResult:
    assert log.producer_state.check_marker(pid, epoch, coordinator_epoch) is None
    return log.append_control_as_leader(pid, epoch, commit, coordinator_epoch, 0)


def config(**changes) -> LogConfig:
    # The batches are stamped TS, long past: with producer.id.expiration.ms's day, every
    # producer would be forgotten when a log reloads (tests/test_producer_expiry.py).
    base = {"segment_bytes": 1024, "index_interval_bytes": 128, "file_delete_delay_ms": 0,
            "producer_id_expiration_ms": 2**63 - 1}
    return LogConfig(**{**base, **changes})


def entries(log: Log) -> list[TxnIndexEntry]:
    return [e for s in log.segments for e in s.txn_index.entries]


def file_entries(log: Log) -> list[TxnIndexEntry]:
    """The entries as the .txnindex files hold them, decoded here from Kafka's layout."""
    out = []
    for segment in log.segments:
        data = segment.txn_index.path.read_bytes()
        assert len(data) % 34 == 0
        for version, *fields in struct.iter_unpack(">hqqqq", data):
            assert version == 0
            out.append(TxnIndexEntry(*fields))
    return out


def producer_summary(log: Log) -> dict[int, tuple[int, int, int, int]]:
    return {
        pid: (e.epoch, e.coordinator_epoch, e.current_txn_first_offset, e.last_sequence)
        for pid, e in log.producer_state.producers.items()
    }


def state_of(log: Log) -> tuple:
    return (log.producer_state.ongoing_transactions(), log.first_unstable_offset, entries(log),
            producer_summary(log), log.log_end_offset)


def log_bytes(log: Log) -> bytes:
    return b"".join(s.log_path.read_bytes() for s in log.segments)


def brute_force(model: list[TxnIndexEntry], start: int, upper: int) -> list[AbortedTxn]:
    return [AbortedTxn(e.producer_id, e.first_offset) for e in model
            if e.last_offset >= start and e.first_offset < upper]


@dataclass
class Workload:
    """Random transactional traffic, with an independent account of what the log must hold."""

    log: Log
    rng: random.Random
    ongoing: dict[int, int] = field(default_factory=dict)
    aborted: list[TxnIndexEntry] = field(default_factory=list)
    seq: dict[int, int] = field(default_factory=dict)

    def data(self, pid: int) -> None:
        n = self.rng.randint(1, 4)
        seq = self.seq.get(pid, 0)
        pairs = [(b"k%d" % self.rng.randint(0, 9), b"v" * self.rng.randint(1, 60))
                 for _ in range(n)]
        result = produce(self.log, data_batch(pairs, pid, seq=seq))
        self.seq[pid] = seq + n
        self.ongoing.setdefault(pid, result.first_offset)

    def plain(self) -> None:
        produce(self.log, data_batch([(b"p", b"x" * 30)], transactional=False))

    def end(self, pid: int, commit: bool) -> None:
        offset = marker(self.log, pid, commit).first_offset
        first = self.ongoing.pop(pid, None)
        if first is not None and not commit:
            lso = min(self.ongoing.values(), default=offset + 1)
            self.aborted.append(TxnIndexEntry(pid, first, offset, lso))

    def step(self) -> None:
        pid = self.rng.randint(1, 4)
        roll = self.rng.random()
        if roll < 0.5:
            self.data(pid)
        elif roll < 0.6:
            self.plain()
        else:
            self.end(pid, commit=roll < 0.8)

    def run(self, steps: int) -> None:
        for _ in range(steps):
            self.step()


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
    assert all(s.txn_index.path.exists() and s.txn_index.path.stat().st_size == 0
               for s in log.segments)


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


# -- compaction ----------------------------------------------------------------------------


def compact_config(**changes) -> LogConfig:
    return config(cleanup_policy=("compact",), delete_retention_ms=60_000, **changes)


def visible(log: Log) -> list[tuple[int, bytes | None, bytes | None]]:
    """(offset, key, value) of every data record in the log, control records left out."""
    raw = log_bytes(log)
    out = []
    for header in split_batches(raw, allow_empty=True):
        batch, raw = raw[: header.size], raw[header.size :]
        if not header.is_control:
            out += [(r.offset, r.key, r.value) for r in read_records(batch)]
    return out


def markers_in(log: Log) -> list[int]:
    return [h.base_offset for h in split_batches(log_bytes(log), allow_empty=True)
            if h.is_control]


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


def read_committed(log: Log) -> list[tuple[int, bytes | None, bytes | None]]:
    """What a read_committed consumer sees, filtering as the Java consumer does with the
    aborted transactions a fetch of the whole log returns."""
    lso = log.first_unstable_offset
    end = log.log_end_offset if lso is None else lso
    aborted = sorted(log.collect_aborted_transactions(0, end), key=lambda a: a.first_offset)
    skipping: set[int] = set()
    raw = log_bytes(log)
    out = []
    for header in split_batches(raw, allow_empty=True):
        batch, raw = raw[: header.size], raw[header.size :]
        if header.base_offset >= end:
            break
        while aborted and aborted[0].first_offset <= header.last_offset:
            skipping.add(aborted.pop(0).producer_id)
        if header.is_control:
            found = read_marker(batch)
            if found is not None and not found.commit:
                skipping.discard(header.producer_id)
        elif not (header.is_transactional and header.producer_id in skipping):
            out += [(r.offset, r.key, r.value) for r in read_records(batch)]
    return out


def latest(records: list[tuple[int, bytes | None, bytes | None]]) -> dict:
    return {key: value for _, key, value in records}


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
    assert names >= {s.txn_index.path.name for s in reopened.segments}
    assert len([n for n in names if n.endswith(".txnindex")]) == len(reopened.segments)
    # The part swapped in is clean, the rest not yet: no aborted record is visible to
    # read_committed, nor any committed one lost.
    seen = read_committed(reopened)
    assert set(seen) <= set(committed) and latest(seen) == latest(committed)
    clean_log(reopened, None, NOW)
    _check_cleaned(reopened, committed)


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
