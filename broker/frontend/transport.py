"""The bytes under a connection: the socket itself, or TLS over it.

A connection reads and writes through one of these. The plain one is the socket's own
non-blocking calls, and keeps ``os.sendfile`` for fetch responses (zero-copy). The TLS one
runs OpenSSL over memory buffers (``ssl.MemoryBIO``) and moves the ciphertext with the same
socket calls, so both work on asyncio and uvloop alike; its fetch responses are read from
the page cache and encrypted, as Kafka loses zero-copy under TLS too.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import ssl
from collections.abc import AsyncIterator, Callable, Iterable
from typing import Any, TypeVar

from broker.frontend.regions import slices
from broker.frontend.send_thread import SendThread
from broker.protocol.file_region import FileRegion

T = TypeVar("T")

RECV_SIZE = 256 << 10
# A TLS fetch response is encrypted piece by piece and sent when this much is waiting.
TLS_FLUSH_BYTES = 1 << 20


class PlainTransport:
    """Reads try the socket first and wait only when it has nothing. The socket stays
    registered with the loop between waits: `loop.sock_recv` registered and unregistered it
    for every read, two or three epoll_ctl calls a request (strace: 6 of 11 system calls of
    a small request's round trip). A wake-up with nobody waiting unregisters it, so a
    connection that stops reading (memory pool full) does not make the loop spin.

    With a ``SendThread``, responses are queued on a channel and sent by its thread. The
    loop writes itself only while it holds the channel (``exclusive``): a fetch response's
    sendfile, and the rest of a response the socket had no room for, which the thread
    hands back (``_on_stalled``). Writes wait for that rest, so a client that does not read
    its answers stops being read from, as without the thread."""

    def __init__(self, sock: socket.socket, sends: SendThread | None = None) -> None:
        self.sock = sock
        self.loop = asyncio.get_running_loop()
        self._fd = sock.fileno()
        self._waiter: asyncio.Future[None] | None = None
        self._watching = False
        self._sends = sends
        self._channel = sends.channel(sock, self._on_stalled) if sends is not None else None
        self._writing = asyncio.Lock()  # the loop writes itself, the channel held
        self._drainer: asyncio.Task[None] | None = None

    async def recv(self, size: int) -> bytes:
        return await self._read(self.sock.recv, size)

    async def recv_into(self, buffer: memoryview) -> int:
        return await self._read(self.sock.recv_into, buffer)

    async def _read(self, call: Callable[[Any], T], arg: Any) -> T:
        waited = False
        while True:
            try:
                result = call(arg)
            except (BlockingIOError, InterruptedError):
                await self._readable()
                waited = True
                continue
            if not waited:  # every read yields to the loop once, as sock_recv did: a
                await asyncio.sleep(0)  # client that never pauses starves no Lease renewal
            return result

    async def _readable(self) -> None:
        waiter = self.loop.create_future()
        self._waiter = waiter
        if not self._watching:
            self.loop.add_reader(self._fd, self._on_readable)
            self._watching = True
        try:
            await waiter
        finally:
            self._waiter = None

    def _on_readable(self) -> None:
        waiter = self._waiter
        if waiter is None or waiter.done():
            self._unwatch()
        else:
            waiter.set_result(None)

    def _unwatch(self) -> None:
        if self._watching:
            self._watching = False
            self.loop.remove_reader(self._fd)

    def close(self) -> None:
        """Before the socket closes: its descriptor number may be reused at once. What the
        channel still holds is dropped: ``flush`` first to send it."""
        self._unwatch()
        if self._drainer is not None:
            self._drainer.cancel()
        if self._channel is not None and self._sends is not None:
            self._sends.release(self._channel)

    async def aclose(self) -> None:
        """``close``, after the task writing a stalled rest has let go of the socket."""
        drainer = self._drainer
        if drainer is not None and not drainer.done():
            drainer.cancel()
            with contextlib.suppress(BaseException):
                await drainer
        self.close()

    @property
    def idle(self) -> bool:
        """Nothing queued for the send thread nor being written: the connection may be
        closed as idle (connections.max.idle.ms)."""
        channel = self._channel
        if channel is None:
            return True
        drainer = self._drainer  # scheduled, maybe not yet holding the channel
        return not (channel.pending or (drainer is not None and not drainer.done()))

    async def flush(self) -> None:
        """Everything queued for the send thread is in the socket when this returns (the
        loop writes what is left): before the connection closes, or shuts down on error."""
        if self._channel is not None:
            async with self.exclusive():
                pass

    def try_send(self, data: bytes | memoryview) -> bytes | memoryview | None:
        """Send what the socket takes now, or queue it on the channel; the rest (None:
        nothing) is for ``sendall``."""
        channel = self._channel
        if channel is not None:
            # Refused (held, full or failed): sendall writes it after the channel's rest.
            if not channel.send(data):
                return data
            self._sends.wake_soon()  # type: ignore[union-attr]
            return None
        try:
            sent = self.sock.send(data)
        except BlockingIOError:
            sent = 0
        return None if sent == len(data) else memoryview(data)[sent:]

    async def sendall(self, data: bytes | bytearray | memoryview) -> None:
        if not data:
            return
        channel = self._channel
        if channel is None:
            await self.loop.sock_sendall(self.sock, data)
            return
        if channel.send(data):  # refused while held, so never ahead of what the loop writes
            self._sends.wake_soon()  # type: ignore[union-attr]
            return
        # Held (a stall's rest being written), full, or failed: write it from the loop,
        # after what the channel holds, waiting for room (or raising the send's error).
        async with self.exclusive():
            await self.loop.sock_sendall(self.sock, data)

    @contextlib.asynccontextmanager
    async def exclusive(self) -> AsyncIterator[None]:
        """The socket is the loop's to write while this lasts: the channel held, what it
        had queued written first, what is queued meanwhile written after."""
        channel = self._channel
        if channel is None:
            yield
            return
        async with self._writing:
            await self._write_held(channel)
            yield
            await self._write_held(channel)
            channel.resume()  # not after a failure: the connection is closing then
            self._sends.wake_soon()  # type: ignore[union-attr]

    async def send_regions(self, chunks: Iterable[bytes | FileRegion]) -> None:
        """A fetch response too large to copy: its file regions sent with sendfile
        (zero-copy), the bytes between them with send."""
        pending = bytearray()
        async with self.exclusive():  # the send thread's queue first, then these
            for chunk in chunks:
                if isinstance(chunk, FileRegion):
                    if chunk.length == 0:
                        continue
                    if pending:
                        await self._send_small(pending)
                        pending = bytearray()
                    await self._sendfile(chunk)
                else:
                    pending += chunk
            if pending:
                await self._send_small(pending)

    async def _send_small(self, data: bytes | bytearray) -> None:
        """A partition header between two sendfiles: try a plain send before awaiting."""
        try:
            sent = self.sock.send(data)
        except BlockingIOError:
            sent = 0
        if sent < len(data):
            await self.loop.sock_sendall(self.sock, memoryview(data)[sent:])

    async def _sendfile(self, region: FileRegion) -> None:
        """``region`` by sendfile. The socket is written from a writer callback kept
        registered until the region is out, and a short send is taken to mean the socket is
        full (the next sendfile would fail with EAGAIN): per refill of a 100 KiB send
        buffer that is one sendfile, where awaiting writability each time cost two epoll_ctl
        calls, a future, a task step and an EAGAIN (profiled: most of the broker's time in
        a large consume was in the loop's own machinery around them)."""
        sending = _RegionSend(self._fd, region)
        if sending.step():
            return
        done = self.loop.create_future()
        sending.done = done
        self.loop.add_writer(self._fd, sending.on_writable)
        try:
            await done
        finally:
            self.loop.remove_writer(self._fd)

    async def _write_held(self, channel: Any) -> None:
        while data := channel.hold():  # OSError if the thread's send failed
            await self.loop.sock_sendall(self.sock, data)

    def _on_stalled(self) -> None:
        """The thread found the socket full (or broken) and holds the channel: write the
        rest from the loop, which waits until the socket has room."""
        if self._drainer is None or self._drainer.done():
            self._drainer = self.loop.create_task(self._drain())

    async def _drain(self) -> None:
        try:
            await self.flush()
        except Exception:  # the client is gone (or memory is): the reader sees it, closes
            with contextlib.suppress(OSError):
                self.sock.shutdown(socket.SHUT_RDWR)

    def peer_certificate(self) -> bytes | None:
        return None


class TlsTransport:
    """TLS over the socket. Every byte of ciphertext leaves through ``_flush``, one at a
    time (a lock), so records from the reader (a TLS 1.3 key update) and from the writer
    never interleave on the wire."""


    def __init__(self, sock: socket.socket, context: ssl.SSLContext,
                 server_side: bool = True, server_hostname: str | None = None) -> None:
        self.sock = sock
        self.loop = asyncio.get_running_loop()
        self._in = ssl.MemoryBIO()
        self._out = ssl.MemoryBIO()
        self.tls = context.wrap_bio(self._in, self._out, server_side=server_side,
                                    server_hostname=server_hostname)
        self._pending = bytearray()  # ciphertext the socket did not take yet
        self._sending = asyncio.Lock()

    async def handshake(self) -> None:
        """Raises ssl.SSLError (a bad certificate, garbage in place of a ClientHello) or
        ConnectionError when the peer goes away first."""
        while True:
            try:
                self.tls.do_handshake()
                break
            except ssl.SSLWantReadError:
                await self._flush()
                if not await self._fill():
                    raise ConnectionError("closed during the TLS handshake") from None
            except ssl.SSLError:
                # The alert OpenSSL wrote (unknown CA, expired certificate) tells the client
                # why; send it before the connection closes.
                with contextlib.suppress(OSError):
                    await self._flush()
                raise
        await self._flush()

    def close(self) -> None:
        """Nothing registered with the loop beyond a read or write in progress."""

    async def aclose(self) -> None:
        self.close()

    @property
    def idle(self) -> bool:
        return not self._pending and not self._sending.locked()

    def peer_certificate(self) -> bytes | None:
        return self.tls.getpeercert(binary_form=True)

    async def _fill(self) -> bool:
        data = await self.loop.sock_recv(self.sock, RECV_SIZE)
        if not data:
            self._in.write_eof()
            return False
        self._in.write(data)
        return True

    async def recv(self, size: int) -> bytes:
        while True:
            try:
                data = self.tls.read(size)
            except ssl.SSLWantReadError:
                if self._out.pending:
                    await self._flush()
                if not await self._fill():
                    return b""
                continue
            except (ssl.SSLZeroReturnError, ssl.SSLEOFError):
                return b""
            if self._out.pending:
                await self._flush()
            return self._more(data, size)

    def _more(self, first: bytes, size: int) -> bytes:
        """``first`` and what other records already received decrypt to, up to ``size``:
        OpenSSL hands out one TLS record (16 KiB) per read, and a large produce request
        would otherwise cost one trip through the event loop per record."""
        parts = [first]
        have = len(first)
        while have < size:
            try:
                more = self.tls.read(size - have)
            except (ssl.SSLWantReadError, ssl.SSLZeroReturnError, ssl.SSLEOFError):
                break
            if not more:
                break
            parts.append(more)
            have += len(more)
        return first if len(parts) == 1 else b"".join(parts)

    async def recv_into(self, buffer: memoryview) -> int:
        while True:
            try:
                count = self.tls.read(len(buffer), buffer)
            except ssl.SSLWantReadError:
                if self._out.pending:
                    await self._flush()
                if not await self._fill():
                    return 0
                continue
            except (ssl.SSLZeroReturnError, ssl.SSLEOFError):
                return 0
            if self._out.pending:
                await self._flush()
            while count < len(buffer):  # more records already here: take them too
                try:
                    more = self.tls.read(len(buffer) - count, buffer[count:])
                except (ssl.SSLWantReadError, ssl.SSLZeroReturnError, ssl.SSLEOFError):
                    break
                if not more:
                    break
                count += more
            return count

    def try_send(self, data: bytes | memoryview) -> bytes | None:
        """Encrypt all of ``data`` and send what the socket takes; b"" means ciphertext is
        left for ``sendall`` to finish."""
        self.tls.write(data)
        if self._sending.locked():
            return b""
        self._pending += self._out.read()
        try:
            sent = self.sock.send(self._pending)
        except BlockingIOError:
            sent = 0
        del self._pending[:sent]
        return None if not self._pending else b""

    async def sendall(self, data: bytes | bytearray | memoryview) -> None:
        if data:
            self.tls.write(data)
        await self._flush()

    def write(self, data: bytes | bytearray | memoryview) -> int:
        """Encrypt ``data`` without sending it yet; how many encrypted bytes wait. A
        response of many pieces is then sent with few system calls (``flush``)."""
        if data:
            self.tls.write(data)
        return self._out.pending

    async def flush(self) -> None:
        await self._flush()

    async def send_regions(self, chunks: Iterable[bytes | FileRegion]) -> None:
        """A fetch response too large to copy: each region read, then encrypted (TLS
        loses zero-copy, in Kafka too), sent whenever TLS_FLUSH_BYTES wait."""
        for chunk in chunks:
            pieces = slices(chunk, TLS_FLUSH_BYTES) if isinstance(chunk, FileRegion) \
                else (chunk,)
            for piece in pieces:
                if self.write(piece) >= TLS_FLUSH_BYTES:
                    await self.flush()
        await self.flush()

    async def _flush(self) -> None:
        async with self._sending:
            if self._pending:
                chunk, self._pending = self._pending, bytearray()
                await self.loop.sock_sendall(self.sock, chunk)
            while self._out.pending:
                await self.loop.sock_sendall(self.sock, self._out.read())


class _RegionSend:
    """One file region's sendfile, driven by the socket's writability."""

    __slots__ = ("done", "fd", "file", "offset", "remaining")

    def __init__(self, fd: int, region: FileRegion) -> None:
        self.fd, self.file = fd, region.fd
        self.offset, self.remaining = region.position, region.length
        self.done: asyncio.Future[None] | None = None

    def step(self) -> bool:
        """Send what the socket takes; True once the whole region is sent."""
        while self.remaining:
            try:
                sent = os.sendfile(self.fd, self.file, self.offset, self.remaining)
            except BlockingIOError:
                return False
            if sent == 0:
                # The file shrank under us: the frame can no longer be completed.
                raise ConnectionError("segment file truncated during a fetch")
            self.offset += sent
            self.remaining -= sent
            if self.remaining:
                return False  # a short send: the socket is full until it says otherwise
        return True

    def on_writable(self) -> None:
        done = self.done
        if done is None or done.done():
            return
        try:
            if self.step():
                done.set_result(None)
        except Exception as e:  # raised in the writer awaiting it
            done.set_exception(e)


Transport = PlainTransport | TlsTransport
