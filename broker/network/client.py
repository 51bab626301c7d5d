"""A broker's own outgoing Kafka connection: followers fetch from leaders over it.

One request at a time per connection (a replica fetcher has one fetch in flight, like
Kafka's ReplicaFetcherThread), with the same sans-IO codec the server uses. Any failure
closes the connection; the caller backs off and reconnects. Each connection asks its peer's
ApiVersions first, as Kafka's NetworkClient does, so a request that has a newer version can
be sent in the newest the peer serves: during a rolling upgrade peers of two releases meet.
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
from collections.abc import Iterator
from typing import Any

from kio.schema.api_versions.v3.request import ApiVersionsRequest

from broker.protocol.codec import RequestHeader, decode_response, encode_request
from broker.security.client import ClientSecurity, PeerAuthenticationFailed

_SIZE = struct.Struct(">i")
API_VERSIONS_KEY = 18


class BrokerConnectionError(Exception):
    """The peer broker is unreachable, closed the connection or did not answer in time."""


class KafkaConnection:
    def __init__(self, host: str, port: int, client_id: str, timeout: float,
                 security: ClientSecurity | None = None) -> None:
        self.host = host
        self.port = port
        self.client_id = client_id
        self.timeout = timeout
        self.security = security or ClientSecurity()
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._correlation_id = 0
        self.api_versions: dict[int, int] = {}  # the peer's, API key -> highest version

    async def request(self, api_key: int, api_version: int, body: Any) -> Any:
        with self._closed_on_failure():
            async with asyncio.timeout(self.timeout):
                return await self._roundtrip(api_key, api_version, body)

    @contextlib.contextmanager
    def _closed_on_failure(self) -> Iterator[None]:
        """Whatever interrupts a request closes the connection, so the next one starts
        afresh: a connection kept after a failure may hold half a frame, or a transport
        that is closed. A failure of the connection is a ``BrokerConnectionError``;
        uvloop reports writing to a transport a reset closed (the peer died while we were
        idle) as RuntimeError, and a connection that kept it was never used again."""
        try:
            yield
        except (OSError, EOFError, asyncio.IncompleteReadError, TimeoutError,
                PeerAuthenticationFailed) as e:
            self.close()
            raise BrokerConnectionError(f"{self.host}:{self.port}: {e!r}") from None
        except RuntimeError as e:
            closed = self._writer is None or self._writer.transport.is_closing()
            self.close()
            if not closed:
                raise  # a bug of ours, not the connection's: logged with its stack
            raise BrokerConnectionError(f"{self.host}:{self.port}: {e!r}") from None
        except BaseException:
            self.close()
            raise

    async def _roundtrip(self, api_key: int, api_version: int, body: Any) -> Any:
        if self._writer is None:
            context = self.security.context
            self._reader, self._writer = await asyncio.open_connection(
                self.host, self.port, ssl=context,
                server_hostname=self.host if context is not None else None)
            await self.security.authenticate(self._exchange)
            answer = await self._exchange(API_VERSIONS_KEY, 3, ApiVersionsRequest(
                client_software_name="kafkube-broker", client_software_version="1"))
            self.api_versions = {a.api_key: a.max_version for a in answer.api_keys}
        return await self._exchange(api_key, api_version, body)

    async def connect(self) -> None:
        """Connect (and learn the peer's API versions) unless connected."""
        with self._closed_on_failure():
            async with asyncio.timeout(self.timeout):
                if self._writer is None:
                    await self._roundtrip(API_VERSIONS_KEY, 3, ApiVersionsRequest(
                        client_software_name="kafkube-broker", client_software_version="1"))

    async def _exchange(self, api_key: int, api_version: int, body: Any) -> Any:
        assert self._reader is not None and self._writer is not None
        self._correlation_id += 1
        header = RequestHeader(api_key, api_version, self._correlation_id, self.client_id)
        self._writer.write(encode_request(header, body))
        (size,) = _SIZE.unpack(await self._reader.readexactly(4))
        frame = await self._reader.readexactly(size)
        correlation_id, response = decode_response(frame, api_key, api_version)
        if correlation_id != self._correlation_id:
            raise EOFError(f"correlation id {correlation_id}, expected {self._correlation_id}")
        return response

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
        self._reader = self._writer = None
