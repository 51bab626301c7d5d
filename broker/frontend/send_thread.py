"""The event loop's side of the send thread (``_sendthread.c``).

A listener's plain connections queue their responses on a ``Channel`` each; one C thread,
which never takes the GIL, makes the ``send`` calls on another core (why: the comment at the
top of ``_sendthread.c``). What stays here is what must run on the loop: knowing which
connection a stalled channel belongs to, and telling it, so that it writes the rest itself
when its socket has room again (``PlainTransport``). ``kafkube.network.send.thread=false``
turns it off, for a comparison or a kernel where it misbehaves.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable

from broker.frontend._sendthread import Channel, Sender


class SendThread:
    def __init__(self) -> None:
        self._sender = Sender()
        self._loop = asyncio.get_running_loop()
        self._stalled_callbacks: dict[int, Callable[[], None]] = {}
        self._fd = self._sender.fileno()
        self._loop.add_reader(self._fd, self._on_stalled)
        self._wake_scheduled = False

    def wake_soon(self) -> None:
        """Wake the thread once the loop has run what is ready now: one wake-up for the
        responses of a whole turn of the loop, not one each (``_sendthread.c``)."""
        if not self._wake_scheduled:
            self._wake_scheduled = True
            self._loop.call_soon(self._wake)

    def _wake(self) -> None:
        self._wake_scheduled = False
        self._sender.wake()

    def channel(self, sock: socket.socket, on_stalled: Callable[[], None]) -> Channel:
        """A channel for ``sock``; ``on_stalled`` runs on the loop when a send stalls
        (the socket full) or fails, with the channel held."""
        channel = Channel(self._sender, sock.fileno())
        self._stalled_callbacks[channel.fd] = on_stalled
        return channel

    def release(self, channel: Channel) -> None:
        """Before the socket closes: its descriptor number may be reused at once."""
        channel.close()
        self._stalled_callbacks.pop(channel.fd, None)

    def stats(self) -> tuple[int, int, int]:
        """(sends, bytes sent, stalls) since the start."""
        return self._sender.stats()

    def stop(self) -> None:
        """After the listener's connections have closed (each flushed its channel first).
        A channel still open keeps what it holds, for ``hold``; ``send`` returns False
        from now on."""
        self._loop.remove_reader(self._fd)
        self._sender.stop()

    def _on_stalled(self) -> None:
        for fd in self._sender.stalled():
            callback = self._stalled_callbacks.get(fd)
            if callback is not None:
                callback()
