"""The log of one partition: an ordered series of segments with offsets, epochs and producers.

Plays the part of Kafka's UnifiedLog + LocalLog for local storage: assigns offsets on
append, rolls segments by size, age or full index, reads by offset or timestamp, enforces
retention, and recovers after an unclean shutdown (scan from the recovery point, truncate
at the first invalid batch, rebuild indexes). It keeps the producer state, transactions
included: every batch written, by leader or follower or found on reload, goes through
``ProducerStateManager.update`` or, for a marker, ``_complete_txn``; an abort marker adds an
entry to its segment's aborted-transaction index.
It knows nothing of leaders, ISR or requests; the partition above it decides the leader
epoch and the high watermark, and checks producers and markers before appending.
Not thread-safe: every call runs on the broker's event loop.

Opening a directory (leftovers, interrupted swaps, recovery) is ``log_loader.py``'s, reading
by offset or timestamp ``log_read.py``'s; the cleaner (``cleaner.py``) uses the log, never the
other way round.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from bisect import bisect_right
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

from broker.protocol.records import (
    ATTR_CONTROL,
    HEADER_SIZE,
    BatchHeader,
    InvalidRecordError,
    parse_header,
    split_batches,
    stamp_header,
)
from broker.storage.leader_epoch import LeaderEpochCache
from broker.storage.log_config import LogConfig
from broker.storage.log_dir_failure import NothingWritten, out_of_files
from broker.storage.log_loader import load_segments
from broker.storage.log_read import (
    ReadResult,
    max_timestamp_offset,
    offset_for_timestamp,
    read_segments,
)
from broker.storage.producer_state import CompletedTxn, ProducerStateManager
from broker.storage.segment import SWAP_SUFFIX, LogSegment
from broker.storage.txn_index import (
    AbortedTxn,
    TxnIndexEntry,
    encode_marker,
    read_marker,
)

log = logging.getLogger(__name__)


class AppendResult(NamedTuple):  # a tuple: one is built per append
    first_offset: int
    last_offset: int
    log_append_time: int  # -1 unless the topic uses LogAppendTime
    duplicate: bool = False


class OffsetOutOfRange(Exception):
    pass


class Log:
    def __init__(
        self,
        directory: Path,
        config: LogConfig,
        recovery_point: int = 0,
        clean_shutdown: bool = True,
        scheduler: Callable[[float, Callable[[], None]], Any] | None = None,
        log_start_offset: int = 0,
    ) -> None:
        """``log_start_offset`` is the checkpointed one: DeleteRecords can put it inside the
        first segment, where only the checkpoint remembers it across a restart."""
        self.dir = directory
        self.config = config
        self.dir.mkdir(parents=True, exist_ok=True)
        self._schedule = scheduler
        self.segments: list[LogSegment] = []
        self._bases: list[int] = []
        # The segments whose aborted-transaction index has entries, in log order: a
        # read_committed fetch on a topic that never aborted a transaction looks at nothing.
        self._txn_segments: list[LogSegment] = []
        self.producer_state = ProducerStateManager()
        self.epoch_cache = LeaderEpochCache(directory)
        self.recovery_point = recovery_point
        self.log_start_offset = 0  # set by _load
        self._unflushed_messages = 0
        self._last_flush_ms = time.monotonic() * 1000
        self._load(clean_shutdown)
        self.log_start_offset = min(max(log_start_offset, self.segments[0].base_offset),
                                    self.log_end_offset)

    # -- loading -------------------------------------------------------------------------

    def _new_segment(self, base_offset: int) -> LogSegment:
        return LogSegment(
            self.dir, base_offset, self.config.index_interval_bytes, self.config.segment_index_bytes
        )

    def _load(self, clean_shutdown: bool) -> None:
        """Open the segments on disk (``log_loader``), then replay them into the producer
        state and leader epochs; recovered, the log is all below its recovery point."""
        opened: list[LogSegment] = []  # closed if the load fails (out of fds: tried later)
        try:
            loaded = load_segments(self.dir, lambda base: opened.append(
                self._new_segment(base)) or opened[-1], self.config.max_message_bytes,
                self.recovery_point, clean_shutdown)
            for segment in loaded.segments:
                self._add_segment(segment)
            self.epoch_cache.truncate_from_end(self.log_end_offset)
            self._rebuild_producer_and_epoch_state(loaded.rebuild, assign_epochs=True)
        except BaseException:
            for segment in opened:
                with contextlib.suppress(OSError):
                    segment.close()
            raise
        self.recovery_point = self.log_end_offset

    def _rebuild_producer_and_epoch_state(
        self, rebuild: list[LogSegment], assign_epochs: bool = False
    ) -> None:
        """Replay every batch header of the log into a fresh producer state, Kafka's
        snapshot-less reload; the aborted-transaction index of each segment in ``rebuild``
        is rewritten from what the replay finds (markers' LSOs included), and the leader
        epoch cache is filled from the headers if asked and it is empty. Producers expired
        by now stay forgotten, as Kafka drops them when it loads a snapshot."""
        assign_epochs = assign_epochs and not self.epoch_cache.entries
        self.producer_state = ProducerStateManager()
        redo = {id(segment) for segment in rebuild}
        for segment in self.segments:
            entries: list[TxnIndexEntry] | None = [] if id(segment) in redo else None
            for batch in segment.batches_from(0):
                header = batch.header
                if header.attributes & ATTR_CONTROL:
                    raw = segment.read_bytes(batch.position, header.size)
                    entry = self._complete_txn(header, raw)
                    if entry is not None and entries is not None:
                        entries.append(entry)
                else:
                    self.producer_state.update(header)
                if assign_epochs:
                    self.epoch_cache.assign(header.partition_leader_epoch, header.base_offset)
            if entries is not None:
                segment.txn_index.replace_all(entries)
        self.producer_state.remove_expired(int(time.time() * 1000),
                                           self.config.producer_id_expiration_ms)
        self._refresh_txn_segments()

    def _refresh_txn_segments(self) -> None:
        self._txn_segments = [s for s in self.segments if s.txn_index.entries]

    def _add_segment(self, segment: LogSegment) -> None:
        self.segments.append(segment)
        self._bases.append(segment.base_offset)

    # -- offsets -------------------------------------------------------------------------

    @property
    def active_segment(self) -> LogSegment:
        return self.segments[-1]

    @property
    def log_end_offset(self) -> int:
        return self.active_segment.next_offset

    @property
    def size_bytes(self) -> int:
        return sum(s.size for s in self.segments)

    def _segment_for(self, offset: int) -> int:
        return max(0, bisect_right(self._bases, offset) - 1)

    # -- appending -----------------------------------------------------------------------

    def append_as_leader(
        self, batch: bytes | memoryview, header: BatchHeader, leader_epoch: int,
        max_timestamp: int | None = None,
    ) -> AppendResult:
        """Give an already-validated batch its offsets and leader epoch, and write it.

        Only a patched copy of the 61-byte header is made; the records go to the file
        straight from the request buffer. ``max_timestamp`` is the records' largest, as the
        validator found it. Idempotence checks (duplicates, sequence and epoch
        errors) are done by the caller through ``producer_state`` first.
        """
        offset = self.log_end_offset
        append_time = None
        if self.config.message_timestamp_type == "LogAppendTime":
            append_time = int(time.time() * 1000)
        head = stamp_header(batch, offset, leader_epoch, append_time, max_timestamp)
        assigned = parse_header(head)  # the header exactly as it goes to disk
        size = assigned.size
        try:
            self._maybe_roll(size, assigned)
        except OSError as e:  # a roll changes nothing it cannot redo: refused if out of fds
            if out_of_files(e):
                raise NothingWritten(e.errno, f"rolling {self.dir.name}: {e}") from e
            raise
        self.active_segment.append([head, memoryview(batch)[HEADER_SIZE:size]], [assigned])
        self.epoch_cache.assign(leader_epoch, offset)
        if assigned.attributes & ATTR_CONTROL:
            self._track_marker(assigned, memoryview(batch)[:size])
        else:
            self.producer_state.update(assigned)
        self._unflushed_messages += header.record_count
        self._maybe_flush()
        stamped = -1 if append_time is None else append_time
        return AppendResult(offset, assigned.last_offset, stamped)

    def append_control_as_leader(
        self, producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int,
        leader_epoch: int,
    ) -> AppendResult:
        """Write a COMMIT or ABORT marker for the producer's transaction (WriteTxnMarkers).

        The caller checks it first with ``producer_state.check_marker``; this only writes.
        The producer's open transaction ends, and an abort is added to the active
        segment's aborted-transaction index.
        """
        batch = encode_marker(producer_id, producer_epoch, commit, coordinator_epoch)
        return self.append_as_leader(batch, parse_header(batch), leader_epoch)

    def _track_marker(self, header: BatchHeader, batch: bytes | memoryview) -> None:
        """Producer state and aborted-transaction index for a marker just written to the
        active segment (``batch``: its bytes; the header may be the unstamped one)."""
        entry = self._complete_txn(header, batch)
        if entry is None:
            return
        segment = self.active_segment
        segment.txn_index.append(entry)
        if not self._txn_segments or self._txn_segments[-1] is not segment:
            self._txn_segments.append(segment)

    def _complete_txn(self, header: BatchHeader, batch: bytes | memoryview
                      ) -> TxnIndexEntry | None:
        """Apply a control batch to the producer state; the index entry it calls for if it
        aborted a transaction. The entry's last stable offset is the first unstable offset
        once this one is done, or the marker's next offset (Kafka's lastStableOffset(txn)):
        every abort completed later began at or after it, which lets a fetch stop early."""
        marker = read_marker(batch) if header.record_count else None
        if marker is None:
            if header.record_count:
                return None  # a control record of some other kind: not a transaction's
            # An empty control batch: a cleaner emptied a marker whose transaction is gone
            # from the log; it still carries the producer's epoch.
            self.producer_state.complete(header, True, -1)
            return None
        done = self.producer_state.complete(header, marker.commit, marker.coordinator_epoch)
        if done is None or not done.is_aborted:
            return None
        return _index_entry(done, self.producer_state.first_unstable_offset)

    @property
    def first_unstable_offset(self) -> int | None:
        """The first offset of the oldest open transaction (None if none is open): the
        partition's last stable offset is the lower of it and the high watermark."""
        return self.producer_state.first_unstable_offset

    def collect_aborted_transactions(self, start_offset: int, upper_bound_offset: int
                                     ) -> list[AbortedTxn]:
        """The aborted transactions with records in [start, upper bound), for a
        read_committed fetch (Kafka's collectAbortedTransactions). A marker can sit in a
        later segment than its records, so segments from the one holding ``start_offset``
        on are looked at, until an entry's last stable offset reaches the upper bound.
        In memory only: no file is read."""
        found: list[AbortedTxn] = []
        for segment in self._txn_segments:
            if segment.next_offset > start_offset and segment.txn_index.collect(
                start_offset, upper_bound_offset, found
            ):
                break
        return found

    def append_as_follower(self, records: bytes | memoryview) -> int:
        """Write batches fetched from the leader as they are: offsets and epochs already set.

        Every batch is CRC-checked and must start at or after the log end (compaction leaves
        gaps); an overlap means follower and leader disagree, which truncation settles
        first. Returns the number of records appended.
        """
        headers = split_batches(records, allow_empty=True)
        view = memoryview(records)
        count = 0
        start = pos = 0  # the run of batches not written yet: view[start:pos]
        pending: list[BatchHeader] = []
        for header in headers:
            if header.base_offset < (pending[-1].next_offset if pending else self.log_end_offset):
                raise InvalidRecordError(
                    f"fetched batch at offset {header.base_offset}, log end is "
                    f"{self.log_end_offset}"
                )
            run = pos - start + header.size
            # A run bound for an empty active segment must still respect segment.bytes:
            # one fetch response can hold many segments' worth of batches.
            if pending and (self._needs_roll(run, header) or run > self.config.segment_bytes):
                self._append_run(view[start:pos], pending)
                start, pending = pos, []
            pending.append(header)
            pos += header.size
            count += header.record_count
        if pending:
            self._append_run(view[start:pos], pending)
        self._unflushed_messages += count
        self._maybe_flush()
        return count

    def _append_run(self, data: memoryview, headers: list[BatchHeader]) -> None:
        """Write consecutive fetched batches with one write, rolling first if due."""
        self._maybe_roll(len(data), headers[-1])
        self.active_segment.append([data], headers)
        position = 0
        for header in headers:
            self.epoch_cache.assign(header.partition_leader_epoch, header.base_offset)
            if header.attributes & ATTR_CONTROL:
                self._track_marker(header, data[position : position + header.size])
            else:
                self.producer_state.update(header)
            position += header.size

    def reset_to(self, offset: int) -> None:
        """Drop every segment and start empty at ``offset``: a follower behind the leader's
        log start offset (Kafka's truncateFullyAndStartAt)."""
        for segment in self.segments:
            segment.close()
            for path in segment.files():
                path.unlink(missing_ok=True)
        self.segments.clear()
        self._bases.clear()
        segment = self._new_segment(offset)
        segment.next_offset = offset
        self._add_segment(segment)
        self.epoch_cache.truncate_from_end(0)
        self.producer_state = ProducerStateManager()
        self._txn_segments = []
        self.recovery_point = offset
        self.log_start_offset = offset

    def maybe_increment_log_start_offset(self, offset: int) -> bool:
        """Move the log start forward (DeleteRecords on a leader, the leader's start on a
        follower); records below it are gone for readers at once, their segments go with
        the next retention pass. Never past the log end."""
        offset = min(offset, self.log_end_offset)
        if offset <= self.log_start_offset:
            return False
        self.log_start_offset = offset
        self.epoch_cache.truncate_from_start(offset)
        return True

    def _maybe_roll(self, incoming: int, first: BatchHeader) -> None:
        if self._needs_roll(incoming, first):
            self.roll()

    def _needs_roll(self, incoming: int, last: BatchHeader) -> bool:
        """Whether ``incoming`` bytes ending with batch ``last`` belong in a new segment."""
        segment = self.active_segment
        if segment.size == 0:
            return False
        return (
            segment.size + incoming > self.config.segment_bytes
            or time.time() * 1000 - segment.created_ms >= self.config.segment_ms
            or segment.is_full
            or last.last_offset - segment.base_offset > 2**31 - 1
        )

    def roll(self) -> LogSegment:
        """Start a new active segment at the log end offset (no-op if the active one is empty)."""
        if self.active_segment.size == 0:
            return self.active_segment
        old = self.active_segment
        old.seal()
        segment = self._new_segment(self.log_end_offset)
        segment.next_offset = old.next_offset
        self._add_segment(segment)
        # The rolled segment is complete, but not yet known to be on disk: the recovery
        # point passes it once the log manager has fsynced it off the event loop
        # (unsynced_sealed, advance_recovery_point), as Kafka's roll schedules a flush.
        return segment

    def unsynced_sealed(self) -> tuple[list[LogSegment], int]:
        """The sealed segments at or past the recovery point, and the recovery point they
        make once on disk (the active segment's base)."""
        target = self.active_segment.base_offset
        if target <= self.recovery_point:
            return [], target
        return [s for s in self.segments[:-1] if s.next_offset > self.recovery_point], target

    def advance_recovery_point(self, offset: int) -> None:
        """The segments below ``offset`` were fsynced (``unsynced_sealed``). A truncation
        since may have removed them: then the recovery point stays."""
        if self.recovery_point < offset <= self.active_segment.base_offset:
            self.recovery_point = offset

    def _maybe_flush(self) -> None:
        cfg = self.config
        due_by_count = self._unflushed_messages >= cfg.flush_messages
        due_by_time = time.monotonic() * 1000 - self._last_flush_ms >= cfg.flush_ms
        if due_by_count or due_by_time:
            self.flush()

    def flush(self) -> None:
        """Everything written is on disk: the segments from the recovery point on."""
        for segment in self.segments[self._segment_for(self.recovery_point):]:
            segment.flush()
        self._unflushed_messages = 0
        self._last_flush_ms = time.monotonic() * 1000
        self.recovery_point = self.log_end_offset

    # -- reading (log_read.py) -----------------------------------------------------------

    def read(
        self, offset: int, max_bytes: int, max_offset: int, min_one_batch: bool
    ) -> ReadResult:
        """A file region of whole batches, starting at the batch that holds ``offset``
        (``log_read.read_segments``: within ``max_bytes``, before ``max_offset``)."""
        if offset < self.log_start_offset or offset > self.log_end_offset:
            raise OffsetOutOfRange(offset)
        return read_segments(self.segments, self._segment_for(offset), offset, max_bytes,
                             max_offset, min_one_batch)

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int, int] | None:
        """(offset, timestamp, leader epoch) of the first record at or after the log start
        with ts >= ``timestamp``."""
        return offset_for_timestamp(self.segments, timestamp, self.log_start_offset,
                                    self.dir.name)

    def max_timestamp_offset(self) -> tuple[int, int, int] | None:
        """(offset, timestamp, epoch) of the first record with the largest timestamp."""
        return max_timestamp_offset(self.segments, self.dir.name)

    # -- retention -----------------------------------------------------------------------

    def delete_old_segments(self, now_ms: int | None = None,
                            high_watermark: int | None = None) -> int:
        """Delete the oldest segments: those wholly below the log start offset (which
        DeleteRecords moves; never the active one) and, under cleanup.policy delete alone or
        with compact, those past retention.ms or beyond retention.bytes.

        Retention follows Kafka's rules: never a record at or above the high watermark,
        since a follower may not have it yet; and the active segment too once it is wholly
        past retention (rolled first, so the log keeps an empty active segment at its end
        offset), which is what lets a topic whose retention.ms was just lowered lose records
        it wrote into one large segment.
        """
        doomed = sum(1 for i in range(len(self.segments) - 1)
                     if self.segments[i + 1].base_offset <= self.log_start_offset)
        if "delete" in self.config.cleanup_policy:
            now_ms = int(time.time() * 1000) if now_ms is None else now_ms
            doomed = max(doomed, self._past_retention(now_ms, high_watermark))
        if doomed == len(self.segments):
            self.roll()
        if doomed:
            self._delete_segments(doomed)
        return doomed

    def _past_retention(self, now_ms: int, high_watermark: int | None) -> int:
        """How many of the oldest segments retention.ms or retention.bytes lets go."""
        cfg = self.config
        limit = self.log_end_offset if high_watermark is None else high_watermark
        candidates = []
        for i, segment in enumerate(self.segments):
            upper = self.segments[i + 1].base_offset if i + 1 < len(self.segments) else (
                self.log_end_offset
            )
            if upper > limit or segment.size == 0:
                break
            candidates.append(segment)
        doomed = 0
        if cfg.retention_ms >= 0:
            for segment in candidates:
                newest = segment.max_timestamp if segment.max_timestamp >= 0 else (
                    segment.last_modified_ms
                )
                if now_ms - newest <= cfg.retention_ms:
                    break
                doomed += 1
        if cfg.retention_bytes >= 0:
            excess = self.size_bytes - cfg.retention_bytes
            by_size = 0
            for segment in candidates:
                if excess < segment.size:
                    break
                excess -= segment.size
                by_size += 1
            doomed = max(doomed, by_size)
        return doomed

    def _delete_segments(self, count: int) -> None:
        doomed = self.segments[:count]
        del self.segments[:count]
        del self._bases[:count]
        self.log_start_offset = max(self.log_start_offset, self.segments[0].base_offset)
        self.epoch_cache.truncate_from_start(self.log_start_offset)
        self._refresh_txn_segments()
        for segment in doomed:
            log.info("%s: deleting segment %s", self.dir.name, segment.log_path.name)
            renamed = segment.mark_deleted()
            self._later(self.config.file_delete_delay_ms / 1000, segment, renamed)

    def replace_segments(self, old: list[LogSegment], new: LogSegment) -> bool:
        """Swap ``new`` (a cleaned segment, files still suffixed .cleaned) in for ``old``.

        Kafka's LocalLog.replaceSegments: rename to .swap first (from then on a restart
        completes the swap instead of discarding it), retire the old files the way retention
        does (renamed .deleted, closed after file.delete.delay.ms so fetches already sending
        from them finish), then give the new files their live names. Returns False and
        changes nothing if ``old`` is no longer a run of non-active segments of this log
        (retention or truncation got there first).
        """
        start = next((i for i, s in enumerate(self.segments) if s is old[0]), -1)
        end = start + len(old)
        if start < 0 or end >= len(self.segments) or self.segments[start:end] != old:
            return False
        new.change_suffix(SWAP_SUFFIX)
        _fsync_dir(self.dir)
        for segment in old:
            renamed = segment.mark_deleted()
            self._later(self.config.file_delete_delay_ms / 1000, segment, renamed)
        new.change_suffix("")
        self.segments[start:end] = [new]
        self._bases[start:end] = [new.base_offset]
        self._refresh_txn_segments()
        return True

    def _later(self, delay: float, segment: LogSegment, paths: list[Path]) -> None:
        def remove() -> None:
            segment.close()
            for path in paths:
                path.unlink(missing_ok=True)

        if self._schedule is None or delay <= 0:
            remove()
        else:
            self._schedule(delay, remove)

    # -- lifecycle -----------------------------------------------------------------------

    def truncate_to(self, offset: int) -> None:
        """Remove everything at or after ``offset`` (a diverged follower's tail)."""
        if offset >= self.log_end_offset:
            return
        if offset < self.segments[0].base_offset:
            self.reset_to(offset)  # Kafka's truncateFullyAndStartAt
            return
        self.log_start_offset = min(self.log_start_offset, offset)
        while len(self.segments) > 1 and self.active_segment.base_offset >= offset:
            segment = self.segments.pop()
            self._bases.pop()
            segment.close()
            for path in segment.files():
                path.unlink(missing_ok=True)
        self.active_segment.truncate_to(offset)
        self.epoch_cache.truncate_from_end(offset)
        if self.producer_state.truncate_to(offset):
            # Kafka reloads from a snapshot; we re-read the batch headers (truncation is rare).
            # The aborted-transaction indexes were truncated with their segments: kept as is.
            self._rebuild_producer_and_epoch_state([])
        self._refresh_txn_segments()
        self.recovery_point = min(self.recovery_point, offset)

    def close(self) -> None:
        for segment in self.segments:
            segment.close()

    def drop_index_writes(self) -> None:
        """Its directory is being moved away for removal: nothing more is written at the
        old paths (see LogSegment.drop_index_writes)."""
        for segment in self.segments:
            segment.drop_index_writes()

    def delete(self) -> None:
        """Close and remove the whole partition directory."""
        self.close()
        for path in self.dir.iterdir():
            path.unlink(missing_ok=True)
        os.rmdir(self.dir)


def _index_entry(done: CompletedTxn, first_unstable: int | None) -> TxnIndexEntry:
    lso = done.last_offset + 1 if first_unstable is None else first_unstable
    return TxnIndexEntry(done.producer_id, done.first_offset, done.last_offset, lso)


def _fsync_dir(directory: Path) -> None:
    """Make renames in ``directory`` durable before the next step depends on them."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
