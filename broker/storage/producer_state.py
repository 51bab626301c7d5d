"""Producer state of one partition: producer id -> epoch, recent batches, open transaction.

The rules are Kafka's (ProducerStateManager / ProducerAppendInfo): the last five batches of
each producer are remembered so a retried batch gets its original offsets back; a batch
whose first sequence does not follow the last one is out of order; an older epoch is fenced.
A transactional batch opens its producer's transaction if none is open; a marker (COMMIT or
ABORT control batch) closes it. The oldest open transaction's first offset is the first
unstable offset, which holds back the last stable offset that read_committed consumers see.

State is rebuilt from the log's batches when a log loads, so it survives restarts: leader
appends, follower appends and reloads all go through ``update`` and ``complete``. No I/O.

A producer is forgotten once it has written nothing here for producer.id.expiration.ms and
has no transaction open here (Kafka's removeExpiredProducers), so the state of a partition
many short-lived producers wrote to does not grow without bound. Its next batch is then
that of an unknown producer, any sequence accepted: Kafka's documented trade-off.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

from broker.protocol.records import ATTR_TRANSACTIONAL, NO_PRODUCER_ID, NO_SEQUENCE, BatchHeader

BATCHES_KEPT = 5
MAX_EPOCH = 32767
_INT_MAX = 2**31 - 1
NO_TXN = -1
NO_TIMESTAMP = -1


@dataclass(frozen=True, slots=True)
class BatchMetadata:
    first_sequence: int
    last_sequence: int
    first_offset: int
    last_offset: int
    timestamp: int


@dataclass(frozen=True, slots=True)
class CompletedTxn:
    """A transaction a marker just ended (Kafka's CompletedTxn)."""

    producer_id: int
    first_offset: int
    last_offset: int  # the marker's offset
    is_aborted: bool


@dataclass(slots=True)
class ProducerEntry:
    producer_id: int
    epoch: int
    batches: deque[BatchMetadata] = field(default_factory=lambda: deque(maxlen=BATCHES_KEPT))
    current_txn_first_offset: int = NO_TXN
    coordinator_epoch: int = -1
    # The largest timestamp of its last batch, or its last marker's (Kafka's lastTimestamp):
    # what expiry measures idleness from. A marker counts (KAFKA-9144), so a producer whose
    # transaction just ended is not forgotten for writing its data long before.
    last_timestamp: int = NO_TIMESTAMP

    @property
    def last_sequence(self) -> int:
        return self.batches[-1].last_sequence if self.batches else NO_SEQUENCE

    def bump_epoch(self, epoch: int) -> None:
        """A newer epoch starts its sequences afresh (Kafka's maybeUpdateProducerEpoch); an
        open transaction and the coordinator epoch carry over."""
        if epoch > self.epoch:
            self.epoch = epoch
            self.batches.clear()


def _in_sequence(last: int, first: int) -> bool:
    return first == last + 1 or (first == 0 and last == _INT_MAX)


class VerificationGuard:
    """One verification of a producer's transaction in a partition (Kafka's
    VerificationGuard): handed out before the leader asks the coordinator, dropped when a
    marker ends the producer's transaction here or its first batch opens one. A batch that
    would open a transaction is appended only with the guard still in place, so a marker
    written while the question was out (the client gave up and aborted) cannot be followed
    by a batch opening a transaction that no marker will end.

    It also keeps the lowest first sequence of the batches that asked (Kafka's
    VerificationStateEntry.lowestSequence): while a producer is unknown here any sequence
    would start it, so a request whose question failed (to be retried) could be overtaken
    by the next one, whose later sequence would then start the producer and leave the
    retried batch OUT_OF_ORDER for good. The first batch must be the lowest that asked.
    An add (transaction.version 2) is not ``voidable``: it is answered only once the
    producer's previous transaction has all its markers, so the marker it meets is that
    one's."""

    __slots__ = ("epoch", "lowest_sequence", "voidable")

    def __init__(self, epoch: int = -1, lowest_sequence: int = -1,
                 voidable: bool = True) -> None:
        self.epoch = epoch
        self.lowest_sequence = lowest_sequence
        self.voidable = voidable


# What a request holds for a partition that needed no question (its transaction was open):
# never the current guard, so if a marker closes the transaction before the append, the
# batch, now opening one, is refused.
NOT_VERIFIED = VerificationGuard()


class ProducerStateManager:
    def __init__(self) -> None:
        self.producers: dict[int, ProducerEntry] = {}
        self._ongoing: dict[int, int] = {}  # producer id -> first offset of its open txn
        self._guards: dict[int, VerificationGuard] = {}  # producer id -> guard in place
        # The last offset of any transactional or control batch applied: truncation below it
        # may reopen or forget a transaction, which only a rebuild from the log undoes.
        self._last_txn_offset = -1

    def start_verification(self, producer_id: int, epoch: int = -1, sequence: int = -1,
                           voidable: bool = True) -> VerificationGuard:
        """The guard of a verification of this producer's transaction here, for a batch of
        ``epoch`` starting at ``sequence``: the one in place if another request's question
        is out at that epoch (its lowest sequence lowered), else a new one."""
        guard = self._guards.get(producer_id)
        if guard is None or guard.epoch != epoch:
            guard = self._guards[producer_id] = VerificationGuard(epoch, sequence, voidable)
        else:
            if sequence >= 0 and (guard.lowest_sequence < 0 or sequence < guard.lowest_sequence):
                guard.lowest_sequence = sequence
            guard.voidable = guard.voidable and voidable
        return guard

    def opens_transaction(self, header: BatchHeader) -> bool:
        """This transactional batch would open a transaction here (none open at its epoch)."""
        entry = self.producers.get(header.producer_id)
        return entry is None or entry.epoch != header.producer_epoch \
            or entry.current_txn_first_offset == NO_TXN

    def verified(self, header: BatchHeader, guard: VerificationGuard) -> bool:
        """A transactional batch may be appended with ``guard``: it continues an open
        transaction, or the verification it was checked by still stands."""
        return not self.opens_transaction(header) or self._guards.get(header.producer_id) is guard

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
            # Unknown producer (new, or expired: producer.id.expiration.ms): any sequence goes,
            # but the lowest of those whose question is out goes first (VerificationGuard).
            guard = self._guards.get(header.producer_id)
            if guard is not None and guard.epoch == header.producer_epoch \
                    and guard.lowest_sequence >= 0 \
                    and header.base_sequence != guard.lowest_sequence:
                return ErrorCode.out_of_order_sequence_number
            return None
        if header.producer_epoch < entry.epoch:
            return ErrorCode.invalid_producer_epoch
        if entry.current_txn_first_offset != NO_TXN and not header.attributes & ATTR_TRANSACTIONAL:
            # Kafka's "Expected transactional write from producer": the transaction is open.
            return ErrorCode.invalid_txn_state
        if header.producer_epoch > entry.epoch:
            return None if header.base_sequence == 0 else ErrorCode.out_of_order_sequence_number
        # With no batch under this epoch yet (a marker bumped it) the last sequence is -1,
        # so the first batch must start at 0, as on any epoch bump.
        if not _in_sequence(entry.last_sequence, header.base_sequence):
            return ErrorCode.out_of_order_sequence_number
        return None

    def check_marker(self, producer_id: int, producer_epoch: int,
                     coordinator_epoch: int, transaction_version: int = 0) -> ErrorCode | None:
        """The error that refuses a marker on the leader, or None (Kafka's
        appendEndTxnMarker checks). A newer producer epoch is accepted: an abort written by
        the coordinator under a bumped epoch is what fences a zombie producer. A marker of
        transaction.version 2 comes under an epoch above its transaction's batches: one
        under the epoch of the transaction open here is the previous transaction's, late (a
        retried WriteTxnMarkers overtaken by its retry), and would end this one with the
        other's outcome (KAFKA-19446). The last epoch cannot be exceeded, so it is let be;
        with no transaction open, a retry is harmless (KAFKA-19999)."""
        entry = self.producers.get(producer_id)
        if entry is None:
            return None
        if producer_epoch < entry.epoch:
            return ErrorCode.invalid_producer_epoch
        if transaction_version >= 2 and producer_epoch == entry.epoch < MAX_EPOCH \
                and entry.current_txn_first_offset != NO_TXN:
            return ErrorCode.invalid_producer_epoch
        if coordinator_epoch < entry.coordinator_epoch:
            return ErrorCode.transaction_coordinator_fenced
        return None

    def update(self, header: BatchHeader) -> None:
        """Record an appended data batch (offsets already assigned); markers go to
        ``complete``."""
        if header.producer_id == NO_PRODUCER_ID:
            return
        entry = self.producers.get(header.producer_id)
        if entry is None:
            entry = ProducerEntry(header.producer_id, header.producer_epoch)
            self.producers[header.producer_id] = entry
        elif header.producer_epoch > entry.epoch:
            entry.bump_epoch(header.producer_epoch)
        entry.batches.append(
            BatchMetadata(
                header.base_sequence,
                header.last_sequence,
                header.base_offset,
                header.last_offset,
                header.max_timestamp,
            )
        )
        entry.last_timestamp = header.max_timestamp
        if header.attributes & ATTR_TRANSACTIONAL:
            self._last_txn_offset = header.last_offset
            if entry.current_txn_first_offset == NO_TXN:
                entry.current_txn_first_offset = header.base_offset
                self._ongoing[header.producer_id] = header.base_offset
                self._guards.pop(header.producer_id, None)  # the verification is used up

    def complete(self, header: BatchHeader, is_commit: bool,
                 coordinator_epoch: int) -> CompletedTxn | None:
        """Record an appended marker: the producer's epoch and coordinator epoch move up to
        the marker's, and its open transaction, if any, ends. A marker with no open
        transaction is legal (Kafka writes one when a transaction wrote nothing here, or
        after a retry); then there is nothing to complete."""
        pid = header.producer_id
        self._last_txn_offset = header.last_offset
        guard = self._guards.get(pid)
        if guard is not None and guard.voidable:
            del self._guards[pid]  # a question asked before the marker no longer holds
        entry = self.producers.get(pid)
        if entry is None:
            entry = ProducerEntry(pid, header.producer_epoch)
            self.producers[pid] = entry
        else:
            entry.bump_epoch(header.producer_epoch)
        entry.coordinator_epoch = max(entry.coordinator_epoch, coordinator_epoch)
        entry.last_timestamp = header.max_timestamp
        first = entry.current_txn_first_offset
        if first == NO_TXN:
            return None
        entry.current_txn_first_offset = NO_TXN
        del self._ongoing[pid]
        return CompletedTxn(pid, first, header.base_offset, not is_commit)

    @property
    def first_unstable_offset(self) -> int | None:
        """The first offset of the oldest open transaction, or None if none is open."""
        ongoing = self._ongoing
        return min(ongoing.values()) if ongoing else None

    def ongoing_transactions(self) -> dict[int, int]:
        """Producer id -> first offset of its open transaction (for DescribeProducers)."""
        return dict(self._ongoing)

    def last_batches(self) -> dict[int, tuple[int, int]]:
        """Producer id -> (last offset of its newest data batch under its current epoch, or
        -1 if a marker came after the epoch began; epoch). The log cleaner keeps those
        batches (or, for -1, the markers of that epoch) so this state survives a reload.
        An expired producer is not here, so its last batch is cleaned like any other."""
        return {
            pid: (entry.batches[-1].last_offset if entry.batches else -1, entry.epoch)
            for pid, entry in self.producers.items()
        }

    def remove_expired(self, now_ms: int, expiration_ms: int) -> int:
        """Forget every producer idle for ``expiration_ms`` or longer at ``now_ms`` (wall
        clock, as batch timestamps are) and with no transaction open here; how many went.
        A producer with an open transaction is kept however long it is idle: forgetting it
        would forget the transaction, and the last stable offset would pass its records."""
        expired = [pid for pid, entry in self.producers.items()
                   if is_expired(entry, now_ms, expiration_ms)]
        for pid in expired:
            del self.producers[pid]
        return len(expired)

    def truncate_to(self, offset: int) -> bool:
        """Forget batches at or after ``offset`` (log truncation). True if the caller must
        rebuild the state from the log: some producer lost every batch kept in memory (its
        older batches are only in the log now, and a retry of one would not be known), or a
        transactional batch or marker was removed (a transaction may have to reopen, an
        epoch go back: the log alone knows)."""
        if offset <= self._last_txn_offset:
            return True
        for entry in self.producers.values():
            batches = entry.batches
            if not batches or batches[-1].last_offset < offset:
                continue
            kept = [b for b in batches if b.last_offset < offset]
            if not kept:
                return True
            entry.batches = deque(kept, maxlen=BATCHES_KEPT)
        return False


def is_expired(entry: ProducerEntry, now_ms: int, expiration_ms: int) -> bool:
    """Kafka's isProducerExpired: no open transaction, and idle for at least the expiration
    (the boundary expires)."""
    return (entry.current_txn_first_offset == NO_TXN
            and now_ms - entry.last_timestamp >= expiration_ms)
