"""What a handler may use: the broker's state below it, and facts about the request."""

from __future__ import annotations

from dataclasses import dataclass, field

from broker.config import BrokerConfig
from broker.controller.controller import Controller
from broker.coordinator.group_coordinator import GroupCoordinator
from broker.metrics import BrokerMetrics
from broker.protocol.codec import RequestHeader
from broker.server.fetch_session import FetchSessionCache
from broker.server.metadata import ClusterMetadata
from broker.server.replica_manager import ReplicaManager


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
