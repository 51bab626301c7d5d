"""What a transaction leaves on disk when it ends: its marker and, if aborted, an index entry.

A *marker* is a control batch (attributes transactional + control) holding exactly one
record: key = int16 version 0 + int16 type (0 ABORT, 1 COMMIT), value = int16 version 0 +
int32 coordinator epoch; producer id and epoch in the batch header, base sequence -1
(Kafka's EndTransactionMarker / ControlRecordType).

The *aborted transaction index* (``<base>.txnindex``, Kafka's TransactionIndex) lists the
aborted transactions whose marker lies in one segment, in the order their markers were
written: 34-byte big-endian entries of int16 version 0, int64 producer id, int64 first
offset, int64 last offset (the marker's), int64 last stable offset (the LSO just after the
abort). read_committed fetches use it to tell consumers which records to skip.

Entries also live in memory, so a fetch reads no file. The file is opened only to write it:
aborts are rare, and a descriptor per segment for a file that stays empty in most topics
would cost more than the opens. Not thread-safe: the owning segment serialises access (the
cleaner writes a new segment's index from its worker thread before anyone else sees it).
"""

from __future__ import annotations

import contextlib
import logging
import os
import struct
import time
from bisect import bisect_left
from dataclasses import dataclass
from pathlib import Path

from broker.protocol.batch_codec import CorruptRecords, Record, encode_batch, read_records
from broker.protocol.records import ATTR_CONTROL, ATTR_TRANSACTIONAL

log = logging.getLogger(__name__)

TXN_INDEX_SUFFIX = ".txnindex"

_ENTRY = struct.Struct(">hqqqq")
ENTRY_SIZE = _ENTRY.size  # 34
_VERSION = 0
_MARKER_KEY = struct.Struct(">hh")
_MARKER_VALUE = struct.Struct(">hi")
ABORT, COMMIT = 0, 1


# -- markers -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TxnMarker:
    """The record of a transaction marker."""

    commit: bool
    coordinator_epoch: int


def encode_marker(
    producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int,
    timestamp_ms: int | None = None,
) -> bytes:
    """A marker batch at base offset 0, ready for ``Log.append_as_leader`` to place."""
    ts = int(time.time() * 1000) if timestamp_ms is None else timestamp_ms
    key = _MARKER_KEY.pack(0, COMMIT if commit else ABORT)
    value = _MARKER_VALUE.pack(0, coordinator_epoch)
    return encode_batch(
        [Record(0, ts, key, value)], 0, producer_id=producer_id, producer_epoch=producer_epoch,
        base_sequence=-1, attributes=ATTR_TRANSACTIONAL | ATTR_CONTROL,
    )


def read_marker(batch: bytes | memoryview) -> TxnMarker | None:
    """The marker in a control batch; None for an empty one (a cleaner's leftover), for any
    other control type (KRaft's, never a transaction's) and for unreadable records."""
    try:
        records = read_records(bytes(batch))
    except CorruptRecords as e:
        log.warning("control batch not readable (%s); not taken as a marker", e)
        return None
    if not records:
        return None
    key, value = records[0].key, records[0].value
    if key is None or len(key) < _MARKER_KEY.size:
        return None
    _, kind = _MARKER_KEY.unpack_from(key)
    if kind not in (ABORT, COMMIT):
        return None
    epoch = -1
    if value is not None and len(value) >= _MARKER_VALUE.size:
        _, epoch = _MARKER_VALUE.unpack_from(value)
    return TxnMarker(kind == COMMIT, epoch)


# -- the index -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    """What a read_committed fetch response lists: whose records to skip, from where."""

    producer_id: int
    first_offset: int


@dataclass(frozen=True, slots=True)
class TxnIndexEntry:
    producer_id: int
    first_offset: int
    last_offset: int  # the abort marker's offset
    last_stable_offset: int  # the LSO right after the abort completed

    def pack(self) -> bytes:
        return _ENTRY.pack(_VERSION, self.producer_id, self.first_offset, self.last_offset,
                           self.last_stable_offset)


def _last_offset(entry: TxnIndexEntry) -> int:
    return entry.last_offset


class TransactionIndex:
    """The aborted transactions whose markers are in one segment, in file and in memory.

    The file is made by the first abort, as Kafka makes it: most segments never have one,
    and a new partition's files are made one by one on the event loop. A file missing for an
    existing segment (``new`` false) may be an old log's or a lost one, so ``missing``
    asks the log to rebuild it from the batches, which costs nothing more: loading replays
    every batch header anyway, and an index found empty is not made then either.
    """

    def __init__(self, path: Path, new: bool) -> None:
        self.path = path
        self.entries: list[TxnIndexEntry] = []
        self._unsynced = False
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            self.missing = not new
            return
        self.missing = False
        self._load(data)

    def _load(self, data: bytes) -> None:
        usable = len(data) - len(data) % ENTRY_SIZE
        if usable != len(data):
            log.warning("%s: %d bytes are not whole %d-byte entries; truncated to %d",
                        self.path, len(data), ENTRY_SIZE, usable)
            os.truncate(self.path, usable)
        self.entries = [TxnIndexEntry(*fields[1:]) for fields in _ENTRY.iter_unpack(data[:usable])]

    def _write_file(self, data: bytes) -> None:
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)
        self._unsynced = True

    def append(self, entry: TxnIndexEntry) -> None:
        """Add an abort whose marker was just written to the segment (in marker order)."""
        if self.entries and entry.last_offset <= self.entries[-1].last_offset:
            raise ValueError(f"{self.path}: entry at {entry.last_offset} after "
                             f"{self.entries[-1].last_offset}")
        self._write_file(entry.pack())
        self.missing = False
        self.entries.append(entry)

    def replace_all(self, entries: list[TxnIndexEntry]) -> None:
        """Write a rebuilt index whole, through a ``.tmp`` file and a rename: a crash in the
        middle leaves the old file (which the next load rebuilds again), never half of one.
        An empty index, the common case, is no file (or an emptied one): no fsync per
        segment."""
        if not entries:
            with contextlib.suppress(FileNotFoundError):
                os.truncate(self.path, 0)
            self.entries = []
            self.missing = False
            return
        tmp = self.path.with_name(self.path.name + ".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, b"".join(e.pack() for e in entries))
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, self.path)
        self.entries = list(entries)
        self.missing = False

    def truncate_to(self, offset: int) -> None:
        """Forget aborts whose marker is at or after ``offset``."""
        keep = bisect_left(self.entries, offset, key=_last_offset)
        if keep == len(self.entries):
            return
        del self.entries[keep:]
        if not self.missing:
            os.truncate(self.path, keep * ENTRY_SIZE)

    def reset(self) -> None:
        self.truncate_to(-1)

    def collect(self, start_offset: int, upper_bound_offset: int,
                out: list[AbortedTxn]) -> bool:
        """Add to ``out`` the aborts overlapping [start, upper bound); True once an entry's
        last stable offset reaches the upper bound: every later abort (here or in a later
        segment) began at or after that LSO, so none can overlap (Kafka's
        collectAbortedTxns)."""
        entries = self.entries
        for i in range(bisect_left(entries, start_offset, key=_last_offset), len(entries)):
            entry = entries[i]
            if entry.first_offset < upper_bound_offset:
                out.append(AbortedTxn(entry.producer_id, entry.first_offset))
            if entry.last_stable_offset >= upper_bound_offset:
                return True
        return False

    def flush(self) -> None:
        if not self._unsynced or self.missing:
            return
        fd = os.open(self.path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        self._unsynced = False
