"""A leader adding a transaction.version 2 producer's partitions retries, for up to
add.partitions.to.txn.retry.backoff.max.ms, the ones its coordinator answered
CONCURRENT_TRANSACTIONS (another leader's add of the same transaction being written), as
Kafka's leaders do, instead of sending the producer away to retry after its own backoff."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from broker.server.txn_verification import TransactionVerifier


@dataclass
class Led:
    leader: int


class LocalCoordinator:
    """This broker leads every partition of __transaction_state: the verifier asks the
    coordinator in process, whose answers are scripted here."""

    def __init__(self, answers: list[ErrorCode]) -> None:
        self.answers = answers
        self.asked: list[tuple[float, list]] = []

    def partition(self, topic: str, index: int) -> Led:
        return Led(0)

    async def add(self, txn_id: str, pid: int, epoch: int, partitions: list) -> ErrorCode:
        self.asked.append((time.monotonic(), list(partitions)))
        return self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]


def verifier(local: LocalCoordinator) -> TransactionVerifier:
    return TransactionVerifier(local, 0, 50, None, lambda *a: {}, local.add,  # type: ignore
                               retry_backoff_ms=20, retry_max_ms=100)


def test_an_add_refused_as_concurrent_is_retried_until_it_goes_through() -> None:
    local = LocalCoordinator([ErrorCode.concurrent_transactions] * 2 + [ErrorCode.none])
    answers = asyncio.run(verifier(local).verify("t", 1, 0, [("a", 0), ("a", 1)], add=True))
    assert answers == {("a", 0): ErrorCode.none, ("a", 1): ErrorCode.none}
    assert len(local.asked) == 3
    assert all(later - earlier >= 0.015 for (earlier, _), (later, _)
               in zip(local.asked, local.asked[1:], strict=False))


def test_the_retries_stop_at_the_maximum_and_the_producer_gets_a_retriable_answer() -> None:
    local = LocalCoordinator([ErrorCode.concurrent_transactions])
    started = time.monotonic()
    answers = asyncio.run(verifier(local).verify("t", 1, 0, [("a", 0)], add=True))
    assert answers == {("a", 0): ErrorCode.concurrent_transactions}
    assert time.monotonic() - started < 0.5 and 3 <= len(local.asked) <= 6


def test_a_verification_is_not_retried() -> None:
    local = LocalCoordinator([ErrorCode.concurrent_transactions])
    checks: list[list] = []
    v = TransactionVerifier(local, 0, 50, None,  # type: ignore
                            lambda t, p, e, parts: checks.append(parts) or dict.fromkeys(
                                parts, ErrorCode.concurrent_transactions), local.add)
    answers = asyncio.run(v.verify("t", 1, 0, [("a", 0)]))
    assert answers == {("a", 0): ErrorCode.concurrent_transactions} and len(checks) == 1


def test_a_concurrent_transaction_reaches_a_tv2_producer_as_itself() -> None:
    """KAFKA-18662: Produce v12 answers CONCURRENT_TRANSACTIONS, which a TV2 producer retries
    after its short backoff; older versions get NOT_ENOUGH_REPLICAS, which they know."""
    from broker.server.txn_verification import as_produce_error

    assert as_produce_error(ErrorCode.concurrent_transactions, 12)[0] == \
        ErrorCode.concurrent_transactions
    assert as_produce_error(ErrorCode.concurrent_transactions, 11)[0] == \
        ErrorCode.not_enough_replicas
    assert as_produce_error(ErrorCode.producer_fenced, 12)[0] == \
        ErrorCode.invalid_producer_epoch
