"""A broker's outgoing connection (broker/network/client.py) when its peer goes away while
it is idle: a follower's fetcher may hold one for minutes with nothing to fetch from that
leader, and the leader's process dies meanwhile (a pod replaced). Under uvloop, writing to
the transport the reset closed raises RuntimeError, not OSError; a connection that let it
through stayed open and was reused by every later fetch, so the follower never fetched from
that leader again."""

from __future__ import annotations

import asyncio
import datetime
import socket
import struct

import pytest
import uvloop
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.errors import ErrorCode

from broker.network.client import API_VERSIONS_KEY, BrokerConnectionError, KafkaConnection
from broker.protocol.codec import decode_request, encode_response
from broker.protocol.messages import build_response

_SIZE = struct.Struct(">i")


class Peer:
    """A peer that answers ApiVersions, and can reset every connection it holds."""

    def __init__(self) -> None:
        self.writers: list[asyncio.StreamWriter] = []
        self.server: asyncio.Server | None = None

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self.server.sockets[0].getsockname()[1]

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.writers.append(writer)
        try:
            while True:
                (size,) = _SIZE.unpack(await reader.readexactly(4))
                request = decode_request(await reader.readexactly(size))
                answer = build_response(request.body, {"error_code": ErrorCode.none, "api_keys": [
                    {"api_key": API_VERSIONS_KEY, "min_version": 0, "max_version": 3}],
                    "throttle_time": datetime.timedelta(0)})
                writer.write(encode_response(request.header.correlation_id, answer))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass

    def reset_all(self) -> None:
        """Close with SO_LINGER 0: the kernel sends RST, as when a pod's process dies."""
        for writer in self.writers:
            sock = writer.get_extra_info("socket")
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            writer.transport.abort()
        self.writers.clear()

    def close(self) -> None:
        assert self.server is not None
        self.server.close()


def _ask() -> ApiVersionsRequest:
    return ApiVersionsRequest(client_software_name="test", client_software_version="1")


async def _reset_while_idle() -> list[str]:
    peer = Peer()
    port = await peer.start()
    connection = KafkaConnection("127.0.0.1", port, "test", timeout=10)
    seen = []
    await connection.request(API_VERSIONS_KEY, 3, _ask())
    seen.append("answered")
    peer.reset_all()
    # Idle while the reset arrives: the transport learns of it and closes.
    for _ in range(100):
        await asyncio.sleep(0.01)
        if connection._writer is not None and connection._writer.transport.is_closing():
            break
    try:
        await connection.request(API_VERSIONS_KEY, 3, _ask())
        seen.append("answered")
    except BrokerConnectionError:
        seen.append("connection error")
    await connection.request(API_VERSIONS_KEY, 3, _ask())  # a fresh connection
    seen.append("answered")
    connection.close()
    peer.close()
    return seen


@pytest.mark.parametrize("run", [uvloop.run, asyncio.run], ids=["uvloop", "asyncio"])
def test_a_peer_reset_while_idle_is_a_connection_error_and_the_next_request_reconnects(
        run) -> None:
    seen = run(_reset_while_idle())
    assert seen[0] == seen[2] == "answered"
    assert seen[1] in ("connection error", "answered")  # never an escaping RuntimeError
