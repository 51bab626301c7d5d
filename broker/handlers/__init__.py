"""Request handlers: one module per API family, registered by API key and version range.

A handler is ``async def handle(ctx, request) -> response | None`` over the replica manager;
it reports failures as Kafka error codes inside the response and raises only for bugs.
Handlers must make their state changes (appends) before their first ``await``: the network
layer starts them in request order, and that is what keeps a connection's writes ordered
(a produce request that must wait first takes a turn in ``append_order``).
ApiVersions is answered from this registry, so nothing unimplemented is ever advertised.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from broker.handlers.context import RequestContext

Handler = Callable[[RequestContext, Any], Awaitable[Any]]

@dataclass(frozen=True, slots=True)
class ApiSpec:
    api_key: int
    min_version: int
    max_version: int
    handler: Handler
    # The lowest version served. Kafka 4 advertises Produce from 0 for old librdkafka's
    # feature detection (KAFKA-18659) but serves only 3+; so do we.
    accepts_from: int

REGISTRY: dict[int, ApiSpec] = {}

def handles(
    api_key: int, min_version: int, max_version: int, accepts_from: int | None = None
) -> Callable[[Handler], Handler]:
    def register(fn: Handler) -> Handler:
        served = min_version if accepts_from is None else accepts_from
        REGISTRY[api_key] = ApiSpec(api_key, min_version, max_version, fn, served)
        return fn

    return register

def load_all() -> dict[int, ApiSpec]:
    """Import every handler module so each registers itself."""
    from broker.handlers import (  # noqa: F401
        acls,
        admin,
        api_versions,
        client_quotas,
        configs,
        consumer_groups,
        delete_records,
        features,
        fetch,
        groups,
        leadership,
        list_offsets,
        log_dirs,
        metadata,
        offset_for_leader_epoch,
        produce,
        producer_id,
        sasl,
        scram_credentials,
        share_fetch,
        share_groups,
        share_offsets,
        share_state,
        transactions,
    )

    return REGISTRY
