"""Reading a log's segments: by offset for Fetch, by timestamp for ListOffsets.

Functions over the segment list rather than methods of ``Log``: a read changes nothing, needs
none of the log's producer, epoch or recovery state, and so sits apart from the code that
appends, rolls and deletes, which is what ``log.py`` is about. ``Log.read`` checks the offset
against the log's bounds and finds the segment; everything after that is here.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from broker.protocol.batch_codec import CorruptRecords, first_record_at_or_after
from broker.protocol.file_region import FileRegion
from broker.storage.segment import BatchPosition, LogSegment

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ReadResult:
    """What a fetch sends from one partition: a region of whole batches, sent by sendfile."""

    region: FileRegion | None  # None: nothing to send
    first_offset: int  # the base offset of the first batch sent, if any
    next_offset: int  # one past the last offset sent


def read_segments(
    segments: Sequence[LogSegment], index: int, offset: int, max_bytes: int, max_offset: int,
    min_one_batch: bool,
) -> ReadResult:
    """A file region of whole batches, starting at the batch that holds ``offset``, looked
    for from ``segments[index]`` on (a compacted segment may end before it).

    Stops before ``max_offset`` (the high watermark) and within ``max_bytes``; with
    ``min_one_batch`` the first batch is sent even when larger than ``max_bytes``
    (KIP-74). Reads stay inside one segment, as Kafka's do.
    """
    empty = ReadResult(None, offset, offset)
    if offset >= max_offset:
        return empty
    while index < len(segments):
        segment = segments[index]
        found = segment.find(offset)
        if found is not None:
            break
        index += 1
    else:
        return empty
    first = found.header
    if first.base_offset >= max_offset:
        return empty
    if max_offset >= segment.next_offset and found.position + max_bytes >= segment.size:
        # The common tail read: everything to the end of the segment, no scan needed.
        return ReadResult(
            segment.region(found.position, segment.size), first.base_offset,
            segment.next_offset,
        )
    if first.size > max_bytes:
        if not min_one_batch:
            return empty
        end, next_offset = found.position + first.size, first.next_offset
    else:
        end, next_offset = segment.whole_batches_end(
            found.position, found.position + max_bytes, max_offset
        )
    return ReadResult(segment.region(found.position, end), first.base_offset, next_offset)


def offset_for_timestamp(
    segments: Sequence[LogSegment], timestamp: int, start: int, name: str
) -> tuple[int, int, int] | None:
    """(offset, timestamp, leader epoch) of the first record at or after ``start`` (the log
    start) with ts >= ``timestamp``; ``name`` (the log's) is for warnings."""
    for segment in segments:
        if segment.max_timestamp < timestamp or segment.next_offset <= start:
            continue
        found = segment.find_timestamp(timestamp)
        if found is None:
            continue
        for batch in segment.batches_from(found.position):
            header = batch.header
            if header.max_timestamp < timestamp or header.last_offset < start:
                continue
            hit = _first_record(segment, batch, timestamp, start, name)
            if hit is not None:
                return hit[0], hit[1], header.partition_leader_epoch
    return None


def max_timestamp_offset(
    segments: Sequence[LogSegment], name: str
) -> tuple[int, int, int] | None:
    """(offset, timestamp, epoch) of the first record with the largest timestamp (KIP-734):
    in the first segment and first batch that hold it, the record itself, not the batch's
    last offset."""
    if not segments:
        return None
    segment = max(segments, key=lambda s: s.max_timestamp)  # the first of equals
    found = segment.first_batch_with_max_timestamp()
    if found is None:
        return None
    hit = _first_record(segment, found, found.header.max_timestamp, 0, name)
    return None if hit is None else (hit[0], hit[1], found.header.partition_leader_epoch)


def _first_record(segment: LogSegment, batch: BatchPosition, timestamp: int,
                  min_offset: int, name: str) -> tuple[int, int] | None:
    """The batch's first record at or after ``min_offset`` reaching ``timestamp``. A
    batch whose records cannot be read (stored before they were checked on append, or
    damaged on disk) is passed over with a warning: one bad batch must not make the
    partition unsearchable."""
    raw = segment.read_bytes(batch.position, batch.header.size)
    try:
        return first_record_at_or_after(raw, timestamp, min_offset)
    except CorruptRecords as e:
        log.warning("%s: %s in %s; passed over", name, e, segment.log_path.name)
        return None
