"""EndTxn's rules: what a commit or abort of a transactional id leads to, as a pure function
of its state, so each rule is tested alone (Kafka's TransactionCoordinator.endTransaction
and TransactionMetadata.prepareAbortOrCommit).

transaction.version 1 (EndTxn v0-4): the producer's id and epoch must be the current ones;
an open transaction is prepared under the same epoch; a retry of one that completed with the
same outcome succeeds.

transaction.version 2 (KIP-890 part 2, EndTxn v5): every EndTxn bumps the epoch, and the
answer carries the new one. The markers are written under it, so a batch the producer sent
late, under the epoch of the transaction that ended, is fenced at every partition instead
of opening a transaction nobody will end. An exhausted epoch (32766) is bumped one last
time for the markers; the transaction then completes under a new producer id at epoch 0.
A retry comes with the epoch before the bump (or, after a new id, with the old id at the
last epoch) and gets the same answer again. Aborting with no transaction open is allowed:
it bumps the epoch all the same (a producer that tried to write and failed aborts to be
sure). A retry asking the other outcome than the one recorded (a commit after the
coordinator aborted on its own, at a timeout) gets INVALID_TXN_STATE, as from Kafka 4.4.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from kio.schema.errors import ErrorCode

from broker.coordinator.transaction_log import NO_PRODUCER_ID, TxnRecord, TxnState

NO_EPOCH = -1
MAX_EPOCH = 32767
TV2 = 2

_COMPLETE = (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)


def epoch_exhausted(epoch: int) -> bool:
    """Kafka keeps the last epoch for fencing: at MAX - 1 the producer id is replaced."""
    return epoch >= MAX_EPOCH - 1


@dataclass(frozen=True, slots=True)
class EndDecision:
    """The answer, and the PrepareCommit/PrepareAbort record to write first if any."""

    error: ErrorCode
    prepared: TxnRecord | None = None
    producer_id: int = NO_PRODUCER_ID  # what EndTxn v5 answers
    producer_epoch: int = NO_EPOCH


def decide_end(record: TxnRecord, producer_id: int, producer_epoch: int, commit: bool,
               bump: bool, now_ms: int, next_producer_id: int = NO_PRODUCER_ID
               ) -> EndDecision:
    """EndTxn on ``record``. ``bump``: the request is transaction.version 2 (EndTxn v5).
    ``next_producer_id``: a fresh id, needed when the epoch is exhausted and bumped."""
    prepare = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
    complete = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
    state = record.state
    if not bump:
        if record.producer_id != producer_id:
            return EndDecision(ErrorCode.invalid_producer_id_mapping)
        if record.producer_epoch != producer_epoch:
            return EndDecision(ErrorCode.producer_fenced)
        if state == TxnState.ONGOING:  # markers under the batches' epoch: version 1's
            return EndDecision(ErrorCode.none, replace(record, state=prepare,
                                                       last_update_ms=now_ms, client_version=0))
        if state == complete:
            return EndDecision(ErrorCode.none)  # a retry of an EndTxn that completed
        if state == prepare:
            return EndDecision(ErrorCode.concurrent_transactions)  # markers being written
        return EndDecision(ErrorCode.invalid_txn_state)
    current = (record.producer_id, record.producer_epoch)
    retried = (producer_id == record.producer_id and producer_epoch + 1 == record.producer_epoch
               and producer_epoch >= 0) or (
        producer_id == record.previous_producer_id != NO_PRODUCER_ID
        and epoch_exhausted(producer_epoch) and record.producer_epoch == 0)
    if retried:
        if state == complete:
            return EndDecision(ErrorCode.none, None, *current)
        if state == prepare:
            return EndDecision(ErrorCode.concurrent_transactions)
        if state in (TxnState.PREPARE_ABORT, TxnState.COMPLETE_ABORT, TxnState.PREPARE_COMMIT,
                     TxnState.COMPLETE_COMMIT):
            return EndDecision(ErrorCode.invalid_txn_state)  # the other outcome, as Kafka 4.4
        return EndDecision(ErrorCode.producer_fenced)
    if record.producer_id != producer_id:
        return EndDecision(ErrorCode.invalid_producer_id_mapping)
    if record.producer_epoch != producer_epoch:
        return EndDecision(ErrorCode.producer_fenced)
    if state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
        return EndDecision(ErrorCode.concurrent_transactions)
    if state != TxnState.ONGOING and (commit or state not in _COMPLETE):
        return EndDecision(ErrorCode.invalid_txn_state)  # nothing open to commit
    if record.producer_epoch >= MAX_EPOCH:
        return EndDecision(ErrorCode.producer_fenced)  # cannot be bumped again
    rotate = epoch_exhausted(record.producer_epoch)
    if rotate and next_producer_id == NO_PRODUCER_ID:
        raise ValueError("an exhausted epoch needs the next producer id")
    ongoing = state == TxnState.ONGOING
    prepared = replace(
        record, state=prepare, producer_epoch=record.producer_epoch + 1,
        partitions=record.partitions if ongoing else frozenset(),
        start_ms=record.start_ms if ongoing else now_ms, last_update_ms=now_ms,
        client_version=TV2, next_producer_id=next_producer_id if rotate else NO_PRODUCER_ID)
    if rotate:
        return EndDecision(ErrorCode.none, prepared, next_producer_id, 0)
    return EndDecision(ErrorCode.none, prepared, record.producer_id, prepared.producer_epoch)


def completed(prepared: TxnRecord, now_ms: int) -> TxnRecord:
    """CompleteCommit or CompleteAbort after ``prepared``'s markers: under the next producer
    id at epoch 0 if the epoch was exhausted."""
    done = replace(prepared, state=TxnState.COMPLETE_COMMIT
                   if prepared.state == TxnState.PREPARE_COMMIT else TxnState.COMPLETE_ABORT,
                   partitions=frozenset(), last_update_ms=now_ms)
    if prepared.next_producer_id == NO_PRODUCER_ID:
        return done
    return replace(done, producer_id=prepared.next_producer_id, producer_epoch=0,
                   previous_producer_id=prepared.producer_id,
                   next_producer_id=NO_PRODUCER_ID)
