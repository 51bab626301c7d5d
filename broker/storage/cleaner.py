"""Log compaction: keep the latest record of every key (Kafka's LogCleaner and Cleaner).

Applies to logs whose ``cleanup.policy`` contains ``compact``. Each log has a *clean* part
(already compacted: offsets below its cleaner checkpoint) and a *dirty* part after it. The
cleaner picks the log with the largest dirty share of its non-active bytes, if that share
exceeds ``min.cleanable.dirty.ratio`` (strictly, as Kafka's LogCleanerManager compares), and:

1. finds the cleanable range: from the log start to the first *uncleanable* offset, which is
   the base of the active segment, or of the first segment reaching the high watermark or
   the first unstable offset (an open transaction may still abort), or of the first dirty
   segment holding a record newer than ``min.compaction.lag.ms`` (Kafka's segment-granular
   rule, by the segment's largest timestamp);
2. maps key -> latest offset over the dirty part of that range (keys of 16 bytes or more are
   kept as a 16-byte digest, as Kafka's SkimpyOffsetMap keeps an MD5 of the key; at most
   MAX_MAP_ENTRIES keys, beyond which the range stops at a segment boundary and the rest is
   left for the next pass);
3. rewrites every segment of the range, grouping adjacent ones up to ``segment.bytes`` (never
   mixing clean and dirty ones), keeping a record iff no later record has its key. Offsets
   are kept, so a compacted log has gaps; ``LogSegment.find`` already answers with the first
   batch whose last offset reaches the requested one, so reads and fetches skip the gaps.
   A batch that keeps every record is copied byte for byte; a batch that keeps some is
   re-encoded with ``encode_batch`` under its base offset, lastOffsetDelta (the next offset
   and the producer's last sequence stay what they were), codec, attributes, leader epoch
   and producer id/epoch/base sequence; a batch that keeps none is dropped, unless it is
   the newest data batch of a producer the partition still knows: then its header is kept
   with no records (Kafka's RETAIN_EMPTY), so the producer's epoch and sequence, and its
   last batch for duplicate detection, survive cleaning and a reload;
4. swaps each rewritten segment in (``.cleaned``, then ``.swap``, then the live name; see
   ``Log.replace_segments`` and ``finish_interrupted_swaps``) and moves the checkpoint to the
   end of the range. The checkpoint is saved by the replica manager in
   ``cleaner-offset-checkpoint`` (Kafka's format), so progress survives restarts.

Tombstones (a key with a null value) are kept while other records may still be hiding behind
them for a reader: a pass drops a tombstone that is the latest for its key only when it lies
in a segment an earlier pass already cleaned and that segment's last-modified time is more
than ``delete.retention.ms`` ago. A rewritten segment's last-modified time is set to the time
of the pass that first cleaned its records (for a segment that was dirty) or to the newest
last-modified time of the clean segments merged into it, and is never refreshed by later
passes; so a tombstone lives at least ``delete.retention.ms`` after it was first compacted,
which is KIP-534's guarantee. Kafka (3.1+) keeps that horizon in the batch header instead;
kafkube's batch codec cannot write it, so the segment's time stands in for it. The cleaner
also remembers when the earliest kept tombstone expires and cleans the log again then, even
without new dirty bytes (that memory does not survive a restart; the next pass drops them).

Transactions follow Kafka's Cleaner and CleanedTransactionMetadata. The aborted transactions
come from the segments' aborted-transaction indexes; their batches are dropped (their records
never enter the offset map, so they cannot hide an older committed value). A marker stays
while a batch of its transaction was met in this pass (an abort's index entry then moves
with it into the cleaned segment) and afterwards until its segment has been clean for
``delete.retention.ms``, the tombstones' rule; then it goes. The markers after a producer's
last data batch under its current epoch stay, as that batch does: they carry the epoch.
Unlike Kafka, such a marker keeps its record (Kafka empties it): a reload, which here replays
the log instead of reading a producer snapshot, then still knows the coordinator epoch.
One pass tracks transactions across all its groups (Kafka: per group), so a COMMIT marker is
never dropped while data of its transaction remains in an earlier group: a reload would take
that data for an open transaction and hold the last stable offset back for good.

Differences from Kafka, deliberate:

- Records without a key are kept. Kafka refuses them on produce to a compacted topic and so
  treats any it meets as invalid; kafkube does not check at produce time, so dropping them
  here would lose acknowledged data.
- Batches whose records cannot be decoded are copied unchanged (they only exist if a client
  wrote malformed records under a valid CRC; see docs/architecture.md), unless they belong
  to an aborted transaction.
- No max.compaction.lag.ms, cleaner I/O throttling or dedupe buffer setting.

Threading: choosing a log, preparing and swapping run on the event loop; building the map and
writing the cleaned files (all the per-record work) run in a worker thread, on duplicated file
descriptors, so retention or a topic deletion closing a segment meanwhile cannot pull a
descriptor from under it. If the log changed underneath (a segment retained away or
truncated), the swap is refused and the pass is abandoned without moving the checkpoint.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import struct
import threading
import time
from collections import deque
from collections.abc import Hashable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import crc32c

from broker.protocol.batch_codec import CorruptRecords, Record, encode_batch, read_records
from broker.protocol.records import (
    ATTR_CONTROL,
    ATTR_TIMESTAMP_TYPE,
    ATTR_TRANSACTIONAL,
    HEADER_SIZE,
    LOG_OVERHEAD,
    BatchHeader,
    parse_header,
    stamp_header,
)
from broker.storage.segment import (
    CLEANED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    SWAP_SUFFIX,
    TIME_INDEX_SUFFIX,
    LogSegment,
    segment_name,
)
from broker.storage.txn_index import TXN_INDEX_SUFFIX, TxnIndexEntry

if TYPE_CHECKING:
    from broker.storage.log import Log, LogConfig

log = logging.getLogger(__name__)

# Kafka's default dedupe buffer (128 MiB at 24 bytes an entry, 0.9 load factor) holds about
# five million keys; a Python dict entry costs more, so stop a little earlier.
MAX_MAP_ENTRIES = 4_000_000
_DIGEST_SIZE = 16
_READ_CHUNK = 1 << 20
_WRITE_CHUNK = 1 << 20
_WRITE_BATCHES = 512  # stay well below IOV_MAX in one writev
_INT_MAX = 2**31 - 1
_NAME_LEN = 20
_SEGMENT_SUFFIXES = (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)
# A v2 batch header (records.py's layout), for the empty batches the cleaner writes.
_BATCH_HEADER = struct.Struct(">qiibIhiqqqhii")


class CleaningAborted(Exception):
    """The pass stopped early (broker shutting down); nothing was swapped in."""


class CorruptSegment(Exception):
    """A non-active segment holds a batch that cannot be read whole."""


# -- choosing what to clean ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CleanableRange:
    """What a pass over one log would cover, and how dirty the log is (Kafka's LogToClean)."""

    first_dirty: int  # offsets below are clean (the checkpoint, or the log start)
    first_uncleanable: int  # a segment base: nothing at or after it is touched
    clean_bytes: int
    dirty_bytes: int

    @property
    def ratio(self) -> float:
        total = self.clean_bytes + self.dirty_bytes
        return self.dirty_bytes / total if total else 0.0


def _largest_timestamp(segment: LogSegment) -> int:
    # As retention and Kafka's LogSegment.largestTimestamp: the file time if no record has one.
    return segment.max_timestamp if segment.max_timestamp >= 0 else segment.last_modified_ms


def _is_dirty(segment: LogSegment, first_dirty: int) -> bool:
    return segment.base_offset >= first_dirty or segment.next_offset > first_dirty


def first_dirty_offset(log_: Log, checkpoint: int | None) -> int:
    """The checkpoint, unless it is missing or outside the log (Kafka resets it then)."""
    if checkpoint is None or not log_.log_start_offset <= checkpoint <= log_.log_end_offset:
        return log_.log_start_offset
    return checkpoint


def cleanable_range(
    log_: Log, checkpoint: int | None, now_ms: int, max_offset: int | None = None
) -> CleanableRange:
    """Kafka's LogCleanerManager.cleanableOffsets and the byte counts of LogToClean.

    ``max_offset`` (the high watermark) and the first unstable offset bound it: records of
    an open transaction may yet be aborted, and its marker is not written yet.
    """
    unstable = log_.first_unstable_offset
    if unstable is not None:
        max_offset = unstable if max_offset is None else min(max_offset, unstable)
    first_dirty = first_dirty_offset(log_, checkpoint)
    lag = log_.config.min_compaction_lag_ms
    limit = log_.active_segment.base_offset
    for segment in log_.segments[:-1]:
        too_new = (
            lag > 0
            and _is_dirty(segment, first_dirty)
            and _largest_timestamp(segment) > now_ms - lag
        )
        if too_new or (max_offset is not None and segment.next_offset > max_offset):
            limit = segment.base_offset
            break
    clean = dirty = 0
    for segment in log_.segments[:-1]:
        if segment.base_offset >= limit:
            break
        if _is_dirty(segment, first_dirty):
            dirty += segment.size
        else:
            clean += segment.size
    return CleanableRange(first_dirty, limit, clean, dirty)


# -- one pass: plan (event loop), execute (worker thread), commit (event loop) ---------------


@dataclass(slots=True)
class _Source:
    """A segment as the worker sees it: a snapshot taken on the loop, and its own duplicate
    of the descriptor."""

    segment: LogSegment
    fd: int
    size: int
    base_offset: int
    next_offset: int
    index_entries: int
    dirty: bool
    last_modified_ms: int


@dataclass(slots=True)
class CleanStats:
    bytes_read: int = 0
    bytes_written: int = 0
    records_read: int = 0
    records_kept: int = 0
    batches_reencoded: int = 0
    batches_dropped: int = 0
    tombstones_dropped: int = 0
    aborted_batches_dropped: int = 0
    markers_dropped: int = 0
    segments_before: int = 0
    segments_after: int = 0


@dataclass(slots=True)
class CleanPlan:
    directory: Path
    config: LogConfig
    first_dirty: int
    end_offset: int  # the range's end; the map may pull it in (see build_offset_map)
    now_ms: int
    sources: list[_Source]
    # The aborts of the log with records below end_offset, by first offset (a snapshot of
    # the segments' indexes, taken on the loop).
    aborted: list[TxnIndexEntry] = field(default_factory=list)
    # Producer id -> (last offset of its newest data batch or -1, epoch): ProducerState-
    # Manager.last_batches when the pass was planned; those batches are never dropped.
    last_batches: dict[int, tuple[int, int]] = field(default_factory=dict)
    stats: CleanStats = field(default_factory=CleanStats)
    tombstone_expiry_ms: int | None = None


@dataclass(slots=True)
class _Staged:
    """One group's outcome: a cleaned segment to swap in, or an untouched one to re-date."""

    old: list[LogSegment]
    new: LogSegment | None
    touch_ms: int | None = None


@dataclass(frozen=True, slots=True)
class CleanResult:
    end_offset: int  # the new checkpoint: everything below it is clean
    stats: CleanStats
    tombstone_expiry_ms: int | None  # when the earliest kept tombstone may go
    aborted: bool = False


def plan_cleaning(log_: Log, cleanable: CleanableRange, now_ms: int) -> CleanPlan | None:
    """Pick the segments of ``cleanable`` and duplicate their descriptors (on the loop)."""
    sources: list[_Source] = []
    try:
        for segment in log_.segments[:-1]:
            if segment.base_offset >= cleanable.first_uncleanable:
                break
            sources.append(_Source(
                segment, os.dup(segment.fd), segment.size, segment.base_offset,
                segment.next_offset, segment.offset_index.entries,
                _is_dirty(segment, cleanable.first_dirty), segment.last_modified_ms,
            ))
    except OSError:
        _close_sources(sources)
        raise
    if not sources:
        return None
    end = cleanable.first_uncleanable
    aborted = sorted(
        (e for s in log_.segments for e in s.txn_index.entries if e.first_offset < end),
        key=lambda e: e.first_offset,
    )
    return CleanPlan(
        log_.dir, log_.config, cleanable.first_dirty, end, now_ms, sources, aborted,
        log_.producer_state.last_batches(),
    )


def _close_sources(sources: Iterable[_Source]) -> None:
    for source in sources:
        if source.fd >= 0:
            os.close(source.fd)
            source.fd = -1


def execute_plan(plan: CleanPlan, abort: threading.Event | None = None) -> list[_Staged]:
    """Build the offset map and write the cleaned segments. Thread-safe: touches no Log.

    Owns the plan's duplicated descriptors and closes them, whatever happens.
    """
    staged: list[_Staged] = []
    try:
        offsets = build_offset_map(plan, abort)
        groups = group_segments(plan)
        txns = _Transactions(plan.aborted, groups[0][0].base_offset if groups else 0)
        for group in groups:
            staged.append(_clean_group(plan, group, offsets, txns, abort))
        if abort is not None and abort.is_set():
            raise CleaningAborted
    except BaseException:
        discard_staged(staged)
        raise
    finally:
        _close_sources(plan.sources)
    return staged


def commit_cleaning(log_: Log, plan: CleanPlan, staged: list[_Staged]) -> CleanResult:
    """Swap the cleaned segments in, oldest first (on the loop).

    Stops at the first group whose segments left the log meanwhile; then the checkpoint does
    not move, and the next pass starts again from the old one.
    """
    stats = plan.stats
    for i, item in enumerate(staged):
        if item.new is None:
            segment = item.old[0]
            if item.touch_ms is not None and any(s is segment for s in log_.segments):
                _set_mtime(segment.log_path, item.touch_ms)
                segment.last_modified_ms = item.touch_ms
            continue
        if not log_.replace_segments(item.old, item.new):
            log.info("%s: log changed while cleaning; pass abandoned", log_.dir.name)
            discard_staged(staged[i:])
            return CleanResult(plan.first_dirty, stats, None, aborted=True)
    stats.segments_after = stats.segments_before - sum(len(s.old) - 1 for s in staged)
    return CleanResult(plan.end_offset, stats, plan.tombstone_expiry_ms)


def discard_staged(staged: Iterable[_Staged]) -> None:
    for item in staged:
        if item.new is not None:
            _delete_segment_files(item.new)


def clean_log(
    log_: Log, checkpoint: int | None, now_ms: int, max_offset: int | None = None
) -> CleanResult | None:
    """One whole pass, synchronously: what the background task does, minus the thread."""
    plan = plan_cleaning(log_, cleanable_range(log_, checkpoint, now_ms, max_offset), now_ms)
    if plan is None:
        return None
    return commit_cleaning(log_, plan, execute_plan(plan))


# -- the offset map ------------------------------------------------------------------------


def key_digest(key: bytes) -> bytes:
    """The map's key: short keys as they are, long ones by a 16-byte digest.

    Lengths keep the two kinds apart (a raw key is shorter than 16 bytes), so only two long
    keys can collide, with negligible odds, as with Kafka's MD5-keyed SkimpyOffsetMap.
    """
    if len(key) < _DIGEST_SIZE:
        return key
    return hashlib.blake2b(key, digest_size=_DIGEST_SIZE).digest()


def build_offset_map(plan: CleanPlan, abort: threading.Event | None = None) -> dict[bytes, int]:
    """Key digest -> latest offset over the dirty segments of the plan.

    Whole segments only: when the map is full, ``plan.end_offset`` moves back to the base of
    the first segment not mapped, so everything the pass rewrites was judged against every
    later key in the range.
    """
    offsets: dict[bytes, int] = {}
    mapped_any = False
    txns: _Transactions | None = None
    for source in plan.sources:
        if not source.dirty:
            continue
        if mapped_any and len(offsets) >= MAX_MAP_ENTRIES:
            plan.end_offset = source.base_offset
            break
        mapped_any = True
        if txns is None:
            txns = _Transactions(plan.aborted, source.base_offset)
        for header, data in _read_batches(source, abort):
            if header.is_control:
                txns.on_marker(header)
                continue
            if txns.is_aborted(header, keeps_header=False):
                continue  # an aborted record must not hide the committed value before it
            records = _decode(header, data)
            for record in records or ():
                if record.key is not None:
                    offsets[key_digest(record.key)] = record.offset
    return offsets


def _decode(header: BatchHeader, data: bytes) -> list[Record] | None:
    """The batch's records, or None if they cannot be decoded (the batch is then kept)."""
    try:
        records = read_records(data)
    except CorruptRecords as e:
        log.warning("batch at offset %d has undecodable records (%s); kept as is",
                    header.base_offset, e)
        return None
    previous = header.base_offset - 1
    for record in records:
        if not previous < record.offset <= header.last_offset:
            log.warning("batch at offset %d has records out of its offset range; kept as is",
                        header.base_offset)
            return None
        previous = record.offset
    return records


def _read_batches(
    source: _Source, abort: threading.Event | None
) -> Iterator[tuple[BatchHeader, bytes]]:
    """Every batch of a segment with its bytes, read in large chunks."""
    position = buf_start = 0
    buf = b""
    while position + HEADER_SIZE <= source.size:
        if abort is not None and abort.is_set():
            raise CleaningAborted
        rel = position - buf_start
        if rel + HEADER_SIZE > len(buf):
            buf, buf_start, rel = os.pread(source.fd, _READ_CHUNK, position), position, 0
        header = parse_header(buf, rel)
        if header.size < HEADER_SIZE or position + header.size > source.size:
            raise CorruptSegment(f"{source.segment.log_path}: bad batch at {position}")
        if rel + header.size > len(buf):
            want = max(_READ_CHUNK, header.size)
            buf, buf_start, rel = os.pread(source.fd, want, position), position, 0
            if len(buf) < header.size:
                raise CorruptSegment(f"{source.segment.log_path}: short read at {position}")
        yield header, buf[rel : rel + header.size]
        position += header.size


# -- rewriting -----------------------------------------------------------------------------


def group_segments(plan: CleanPlan) -> list[list[_Source]]:
    """Runs of adjacent segments to merge, as Kafka's groupSegmentsBySize.

    A group stays within segment.bytes, the index size and a 32-bit relative offset, and
    never mixes clean and dirty segments: a dirty group's file time becomes the time of this
    pass, which must not extend the life of tombstones already counting down in clean ones.
    """
    cfg = plan.config
    max_entries = cfg.segment_index_bytes // 8  # an offset index entry is 8 bytes
    groups: list[list[_Source]] = []
    size = entries = 0
    for source in plan.sources:
        if source.base_offset >= plan.end_offset:
            break
        current = groups[-1] if groups else None
        if (
            current is None
            or current[0].dirty != source.dirty
            or size + source.size > cfg.segment_bytes
            or entries + source.index_entries > max_entries
            or source.next_offset - 1 - current[0].base_offset > _INT_MAX
        ):
            groups.append([source])
            size = entries = 0
        else:
            current.append(source)
        size += source.size
        entries += source.index_entries
    plan.stats.segments_before = sum(len(g) for g in groups)
    return groups


@dataclass(slots=True)
class _OpenAbort:
    entry: TxnIndexEntry
    met: bool = False  # a batch of it was read in this pass
    header_kept: bool = False  # ... and kept, emptied, as its producer's last


class _Transactions:
    """Which batches of a pass belong to aborted transactions and which markers are still
    needed, learnt by meeting the batches in log order (Kafka's CleanedTransactionMetadata).

    A producer's transactions never interleave, so its next control batch after a data batch
    of a transaction is that transaction's marker; the marker's record need not be read.
    """

    def __init__(self, aborted: list[TxnIndexEntry], start: int) -> None:
        # Aborts whose markers lie at or after ``start``: the pass meets each of them.
        self._pending = deque(e for e in aborted if e.last_offset >= start)
        self._aborted: dict[int, _OpenAbort] = {}
        self._committed: set[int] = set()  # producers with committed data met, marker not

    def _open_up_to(self, offset: int) -> None:
        pending = self._pending
        while pending and pending[0].first_offset <= offset:
            entry = pending.popleft()
            self._aborted.setdefault(entry.producer_id, _OpenAbort(entry))

    def is_aborted(self, header: BatchHeader, keeps_header: bool) -> bool:
        """Whether a data batch belongs to an aborted transaction (its records all go);
        ``keeps_header``: the cleaner keeps its empty header anyway."""
        self._open_up_to(header.last_offset)
        if not header.attributes & ATTR_TRANSACTIONAL:
            return False
        found = self._aborted.get(header.producer_id)
        if found is None:
            self._committed.add(header.producer_id)
            return False
        found.met = True
        found.header_kept = found.header_kept or keeps_header
        return True

    def on_marker(self, header: BatchHeader) -> tuple[bool, TxnIndexEntry | None, bool]:
        """For a control batch: (whether a batch of its transaction was met, so the marker
        must stay; the abort's index entry the cleaned segment must keep, if any; whether
        data of it stays in the log after this pass)."""
        self._open_up_to(header.last_offset)
        pid = header.producer_id
        found = self._aborted.pop(pid, None)
        if found is not None:
            if not found.met:
                return False, None, False
            return True, found.entry, found.header_kept
        if pid in self._committed:
            self._committed.discard(pid)
            return True, None, True
        return False, None, False


def _is_producers_last(header: BatchHeader, last_batches: dict[int, tuple[int, int]]) -> bool:
    """Whether the batch carries what the producer state must find after a reload: the
    producer's newest data batch, or, when a marker came after its epoch began, that epoch's
    markers (Kafka's isBatchLastRecordOfProducer)."""
    if header.producer_id < 0:
        return False
    last = last_batches.get(header.producer_id)
    if last is None:
        return False
    last_data_offset, epoch = last
    if header.attributes & ATTR_CONTROL:
        return last_data_offset < 0 and header.producer_epoch == epoch
    return header.last_offset == last_data_offset


def _clean_group(
    plan: CleanPlan,
    group: list[_Source],
    offsets: dict[bytes, int],
    txns: _Transactions,
    abort: threading.Event | None,
) -> _Staged:
    """Write the records of ``group`` that survive into one ``.cleaned`` segment."""
    cfg = plan.config
    dirty = group[0].dirty
    file_time = plan.now_ms if dirty else max(s.last_modified_ms for s in group)
    out = _new_cleaned_segment(plan, group[0].base_offset)
    writer = _Writer(out, plan.stats)
    unchanged = len(group) == 1
    kept_deletes = False  # tombstones or markers that a later pass may drop
    try:
        for source in group:
            expired = source.last_modified_ms + cfg.delete_retention_ms < plan.now_ms
            drop_deletes = not source.dirty and expired
            for header, data in _read_batches(source, abort):
                last = _is_producers_last(header, plan.last_batches)
                if header.is_control:
                    kept, waiting = _filter_marker(header, data, txns, drop_deletes, last, out,
                                                   plan.stats)
                else:
                    aborted = txns.is_aborted(header, keeps_header=last)
                    kept, tombstones = _filter_batch(header, data, offsets, drop_deletes,
                                                     aborted, last, plan.stats)
                    waiting = tombstones > 0
                unchanged = unchanged and kept is data
                kept_deletes = kept_deletes or waiting
                if kept is not None:
                    writer.add(kept)
        writer.flush()
    except BaseException:
        _delete_segment_files(out)
        raise
    if kept_deletes:
        expiry = file_time + cfg.delete_retention_ms
        current = plan.tombstone_expiry_ms
        plan.tombstone_expiry_ms = expiry if current is None else min(current, expiry)
    if unchanged:
        # Nothing to rewrite; a segment cleaned for the first time is still re-dated, which
        # starts its tombstones' delete.retention.ms.
        _delete_segment_files(out)
        return _Staged([group[0].segment], None, file_time if dirty else None)
    out.seal()
    out.flush()
    _set_mtime(out.log_path, file_time)
    out.last_modified_ms = file_time
    return _Staged([s.segment for s in group], out)


def _filter_marker(
    header: BatchHeader,
    data: bytes,
    txns: _Transactions,
    drop_deletes: bool,
    producers_last: bool,
    out: LogSegment,
    stats: CleanStats,
) -> tuple[bytes | None, bool]:
    """(what to write for this marker, whether a later pass may drop it)."""
    stats.bytes_read += header.size
    needed, entry, data_remains = txns.on_marker(header)
    if entry is not None:
        out.txn_index.append(entry)
    if producers_last or needed:
        return data, not producers_last and not data_remains
    if drop_deletes:
        stats.markers_dropped += 1
        return None, False
    return data, True


def _filter_batch(
    header: BatchHeader,
    data: bytes,
    offsets: dict[bytes, int],
    drop_tombstones: bool,
    aborted: bool,
    producers_last: bool,
    stats: CleanStats,
) -> tuple[bytes | None, int]:
    """(what to write for this data batch, how many tombstones it keeps).

    Returns ``data`` itself when every record stays, None when none does and the batch is
    not its producer's last (that one keeps its header, emptied).
    """
    stats.bytes_read += header.size
    if producers_last and header.record_count == 0:
        return data, 0  # emptied by an earlier pass
    if aborted:
        stats.aborted_batches_dropped += 1
        stats.records_read += header.record_count
        return (_empty_batch(header) if producers_last else None), 0
    records = _decode(header, data)
    if records is None:
        return data, 0
    kept = _select_records(records, offsets, drop_tombstones, stats)
    tombstones = sum(1 for r in kept if r.key is not None and r.value is None)
    if len(kept) == len(records) and (kept or producers_last):
        return data, tombstones
    if not kept:
        stats.batches_dropped += 1
        return (_empty_batch(header) if producers_last else None), 0
    stats.batches_reencoded += 1
    return _reencode(header, kept), tombstones


def _empty_batch(header: BatchHeader) -> bytes:
    """The batch's header with no records (Kafka's DefaultRecordBatch.writeEmptyHeader):
    offsets, producer id, epoch and base sequence kept, so the next offset and the
    producer's last sequence stay what they were; uncompressed; both timestamps the max."""
    attributes = header.attributes & (ATTR_TIMESTAMP_TYPE | ATTR_TRANSACTIONAL | ATTR_CONTROL)
    head = bytearray(_BATCH_HEADER.pack(
        header.base_offset, HEADER_SIZE - LOG_OVERHEAD, header.partition_leader_epoch, 2, 0,
        attributes, header.last_offset_delta, header.max_timestamp, header.max_timestamp,
        header.producer_id, header.producer_epoch, header.base_sequence, 0,
    ))
    struct.pack_into(">I", head, 17, crc32c.crc32c(memoryview(head)[21:]))
    return bytes(head)


def _select_records(
    records: list[Record], offsets: dict[bytes, int], drop_tombstones: bool, stats: CleanStats
) -> list[Record]:
    """The records that stay: the latest of their key (a tombstone only while it must)."""
    kept: list[Record] = []
    for record in records:
        if record.key is not None:
            latest = offsets.get(key_digest(record.key))
            if latest is not None and record.offset < latest:
                continue  # superseded by a later record of the same key
            if record.value is None and drop_tombstones:
                stats.tombstones_dropped += 1
                continue
        kept.append(record)
    stats.records_read += len(records)
    stats.records_kept += len(kept)
    return kept


def _reencode(header: BatchHeader, kept: list[Record]) -> bytes:
    """A batch of the kept records that otherwise reads as the original did."""
    batch = encode_batch(
        kept,
        header.base_offset,
        codec=header.compression,
        last_offset_delta=header.last_offset_delta,
        producer_id=header.producer_id,
        producer_epoch=header.producer_epoch,
        base_sequence=header.base_sequence,
        partition_leader_epoch=header.partition_leader_epoch,
        attributes=header.attributes,
    )
    if header.attributes & ATTR_TIMESTAMP_TYPE:
        # LogAppendTime: the batch's max timestamp is the broker's append time, not the
        # largest record timestamp encode_batch puts there.
        head = stamp_header(
            batch, header.base_offset, header.partition_leader_epoch, header.max_timestamp
        )
        batch = bytes(head) + batch[HEADER_SIZE:]
    return batch


class _Writer:
    """Appends batches to the cleaned segment a writev at a time; the segment indexes them."""

    def __init__(self, segment: LogSegment, stats: CleanStats) -> None:
        self.segment = segment
        self.stats = stats
        self.chunks: list[bytes] = []
        self.headers: list[BatchHeader] = []
        self.pending = 0

    def add(self, batch: bytes) -> None:
        self.chunks.append(batch)
        self.headers.append(parse_header(batch))
        self.pending += len(batch)
        if self.pending >= _WRITE_CHUNK or len(self.chunks) >= _WRITE_BATCHES:
            self.flush()

    def flush(self) -> None:
        if self.chunks:
            self.segment.append(self.chunks, self.headers)
            self.stats.bytes_written += self.pending
        self.chunks, self.headers, self.pending = [], [], 0


def _segment_files(directory: Path, base_offset: int, suffix: str) -> list[Path]:
    stem = segment_name(base_offset)
    return [directory / f"{stem}{ext}{suffix}" for ext in _SEGMENT_SUFFIXES]


def _new_cleaned_segment(plan: CleanPlan, base_offset: int) -> LogSegment:
    # Leftovers of an abandoned pass would be appended to: start from empty files.
    for path in _segment_files(plan.directory, base_offset, CLEANED_SUFFIX):
        path.unlink(missing_ok=True)
    return LogSegment(
        plan.directory, base_offset, plan.config.index_interval_bytes,
        plan.config.segment_index_bytes, CLEANED_SUFFIX,
    )


def _delete_segment_files(segment: LogSegment) -> None:
    segment.close()
    for path in segment.files():
        path.unlink(missing_ok=True)


def _set_mtime(path: Path, ms: int) -> None:
    ns = ms * 1_000_000
    os.utime(path, ns=(ns, ns))


# -- restart after a crash mid-swap --------------------------------------------------------


def finish_interrupted_swaps(directory: Path) -> set[int]:
    """Discard unfinished cleanings and complete interrupted swaps; Kafka's LogLoader rules.

    ``*.cleaned`` files were never committed: deleted. A ``<base>.log.swap`` was complete
    (flushed before the rename): the segments it replaces are those whose base offset lies in
    [base, its next offset), and any of them not yet retired is deleted before the swap file
    takes the live name. Index files of a swapped segment are deleted too; the returned base
    offsets tell the log to rebuild them. A segment that was replaced but lies beyond the
    swap's last batch (every record of it dropped) survives a crash; its records are all
    superseded, and as the checkpoint had not moved yet, the next pass removes them again.
    """
    for path in directory.glob(f"*{CLEANED_SUFFIX}"):
        path.unlink(missing_ok=True)
    swapped: set[int] = set()
    for swap in sorted(directory.glob(f"*{LOG_SUFFIX}{SWAP_SUFFIX}")):
        base = _base_offset_of(swap.name)
        if base is None:
            continue
        end = _next_offset_of(swap, base)
        for path in directory.iterdir():
            offset = _base_offset_of(path.name)
            if path.name.endswith(SWAP_SUFFIX) or offset is None:
                continue
            if offset == base or base <= offset < end:
                log.info("%s: removing %s, replaced by an interrupted swap", directory.name,
                         path.name)
                path.unlink(missing_ok=True)
        os.replace(swap, directory / f"{segment_name(base)}{LOG_SUFFIX}")
        swapped.add(base)
    for path in directory.glob(f"*{SWAP_SUFFIX}"):
        path.unlink(missing_ok=True)  # index files of a swap: rebuilt from the log
    return swapped


def _base_offset_of(name: str) -> int | None:
    stem, dot, rest = name.partition(".")
    is_segment_file = any(f".{rest}".startswith(ext) for ext in _SEGMENT_SUFFIXES)
    if len(stem) != _NAME_LEN or not stem.isdigit() or not dot or not is_segment_file:
        return None
    return int(stem)


def _next_offset_of(path: Path, base_offset: int) -> int:
    """One past the last offset held by the log file at ``path`` (header walk)."""
    end = base_offset
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        position = 0
        while position + HEADER_SIZE <= size:
            header = parse_header(os.pread(fd, HEADER_SIZE, position))
            if header.size < HEADER_SIZE:
                break
            end = header.next_offset
            position += header.size
    finally:
        os.close(fd)
    return end


# -- the background cleaner ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CleanTarget:
    """A log the cleaner may compact, named by ``key`` (the replica manager's partition)."""

    key: Hashable
    log: Log
    max_offset: int  # the high watermark: nothing at or above it is cleaned


class LogCleaner:
    """Chooses the filthiest compacted log and cleans it; remembers each log's checkpoint.

    Holds no files: the replica manager loads ``checkpoints`` at start-up and saves them
    after every pass, as Kafka's LogCleanerManager does with cleaner-offset-checkpoint.
    """

    def __init__(self) -> None:
        self.checkpoints: dict[Hashable, int] = {}
        self._tombstone_expiry: dict[Hashable, int] = {}
        self._uncleanable: set[Hashable] = set()
        self._abort = threading.Event()

    def choose(
        self, targets: Iterable[CleanTarget], now_ms: int
    ) -> tuple[CleanTarget, CleanableRange] | None:
        """The compacted log with the largest dirty ratio above its minimum, if any.

        A log whose earliest kept tombstone has expired is due too, dirty or not.
        """
        best: tuple[CleanTarget, CleanableRange] | None = None
        for target in targets:
            config = target.log.config
            if "compact" not in config.cleanup_policy or target.key in self._uncleanable:
                continue
            found = cleanable_range(
                target.log, self.checkpoints.get(target.key), now_ms, target.max_offset
            )
            expiry = self._tombstone_expiry.get(target.key)
            due = expiry is not None and now_ms > expiry
            dirty = found.dirty_bytes > 0 and found.ratio > config.min_cleanable_dirty_ratio
            if found.first_uncleanable <= target.log.log_start_offset or not (dirty or due):
                continue
            if best is None or found.ratio > best[1].ratio:
                best = (target, found)
        return best

    async def clean_filthiest(
        self, targets: Iterable[CleanTarget], now_ms: int | None = None
    ) -> CleanResult | None:
        """Clean the filthiest log, the heavy part in a worker thread; None if none needed it.

        A log that fails with an unexpected error is marked uncleanable until restart, as
        Kafka marks its partition, so one bad log cannot keep the cleaner busy failing.
        """
        now_ms = int(time.time() * 1000) if now_ms is None else now_ms
        chosen = self.choose(targets, now_ms)
        if chosen is None:
            return None
        target, cleanable = chosen
        try:
            plan = plan_cleaning(target.log, cleanable, now_ms)
            if plan is None:
                return None
            try:
                staged = await asyncio.to_thread(execute_plan, plan, self._abort)
            except asyncio.CancelledError:
                self._abort.set()  # the thread sees it and deletes what it wrote
                raise
            result = commit_cleaning(target.log, plan, staged)
        except CleaningAborted:
            return None
        except Exception:
            log.exception("cleaning %s failed; it is not cleaned again until restart",
                          target.log.dir.name)
            self._uncleanable.add(target.key)
            return None
        self._record(target, result)
        return result

    def _record(self, target: CleanTarget, result: CleanResult) -> None:
        if result.aborted:
            return
        self.checkpoints[target.key] = result.end_offset
        if result.tombstone_expiry_ms is None:
            self._tombstone_expiry.pop(target.key, None)
        else:
            self._tombstone_expiry[target.key] = result.tombstone_expiry_ms
        s = result.stats
        log.info(
            "cleaned %s up to offset %d: %d -> %d bytes, %d -> %d records, %d -> %d segments",
            target.log.dir.name, result.end_offset, s.bytes_read, s.bytes_written, s.records_read,
            s.records_kept, s.segments_before, s.segments_after,
        )

    def forget(self, key: Hashable) -> None:
        """Drop what is known of a log that was deleted (a new one may reuse its name)."""
        self.checkpoints.pop(key, None)
        self._tombstone_expiry.pop(key, None)
        self._uncleanable.discard(key)

    def stop(self) -> None:
        """Make a pass in progress give up at its next batch."""
        self._abort.set()
