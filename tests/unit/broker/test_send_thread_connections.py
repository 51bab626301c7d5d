"""Connections whose responses go through the send thread, on a real listener (KafkaServer
on uvloop, in this process) and real client sockets, with the thread on and, as the
reference, off: a client that half-closes after its requests gets every answer, a client
reading slowly is not closed as idle while its answers are still being written, and one
that never reads stops being read from (the thread's queue is bounded)."""

from __future__ import annotations

import asyncio
import select
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest
import uvloop

from broker.config.listeners import Listener, SecurityProtocol
from broker.frontend.socket_server import KafkaServer
from broker.handlers.context import BrokerServices
from broker.protocol.codec import RequestHeader, encode_request
from broker.security.session import ListenerSecurity
from tests.support.handlers import make_services, request

API_VERSIONS, DESCRIBE_CONFIGS = 18, 32
T = TypeVar("T")


def frames(count: int) -> bytes:
    return b"".join(encode_request(RequestHeader(API_VERSIONS, 0, i, "c"),
                                   request(API_VERSIONS, 0, {})) for i in range(count))


def whole_frames(data: bytes) -> int:
    count = pos = 0
    while pos + 4 <= len(data):
        size = int.from_bytes(data[pos:pos + 4], "big")
        if pos + 4 + size > len(data):
            break
        pos += 4 + size
        count += 1
    return count


async def serving(tmp_path: Path, scenario: Callable[[int, BrokerServices], T],
                  **settings: str) -> T:
    """``scenario(port, services)`` on a worker thread against a listener on this loop."""
    services = make_services(tmp_path, **settings)
    listener = Listener("PLAINTEXT", SecurityProtocol.PLAINTEXT, "127.0.0.1", 0)
    server = KafkaServer(services, ListenerSecurity(services.config, listener,
                                                    lambda *a: None))
    await server.start()
    try:
        return await asyncio.to_thread(scenario, server.port, services)
    finally:
        await server.stop()


@pytest.mark.parametrize("thread", ["true", "false"])
def test_every_answer_arrives_when_the_client_half_closes_after_its_requests(
        tmp_path: Path, thread: str) -> None:
    """The reader sees EOF while answers wait for the thread: they are sent, then closed
    (before the fix the channel was closed with them in it: some connections got none)."""
    def clients(port: int, _: BrokerServices) -> list[int]:
        counts = []
        for _ in range(20):
            with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
                s.sendall(frames(5))
                s.shutdown(socket.SHUT_WR)
                got = bytearray()
                while chunk := s.recv(65536):
                    got += chunk
            counts.append(whole_frames(bytes(got)))
        return counts

    counts = uvloop.run(serving(tmp_path, clients, **{"kafkube.network.send.thread": thread}))
    assert counts == [5] * 20


@pytest.mark.parametrize("thread", ["true", "false"])
def test_a_slow_reader_is_not_closed_as_idle_while_its_answers_are_written(
        tmp_path: Path, thread: str) -> None:
    """3,000 answers do not fit the socket's buffers; the client starts reading only after
    connections.max.idle.ms. The connection is not idle: its answers are being written."""
    count = 3000

    def client(port: int, _: BrokerServices) -> int:
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8192)
        s.connect(("127.0.0.1", port))
        s.settimeout(10)
        s.sendall(frames(count))
        time.sleep(2.5)  # the scenario: a client not reading for longer than the idle time
        got = bytearray()
        while whole_frames(bytes(got)) < count and (chunk := s.recv(65536)):
            got += chunk
        s.close()
        return whole_frames(bytes(got))

    received = uvloop.run(serving(tmp_path, client, **{
        "kafkube.network.send.thread": thread, "connections.max.idle.ms": "1000",
        "socket.send.buffer.bytes": "8192"}))
    assert received == count


def test_a_client_that_never_reads_stops_being_read(tmp_path: Path) -> None:
    """It pipelines requests with large answers (the broker's configs, 7 KB) and reads
    nothing. The broker answers until the thread's queue is full (256 KiB) and
    MAX_IN_FLIGHT answers wait behind it, then reads no more: TCP pushes back on the
    client. Without the limit the answers to the requests of every read went into the
    queue (1,187 answered, 8 MB, in one run before the fix, against a bound of 58): memory
    grew with the size of the answers, not bounded by the queue."""
    body = request(DESCRIBE_CONFIGS, 1, {
        "resources": [{"resource_type": 4, "resource_name": "1", "configuration_keys": None}],
        "include_synonyms": False})
    one = encode_request(RequestHeader(DESCRIBE_CONFIGS, 1, 1, "c"), body)

    def client(port: int, services: BrokerServices) -> tuple[float, int]:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as probe:
            probe.sendall(one)
            answer_size = 4 + int.from_bytes(probe.recv(4), "big")
        registry = services.metrics.registry

        def answers_so_far() -> float:
            return registry.get_sample_value(  # the probe's answer too
                "kafka_network_requests_total", {"api": "DescribeConfigs", "version": "1"}) or 0

        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8192)
        # Small, or the kernel queues megabytes of requests here without the broker reading.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 8192)
        s.connect(("127.0.0.1", port))
        s.setblocking(False)
        data = one * 100_000
        sent = 0
        last = -1.0
        deadline = time.monotonic() + 30
        writable = select.poll()  # not select(): a worker's descriptors may pass 1,024
        writable.register(s, select.POLLOUT)
        while sent < len(data) and time.monotonic() < deadline:
            if not writable.poll(1000):
                # The socket full for 1 s. The broker has stopped reading if it has answered
                # some and no more since the last time (on a busy machine it may just be
                # slow: then it answers more meanwhile).
                now = answers_so_far()
                if now > 1 and now == last:
                    break
                last = now
                continue
            try:
                sent += s.send(data[sent:sent + 65536])
            except BlockingIOError:
                continue
        s.close()
        result = answers_so_far()
        return result - 1, answer_size  # not the probe's

    answered, size = uvloop.run(serving(tmp_path, client,
                                        **{"socket.send.buffer.bytes": "8192"}))
    # The queue, the socket buffers both ends (the kernel doubles what is set), the
    # responses queued for the writer.
    bound = ((256 << 10) + 4 * 8192) // size + 16 + 1
    assert 0 < answered <= bound
