"""Opening a log directory, Kafka's LogLoader: what is on disk becomes a list of segments.

Before the segments are opened, leftovers are settled: files of segments retired by
retention or cleaning (``*.deleted``) and small files whose write never finished (``*.tmp``:
the leader-epoch checkpoint, partition.metadata) are removed, a cleaning that never committed
(``*.cleaned``) is discarded and one interrupted mid-swap (``*.swap``) is completed, as
``Log.replace_segments`` left it. Then every segment is opened: from its indexes when the
shutdown was clean or it lies wholly below the recovery point, else by scanning its batches,
truncating at the first invalid one (and deleting every later segment: what follows a torn
batch cannot be trusted).

Apart from ``log.py`` so that the log keeps to what it does once open, and so that the
cleaner's swap protocol and its recovery, which ``log.py`` needs at load time, sit below both
the log and the cleaner: neither imports the other for it.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from broker.protocol.records import HEADER_SIZE, parse_header
from broker.storage.segment import (
    CLEANED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    SWAP_SUFFIX,
    TIME_INDEX_SUFFIX,
    LogSegment,
    segment_name,
)
from broker.storage.txn_index import TXN_INDEX_SUFFIX

log = logging.getLogger(__name__)

_NAME_LEN = 20
# The files of one segment; a ``.cleaned`` or ``.swap`` suffix may follow any of them.
SEGMENT_SUFFIXES = (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)


@dataclass(slots=True)
class LoadedSegments:
    """What ``load_segments`` found: the segments in offset order (never empty), and those
    whose aborted-transaction index must be rebuilt from their batches (recovered, swapped
    in, or with the index file missing)."""

    segments: list[LogSegment]
    rebuild: list[LogSegment]


def load_segments(
    directory: Path,
    new_segment: Callable[[int], LogSegment],
    max_message_bytes: int,
    recovery_point: int,
    clean_shutdown: bool,
) -> LoadedSegments:
    """Settle the leftovers of ``directory`` and open its segments (see the module's doc).

    ``new_segment`` opens (or creates) the segment at a base offset with the log's index
    settings; an empty directory gets one at offset 0.
    """
    if not os.listdir(directory):  # a new replica's: nothing to settle (one listing, not six)
        return LoadedSegments([new_segment(0)], [])
    for stale in directory.glob("*.deleted"):
        stale.unlink(missing_ok=True)
    for tmp in directory.glob("*.tmp"):
        tmp.unlink(missing_ok=True)
    swapped = finish_interrupted_swaps(directory)
    bases = sorted(int(p.stem) for p in directory.glob(f"*{LOG_SUFFIX}") if p.stem.isdigit())
    segments = [new_segment(base) for base in bases]
    truncated_at = None
    rebuild: list[LogSegment] = []  # segments whose aborted-transaction index is remade
    for i, segment in enumerate(segments):
        complete = i + 1 < len(segments) and bases[i + 1] <= recovery_point
        if (clean_shutdown or complete) and segment.base_offset not in swapped:
            segment.load_from_indexes()
            if segment.txn_index.missing:
                rebuild.append(segment)
            continue
        rebuild.append(segment)
        lost = segment.recover(max_message_bytes)
        if lost:
            log.warning(
                "%s: truncated %d bytes of invalid data at offset %d in %s",
                directory.name, lost, segment.next_offset, segment.log_path.name,
            )
            truncated_at = i
            break
    if truncated_at is not None:
        for segment in segments[truncated_at + 1 :]:
            log.warning("%s: deleting %s after a torn batch", directory.name, segment.log_path)
            segment.close()
            for path in segment.files():
                path.unlink(missing_ok=True)
        del segments[truncated_at + 1 :]
    if not segments:
        segments.append(new_segment(0))
    return LoadedSegments(segments, rebuild)


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
    is_segment_file = any(f".{rest}".startswith(ext) for ext in SEGMENT_SUFFIXES)
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

