"""What a handler may use: the broker's state below it, and facts about the request."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass, field
from typing import TypeVar

from broker.config import BrokerConfig
from broker.controller.controller import Controller
from broker.coordinator.group_coordinator import GroupCoordinator
from broker.metrics import BrokerMetrics
from broker.protocol.codec import RequestHeader
from broker.server.fetch_session import FetchSessionCache
from broker.server.metadata import ClusterMetadata
from broker.server.replica_manager import ReplicaManager

T = TypeVar("T")
SLICE_SECONDS = 0.05


async def cooperatively(items: Iterable[T]) -> AsyncIterator[T]:
    """The items, letting the event loop run every ``SLICE_SECONDS`` of work on them.

    A request may name a hundred thousand groups or topics (up to
    ``socket.request.max.bytes``), and Kafka's request threads would take them in parallel
    with other requests; on one event loop, every other client and the broker's own lease
    renewal would wait for the last of them."""
    started = time.monotonic()
    for item in items:
        yield item
        if time.monotonic() - started >= SLICE_SECONDS:
            await asyncio.sleep(0)
            started = time.monotonic()


@dataclass(frozen=True, slots=True)
class Endpoint:
    host: str
    port: int
    rack: str | None = None


@dataclass
class BrokerServices:
    """The broker-wide objects handlers work on; built once by the app."""

    config: BrokerConfig
    store: ClusterMetadata
    replicas: ReplicaManager
    metrics: BrokerMetrics
    advertised: Endpoint  # host may be empty: use the address the client connected to
    groups: GroupCoordinator
    controller: Controller
    # Kafka's default of max.incremental.fetch.session.cache.slots; the app passes the setting.
    fetch_sessions: FetchSessionCache = field(default_factory=lambda: FetchSessionCache(1000))

    @property
    def node_id(self) -> int:
        return self.config.node_id


@dataclass(frozen=True, slots=True)
class RequestContext:
    services: BrokerServices
    header: RequestHeader
    client_host: str
    local_host: str  # the address this connection reached us on

    @property
    def version(self) -> int:
        return self.header.api_version

    def advertised_endpoint(self) -> Endpoint:
        adv = self.services.advertised
        if adv.host:
            return adv
        return Endpoint(self.local_host, adv.port, adv.rack)
