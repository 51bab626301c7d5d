"""Sparse offset and time indexes of one segment, in Kafka's on-disk entry format.

``.index``: 4-byte offset relative to the segment base + 4-byte file position.
``.timeindex``: 8-byte timestamp + 4-byte relative offset, timestamps strictly increasing.
Neither is checksummed; both are rebuilt from the log after an unclean shutdown, as Kafka does.

The entries also live in memory (two compact arrays per index), so a lookup is a bisect with
no system call. New entries wait in memory too (at most PENDING_LIMIT bytes), and reach the
file when the segment is flushed, sealed, renamed or closed: no descriptor stays open for an
index, so a segment holds one (its .log), as in Kafka, whose indexes are memory-mapped.
10,000 partitions with three descriptors each ran a broker out of its 20,000 open files.
Entries lost to a crash are those of segments past the recovery point, which are rebuilt
from the log at restart anyway. Not thread-safe: the owning segment serialises access.
"""

from __future__ import annotations

import os
import struct
from array import array
from bisect import bisect_right
from pathlib import Path

# Entries held before they are appended to the file anyway (one open, write and close per
# ~2,000 entries, ~8 MB of log at the default index interval): memory stays bounded however
# large an active segment grows between flushes.
PENDING_LIMIT = 16 << 10
_OFFSET_ENTRY = struct.Struct(">ii")
_TIME_ENTRY = struct.Struct(">qi")


class _IndexFile:
    entry: struct.Struct

    def __init__(self, path: Path, max_bytes: int, new: bool = False) -> None:
        """``new``: the index of a segment whose log was just created, so no file of it can
        hold anything; the file is made by the first write of entries. A new partition's
        files are made one by one on the event loop (about 0.3-0.5 ms of kernel time each on
        the VMs measured), and a small segment's index may never need one: it is rebuilt
        from the log whenever it is missing."""
        self.path = path
        self.max_entries = max(1, max_bytes // self.entry.size)
        self._pending = bytearray()  # entries appended since the file was last written
        self.on_disk = not new
        self._gone = False  # its segment was deleted: the file is never made again
        if new:
            self._load(b"")
            return
        fd = os.open(path, os.O_RDONLY | os.O_CREAT, 0o644)
        try:
            self._load(os.pread(fd, os.fstat(fd).st_size, 0))
        finally:
            os.close(fd)

    def _load(self, data: bytes) -> None:
        raise NotImplementedError

    @property
    def entries(self) -> int:
        raise NotImplementedError

    @property
    def is_full(self) -> bool:
        return self.entries >= self.max_entries

    def _write(self, data: bytes) -> None:
        self._pending += data
        if len(self._pending) >= PENDING_LIMIT:
            self.write_out()

    def write_out(self, sync: bool = False) -> None:
        """Append the waiting entries to the file (and fsync it if ``sync``). A file
        deleted with its segment (retention, a deleted topic) is not created again."""
        if not self._pending and (not sync or not self.on_disk):
            return
        if self._gone:
            self._pending.clear()
            return
        # Made on the first write (truncated: a leftover of an earlier segment at this
        # name holds nothing of this one); a file that was made and is gone was deleted.
        flags = os.O_WRONLY | os.O_APPEND | (0 if self.on_disk else os.O_CREAT | os.O_TRUNC)
        try:
            fd = os.open(self.path, flags, 0o644)
        except FileNotFoundError:
            self._pending.clear()
            return
        self.on_disk = True
        try:
            if self._pending:
                os.write(fd, self._pending)
                self._pending.clear()
            if sync:
                os.fsync(fd)
        finally:
            os.close(fd)

    def reset(self) -> None:
        """Drop every entry (before a rebuild)."""
        self._pending.clear()
        if self.on_disk:
            os.truncate(self.path, 0)
        self._load(b"")

    def _truncate_entries(self, keep: int) -> None:
        self.write_out()
        if self.on_disk:
            os.truncate(self.path, keep * self.entry.size)

    def rename(self, path: Path) -> None:
        """The file (if it was made) renamed to ``path``, entries written out first."""
        self.write_out()
        if self.on_disk:
            os.rename(self.path, path)
        self.path = path

    def deleted(self) -> None:
        """Its segment's files are gone (or going): entries are dropped from now on."""
        self._gone = True
        self._pending.clear()

    def flush(self) -> None:
        self.write_out(sync=True)

    def close(self) -> None:
        self.write_out()


class OffsetIndex(_IndexFile):
    """Maps a relative offset to the file position of the batch that holds it."""

    entry = _OFFSET_ENTRY

    def __init__(self, path: Path, base_offset: int, max_bytes: int, new: bool = False
                 ) -> None:
        self.base_offset = base_offset
        super().__init__(path, max_bytes, new)

    def _load(self, data: bytes) -> None:
        usable = len(data) - len(data) % self.entry.size
        self._offsets = array("i")
        self._positions = array("i")
        for rel, pos in self.entry.iter_unpack(data[:usable]):
            self._offsets.append(rel)
            self._positions.append(pos)

    @property
    def entries(self) -> int:
        return len(self._offsets)

    @property
    def last_offset(self) -> int:
        return self.base_offset + (self._offsets[-1] if self._offsets else 0)

    def append(self, offset: int, position: int) -> None:
        rel = offset - self.base_offset
        if self._offsets and rel <= self._offsets[-1]:
            return
        self._offsets.append(rel)
        self._positions.append(position)
        self._write(self.entry.pack(rel, position))

    def lookup(self, offset: int) -> tuple[int, int]:
        """The largest indexed (offset, position) with offset <= target, else (base, 0)."""
        i = bisect_right(self._offsets, offset - self.base_offset) - 1
        if i < 0:
            return self.base_offset, 0
        return self.base_offset + self._offsets[i], self._positions[i]

    def floor_position(self, position: int) -> tuple[int, int]:
        """The indexed (offset, position) with the largest position <= ``position``."""
        i = bisect_right(self._positions, position) - 1
        if i < 0:
            return self.base_offset, 0
        return self.base_offset + self._offsets[i], self._positions[i]

    def truncate_to(self, offset: int) -> None:
        """Drop entries for offsets >= ``offset``."""
        keep = bisect_right(self._offsets, offset - self.base_offset - 1)
        del self._offsets[keep:]
        del self._positions[keep:]
        self._truncate_entries(keep)


class TimeIndex(_IndexFile):
    """Maps a timestamp to the first offset whose batch may reach it."""

    entry = _TIME_ENTRY

    def __init__(self, path: Path, base_offset: int, max_bytes: int, new: bool = False
                 ) -> None:
        self.base_offset = base_offset
        super().__init__(path, max_bytes, new)

    def _load(self, data: bytes) -> None:
        usable = len(data) - len(data) % self.entry.size
        self._timestamps = array("q")
        self._offsets = array("i")
        for ts, rel in self.entry.iter_unpack(data[:usable]):
            self._timestamps.append(ts)
            self._offsets.append(rel)

    @property
    def entries(self) -> int:
        return len(self._timestamps)

    @property
    def last_timestamp(self) -> int:
        return self._timestamps[-1] if self._timestamps else -1

    @property
    def last_offset(self) -> int:
        return self.base_offset + (self._offsets[-1] if self._offsets else 0)

    def append(self, timestamp: int, offset: int) -> None:
        if self._timestamps and timestamp <= self._timestamps[-1]:
            return
        rel = offset - self.base_offset
        self._timestamps.append(timestamp)
        self._offsets.append(rel)
        self._write(self.entry.pack(timestamp, rel))

    def lookup(self, timestamp: int) -> int:
        """An offset to start scanning from: that of the last entry with ts < target."""
        i = bisect_right(self._timestamps, timestamp - 1) - 1
        if i < 0:
            return self.base_offset
        return self.base_offset + self._offsets[i]

    def truncate_to(self, offset: int) -> None:
        rel = offset - self.base_offset
        keep = len(self._offsets)
        while keep and self._offsets[keep - 1] >= rel:
            keep -= 1
        del self._timestamps[keep:]
        del self._offsets[keep:]
        self._truncate_entries(keep)
