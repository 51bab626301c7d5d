"""Requests from this broker to its peers: one connection per peer, one request at a time.

The transaction coordinator's markers and a partition leader's transaction checks are
short requests to other brokers (or to this one, over loopback, as Kafka sends them too).
They share these connections, found from the live brokers' registrations on each use so a
peer that restarted on a new address is followed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from broker.cluster.metadata import ClusterMetadata
from broker.network.client import BrokerConnectionError, KafkaConnection
from broker.security.client import ClientSecurity


class PeerChannels:
    def __init__(self, store: ClusterMetadata, client_id: str, timeout: float,
                 security: ClientSecurity | None = None, listener: str | None = None) -> None:
        """``listener``: this broker's inter-broker listener, on which peers are dialled."""
        self.store = store
        self.listener = listener
        self.client_id = client_id
        self.timeout = timeout
        self.security = security
        self._connections: dict[int, KafkaConnection] = {}
        self._locks: dict[int, asyncio.Lock] = {}

    async def version(self, node: int, api_key: int, newest: int) -> int:
        """The highest version of ``api_key`` up to ``newest`` that the peer serves (-1 if
        none); BrokerConnectionError as for ``request``."""
        async def served(conn: KafkaConnection) -> int:
            await conn.connect()
            return conn.api_versions.get(api_key, -1)

        return min(newest, await self._turn(node, served))

    async def request(self, node: int, api_key: int, api_version: int, body: Any) -> Any:
        """The peer's answer; BrokerConnectionError if it is not registered, unreachable,
        or does not answer within the timeout (and if the requests ahead of this one keep
        its connection busy that long)."""
        return await self._turn(node, lambda conn: conn.request(api_key, api_version, body))

    async def _turn(self, node: int,
                    use: Callable[[KafkaConnection], Awaitable[Any]]) -> Any:
        """``use(connection)`` in this request's turn on the peer's connection."""
        registration = self.store.peer(node, self.listener)
        if registration is None:
            raise BrokerConnectionError(
                f"broker {node} is not registered" if self.store.broker(node) is None
                else f"broker {node} does not advertise listener {self.listener}")
        lock = self._locks.setdefault(node, asyncio.Lock())
        try:  # behind requests to a peer that stopped answering: give up as they do
            await asyncio.wait_for(lock.acquire(), self.timeout)
        except TimeoutError:
            raise BrokerConnectionError(
                f"broker {node}: no turn on its connection within {self.timeout} s") from None
        try:
            conn = self._connections.get(node)
            if conn is None or (conn.host, conn.port) != (registration.host, registration.port):
                if conn is not None:
                    conn.close()
                conn = self._connections[node] = KafkaConnection(
                    registration.host, registration.port, self.client_id, self.timeout,
                    self.security)
            return await use(conn)
        finally:
            lock.release()

    def close(self) -> None:
        for conn in self._connections.values():
            conn.close()
        self._connections.clear()
