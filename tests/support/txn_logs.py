"""Transactions in a log on a temp dir, for the unit tier's storage tests: batches and
markers written as producers and coordinators write them, what the log's index and
producer state hold, and a model (``Workload``) that says independently which
transactions are open and which aborts the index must hold."""

from __future__ import annotations

import random
import struct
from dataclasses import dataclass, field

from broker.protocol.batch_codec import Record, encode_batch, read_records
from broker.protocol.records import ATTR_TRANSACTIONAL, split_batches
from broker.storage.log import AbortedTxn, AppendResult, Log, LogConfig
from broker.storage.txn_index import TxnIndexEntry, read_marker

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
    # producer would be forgotten when a log reloads (tests/unit/broker/test_producer_expiry.py).
    base = {"segment_bytes": 1024, "index_interval_bytes": 128, "file_delete_delay_ms": 0,
            "producer_id_expiration_ms": 2**63 - 1}
    return LogConfig(**{**base, **changes})


def entries(log: Log) -> list[TxnIndexEntry]:
    return [e for s in log.segments for e in s.txn_index.entries]


def file_entries(log: Log) -> list[TxnIndexEntry]:
    """The entries as the .txnindex files hold them, decoded here from Kafka's layout (no
    file: none, as in Kafka, which makes the file with the first abort)."""
    out = []
    for segment in log.segments:
        path = segment.txn_index.path
        data = path.read_bytes() if path.exists() else b""
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
