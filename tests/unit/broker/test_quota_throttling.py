"""The front end's side of client quotas (broker/frontend/throttling.py): which requests are
charged to request_percentage, a kio response given its throttle time, and the mute (and
how the socket server's reader waits it out)."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import socket
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from broker.cluster.client_quotas import QuotaEntity
from broker.frontend.memory_pool import MemoryPool
from broker.frontend.socket_server import Connection
from broker.frontend.throttling import Mute, exempt, peer_closed, settle
from broker.handlers.context import RequestContext, RequestThrottle
from broker.protocol.codec import RequestHeader
from broker.protocol.messages import build_response
from broker.security.acl import Authorizer
from tests.support.handlers import make_services, request


def context(tmp_path: Path, api_key: int, client_id: str = "busy",
            version: int = 1) -> RequestContext:
    """A request of ``client_id``; the client-id ``busy`` has a request_percentage of 1."""
    services = make_services(tmp_path)
    asyncio.run(services.store.update(lambda image: image.with_client_quotas(
        {QuotaEntity.client("busy"): {"request_percentage": 1.0}})))
    return RequestContext(services, RequestHeader(api_key, version, 7, client_id),
                          "127.0.0.1", "127.0.0.1", throttle=RequestThrottle())


def test_a_slow_request_earns_a_throttle_its_response_reports(tmp_path: Path) -> None:
    ctx = context(tmp_path, 48)
    req = request(48, 1, {"components": [], "strict": False})
    response = build_response(req, {"throttle_time": datetime.timedelta(0),
                                    "error_code": ErrorCode.none, "error_message": None,
                                    "entries": []})
    # 0.5 s of the loop in a window of 10 s is 5 %, against 1 %: throttled.
    settled = settle(ctx, req, response, time.perf_counter() - 0.5)
    assert ctx.throttle.ms > 0
    assert settled.throttle_time == datetime.timedelta(milliseconds=ctx.throttle.ms)


def test_exempt_requests_are_not_charged(tmp_path: Path) -> None:
    assert exempt(context(tmp_path, 18), object())  # ApiVersions
    assert exempt(context(tmp_path, 1), SimpleNamespace(replica_id=2))  # a follower
    assert not exempt(context(tmp_path, 1), SimpleNamespace(replica_id=-1))


def test_a_muted_connection_waits_out_its_throttle() -> None:
    mute = Mute()
    mute.extend(RequestThrottle(ms=0))
    waiting = mute.wait()
    with pytest.raises(StopIteration):  # over at once: returns without suspending
        waiting.send(None)
    started = time.monotonic()
    mute.extend(RequestThrottle(ms=200))
    asyncio.run(mute.wait())
    assert time.monotonic() - started >= 0.19


def test_brokers_requests_are_exempt(tmp_path: Path) -> None:
    follower, consumer = SimpleNamespace(replica_id=2), SimpleNamespace(replica_id=-1)
    assert exempt(context(tmp_path, 23, version=4), follower)  # OffsetForLeaderEpoch
    assert not exempt(context(tmp_path, 23, version=4), consumer)
    assert exempt(context(tmp_path, 24, version=4), object())  # a leader verifies (KIP-890)
    assert not exempt(context(tmp_path, 24, version=3), object())  # a producer's
    assert exempt(context(tmp_path, 85, version=1), object())  # WriteShareGroupState


def test_a_follower_is_not_throttled_by_a_default_quota(tmp_path: Path) -> None:
    ctx = context(tmp_path, 23, version=4)
    asyncio.run(ctx.services.store.update(lambda image: image.with_client_quotas(
        {QuotaEntity.user(None): {"request_percentage": 1.0}})))
    body = SimpleNamespace(replica_id=2)
    for _ in range(3):  # 1.5 s of the loop in 10 s, against 1 %
        settle(ctx, body, None, time.perf_counter() - 0.5)
    assert ctx.throttle.ms == 0


def test_only_a_principal_allowed_cluster_action_is_a_broker(tmp_path: Path) -> None:
    ctx = context(tmp_path, 23, version=4)
    ctx.services.authorizer = Authorizer(True, frozenset(), False, lambda: ())
    assert not exempt(ctx, SimpleNamespace(replica_id=2))


def test_a_mute_extended_while_waited_on_is_waited_out() -> None:
    async def run() -> float:
        mute = Mute()
        mute.extend(RequestThrottle(ms=100))
        started = time.monotonic()
        # A request still being handled ends while the reader waits, and extends the mute.
        asyncio.get_running_loop().call_later(0.05, mute.extend, RequestThrottle(ms=200))
        assert await mute.wait()
        return time.monotonic() - started

    assert asyncio.run(run()) >= 0.24


def test_a_muted_connection_stops_waiting_when_its_client_goes() -> None:
    async def run() -> bool:
        ours, theirs = socket.socketpair()
        with ours, theirs:
            mute = Mute(lambda: peer_closed(ours))
            mute.extend(RequestThrottle(ms=2**31 - 1))  # ~25 days
            waiting = asyncio.create_task(mute.wait())
            theirs.sendall(b"more requests")  # pipelined, unread: then the client goes
            asyncio.get_running_loop().call_soon(theirs.close)
            return await asyncio.wait_for(waiting, timeout=10)

    assert asyncio.run(run()) is False


class Reads:
    """A transport that hands out ``chunks`` one read at a time, counting reads."""

    def __init__(self, *chunks: bytes) -> None:
        self.chunks = list(chunks)
        self.reads = 0

    async def recv(self, size: int) -> bytes:
        self.reads += 1
        if not self.chunks:
            await asyncio.Event().wait()  # nothing more: until cancelled
        return self.chunks.pop(0)

    async def recv_into(self, target: Any) -> int:
        data = await self.recv(len(target))
        target[:len(data)] = data
        return len(data)


class HeldMute:
    """A mute the test ends: says when the reader starts waiting on it."""

    def __init__(self) -> None:
        self.entered = asyncio.Event()
        self.over = asyncio.Event()

    @property
    def muted(self) -> bool:
        return not self.over.is_set()

    async def wait(self) -> bool:
        self.entered.set()
        await self.over.wait()
        return True


def test_a_muted_reader_reserves_and_reads_nothing(tmp_path: Path) -> None:
    """The pool is shared: bytes a muted client's next frame held would keep every other
    client waiting for the whole throttle."""

    async def run() -> tuple[int, int]:
        with socket.socket() as ours:  # bound, never connected: the reads are the test's
            ours.bind(("127.0.0.1", 0))
            pool = MemoryPool(1 << 20)
            conn = Connection(make_services(tmp_path), ours, ("127.0.0.1", 1), pool,
                              SimpleNamespace(context=None))  # type: ignore[arg-type]
            # A 1000-byte frame, begun in one read and finished in the next.
            reads = Reads((1000).to_bytes(4, "big") + bytes(10), bytes(990))
            mute = HeldMute()
            conn.transport, conn.mute = reads, mute  # type: ignore[assignment]
            reader = asyncio.create_task(conn._read_loop())
            await asyncio.wait_for(mute.entered.wait(), timeout=10)
            seen = pool.reserved, reads.reads
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reader
            return seen

    assert asyncio.run(run()) == (0, 0)
