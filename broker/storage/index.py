"""Sparse offset and time indexes of one segment, in Kafka's on-disk entry format.

``.index``: 4-byte offset relative to the segment base + 4-byte file position.
``.timeindex``: 8-byte timestamp + 4-byte relative offset, timestamps strictly increasing.
Neither is checksummed; both are rebuilt from the log after an unclean shutdown, as Kafka does.

The entries also live in memory (two compact arrays per index), so a lookup is a bisect with
no system call; appends go to the file through its page cache. Not thread-safe: the owning
segment serialises access.
"""

from __future__ import annotations

import os
import struct
from array import array
from bisect import bisect_right
from pathlib import Path

_OFFSET_ENTRY = struct.Struct(">ii")
_TIME_ENTRY = struct.Struct(">qi")


class _IndexFile:
    entry: struct.Struct

    def __init__(self, path: Path, max_bytes: int) -> None:
        self.path = path
        self.max_entries = max(1, max_bytes // self.entry.size)
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        self._load(os.pread(self._fd, os.fstat(self._fd).st_size, 0))

    def _load(self, data: bytes) -> None:
        raise NotImplementedError

    @property
    def entries(self) -> int:
        raise NotImplementedError

    @property
    def is_full(self) -> bool:
        return self.entries >= self.max_entries

    def _write(self, data: bytes) -> None:
        os.write(self._fd, data)

    def reset(self) -> None:
        """Drop every entry (before a rebuild)."""
        os.ftruncate(self._fd, 0)
        self._load(b"")

    def _truncate_entries(self, keep: int) -> None:
        os.ftruncate(self._fd, keep * self.entry.size)

    def flush(self) -> None:
        os.fsync(self._fd)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


class OffsetIndex(_IndexFile):
    """Maps a relative offset to the file position of the batch that holds it."""

    entry = _OFFSET_ENTRY

    def __init__(self, path: Path, base_offset: int, max_bytes: int) -> None:
        self.base_offset = base_offset
        super().__init__(path, max_bytes)

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

    def __init__(self, path: Path, base_offset: int, max_bytes: int) -> None:
        self.base_offset = base_offset
        super().__init__(path, max_bytes)

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
