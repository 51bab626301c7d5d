"""Leader epoch cache of one partition and its `leader-epoch-checkpoint` file (KIP-101).

Each entry says "epoch E started at offset O". Followers use it (through
OffsetForLeaderEpoch) to find where their log diverged from the leader's. The file format
is Kafka's: a version line ``0``, the entry count, then ``epoch startOffset`` lines.
"""

from __future__ import annotations

import os
from pathlib import Path

CHECKPOINT_FILE = "leader-epoch-checkpoint"
UNDEFINED_EPOCH = -1
UNDEFINED_OFFSET = -1


class LeaderEpochCache:
    def __init__(self, directory: Path) -> None:
        self.path = directory / CHECKPOINT_FILE
        self.entries: list[tuple[int, int]] = self._read()

    def _read(self) -> list[tuple[int, int]]:
        try:
            lines = self.path.read_text().split("\n")
        except FileNotFoundError:
            return []
        try:
            count = int(lines[1])
            entries = [tuple(map(int, line.split())) for line in lines[2 : 2 + count]]
        except (IndexError, ValueError):
            return []  # a torn checkpoint is rebuilt from the batches' epochs
        return [(e, o) for e, o in entries]

    def _write(self) -> None:
        tmp = self.path.with_suffix(".tmp")
        body = "".join(f"{e} {o}\n" for e, o in self.entries)
        tmp.write_text(f"0\n{len(self.entries)}\n{body}")
        os.replace(tmp, self.path)

    def assign(self, epoch: int, start_offset: int) -> None:
        """Note that ``epoch`` starts at ``start_offset``, if it is new."""
        if epoch < 0 or (self.entries and epoch <= self.entries[-1][0]):
            return
        self.entries.append((epoch, start_offset))
        self._write()

    def end_offset_for(self, epoch: int, log_end_offset: int) -> tuple[int, int]:
        """(epoch, end offset) as LeaderEpochFileCache.endOffsetFor answers it.

        The latest epoch ends at the log end; an older one ends where the next epoch starts,
        reported under the largest known epoch <= the requested one (or the requested one
        itself if it predates them all); an epoch newer than any we know is undefined.
        """
        if epoch == UNDEFINED_EPOCH or not self.entries:
            return UNDEFINED_EPOCH, UNDEFINED_OFFSET
        if epoch == self.entries[-1][0]:
            return epoch, log_end_offset
        higher = next((i for i, (e, _) in enumerate(self.entries) if e > epoch), None)
        if higher is None:
            return UNDEFINED_EPOCH, UNDEFINED_OFFSET
        floor_epoch = self.entries[higher - 1][0] if higher > 0 else epoch
        return floor_epoch, self.entries[higher][1]

    def epoch_for(self, offset: int) -> int:
        """The epoch in which ``offset`` was written (the last to start at or before it)."""
        found = UNDEFINED_EPOCH
        for epoch, start in self.entries:
            if start > offset:
                break
            found = epoch
        return found

    @property
    def latest_epoch(self) -> int:
        return self.entries[-1][0] if self.entries else UNDEFINED_EPOCH

    def truncate_from_end(self, end_offset: int) -> None:
        """Drop epochs that start at or after ``end_offset`` (log truncated there)."""
        kept = [(e, o) for e, o in self.entries if o < end_offset]
        if kept != self.entries:
            self.entries = kept
            self._write()

    def truncate_from_start(self, start_offset: int) -> None:
        """Drop epochs wholly before ``start_offset`` (segments deleted by retention)."""
        while len(self.entries) > 1 and self.entries[1][1] <= start_offset:
            self.entries.pop(0)
        if self.entries and self.entries[0][1] < start_offset:
            self.entries[0] = (self.entries[0][0], start_offset)
        self._write()
