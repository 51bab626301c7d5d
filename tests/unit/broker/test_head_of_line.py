"""A waiting fetch and the requests behind it on its connection (broker/handlers/head_of_line):
what counts as a request behind, and the fetch handler ending its wait for one, against a real
replica manager on a temp dir."""

from __future__ import annotations

import asyncio
from pathlib import Path

from kafka.record.default_records import DefaultRecordBatchBuilder
from kio.schema.errors import ErrorCode

from broker.frontend import eager
from broker.handlers.context import RequestContext
from broker.handlers.fetch import handle_fetch
from broker.handlers.head_of_line import HeadOfLine
from broker.protocol.codec import RequestHeader
from broker.protocol.fetch import FetchRequest, RequestedPartition, RequestedTopic
from broker.protocol.produce import ProduceRequest
from tests.support.handlers import create, make_services, new_topic

FETCH, PRODUCE, LIST_OFFSETS = 1, 0, 2


def produce_body(acks: int) -> ProduceRequest:
    return ProduceRequest(None, acks, 1000, [])


def test_what_counts_as_a_request_behind() -> None:
    async def scenario() -> None:
        line = HeadOfLine()
        waiting = asyncio.get_running_loop().create_future()
        line.park(waiting)
        line.request_arrived(FETCH, None)  # a fetch behind a fetch: no
        line.request_arrived(PRODUCE, produce_body(acks=0))  # no answer, nobody waits: no
        assert (line.arrivals, waiting.done()) == (0, False)
        line.request_arrived(PRODUCE, produce_body(acks=1))
        assert (line.arrivals, waiting.done()) == (1, True)
        line.request_arrived(LIST_OFFSETS, None)  # counted with nothing parked
        assert line.arrivals == 2

    asyncio.run(scenario())


def one_record() -> bytes:
    builder = DefaultRecordBatchBuilder(2, 0, False, -1, -1, -1, 1 << 20)
    builder.append(0, 1_700_000_000_000, None, b"v", [])
    return bytes(builder.build())


def test_a_request_behind_a_fetch_woken_by_too_little_data_still_ends_its_wait(
        tmp_path: Path) -> None:
    """The fetch wants more bytes than arrive: the data wakes it, and a ListOffsets read
    before it runs again must still end its wait (it was not parked at that moment)."""
    services = make_services(tmp_path)
    create(services, 7, new_topic("t", 1))
    partition = services.replicas.get("t", 0)
    request = FetchRequest(-1, 60_000, 1 << 20, 1 << 20, 0, 0, -1, [RequestedTopic("t", [
        RequestedPartition(0, -1, 0, -1, -1, 1 << 20)])], [], "")

    async def scenario() -> bytes:
        ctx = RequestContext(services, RequestHeader(FETCH, 12, 1, "c"), "127.0.0.1",
                             "127.0.0.1")
        step = eager.start(handle_fetch(ctx, request))
        assert not step.done and step.task is not None  # parked: nothing to read
        assert partition.append(one_record(), 1 << 20).error == ErrorCode.none  # wakes it
        ctx.head_of_line.request_arrived(LIST_OFFSETS, None)  # before it runs again
        response = await asyncio.wait_for(step.task, 10)  # its max wait is 60 s
        return b"".join(bytes(c) if isinstance(c, bytes) else b"" for c in response.chunks)

    assert asyncio.run(scenario())
