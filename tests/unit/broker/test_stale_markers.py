"""A late marker of a producer's previous transaction must not end the one open now
(transaction.version 2, KAFKA-19446): a WriteTxnMarkers the coordinator retried on a new
connection can be overtaken by its retry, and the original, landing after the producer's
next transaction began here, would otherwise end it with the other's outcome (a torn
transaction). Found by a review of the TV2 change."""

from __future__ import annotations

import time

from kio.schema.errors import ErrorCode

from broker.protocol.records import ATTR_TRANSACTIONAL, parse_header
from broker.storage.producer_state import MAX_EPOCH, ProducerStateManager
from kafkube.harness.wire import build_batch

PID = 7


def opened_at(state: ProducerStateManager, epoch: int, offset: int = 0) -> None:
    """The producer's transaction open here under ``epoch``: one batch written."""
    raw = build_batch([(None, b"v", (), 0)], int(time.time() * 1000), PID, epoch, 0,
                      base_offset=offset, attributes=ATTR_TRANSACTIONAL)
    state.update(parse_header(raw))


def test_a_tv2_marker_under_the_open_transactions_epoch_is_refused() -> None:
    state = ProducerStateManager()
    opened_at(state, 5)  # the next transaction, begun after the last one's markers (epoch 5)
    assert state.check_marker(PID, 5, 0, transaction_version=2) == \
        ErrorCode.invalid_producer_epoch
    assert state.check_marker(PID, 6, 0, transaction_version=2) is None  # its own marker


def test_what_stays_accepted() -> None:
    state = ProducerStateManager()
    opened_at(state, 5)
    assert state.check_marker(PID, 5, 0, transaction_version=0) is None  # TV1: same epoch
    at_max = ProducerStateManager()
    opened_at(at_max, MAX_EPOCH)  # no epoch above: an abort there comes under MAX itself
    assert at_max.check_marker(PID, MAX_EPOCH, 0, transaction_version=2) is None
    closed = ProducerStateManager()  # nothing open: a retried marker is harmless
    assert closed.check_marker(PID, 5, 0, transaction_version=2) is None
