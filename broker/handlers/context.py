"""What a handler may use: the broker's state below it, and facts about the request."""

from __future__ import annotations

import asyncio
import datetime
import time
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass, field
from typing import TypeVar

from kio.schema.errors import ErrorCode

from broker.cluster.metadata import ClusterMetadata
from broker.common.metrics import BrokerMetrics
from broker.config.broker_config import BrokerConfig
from broker.controller.controller import Controller
from broker.coordinator.group_coordinator import GroupCoordinator
from broker.coordinator.share_coordinator import ShareCoordinator
from broker.coordinator.transaction_coordinator import TransactionCoordinator
from broker.handlers.append_order import AppendOrder
from broker.handlers.head_of_line import HeadOfLine
from broker.protocol.codec import RequestHeader, api_name
from broker.security.acl import CLUSTER_NAME, Authorizer, Operation, ResourceType
from broker.security.session import Session, plaintext_session
from broker.server.client_quotas import MAX_THROTTLE_MS, ClientQuotaManager
from broker.server.fetch_session import FetchSessionCache
from broker.server.replica_manager import ReplicaManager
from broker.server.txn_verification import TransactionVerifier
from broker.share.share_partitions import SharePartitionManager
from broker.share.share_sessions import ShareSessions

T = TypeVar("T")
# Kafka's default messages of the authorization errors (Errors.java).
DENIED_MESSAGES: dict[ErrorCode, str] = {
    ErrorCode.topic_authorization_failed: "Topic authorization failed.",
    ErrorCode.group_authorization_failed: "Group authorization failed.",
    ErrorCode.cluster_authorization_failed: "Cluster authorization failed.",
    ErrorCode.transactional_id_authorization_failed: "Transactional Id authorization failed.",
}
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
    # This broker's address per listener name; a host may be empty: the client gets the
    # address it connected to.
    advertised: dict[str, Endpoint]
    groups: GroupCoordinator
    controller: Controller
    transactions: TransactionCoordinator
    verifier: TransactionVerifier
    authorizer: Authorizer
    # Kafka's default of max.incremental.fetch.session.cache.slots; the app passes the setting.
    fetch_sessions: FetchSessionCache = field(default_factory=lambda: FetchSessionCache(1000))
    # Share groups (KIP-932): the share-partitions led here, the share coordinator of
    # __share_group_state, and the share consumers' sessions.
    shares: SharePartitionManager | None = None
    share_coordinator: ShareCoordinator | None = None
    share_sessions: ShareSessions = field(default_factory=lambda: ShareSessions(2000))
    # Client quotas (broker/server/client_quotas.py): made from the config and the image
    # when not given.
    quotas: ClientQuotaManager | None = None

    def __post_init__(self) -> None:
        if self.quotas is None:
            config, metrics = self.config, self.metrics
            self.quotas = ClientQuotaManager(
                lambda: self.store.image, config["quota.window.num"],
                config["quota.window.size.seconds"], config["controller.quota.window.num"],
                config["controller.quota.window.size.seconds"], metrics.throttled,
                on_forget=metrics.forget_quota_sensor)
            metrics.watch_quotas(self.quotas.samples_now)

    @property
    def client_quotas(self) -> ClientQuotaManager:
        assert self.quotas is not None
        return self.quotas

    @property
    def node_id(self) -> int:
        return self.config.node_id


@dataclass(slots=True)
class RequestThrottle:
    """The throttle time (ms) one request earned against its client's quotas: the handler
    reports it in its response, and the front end mutes the connection for it (KIP-219).
    ``first_step_s`` is set by the front end when the handler had to wait: only its first
    step held the event loop (the request quota's measure)."""

    ms: int = 0
    first_step_s: float | None = None

    def add(self, ms: int) -> int:
        """Keep the largest throttle, at most what an int32 ``throttle_time_ms`` holds."""
        self.ms = min(max(self.ms, ms), MAX_THROTTLE_MS)
        return self.ms


@dataclass(frozen=True, slots=True)
class RequestContext:
    services: BrokerServices
    header: RequestHeader
    client_host: str
    local_host: str  # the address this connection reached us on
    session: Session = field(default_factory=lambda: plaintext_session(""))
    # The connection's produce order; one per connection (the front end keeps it).
    append_order: AppendOrder = field(default_factory=AppendOrder)
    # The connection's waiting fetches, woken by a request behind them (the front end's).
    head_of_line: HeadOfLine = field(default_factory=HeadOfLine)
    # This request's throttle time against the client's quotas, and its size on the wire.
    throttle: RequestThrottle = field(default_factory=RequestThrottle)
    size: int = 0

    @property
    def version(self) -> int:
        return self.header.api_version

    @property
    def listener(self) -> str:
        return self.session.listener.name

    @property
    def principal(self) -> str:
        return self.session.principal

    @property
    def client_id(self) -> str:
        return self.header.client_id or ""

    @property
    def throttle_time(self) -> datetime.timedelta:
        """The request's throttle so far, as kio responses carry it."""
        return datetime.timedelta(milliseconds=self.throttle.ms)

    def authorize(self, operation: Operation, resource_type: ResourceType, name: str,
                  log_denied: bool = True) -> bool:
        """Whether this request's principal may; denials are logged as Kafka's authorizer
        logs them unless ``log_denied`` is False (Kafka's checks that only filter)."""
        return self.services.authorizer.authorize(
            self.session.principal, self.client_host, operation, resource_type, name,
            self._api_name if log_denied else None)

    def authorize_cluster(self, operation: Operation, log_denied: bool = True) -> bool:
        return self.authorize(operation, ResourceType.CLUSTER, CLUSTER_NAME, log_denied)

    def authorized_names(self, operation: Operation, resource_type: ResourceType,
                         names: Iterable[str], log_denied: bool = True) -> set[str]:
        """The names among ``names`` the principal may act on (Kafka's filterByAuthorized):
        each distinct name is checked once, so a name a request repeats is one decision
        and at most one line in the authorizer log."""
        return {name for name in dict.fromkeys(names)
                if self.authorize(operation, resource_type, name, log_denied)}

    def not_authorized(self) -> str:
        """The message of Kafka's ClusterAuthorizationException (it names the request)."""
        return (f"Request {api_name(self.header.api_key)} v{self.version} of "
                f"{self.principal} from {self.client_host} is not authorized.")

    def _api_name(self) -> str:
        return api_name(self.header.api_key)

    def advertised_endpoint(self) -> Endpoint:
        adv = self.services.advertised[self.listener]
        if adv.host:
            return adv
        return Endpoint(self.local_host, adv.port, adv.rack)

    def broker_endpoint(self, node_id: int) -> Endpoint | None:
        """A broker's address on this request's listener (None: it has no such listener
        or is not live), as Kafka answers each client with its own listener's addresses."""
        if node_id == self.services.node_id:
            return self.advertised_endpoint()
        registration = self.services.store.brokers.get(node_id)
        if registration is None:
            return None
        address = registration.endpoint(self.listener)
        return Endpoint(*address, registration.rack) if address is not None else None
