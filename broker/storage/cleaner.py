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
   ``Log.replace_segments`` and ``log_loader.finish_interrupted_swaps``) and moves the
   checkpoint to the end of the range. The checkpoint is saved by the log manager in
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
  wrote malformed records under a valid CRC; see docs/broker.md), unless they belong
  to an aborted transaction.
- No max.compaction.lag.ms, cleaner I/O throttling or dedupe buffer setting.

Threading: choosing a log, preparing and swapping run on the event loop; building the map and
writing the cleaned files (all the per-record work) run in a worker thread, on duplicated file
descriptors, so retention or a topic deletion closing a segment meanwhile cannot pull a
descriptor from under it. If the log changed underneath (a segment retained away or
truncated), the swap is refused and the pass is abandoned without moving the checkpoint.

The modules, by job: this one chooses the log and its range, plans a pass and commits it, and
runs the background cleaner; ``cleaner_rewrite.py`` does the worker thread's part (offset
map, filtering, rewriting; it never sees a ``Log``), with ``cleaner_txns.py`` for the
transactions; ``log_loader.py`` completes a swap a crash interrupted when the log is opened.
Only this module knows the ``Log``, and the log imports none of them.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from collections.abc import Hashable, Iterable
from dataclasses import dataclass

from broker.storage.cleaner_rewrite import (
    CleaningAborted,
    CleanPlan,
    CleanStats,
    SourceSegment,
    StagedSegment,
    close_sources,
    discard_staged,
    execute_plan,
    set_mtime,
)
from broker.storage.log import Log
from broker.storage.segment import LogSegment

log = logging.getLogger(__name__)


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


# -- one pass: plan (event loop), execute (worker thread: cleaner_rewrite), commit (loop) --


@dataclass(frozen=True, slots=True)
class CleanResult:
    """A pass's outcome: where the checkpoint moves, unless the pass was abandoned."""

    end_offset: int  # the new checkpoint: everything below it is clean
    stats: CleanStats
    tombstone_expiry_ms: int | None  # when the earliest kept tombstone may go
    aborted: bool = False


def plan_cleaning(log_: Log, cleanable: CleanableRange, now_ms: int) -> CleanPlan | None:
    """Pick the segments of ``cleanable`` and duplicate their descriptors (on the loop)."""
    sources: list[SourceSegment] = []
    try:
        for segment in log_.segments[:-1]:
            if segment.base_offset >= cleanable.first_uncleanable:
                break
            sources.append(SourceSegment(
                segment, os.dup(segment.fd), segment.size, segment.base_offset,
                segment.next_offset, segment.offset_index.entries,
                _is_dirty(segment, cleanable.first_dirty), segment.last_modified_ms,
            ))
    except OSError:
        close_sources(sources)
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


def commit_cleaning(log_: Log, plan: CleanPlan, staged: list[StagedSegment]) -> CleanResult:
    """Swap the cleaned segments in, oldest first (on the loop).

    Stops at the first group whose segments left the log meanwhile; then the checkpoint does
    not move, and the next pass starts again from the old one.
    """
    stats = plan.stats
    for i, item in enumerate(staged):
        if item.new is None:
            segment = item.old[0]
            if item.touch_ms is not None and any(s is segment for s in log_.segments):
                set_mtime(segment.log_path, item.touch_ms)
                segment.last_modified_ms = item.touch_ms
            continue
        if not log_.replace_segments(item.old, item.new):
            log.info("%s: log changed while cleaning; pass abandoned", log_.dir.name)
            discard_staged(staged[i:])
            return CleanResult(plan.first_dirty, stats, None, aborted=True)
    stats.segments_after = stats.segments_before - sum(len(s.old) - 1 for s in staged)
    return CleanResult(plan.end_offset, stats, plan.tombstone_expiry_ms)


def clean_log(
    log_: Log, checkpoint: int | None, now_ms: int, max_offset: int | None = None
) -> CleanResult | None:
    """One whole pass, synchronously: what the background task does, minus the thread."""
    plan = plan_cleaning(log_, cleanable_range(log_, checkpoint, now_ms, max_offset), now_ms)
    if plan is None:
        return None
    return commit_cleaning(log_, plan, execute_plan(plan))


# -- the background cleaner ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CleanTarget:
    """A log the cleaner may compact, named by ``key`` (the log manager's partition)."""

    key: Hashable
    log: Log
    max_offset: int  # the high watermark: nothing at or above it is cleaned


class LogCleaner:
    """Chooses the filthiest compacted log and cleans it; remembers each log's checkpoint.

    Holds no files: the log manager loads ``checkpoints`` at start-up and saves them
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
