"""The socket side: accept connections, read frames, run handlers, write responses in order.

Each connection is a pipeline. A reader decodes frames and starts each request's handler
at once, in arrival order (so appends happen in request order). Most handlers finish
without waiting; when nothing earlier is still waiting to be written, the reader sends such
a response itself (queued for the send thread on plain listeners, ``send_thread.py``). A
handler that has to wait (a long-poll fetch, acks=all) becomes a task,
and a writer awaits the queued tasks and responses in order, so responses leave in request
order while slow requests do not stop the reader. At most ``MAX_IN_FLIGHT`` responses wait
per connection; beyond that the reader stops reading and TCP pushes back on the client.

Memory is bounded the way Kafka bounds it: a frame's buffer grows with the bytes that
arrive, its declared size is reserved from the pool all connections share
(``queued.max.request.bytes``) before its body is read and returned when its request has
been handled; a connection idle for ``connections.max.idle.ms`` is closed; and
``max.connections`` / ``max.connections.per.ip`` cap how many there are.

Raw non-blocking sockets with the loop's ``sock_*`` calls work on both asyncio and uvloop,
and leave the file descriptor free for ``os.sendfile``: file regions of a fetch response go
from the page cache to the socket without passing through Python (``transport.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import socket
import ssl
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from broker.frontend import eager
from broker.frontend.memory_pool import MemoryPool
from broker.frontend.regions import inline
from broker.frontend.send_thread import SendThread
from broker.frontend.throttling import Mute, peer_closed, settle
from broker.frontend.transport import PlainTransport, TlsTransport, Transport
from broker.handlers import REGISTRY
from broker.handlers.api_versions import unsupported_version_response
from broker.handlers.append_order import AppendOrder
from broker.handlers.context import BrokerServices, RequestContext, RequestThrottle
from broker.handlers.head_of_line import HeadOfLine
from broker.protocol.codec import (
    API_VERSIONS_KEY,
    FrameReader,
    ProtocolError,
    Request,
    UnsupportedRequest,
    decode_request,
    encode_response,
)
from broker.protocol.fetch import EncodedResponse
from broker.security.sasl import (
    SASL_AUTHENTICATE,
    SASL_HANDSHAKE,
    AuthenticationFailed,
    IllegalSaslState,
    SaslState,
)
from broker.security.session import ListenerSecurity, Session
from broker.security.tls import NoMatchingRule

log = logging.getLogger(__name__)

MAX_IN_FLIGHT = 16
# A fetch response up to this size is copied out of the page cache (one pread per region)
# and sent with one send(): cheaper than a send and a sendfile per partition, and the
# client gets one segment instead of many. Larger ones are sent with sendfile.
INLINE_LIMIT = 64 << 10
# What one read asks for. 1 MiB cost memory per producer connection, not speed: each read
# allocated 1 MiB that shrank to what arrived, and the heap kept the holes (200 producers:
# RSS peak 193-259 MiB with 1 MiB reads, 103 MiB with 64 KiB). Larger frames are received
# in place anyway (DIRECT_RECV_BYTES).
RECV_SIZE = 64 << 10
DIRECT_RECV_BYTES = 64 << 10  # frames missing more than this are received in place
# Frames from this size on (other than Produce, whose records stay bytes) are decoded and
# answered on a worker thread: a request naming 100,000 groups takes seconds of kio's time.
LARGE_FRAME = 256 << 10
PRODUCE_KEY = b"\x00\x00"
# Frames answered on the loop whatever their size: Produce (its records stay bytes), and
# SASL's, whose handling changes the connection's state right after (sasl.py).
SASL_KEYS = (SASL_HANDSHAKE, SASL_AUTHENTICATE)
SMALL_WORK_KEYS = (PRODUCE_KEY, *(key.to_bytes(2, "big") for key in SASL_KEYS))
_CLOSE = object()


class KafkaServer:
    """One listener: its socket, and the security every connection on it starts with."""

    def __init__(self, services: BrokerServices, security: ListenerSecurity) -> None:
        self.services = services
        self.security = security
        self.host = security.listener.host
        self.port = security.listener.port
        self._sock: socket.socket | None = None
        self._accept_task: asyncio.Task[None] | None = None
        self._connections: set[asyncio.Task[None]] = set()
        config = services.config
        self.pool = MemoryPool(config["queued.max.request.bytes"])
        services.metrics.track_memory_pool(self.pool)
        self.max_connections = config["max.connections"]
        self.max_per_ip = config["max.connections.per.ip"]
        self._per_ip: Counter[str] = Counter()
        self._slot_freed = asyncio.Event()
        self.send_buffer = config["socket.send.buffer.bytes"]
        self.receive_buffer = config["socket.receive.buffer.bytes"]
        self.sends: SendThread | None = None  # TLS encrypts on the loop and sends there

    async def start(self) -> None:
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if self.receive_buffer != -1:
            # Set before listen(): the window scale a connection uses is fixed by its SYN.
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, self.receive_buffer)
        sock.bind((self.host, self.port))
        sock.listen(512)
        sock.setblocking(False)
        self._sock = sock
        self.port = sock.getsockname()[1]
        if self.security.context is None and self.services.config["kafkube.network.send.thread"]:
            self.sends = SendThread()
        self._accept_task = asyncio.create_task(self._accept_loop())

    async def _accept_loop(self) -> None:
        loop = asyncio.get_running_loop()
        assert self._sock is not None
        while True:
            while len(self._connections) >= self.max_connections:
                # Kafka's acceptor waits for a free slot too: the client's connect queues in
                # the listen backlog meanwhile.
                self._slot_freed.clear()
                await self._slot_freed.wait()
            try:
                conn, addr = await loop.sock_accept(self._sock)
            except OSError as e:
                if e.errno in (errno.EMFILE, errno.ENFILE):
                    log.error("out of file descriptors; pausing accepts for 100 ms")
                    await asyncio.sleep(0.1)
                    continue
                raise
            ip = addr[0] if isinstance(addr, tuple) else ""
            if self._per_ip[ip] >= self.max_per_ip:
                log.info("closing a connection from %s: it already has %d "
                         "(max.connections.per.ip)", ip, self._per_ip[ip])
                self.services.metrics.request_errors.labels("connection_limit").inc()
                conn.close()
                continue
            conn.setblocking(False)
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self.send_buffer != -1:
                conn.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, self.send_buffer)
            self._per_ip[ip] += 1
            task = asyncio.create_task(
                Connection(self.services, conn, addr, self.pool, self.security,
                           self.sends).run())
            self._connections.add(task)
            task.add_done_callback(lambda t, ip=ip: self._closed(t, ip))

    def _closed(self, task: asyncio.Task[None], ip: str) -> None:
        self._connections.discard(task)
        self._per_ip[ip] -= 1
        if not self._per_ip[ip]:
            del self._per_ip[ip]
        self._slot_freed.set()

    async def stop(self) -> None:
        if self._accept_task:
            self._accept_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._accept_task
        if self._sock:
            self._sock.close()
        for task in list(self._connections):
            task.cancel()
        await asyncio.gather(*self._connections, return_exceptions=True)
        if self.sends is not None:
            self.sends.stop()


class Connection:
    def __init__(self, services: BrokerServices, sock: socket.socket, addr: Any,
                 pool: MemoryPool, security: ListenerSecurity,
                 sends: SendThread | None = None) -> None:
        self.services = services
        self.sock = sock
        self.peer = f"{addr[0]}:{addr[1]}" if isinstance(addr, tuple) else str(addr)
        self.client_host = addr[0] if isinstance(addr, tuple) else ""
        self.local_host = sock.getsockname()[0]
        self.loop = asyncio.get_running_loop()
        self.security = security
        self.transport: Transport = (
            TlsTransport(sock, security.context) if security.context is not None
            else PlainTransport(sock, sends))
        self.session: Session | None = None
        self.append_order = AppendOrder()  # produce requests append in arrival order
        self.head_of_line = HeadOfLine()  # fetches waiting, answered when a request follows
        self.frames = FrameReader(services.config["socket.request.max.bytes"])
        self.pool = pool
        self._reserved = 0  # pool bytes held for the frame being read
        self._idle_s = services.config["connections.max.idle.ms"] / 1000
        self.last_active = self.loop.time()
        self._idle_timer: asyncio.TimerHandle | None = None
        self.queue: asyncio.Queue[Any] = asyncio.Queue(MAX_IN_FLIGHT)
        self._backlog = 0  # responses queued, or being written by the writer
        self._writer: asyncio.Task[None] | None = None
        self.metrics = services.metrics
        # Client quotas: no request is read while muted (KIP-219), until the client goes.
        self.mute = Mute(lambda: peer_closed(self.sock))

    async def run(self) -> None:
        self.metrics.connections.inc()
        writer = self._writer = asyncio.create_task(self._write_loop())
        self._idle_timer = self.loop.call_later(self._idle_s, self._check_idle)
        auth_deadline = self.loop.call_later(
            self.services.config["kafkube.authentication.timeout.ms"] / 1000,
            self._authentication_timed_out)
        try:
            if not await self._open_session():
                return
            if self.session is not None and self.session.authenticated:
                auth_deadline.cancel()
            await self._read_loop()
        except (ConnectionError, OSError) as e:
            log.debug("%s: connection lost: %s", self.peer, e)
        except asyncio.CancelledError:
            writer.cancel()
            raise
        finally:
            if not writer.done():
                await self.queue.put(_CLOSE)
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await writer
            if self._idle_timer is not None:
                self._idle_timer.cancel()
            auth_deadline.cancel()
            self.pool.release(self._reserved)
            self._reserved = 0
            await self.transport.aclose()
            self.sock.close()
            self.metrics.connections.dec()
            if (shares := self.services.shares) is not None:  # its share sessions end too
                shares.connection_closed(self.services.share_sessions, self.head_of_line)

    async def _open_session(self) -> bool:
        """The TLS handshake, if any, and the session it leaves; False closes."""
        transport = self.transport
        certificate = None
        if isinstance(transport, TlsTransport):
            try:
                await transport.handshake()
                certificate = transport.peer_certificate()
            except ssl.SSLError as e:
                self._refuse("authentication", ConnectionError(
                    f"Failed authentication with {self.client_host} (SSL handshake failed: "
                    f"{e.reason or e})"))
                return False
        try:
            self.session = self.security.new_session(self.client_host, certificate)
        except NoMatchingRule as e:
            self._refuse("authentication", ConnectionError(
                f"Failed authentication with {self.client_host} ({e})"))
            return False
        if not self.session.authenticated:
            # Kafka's sasl.server.max.receive.size: a client not yet known sends small frames.
            self.frames.max_frame_bytes = self.services.config["sasl.server.max.receive.size"]
        return True

    def _authentication_timed_out(self) -> None:
        if self.session is not None and self.session.authenticated:
            return
        self._refuse("authentication", ConnectionError(
            "not authenticated within kafkube.authentication.timeout.ms"))
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)

    def _check_idle(self) -> None:
        """Close the connection after connections.max.idle.ms with nothing read, written
        or pending (a long-poll fetch is pending, so its consumer is not idle)."""
        quiet = self.loop.time() - self.last_active
        writing = self._backlog or not self.transport.idle
        if quiet >= self._idle_s and not writing:
            self._refuse("idle", ConnectionError(
                f"idle for {quiet:.0f} s (connections.max.idle.ms)"))
            with contextlib.suppress(OSError):
                self.sock.shutdown(socket.SHUT_RDWR)
            return
        self._idle_timer = self.loop.call_later(
            max(self._idle_s - quiet, 0.01) if not writing else self._idle_s,
            self._check_idle)

    # -- reading -------------------------------------------------------------------------

    async def _read_loop(self) -> None:
        while True:
            # A muted client's next frame is neither reserved nor read until the mute is
            # over: its pool bytes would keep other connections waiting meanwhile.
            if self.mute.muted and not await self.mute.wait():
                return
            pending = self.frames.in_progress
            if pending is not None and not self._reserved:
                # A frame begun in the last read: its whole size from the shared pool before
                # any more of it is read (waiting here is Kafka's muted channel).
                if not self.pool.try_reserve(pending):
                    self.metrics.memory_waiting.inc()
                    try:
                        await self.pool.reserve(pending)
                    finally:
                        self.metrics.memory_waiting.dec()
                self._reserved = pending
            target = self.frames.unfilled(DIRECT_RECV_BYTES)
            if target is not None:  # the rest of a large frame: receive straight into it
                count = await self.transport.recv_into(target)
                del target
                if not count:
                    return
                frames = self.frames.filled(count)
            else:
                data = await self.transport.recv(RECV_SIZE)
                if not data:
                    return
                try:
                    frames = self.frames.feed(data)
                except ProtocolError as e:
                    self._refuse("frame", e)
                    return
            self.last_active = self.loop.time()
            for frame in frames:
                if self.mute.muted and not await self.mute.wait():
                    return
                if self._reserved:  # the frame that was in progress, reserved already
                    held, self._reserved = self._reserved, 0
                else:  # arrived whole within this read
                    held = len(frame)
                    self.pool.force(held)
                if not await self._dispatch(frame, held):
                    return

    def _refuse(self, reason: str, error: Exception) -> None:
        self.metrics.request_errors.labels(reason).inc()
        log.info("%s: closing connection: %s", self.peer, error)

    async def _dispatch(self, frame: bytes, held: int) -> bool:
        """Start handling one frame; False when the connection must close after it.
        ``held`` pool bytes go back when the request has been handled."""
        task: asyncio.Task[Any] | None = None
        try:
            keep_open, task = await self._start(frame)
            return keep_open
        finally:
            if task is not None and not task.done():
                task.add_done_callback(lambda _: self.pool.release(held))
            else:
                self.pool.release(held)

    async def _start(self, frame: bytes) -> tuple[bool, asyncio.Task[Any] | None]:
        """Decode the frame and start its handler; (keep the connection open, the handler's
        task if it is still running)."""
        session = self.session
        assert session is not None
        if session.sasl is not None and session.sasl.raw_tokens \
                and session.sasl.state == SaslState.AUTHENTICATE:
            return await self._raw_sasl_token(session, bytes(frame)), None
        started = time.perf_counter()
        try:
            # A large frame is decoded on a worker thread (kio takes ~2 µs an element) while
            # the loop serves everyone else; so is its answer encoded, in _handle.
            large = len(frame) >= LARGE_FRAME and frame[:2] not in SMALL_WORK_KEYS
            request = (await asyncio.to_thread(decode_request, frame) if large
                       else decode_request(frame))
        except UnsupportedRequest as e:
            if e.api_key == API_VERSIONS_KEY:
                # KIP-511: answer in v0 with UNSUPPORTED_VERSION and our ranges; the client
                # retries with a version we know.
                await self._respond(self._ready(
                    encode_response(e.correlation_id, unsupported_version_response(
                        self.services.store.image.features))
                ))
                return True, None
            self._refuse("unsupported_api", e)
            return False, None
        except ProtocolError as e:
            self._refuse("malformed", e)
            return False, None
        spec = REGISTRY.get(request.header.api_key)
        version = request.header.api_version
        if spec is None or not spec.accepts_from <= version <= spec.max_version:
            self._refuse(
                "unsupported_api",
                ProtocolError(f"API {request.header.api_key} v{version} is not supported"),
            )
            return False, None
        if not session.allows(request.header.api_key):
            expired = session.sasl is not None and session.sasl.expired()
            self._refuse("authentication", ProtocolError(
                f"{session.principal}'s session expired without re-authentication "
                f"(connections.max.reauth.ms)" if expired else
                f"Unexpected Kafka request of type {type(request.body).__name__} during SASL "
                f"authentication on listener {session.listener.name}"))
            return False, None
        # A fetch waiting before it answers now (broker/handlers/head_of_line.py).
        self.head_of_line.request_arrived(request.header.api_key, request.body)
        ctx = RequestContext(self.services, request.header, self.client_host, self.local_host,
                             session, self.append_order, self.head_of_line, RequestThrottle(),
                             len(frame))
        try:
            step = eager.start(self._handle(spec.handler, ctx, request, started, large))
        except Exception as e:  # a handler bug: the writer logs it and closes, in order
            failed = self.loop.create_future()
            failed.set_exception(e)
            await self._respond(failed)
            return True, None
        if not step.done:
            ctx.throttle.first_step_s = time.perf_counter() - started  # what held the loop
            # A throttle earned in the first step mutes at once: the frames behind this one
            # are not read while it waits (Kafka reads none while a request is in flight).
            # The response extends the mute again, so it lasts the throttle from then.
            self.mute.extend(ctx.throttle)
            await self._respond(step.task)
            return True, step.task
        elif self._backlog == 0:
            # Nothing is waiting to be written before this response: send it from here.
            rest = self._try_write(step.result) if step.result is not None else None
            if rest is not None:
                await self._respond(self._ready(rest))
        else:
            await self._respond(self._ready(step.result))
        if session.sasl is not None and request.header.api_key in SASL_KEYS:
            return await self._after_sasl_step(session), None
        return True, None

    async def _raw_sasl_token(self, session: Session, token: bytes) -> bool:
        """A SASL token as a bare frame (after SaslHandshake v0), answered the same way."""
        assert session.sasl is not None
        try:
            answer, _ = session.sasl.authenticate(token)
        except (AuthenticationFailed, IllegalSaslState) as e:
            log.info("Failed authentication with %s (%s) on listener %s", self.client_host, e,
                     session.listener.name)
            return await self._after_sasl_step(session)
        await self._respond(self._ready(len(answer).to_bytes(4, "big") + answer))
        return await self._after_sasl_step(session)

    async def _after_sasl_step(self, session: Session) -> bool:
        """Keep the connection open after a SASL request, or close it (after Kafka's
        connection.failed.authentication.delay.ms, which slows password guessing)."""
        if session.sasl is not None and session.sasl.state == SaslState.FAILED:
            self.metrics.request_errors.labels("authentication").inc()
            await asyncio.sleep(
                self.services.config["connection.failed.authentication.delay.ms"] / 1000)
            return False
        if session.authenticated:
            self.frames.max_frame_bytes = self.services.config["socket.request.max.bytes"]
        return True

    async def _respond(self, item: asyncio.Future[Any]) -> None:
        """Queue a response (or the task making it) for the writer, behind earlier ones."""
        if self._writer is not None and self._writer.done():
            # The writer gave up on this connection (a failed write or a handler bug): stop
            # reading too, rather than fill a queue nobody empties.
            if isinstance(item, asyncio.Task):
                item.cancel()
            raise ConnectionError("the connection's writer has stopped")
        self._backlog += 1
        await self.queue.put(item)

    def _ready(self, response: Any) -> asyncio.Future[Any]:
        fut = self.loop.create_future()
        fut.set_result(response)
        return fut

    async def _handle(
        self, handler: Callable[..., Any], ctx: RequestContext, request: Request, started: float,
        large: bool = False,
    ) -> bytes | EncodedResponse | None:
        response = settle(ctx, request.body, await handler(ctx, request.body), started)
        self.mute.extend(ctx.throttle)
        api = type(request.body).__name__.removesuffix("Request")
        count, latency = self.metrics.request_meters(api, request.header.api_version)
        count.inc()
        latency.observe(time.perf_counter() - started)
        if response is None:  # Produce with acks=0 gets no response
            return None
        if isinstance(response, bytes | EncodedResponse):  # encoded by a hand-written codec
            return response
        if large:
            return await asyncio.to_thread(encode_response, request.header.correlation_id,
                                           response)
        return encode_response(request.header.correlation_id, response)

    # -- writing -------------------------------------------------------------------------

    def _try_write(
        self, response: bytes | EncodedResponse
    ) -> bytes | memoryview | EncodedResponse | None:
        """Send ``response`` now if the socket takes it; what is left goes to the writer.

        Returns None when all was sent, else the unsent rest (or the whole of a fetch
        response too large to copy, which the writer sends with sendfile).
        """
        if isinstance(response, EncodedResponse):
            if response.size > INLINE_LIMIT:
                return response
            response = inline(response)
        return self.transport.try_send(response)

    async def _write_loop(self) -> None:
        try:
            while True:
                item = await self.queue.get()
                if item is _CLOSE:  # what the send thread holds goes before the close
                    await self.transport.flush()
                    return
                try:
                    try:
                        response = await item
                    except Exception:
                        log.exception("%s: handler failed; closing the connection", self.peer)
                        self.metrics.request_errors.labels("handler").inc()
                        await self.transport.flush()  # the answers before it, then close
                        self.sock.shutdown(socket.SHUT_RDWR)
                        return
                    if isinstance(response, EncodedResponse):
                        await self._send_chunks(response)
                    elif response is not None:
                        await self.transport.sendall(response)
                    self.last_active = self.loop.time()
                finally:
                    self._backlog -= 1
        except (ConnectionError, OSError) as e:
            log.debug("%s: write failed: %s", self.peer, e)
            with contextlib.suppress(OSError):
                self.sock.shutdown(socket.SHUT_RDWR)
        finally:
            while not self.queue.empty():
                item = self.queue.get_nowait()
                if isinstance(item, asyncio.Task):
                    item.cancel()

    async def _send_chunks(self, response: EncodedResponse) -> None:
        if response.size <= INLINE_LIMIT:
            await self.transport.sendall(inline(response))
        else:
            await self.transport.send_regions(response.chunks)
