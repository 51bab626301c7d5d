"""The send thread (broker/frontend/_sendthread.c, send_thread.py) under PlainTransport, on
uvloop over real socket pairs: responses leave in the order they were queued whichever way
each was written (queued for the thread, written by the loop after a stall, sent with
sendfile), a client that stops reading holds its writer back, a client that goes away is
noticed, and a closed channel never writes to the descriptor number it had."""

from __future__ import annotations

import asyncio
import os
import socket
import tempfile
from collections.abc import Callable

import uvloop

from broker.frontend.send_thread import SendThread
from broker.frontend.transport import PlainTransport
from broker.protocol.file_region import FileRegion


def pair() -> tuple[socket.socket, socket.socket]:
    server, client = socket.socketpair()
    server.setblocking(False)
    # Small buffers, so that a few responses fill them.
    server.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 16 << 10)
    client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 << 10)
    return server, client


async def read_exactly(client: socket.socket, size: int) -> bytes:
    """``size`` bytes from the client's end, read on a worker thread (bounded: 10 s)."""
    client.settimeout(10)

    def read() -> bytes:
        got = bytearray()
        while len(got) < size:
            chunk = client.recv(size - len(got))
            if not chunk:
                break
            got += chunk
        return bytes(got)

    return await asyncio.to_thread(read)


async def until(predicate: Callable[[], bool], turns: int = 20000) -> None:
    """Until ``predicate()`` holds, yielding to the loop (bounded in turns, with a short
    wait between them for the thread)."""
    for _ in range(turns):
        if predicate():
            return
        await asyncio.sleep(0.001)
    raise AssertionError("never happened")


async def _in_order() -> dict[str, object]:
    sends = SendThread()
    server, client = pair()
    transport = PlainTransport(server, sends)
    expected = bytearray()
    # Every 7th response larger than the socket's buffers: the thread stalls on those.
    responses = [b"response %03d;" % i + (b"." * 50_000 if i % 7 == 0 else b"")
                 for i in range(300)]
    total = sum(map(len, responses)) + 6 * (len(b"headertrailer") + 200_000)
    reading: asyncio.Task[bytes] | None = None
    with tempfile.TemporaryFile() as f:
        f.write(os.urandom(300_000))
        f.flush()
        for i, small in enumerate(responses):
            expected += small
            if i % 3 == 0:  # the reader's fast path; the rest is the writer's, as in
                rest = transport.try_send(small)  # Connection._start
                if rest is not None:
                    await transport.sendall(rest)
            else:
                await transport.sendall(small)  # the writer's
            if reading is None:
                # The client reads nothing until the thread has stalled on the first large
                # response (a reader started at once could keep ahead of every send).
                await until(lambda: sends.stats()[2] > 0)
                reading = asyncio.get_running_loop().create_task(read_exactly(client, total))
            if i % 10 == 9:  # a turn of the loop, as between two reads: the thread wakes
                await asyncio.sleep(0)
            if i % 50 == 49:  # a large fetch response: bytes and sendfile, by the loop
                region = FileRegion(f.fileno(), i * 100, 200_000)
                await transport.send_regions([b"header", region, b"trailer"])
                expected += b"header" + os.pread(f.fileno(), 200_000, i * 100) + b"trailer"
        assert reading is not None
        got = await asyncio.wait_for(reading, 20)
    transport.close()
    sends_made, sent, stalls = sends.stats()
    sends.stop()
    server.close()
    client.close()
    return {"in_order": got == bytes(expected), "bytes_by_thread": sent > 0,
            "stalled": stalls > 0, "sends": sends_made}


def test_responses_leave_in_order_however_each_is_written() -> None:
    seen = uvloop.run(_in_order())
    assert seen["in_order"] is True
    assert seen["bytes_by_thread"] is True
    assert seen["stalled"] is True  # 50 KB through 16 KiB buffers: the loop wrote the rest


async def _client_not_reading() -> dict[str, object]:
    sends = SendThread()
    server, client = pair()
    transport = PlainTransport(server, sends)
    chunk = b"z" * 8192
    queued = 0
    # The client reads nothing: the thread's sends stall, and the fast path refuses more
    # (it returns what it was given, for the writer).
    while (rest := transport.try_send(chunk)) is None:
        queued += 1
        assert queued < 10_000, "the socket never filled"
        await asyncio.sleep(0)  # a turn of the loop: the thread wakes and sends
    writer = asyncio.get_running_loop().create_task(transport.sendall(bytes(rest) + b"last"))
    for _ in range(200):  # the writer cannot finish while the client reads nothing
        await asyncio.sleep(0)
    blocked = not writer.done()
    got = await read_exactly(client, (queued + 1) * len(chunk) + 4)
    await asyncio.wait_for(writer, 10)
    transport.close()
    sends.stop()
    server.close()
    client.close()
    return {"blocked": blocked, "all": got == chunk * (queued + 1) + b"last"}


def test_a_client_that_stops_reading_holds_the_writer_back_and_loses_nothing() -> None:
    seen = uvloop.run(_client_not_reading())
    assert seen == {"blocked": True, "all": True}


async def _client_gone() -> dict[str, object]:
    sends = SendThread()
    server, client = pair()
    transport = PlainTransport(server, sends)
    client.close()  # the thread's next send fails (EPIPE / ECONNRESET)
    transport.try_send(b"into the void")
    await until(lambda: transport._drainer is not None and transport._drainer.done())
    try:
        await transport.sendall(b"more")
        error = None
    except OSError as e:
        error = type(e).__name__
    transport.close()
    sends.stop()
    server.close()
    return {"error": error}


def test_a_client_gone_is_noticed_and_later_writes_fail() -> None:
    seen = uvloop.run(_client_gone())
    assert seen["error"] in ("BrokenPipeError", "ConnectionResetError", "OSError")


async def _closed_channel() -> dict[str, object]:
    sends = SendThread()
    server, client = pair()
    transport = PlainTransport(server, sends)
    await transport.sendall(b"first")  # the thread, started, sends this and goes to sleep
    assert await read_exactly(client, 5) == b"first"
    for _ in range(64):  # queued, the thread not woken yet (that waits for a loop turn)
        if transport.try_send(b"old" * 2000) is not None:
            break  # full (the limit), or a spurious wake-up sent some: enough is queued
    transport.close()  # as Connection.run does before the socket closes
    client.close()
    _, sent_before, _ = sends.stats()
    # A new connection at the old descriptor number, as the kernel hands numbers out again:
    # dup2 closes the old socket and puts the new one in its place.
    new_server, new_client = pair()
    os.dup2(new_server.fileno(), server.fileno())
    new_server.close()
    fresh = PlainTransport(server, sends)
    await fresh.sendall(b"new")
    got = await read_exactly(new_client, 3)
    # The thread counts a send after it returns, maybe after the peer read the bytes.
    await until(lambda: sends.stats()[1] - sent_before >= 3)
    _, sent_after, _ = sends.stats()
    fresh.close()
    sends.stop()
    server.close()
    new_client.close()
    return {"got": got, "sent_since_close": sent_after - sent_before}


def test_a_closed_channel_never_writes_to_its_old_descriptor_number() -> None:
    seen = uvloop.run(_closed_channel())
    assert seen == {"got": b"new", "sent_since_close": 3}
