"""broker/frontend/transport.py's PlainTransport on uvloop, the broker's loop, over a real
socket pair: reads take what is there without waiting, the socket stays registered between
reads, and a connection that stops reading does not keep the loop busy."""

from __future__ import annotations

import asyncio
import socket

import uvloop

from broker.frontend.transport import PlainTransport


async def waiting(transport: PlainTransport) -> None:
    """Until a read is parked on the loop (bounded: 1000 loop turns)."""
    for _ in range(1000):
        if transport._waiter is not None:
            return
        await asyncio.sleep(0)
    raise AssertionError("the read never waited")


async def _scenario() -> dict[str, object]:
    loop = asyncio.get_running_loop()
    server, client = socket.socketpair()
    server.setblocking(False)
    transport = PlainTransport(server)
    seen: dict[str, object] = {}
    calls = 0
    on_readable = transport._on_readable

    def counted() -> None:
        nonlocal calls
        calls += 1
        on_readable()

    transport._on_readable = counted  # type: ignore[method-assign]

    client.sendall(b"there already")
    seen["ready"] = await transport.recv(100)  # no wait: nothing registered
    seen["registered_before_waiting"] = transport._watching

    reading = loop.create_task(transport.recv(100))
    await waiting(transport)
    client.sendall(b"later")
    seen["waited"] = await asyncio.wait_for(reading, 5)
    seen["registered_between_reads"] = transport._watching

    # Nobody reads now (as when the memory pool is full) while bytes wait in the socket:
    # one wake-up unregisters it, no more follow.
    before = calls
    client.sendall(b"unread")
    await asyncio.sleep(0.2)
    seen["wakeups_while_nobody_reads"] = calls - before
    seen["registered_while_nobody_reads"] = transport._watching
    seen["still_there"] = await transport.recv(100)

    # A read cancelled mid-wait (the connection closing), then close(): nothing is left
    # registered for a descriptor number the next socket may get.
    reading = loop.create_task(transport.recv(100))
    await waiting(transport)
    reading.cancel()
    await asyncio.gather(reading, return_exceptions=True)
    transport.close()
    before = calls
    client.sendall(b"after close")
    await asyncio.sleep(0.1)
    seen["wakeups_after_close"] = calls - before
    client.close()
    server.close()
    return seen


def test_reads_register_once_and_a_stalled_reader_does_not_spin() -> None:
    seen = uvloop.run(_scenario())
    assert seen == {
        "ready": b"there already", "registered_before_waiting": False,
        "waited": b"later", "registered_between_reads": True,
        "wakeups_while_nobody_reads": 1, "registered_while_nobody_reads": False,
        "still_there": b"unread", "wakeups_after_close": 0,
    }
