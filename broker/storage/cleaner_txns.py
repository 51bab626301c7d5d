"""Transactions in a cleaning pass (Kafka's CleanedTransactionMetadata): which batches
belong to aborted transactions, which markers are still needed, and which batches carry what
a producer's state must find after a reload.

Apart from the rewriting in ``cleaner_rewrite.py`` because both of its walks over the log
(building the offset map, rewriting the groups) ask the same questions of every batch, and
the answers depend only on the transactions met so far, not on keys or files. The rules
themselves are told in ``cleaner.py``'s module doc.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from broker.protocol.records import ATTR_CONTROL, ATTR_TRANSACTIONAL, BatchHeader
from broker.storage.txn_index import TxnIndexEntry


@dataclass(slots=True)
class _OpenAbort:
    entry: TxnIndexEntry
    met: bool = False  # a batch of it was read in this pass
    header_kept: bool = False  # ... and kept, emptied, as its producer's last


class CleanedTransactions:
    """Which batches of a pass belong to aborted transactions and which markers are still
    needed, learnt by meeting the batches in log order (Kafka's CleanedTransactionMetadata).

    A producer's transactions never interleave, so its next control batch after a data batch
    of a transaction is that transaction's marker; the marker's record need not be read.
    """

    def __init__(self, aborted: list[TxnIndexEntry], start: int) -> None:
        # Aborts whose markers lie at or after ``start``: the pass meets each of them.
        self._pending = deque(e for e in aborted if e.last_offset >= start)
        self._aborted: dict[int, _OpenAbort] = {}
        self._committed: set[int] = set()  # producers with committed data met, marker not

    def _open_up_to(self, offset: int) -> None:
        pending = self._pending
        while pending and pending[0].first_offset <= offset:
            entry = pending.popleft()
            self._aborted.setdefault(entry.producer_id, _OpenAbort(entry))

    def is_aborted(self, header: BatchHeader, keeps_header: bool) -> bool:
        """Whether a data batch belongs to an aborted transaction (its records all go);
        ``keeps_header``: the cleaner keeps its empty header anyway."""
        self._open_up_to(header.last_offset)
        if not header.attributes & ATTR_TRANSACTIONAL:
            return False
        found = self._aborted.get(header.producer_id)
        if found is None:
            self._committed.add(header.producer_id)
            return False
        found.met = True
        found.header_kept = found.header_kept or keeps_header
        return True

    def on_marker(self, header: BatchHeader) -> tuple[bool, TxnIndexEntry | None, bool]:
        """For a control batch: (whether a batch of its transaction was met, so the marker
        must stay; the abort's index entry the cleaned segment must keep, if any; whether
        data of it stays in the log after this pass)."""
        self._open_up_to(header.last_offset)
        pid = header.producer_id
        found = self._aborted.pop(pid, None)
        if found is not None:
            if not found.met:
                return False, None, False
            return True, found.entry, found.header_kept
        if pid in self._committed:
            self._committed.discard(pid)
            return True, None, True
        return False, None, False


def is_producers_last(header: BatchHeader, last_batches: dict[int, tuple[int, int]]) -> bool:
    """Whether the batch carries what the producer state must find after a reload: the
    producer's newest data batch, or, when a marker came after its epoch began, that epoch's
    markers (Kafka's isBatchLastRecordOfProducer)."""
    if header.producer_id < 0:
        return False
    last = last_batches.get(header.producer_id)
    if last is None:
        return False
    last_data_offset, epoch = last
    if header.attributes & ATTR_CONTROL:
        return last_data_offset < 0 and header.producer_epoch == epoch
    return header.last_offset == last_data_offset

