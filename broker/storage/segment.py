"""One log segment: a `.log` file of record batches, its two sparse indexes and its
aborted-transaction index.

Files are named by the 20-digit base offset, as in Kafka (LogFileUtils). A segment appends
batches it is given with offsets already assigned, finds the batch holding an offset, and
recovers itself by re-validating every batch. It does not decide when to roll, what offsets
to assign or which segments exist: that is the log's job. Not thread-safe; the broker runs
storage on one event loop.
"""

from __future__ import annotations

import contextlib
import os
import time
from bisect import bisect_left, bisect_right
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

from broker.protocol.file_region import FileRegion
from broker.protocol.records import (
    HEADER_SIZE,
    LOG_OVERHEAD,
    BatchHeader,
    InvalidRecordError,
    parse_header,
    validate_batch,
)
from broker.storage.index import OffsetIndex, TimeIndex
from broker.storage.txn_index import TXN_INDEX_SUFFIX, TransactionIndex

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
DELETED_SUFFIX = ".deleted"
CLEANED_SUFFIX = ".cleaned"  # a segment the cleaner is still writing: discarded on load
SWAP_SUFFIX = ".swap"  # a cleaned segment being swapped in: completed on load
_READ_CHUNK = 1 << 20


def segment_name(base_offset: int) -> str:
    return f"{base_offset:020d}"


class BatchPosition(NamedTuple):
    header: BatchHeader
    position: int


# How many of the newest batches a segment remembers with their positions. Tailing consumers
# and followers read what was just appended; with these in memory their reads need no
# header scans (one pread each) from the nearest sparse-index entry.
TAIL_BATCHES = 64


def _last_offset(batch: BatchPosition) -> int:
    return batch.header.base_offset + batch.header.last_offset_delta


def _end(batch: BatchPosition) -> int:
    return batch.position + batch.header.batch_length + LOG_OVERHEAD


class LogSegment:
    def __init__(
        self,
        directory: Path,
        base_offset: int,
        index_interval_bytes: int,
        index_max_bytes: int,
        suffix: str = "",
    ) -> None:
        """Open (or create) the segment's files; ``suffix`` names a cleaner's temporary copy."""
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        self.suffix = suffix
        stem = str(directory / segment_name(base_offset))
        self.log_path = Path(stem + LOG_SUFFIX + suffix)
        try:  # a new segment's indexes have no file until they have entries
            self.fd = os.open(self.log_path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_APPEND,
                              0o644)
            new = True
            for leftover in (INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX):
                # Of an earlier segment at this name (a crash while it was deleted): it
                # would be read as this one's after a restart.
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(stem + leftover + suffix)
        except FileExistsError:
            self.fd = os.open(self.log_path, os.O_RDWR | os.O_APPEND)
            new = False
        try:  # reading the indexes opens files too: out of descriptors, fd is not leaked
            self.size = os.fstat(self.fd).st_size
            self.offset_index = OffsetIndex(
                Path(stem + INDEX_SUFFIX + suffix), base_offset, index_max_bytes, new
            )
            self.time_index = TimeIndex(
                Path(stem + TIME_INDEX_SUFFIX + suffix), base_offset, index_max_bytes, new
            )
            self.txn_index = TransactionIndex(Path(stem + TXN_INDEX_SUFFIX + suffix),
                                              new=self.size == 0)
        except BaseException:
            os.close(self.fd)
            raise
        self._bytes_since_index = 0
        self.max_timestamp = -1
        self.offset_of_max_timestamp = base_offset  # last offset of the batch holding it
        self.next_offset = base_offset  # one past the last offset held; set by load/append
        # The newest batches, in order, ending at the segment's end (see TAIL_BATCHES).
        self._tail: list[BatchPosition] = []
        self.created_ms = int(time.time() * 1000)
        self.last_modified_ms = int(os.stat(self.log_path).st_mtime * 1000)

    # -- writing -------------------------------------------------------------------------

    def append(
        self, chunks: list[bytes | bytearray | memoryview], headers: list[BatchHeader]
    ) -> None:
        """Append validated batches (offsets assigned), given as buffers, in one writev."""
        expected = sum(header.size for header in headers)
        written = os.writev(self.fd, chunks)
        if written != expected:  # a regular file only writes short when the disk is full
            os.ftruncate(self.fd, self.size)
            raise OSError(f"short write to {self.log_path}: {written} of {expected} bytes")
        position = self.size
        for header in headers:
            self._index_batch(header, position)
            position += header.size
        now_ms = int(time.time() * 1000)
        if self.size == 0:
            self.created_ms = now_ms
        self.size = position
        self.next_offset = headers[-1].next_offset
        self.last_modified_ms = now_ms

    @property
    def is_full(self) -> bool:
        return self.offset_index.is_full or self.time_index.is_full

    # -- reading -------------------------------------------------------------------------

    def read_header(self, position: int) -> BatchHeader | None:
        if position + HEADER_SIZE > self.size:
            return None
        return parse_header(os.pread(self.fd, HEADER_SIZE, position))

    def batches_from(self, position: int = 0) -> Iterator[BatchPosition]:
        """Batch headers from ``position`` on, read one header at a time."""
        while True:
            header = self.read_header(position)
            if header is None or position + header.size > self.size:
                return
            yield BatchPosition(header, position)
            position += header.size

    def find(self, offset: int) -> BatchPosition | None:
        """The first batch whose last offset is >= ``offset``, or None past the end."""
        tail = self._tail
        if tail and offset >= tail[0].header.base_offset:
            i = bisect_left(tail, offset, key=_last_offset)
            return tail[i] if i < len(tail) else None
        _, position = self.offset_index.lookup(offset)
        for batch in self.batches_from(position):
            if batch.header.last_offset >= offset:
                return batch
        return None

    def find_timestamp(self, timestamp: int) -> BatchPosition | None:
        """The first batch whose max timestamp is >= ``timestamp``."""
        start = self.time_index.lookup(timestamp)
        found = self.find(start)
        if found is None:
            return None
        for batch in self.batches_from(found.position):
            if batch.header.max_timestamp >= timestamp:
                return batch
        return None

    def first_batch_with_max_timestamp(self) -> BatchPosition | None:
        """The first batch holding this segment's largest timestamp (Kafka's starting point
        for ListOffsets MAX_TIMESTAMP)."""
        if self.max_timestamp < 0:
            return None
        found = self.find(self.offset_of_max_timestamp)
        if found is None:
            return None
        for batch in self.batches_from(found.position):
            if batch.header.max_timestamp == self.max_timestamp:
                return batch
        return None

    def whole_batches_end(self, start: int, limit: int, max_offset: int) -> tuple[int, int]:
        """(end position, next offset) of the run of whole batches from ``start`` that ends
        at or before position ``limit`` and holds only offsets below ``max_offset``.

        The offset index is sorted by position too, so a bisect finds an indexed batch close
        to ``limit`` and only the few headers after it are read.
        """
        tail = self._tail
        if tail and start >= tail[0].position:
            first = bisect_right(tail, start, key=_end)  # the batch starting at ``start``
            if first == len(tail):
                return start, -1
            end = min(bisect_right(tail, limit, key=_end),
                      bisect_left(tail, max_offset, key=_last_offset))
            if end <= first:
                return start, tail[first].header.base_offset
            return _end(tail[end - 1]), tail[end - 1].header.next_offset
        entry_offset, entry_position = self.offset_index.floor_position(limit)
        position = start
        if entry_position > start and entry_offset < max_offset:
            position = entry_position  # every batch before it is whole and below max_offset
        next_offset = -1
        for batch in self.batches_from(position):
            header = batch.header
            if next_offset < 0:
                next_offset = header.base_offset
            if batch.position + header.size > limit or header.last_offset >= max_offset:
                break
            position, next_offset = batch.position + header.size, header.next_offset
        return position, next_offset

    def position_of(self, offset: int) -> int:
        """File position where ``offset``'s batch starts, or the size if past the end."""
        found = self.find(offset)
        return self.size if found is None else found.position

    def region(self, position: int, end: int) -> FileRegion:
        return FileRegion(self.fd, position, max(0, end - position))

    def read_bytes(self, position: int, length: int) -> bytes:
        return os.pread(self.fd, length, position)

    # -- recovery and truncation ---------------------------------------------------------

    def recover(self, max_batch_bytes: int) -> int:
        """Re-validate every batch, rebuild both indexes, truncate at the first bad batch.

        Returns the number of bytes truncated. Mirrors LogSegment.recover in Kafka.
        """
        self.offset_index.reset()
        self.time_index.reset()
        self._forget_tail()
        self._bytes_since_index = 0
        self.max_timestamp = -1
        self.offset_of_max_timestamp = self.base_offset
        self.next_offset = self.base_offset
        valid = 0
        buf = b""
        buf_start = 0
        while valid < self.size:
            need = valid - buf_start + HEADER_SIZE
            if need > len(buf):
                buf_start = valid
                buf = os.pread(self.fd, max(_READ_CHUNK, HEADER_SIZE), valid)
            rel = valid - buf_start
            if len(buf) - rel < HEADER_SIZE:
                break
            header = parse_header(buf, rel)
            if header.size > max_batch_bytes + HEADER_SIZE or header.size < HEADER_SIZE:
                break
            if rel + header.size > len(buf):
                buf_start = valid
                buf = os.pread(self.fd, max(_READ_CHUNK, header.size), valid)
                rel = 0
            try:
                # A batch without records is legal on disk: a cleaner keeps a producer's
                # last batch header when all its records are gone (Kafka's RETAIN_EMPTY).
                validate_batch(buf, rel, len(buf), allow_empty=True)
            except InvalidRecordError:
                break
            if header.base_offset < self.next_offset and self.next_offset != self.base_offset:
                break  # offsets must increase; anything else is garbage from a torn write
            self._index_batch(header, valid)
            self.next_offset = header.next_offset
            valid += header.size
        truncated = self.size - valid
        if truncated:
            os.ftruncate(self.fd, valid)
            self.size = valid
        return truncated

    def load_from_indexes(self) -> None:
        """Restore in-memory state after a clean shutdown, trusting the indexes.

        Only the batches after the last offset-index entry are read.
        """
        _, position = self.offset_index.lookup(self.base_offset + 2**31 - 1)
        self._forget_tail()
        self.max_timestamp = self.time_index.last_timestamp
        self.offset_of_max_timestamp = self.time_index.last_offset
        self.next_offset = self.base_offset
        self._bytes_since_index = 0
        for batch in self.batches_from(position):
            self._index_batch(batch.header, batch.position)
            self.next_offset = batch.header.next_offset

    def _index_batch(self, header: BatchHeader, position: int) -> None:
        """Kafka's LogSegment.append, batch by batch: the time index entry, when one is due,
        pairs the largest timestamp so far with the last offset of the batch that holds it
        (the pair DumpLogSegments checks against the log)."""
        last_offset = header.base_offset + header.last_offset_delta
        if header.max_timestamp > self.max_timestamp:
            self.max_timestamp = header.max_timestamp
            self.offset_of_max_timestamp = last_offset
        if self._bytes_since_index > self.index_interval_bytes:
            self.offset_index.append(last_offset, position)
            self.time_index.append(self.max_timestamp, self.offset_of_max_timestamp)
            self._bytes_since_index = 0
        self._bytes_since_index += header.batch_length + LOG_OVERHEAD
        self._tail.append(BatchPosition(header, position))
        if len(self._tail) > 2 * TAIL_BATCHES:
            del self._tail[:-TAIL_BATCHES]

    def seal(self) -> None:
        """The segment stops being active: its time index ends with its largest timestamp,
        as Kafka's onBecomeInactiveSegment leaves it."""
        if self.max_timestamp >= 0:
            self.time_index.append(self.max_timestamp, self.offset_of_max_timestamp)
        # The recovery point passes a sealed segment: its indexes are read as they are.
        self.offset_index.write_out()
        self.time_index.write_out()

    def _forget_tail(self) -> None:
        self._tail.clear()

    def truncate_to(self, offset: int) -> int:
        """Remove every batch at or after ``offset``; returns bytes removed.

        Rare (follower truncation), so it simply rebuilds the indexes from the kept bytes.
        The aborted-transaction index keeps the aborts whose markers are still there.
        """
        position = self.position_of(offset)
        removed = self.size - position
        os.ftruncate(self.fd, position)
        self.size = position
        self.recover(max_batch_bytes=2**31)
        self.txn_index.truncate_to(self.next_offset)
        return removed

    # -- lifecycle -----------------------------------------------------------------------

    def flush(self) -> None:
        os.fsync(self.fd)
        self.offset_index.flush()
        self.time_index.flush()
        self.txn_index.flush()

    def sync_files(self) -> None:
        """fsync a sealed segment's files from another thread: nothing of the segment's
        state is touched (seal() wrote its index entries out), so a segment deleted or
        truncated meanwhile costs an OSError, which the caller takes as "not synced"."""
        os.fsync(self.fd)
        for index in (self.offset_index, self.time_index, self.txn_index):
            path = index.path
            try:
                fd = os.open(path, os.O_RDONLY)
            except FileNotFoundError:
                if index is self.txn_index or not index.on_disk:
                    continue  # an index that never had an entry to write
                raise
            try:
                os.fsync(fd)
            finally:
                os.close(fd)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        self.offset_index.close()
        self.time_index.close()

    def files(self) -> list[Path]:
        return [self.log_path, self.offset_index.path, self.time_index.path, self.txn_index.path]

    def change_suffix(self, suffix: str) -> None:
        """Rename the files from the current suffix to ``suffix`` ("" for the live names).

        Kafka's LogSegment.changeFileSuffixes: the descriptors stay open, so the segment keeps
        working. The .log file goes last because a restart decides by its name alone.
        """
        for index in (self.offset_index, self.time_index):
            index.rename(_renamed(index.path, self.suffix, suffix))
        self.txn_index.path = _resuffixed(self.txn_index.path, self.suffix, suffix)
        self.log_path = _resuffixed(self.log_path, self.suffix, suffix)
        self.suffix = suffix

    def drop_index_writes(self) -> None:
        """Its files are deleted or moved away: index entries still waiting are dropped,
        and no index file is made again at the old names, which a new segment (of a topic
        made again under the same name) may have by then."""
        self.offset_index.deleted()
        self.time_index.deleted()

    def mark_deleted(self) -> list[Path]:
        """Rename the files to ``*.deleted``; the fd stays open for fetches in flight."""
        renamed = []
        self.drop_index_writes()
        for path in self.files():
            target = path.with_name(path.name + DELETED_SUFFIX)
            if path.exists():
                path.rename(target)
                renamed.append(target)
        return renamed


def _renamed(path: Path, old: str, new: str) -> Path:
    """``path`` with its suffix ``old`` replaced by ``new``."""
    base = path.name[: len(path.name) - len(old)] if old else path.name
    return path.with_name(base + new)


def _resuffixed(path: Path, old: str, new: str) -> Path:
    target = _renamed(path, old, new)
    try:
        path.rename(target)
    except FileNotFoundError:
        if not path.name.endswith(TXN_INDEX_SUFFIX + old):
            raise  # only a transaction index may be absent (an old log's, until rebuilt)
    return target
