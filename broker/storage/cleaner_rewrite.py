"""One cleaning pass's record-level work (Kafka's Cleaner): the offset map, then every group
of segments rewritten into a ``.cleaned`` segment keeping only what must stay.

``cleaner.py`` chooses the log and the range, takes a ``CleanPlan`` of it on the event loop
and swaps the outcome in; everything here runs in a worker thread on the plan alone (the
segments' duplicated descriptors and snapshots of their sizes, aborts and producers) and never
touches a ``Log``: that is what makes it safe off the loop, and why it is a module of its own
with no dependency on the log. The rules (what a record, tombstone or marker needs to stay)
are told in ``cleaner.py``'s module doc; the transactions' part is in ``cleaner_txns.py``.
"""

from __future__ import annotations

import hashlib
import logging
import os
import struct
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

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
from broker.storage.cleaner_txns import CleanedTransactions, is_producers_last
from broker.storage.log_config import LogConfig
from broker.storage.log_loader import SEGMENT_SUFFIXES
from broker.storage.segment import CLEANED_SUFFIX, LogSegment, segment_name
from broker.storage.txn_index import TxnIndexEntry

log = logging.getLogger(__name__)

# Kafka's default dedupe buffer (128 MiB at 24 bytes an entry, 0.9 load factor) holds about
# five million keys; a Python dict entry costs more, so stop a little earlier.
MAX_MAP_ENTRIES = 4_000_000
_DIGEST_SIZE = 16
_READ_CHUNK = 1 << 20
_WRITE_CHUNK = 1 << 20
_WRITE_BATCHES = 512  # stay well below IOV_MAX in one writev
_INT_MAX = 2**31 - 1
# A v2 batch header (records.py's layout), for the empty batches the cleaner writes.
_BATCH_HEADER = struct.Struct(">qiibIhiqqqhii")


class CleaningAborted(Exception):
    """The pass stopped early (broker shutting down); nothing was swapped in."""


class CorruptSegment(Exception):
    """A non-active segment holds a batch that cannot be read whole."""


# -- the plan: what the worker is given --------------------------------------------------


@dataclass(slots=True)
class SourceSegment:
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
    """What one pass did, for its log line and the tests."""

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
    """Everything the worker needs, taken on the event loop, so it never reads the live log."""

    directory: Path
    config: LogConfig
    first_dirty: int
    end_offset: int  # the range's end; the map may pull it in (see build_offset_map)
    now_ms: int
    sources: list[SourceSegment]
    # The aborts of the log with records below end_offset, by first offset (a snapshot of
    # the segments' indexes, taken on the loop).
    aborted: list[TxnIndexEntry] = field(default_factory=list)
    # Producer id -> (last offset of its newest data batch or -1, epoch): ProducerState-
    # Manager.last_batches when the pass was planned; those batches are never dropped.
    last_batches: dict[int, tuple[int, int]] = field(default_factory=dict)
    stats: CleanStats = field(default_factory=CleanStats)
    tombstone_expiry_ms: int | None = None


@dataclass(slots=True)
class StagedSegment:
    """One group's outcome: a cleaned segment to swap in, or an untouched one to re-date."""

    old: list[LogSegment]
    new: LogSegment | None
    touch_ms: int | None = None


def close_sources(sources: Iterable[SourceSegment]) -> None:
    """Close the worker's duplicated descriptors (the log's own stay open)."""
    for source in sources:
        if source.fd >= 0:
            os.close(source.fd)
            source.fd = -1


def execute_plan(plan: CleanPlan, abort: threading.Event | None = None) -> list[StagedSegment]:
    """Build the offset map and write the cleaned segments. Thread-safe: touches no Log.

    Owns the plan's duplicated descriptors and closes them, whatever happens.
    """
    staged: list[StagedSegment] = []
    try:
        offsets = build_offset_map(plan, abort)
        groups = group_segments(plan)
        txns = CleanedTransactions(plan.aborted, groups[0][0].base_offset if groups else 0)
        for group in groups:
            staged.append(_clean_group(plan, group, offsets, txns, abort))
        if abort is not None and abort.is_set():
            raise CleaningAborted
    except BaseException:
        discard_staged(staged)
        raise
    finally:
        close_sources(plan.sources)
    return staged


def discard_staged(staged: Iterable[StagedSegment]) -> None:
    """Delete the cleaned files of a pass that will not be swapped in (aborted, or the log
    changed underneath): they would otherwise stay until the log is next opened."""
    for item in staged:
        if item.new is not None:
            _delete_segment_files(item.new)


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
    txns: CleanedTransactions | None = None
    for source in plan.sources:
        if not source.dirty:
            continue
        if mapped_any and len(offsets) >= MAX_MAP_ENTRIES:
            plan.end_offset = source.base_offset
            break
        mapped_any = True
        if txns is None:
            txns = CleanedTransactions(plan.aborted, source.base_offset)
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
    source: SourceSegment, abort: threading.Event | None
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


def group_segments(plan: CleanPlan) -> list[list[SourceSegment]]:
    """Runs of adjacent segments to merge, as Kafka's groupSegmentsBySize.

    A group stays within segment.bytes, the index size and a 32-bit relative offset, and
    never mixes clean and dirty segments: a dirty group's file time becomes the time of this
    pass, which must not extend the life of tombstones already counting down in clean ones.
    """
    cfg = plan.config
    max_entries = cfg.segment_index_bytes // 8  # an offset index entry is 8 bytes
    groups: list[list[SourceSegment]] = []
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


def _clean_group(
    plan: CleanPlan,
    group: list[SourceSegment],
    offsets: dict[bytes, int],
    txns: CleanedTransactions,
    abort: threading.Event | None,
) -> StagedSegment:
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
                last = is_producers_last(header, plan.last_batches)
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
        return StagedSegment([group[0].segment], None, file_time if dirty else None)
    out.seal()
    out.flush()
    set_mtime(out.log_path, file_time)
    out.last_modified_ms = file_time
    return StagedSegment([s.segment for s in group], out)


def _filter_marker(
    header: BatchHeader,
    data: bytes,
    txns: CleanedTransactions,
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
    return [directory / f"{stem}{ext}{suffix}" for ext in SEGMENT_SUFFIXES]


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


def set_mtime(path: Path, ms: int) -> None:
    """Date a segment file: its last-modified time is the clock of its tombstones and markers
    (``delete.retention.ms`` counts from it), so it is set, never left to the filesystem."""
    ns = ms * 1_000_000
    os.utime(path, ns=(ns, ns))
