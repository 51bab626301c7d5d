"""EndTxn's rules (broker/coordinator/txn_end.py), transaction.version 1 and 2, one state
at a time: the answers Kafka's coordinator gives, the epoch bump of KIP-890 part 2 and its
retries, and an exhausted epoch moving to a new producer id."""

from __future__ import annotations

from dataclasses import replace

import pytest
from kio.schema.errors import ErrorCode

from broker.coordinator.transaction_log import TxnRecord, TxnState
from broker.coordinator.txn_end import MAX_EPOCH, completed, decide_end

NOW = 1_700_000_000_000
OPEN = TxnRecord(7, 3, 60_000, TxnState.ONGOING, frozenset({("t", 0), ("t", 1)}), NOW - 5,
                 NOW - 10)


def test_v1_prepares_under_the_same_epoch_and_answers_retries() -> None:
    decision = decide_end(OPEN, 7, 3, True, False, NOW)
    assert decision.error == ErrorCode.none
    assert decision.prepared == replace(OPEN, state=TxnState.PREPARE_COMMIT, last_update_ms=NOW,
                                        client_version=0)
    done = completed(decision.prepared, NOW)
    assert (done.state, done.producer_epoch, done.partitions) == (
        TxnState.COMPLETE_COMMIT, 3, frozenset())
    assert decide_end(done, 7, 3, True, False, NOW).error == ErrorCode.none
    assert decide_end(done, 7, 3, False, False, NOW).error == ErrorCode.invalid_txn_state
    assert decide_end(decision.prepared, 7, 3, True, False, NOW).error == \
        ErrorCode.concurrent_transactions
    assert decide_end(OPEN, 8, 3, True, False, NOW).error == \
        ErrorCode.invalid_producer_id_mapping
    assert decide_end(OPEN, 7, 2, True, False, NOW).error == ErrorCode.producer_fenced


@pytest.mark.parametrize("commit", [True, False])
def test_v2_bumps_the_epoch_and_answers_with_it(commit: bool) -> None:
    decision = decide_end(OPEN, 7, 3, commit, True, NOW)
    prepared = decision.prepared
    assert decision.error == ErrorCode.none and prepared is not None
    assert (decision.producer_id, decision.producer_epoch) == (7, 4)
    assert prepared.producer_epoch == 4 and prepared.partitions == OPEN.partitions
    assert prepared.client_version == 2
    assert prepared.state == (TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT)
    # The retry, with the epoch the producer had, while the markers are written and after.
    assert decide_end(prepared, 7, 3, commit, True, NOW).error == \
        ErrorCode.concurrent_transactions
    done = completed(prepared, NOW)
    again = decide_end(done, 7, 3, commit, True, NOW)
    assert (again.error, again.prepared, again.producer_id, again.producer_epoch) == (
        ErrorCode.none, None, 7, 4)
    # An epoch older than the one before the bump is a zombie.
    assert decide_end(done, 7, 2, commit, True, NOW).error == ErrorCode.producer_fenced


def test_v2_aborts_with_nothing_open_and_refuses_such_a_commit() -> None:
    done = completed(decide_end(OPEN, 7, 3, True, True, NOW).prepared, NOW)
    assert decide_end(done, 7, 4, True, True, NOW).error == ErrorCode.invalid_txn_state
    empty_abort = decide_end(done, 7, 4, False, True, NOW)
    assert empty_abort.error == ErrorCode.none and empty_abort.producer_epoch == 5
    assert empty_abort.prepared.partitions == frozenset()
    assert empty_abort.prepared.state == TxnState.PREPARE_ABORT


def test_v2_commit_retried_after_the_coordinator_aborted_gets_kafkas_answer() -> None:
    # A timeout abort bumped the epoch to 4 and completed: the producer's commit at 3.
    aborted = replace(OPEN, producer_epoch=4, state=TxnState.COMPLETE_ABORT,
                      partitions=frozenset())
    assert decide_end(aborted, 7, 3, True, True, NOW).error == ErrorCode.invalid_txn_state
    assert decide_end(aborted, 7, 3, False, True, NOW).error == ErrorCode.none


def test_v2_an_exhausted_epoch_completes_under_a_new_producer_id() -> None:
    last = replace(OPEN, producer_epoch=MAX_EPOCH - 1)
    with pytest.raises(ValueError):
        decide_end(last, 7, MAX_EPOCH - 1, True, True, NOW)
    decision = decide_end(last, 7, MAX_EPOCH - 1, True, True, NOW, next_producer_id=8)
    assert (decision.producer_id, decision.producer_epoch) == (8, 0)
    assert decision.prepared.producer_epoch == MAX_EPOCH  # the markers' epoch fences the old
    done = completed(decision.prepared, NOW)
    assert (done.producer_id, done.producer_epoch, done.previous_producer_id,
            done.next_producer_id) == (8, 0, 7, -1)
    retried = decide_end(done, 7, MAX_EPOCH - 1, True, True, NOW)
    assert (retried.error, retried.producer_id, retried.producer_epoch) == (ErrorCode.none, 8, 0)
    assert decide_end(done, 8, 0, True, True, NOW).error == ErrorCode.invalid_txn_state
