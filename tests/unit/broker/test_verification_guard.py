"""A transaction verification (KIP-890) voided by a marker written while the question was
out: the batch it was for, and a batch of the same request whose transaction the marker
closed, are refused, so neither opens a transaction that no marker will end (found by a
review: on transaction.version 1 the markers carry the producer's epoch, so nothing else
stops them; the stray could later be committed by the producer's next transaction).

The produce handler runs in process over a real replica manager; the coordinator's answer
is held back by a verifier whose answers the test releases, to place the marker inside the
window."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from kio.schema.errors import ErrorCode

from broker.handlers.append_order import AppendOrder
from broker.handlers.context import RequestContext
from broker.handlers.produce import handle_produce
from broker.protocol.codec import RequestHeader
from broker.protocol.produce import PartitionData, ProduceRequest, TopicData
from broker.protocol.records import ATTR_TRANSACTIONAL
from kafkube.harness.wire import build_batch, decode_response_exact
from tests.support.handlers import NODE_ID, make_services

PID, EPOCH = 1000, 0


def batch(sequence: int) -> memoryview:
    return memoryview(build_batch([(None, f"s{sequence}".encode(), (), 0)],
                                  int(time.time() * 1000), PID, EPOCH, sequence,
                                  attributes=ATTR_TRANSACTIONAL))


class HeldVerifier:
    """Answers NONE (the coordinator vouches), once the test lets it."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.asked: list[list[tuple[str, int]]] = []

    async def verify(self, transactional_id, producer_id, producer_epoch, partitions,
                     add=False):
        self.asked.append(list(partitions))
        await self.release.wait()
        return dict.fromkeys(partitions, ErrorCode.none)


def produce(services, partitions: dict[int, int], version: int = 9,
            connection: AppendOrder | None = None) -> asyncio.Future:
    ctx = RequestContext(services, RequestHeader(0, version, 1, "c"), "127.0.0.1",
                         "127.0.0.1", append_order=connection or AppendOrder())
    request = ProduceRequest("txn", 1, 5000, [TopicData("t", [
        PartitionData(p, batch(s)) for p, s in partitions.items()])])
    return asyncio.ensure_future(handle_produce(ctx, request))


async def led(services, count: int) -> list:
    """Topic t's ``count`` partitions, once this broker leads them all: the replicas open
    in slices, a turn of the event loop apart (at most 2 s)."""
    for _ in range(200):
        services.replicas.apply_image(services.store.image)
        found = [services.replicas.get("t", i) for i in range(count)]
        if all(p is not None and p.is_leader for p in found):
            return found
        await asyncio.sleep(0.01)
    raise AssertionError(f"topic t's {count} partitions not led here within 2 s")


def errors(encoded: bytes, version: int = 9) -> dict[int, int]:
    """Partition -> error code of the handler's ProduceResponse (size-prefixed)."""
    _, response = decode_response_exact(encoded[4:], 0, version)
    return {p.index: p.error_code for t in response.responses for p in t.partition_responses}


def test_a_marker_written_while_the_coordinator_is_asked_voids_the_verification(
        tmp_path: Path) -> None:
    async def scenario() -> None:
        services = make_services(tmp_path)
        await services.replicas.create_topic("t", 2, {}, 1, [(NODE_ID,), (NODE_ID,)])
        p0, p1 = await led(services, 2)
        verifier = services.verifier = HeldVerifier()
        verifier.release.set()
        assert errors(await produce(services, {0: 0})) == {0: 0}  # P0's transaction open
        verifier.release.clear()
        # One request: P1's first batch (asked about) and P0's next (its transaction open).
        pending = produce(services, {1: 0, 0: 1})
        while not verifier.asked[1:]:
            await asyncio.sleep(0.001)
        # Meanwhile the client gave up and aborted; the markers reach both partitions.
        for p in (p0, p1):
            assert p.append_marker(PID, EPOCH, False, 0).error == ErrorCode.none
        verifier.release.set()
        assert errors(await pending) == {1: ErrorCode.invalid_txn_state,
                                         0: ErrorCode.invalid_txn_state}
        for p in (p0, p1):
            assert p.log.first_unstable_offset is None, p
        assert p0.log.producer_state.producers[PID].last_sequence == 0  # s1 never written
        assert PID not in p1.log.producer_state.ongoing_transactions()

    asyncio.run(scenario())


class ScriptedVerifier:
    """The coordinator's answers to a TV2 producer's adds, one per question, in order."""

    def __init__(self, answers: list[ErrorCode]) -> None:
        self.answers = answers

    async def verify(self, transactional_id, producer_id, producer_epoch, partitions,
                     add=False):
        await asyncio.sleep(0)  # a question is an await, whoever answers it
        return dict.fromkeys(partitions, self.answers.pop(0))


def test_a_producer_new_here_starts_at_the_lowest_sequence_that_asked(tmp_path: Path) -> None:
    """Seen in bench transactions with the Java 4.4 producer (TV2): its first request here
    (sequences 0-6) was told to retry, the next (7) went through and started the producer,
    and the retried 0 was OUT_OF_ORDER for good."""
    async def scenario() -> None:
        services = make_services(tmp_path)
        await services.replicas.create_topic("t", 1, {}, 1, [(NODE_ID,)])
        await led(services, 1)
        services.verifier = ScriptedVerifier([ErrorCode.concurrent_transactions,
                                              ErrorCode.none, ErrorCode.none])
        connection = AppendOrder()
        first = produce(services, {0: 0}, 12, connection)  # told to retry
        second = produce(services, {0: 7}, 12, connection)  # must not start the producer
        assert errors(await first, 12) == {0: ErrorCode.concurrent_transactions}
        assert errors(await second, 12) == {0: ErrorCode.out_of_order_sequence_number}
        assert errors(await produce(services, {0: 0}, 12, connection), 12) == {0: 0}

    asyncio.run(scenario())
