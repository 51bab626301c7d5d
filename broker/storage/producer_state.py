"""Idempotent-producer state of one partition: producer id -> epoch and recent batches.

The rules are Kafka's (ProducerStateManager / ProducerAppendInfo): the last five batches of
each producer are remembered so a retried batch gets its original offsets back; a batch
whose first sequence does not follow the last one is out of order; an older epoch is fenced.
State is rebuilt from batch headers when a log loads, so it survives restarts. No I/O.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

from broker.protocol.records import NO_PRODUCER_ID, NO_SEQUENCE, BatchHeader

BATCHES_KEPT = 5
_INT_MAX = 2**31 - 1


@dataclass(frozen=True, slots=True)
class BatchMetadata:
    first_sequence: int
    last_sequence: int
    first_offset: int
    last_offset: int
    timestamp: int


@dataclass(slots=True)
class ProducerEntry:
    producer_id: int
    epoch: int
    batches: deque[BatchMetadata] = field(default_factory=lambda: deque(maxlen=BATCHES_KEPT))

    @property
    def last_sequence(self) -> int:
        return self.batches[-1].last_sequence if self.batches else NO_SEQUENCE


def _in_sequence(last: int, first: int) -> bool:
    return first == last + 1 or (first == 0 and last == _INT_MAX)


class ProducerStateManager:
    def __init__(self) -> None:
        self.producers: dict[int, ProducerEntry] = {}

    def find_duplicate(self, header: BatchHeader) -> BatchMetadata | None:
        entry = self.producers.get(header.producer_id)
        if entry is None or entry.epoch != header.producer_epoch:
            return None
        for batch in entry.batches:
            if (
                batch.first_sequence == header.base_sequence
                and batch.last_sequence == header.last_sequence
            ):
                return batch
        return None

    def check(self, header: BatchHeader) -> ErrorCode | None:
        """The error that refuses this batch, or None. Call after find_duplicate."""
        if header.producer_id == NO_PRODUCER_ID:
            return None
        entry = self.producers.get(header.producer_id)
        if entry is None:
            # Unknown producer (new, or its state expired with retention): any sequence goes.
            return None
        if header.producer_epoch < entry.epoch:
            return ErrorCode.invalid_producer_epoch
        if header.producer_epoch > entry.epoch:
            return None if header.base_sequence == 0 else ErrorCode.out_of_order_sequence_number
        if entry.batches and not _in_sequence(entry.last_sequence, header.base_sequence):
            return ErrorCode.out_of_order_sequence_number
        return None

    def update(self, header: BatchHeader) -> None:
        """Record an appended batch (offsets already assigned)."""
        if header.producer_id == NO_PRODUCER_ID:
            return
        entry = self.producers.get(header.producer_id)
        if entry is None or header.producer_epoch > entry.epoch:
            entry = ProducerEntry(header.producer_id, header.producer_epoch)
            self.producers[header.producer_id] = entry
        entry.batches.append(
            BatchMetadata(
                header.base_sequence,
                header.last_sequence,
                header.base_offset,
                header.last_offset,
                header.max_timestamp,
            )
        )

    def truncate_to(self, offset: int) -> bool:
        """Forget batches at or after ``offset`` (log truncation). True if some producer lost
        every batch kept in memory: its older batches are only in the log now, and the
        caller must rebuild the state from there, or a retry of one would not be known."""
        emptied = False
        for pid in list(self.producers):
            entry = self.producers[pid]
            kept = [b for b in entry.batches if b.last_offset < offset]
            if kept:
                entry.batches = deque(kept, maxlen=BATCHES_KEPT)
            else:
                del self.producers[pid]
                emptied = True
        return emptied

