"""Metadata: brokers, the cluster id, and topics with partition leaders; auto-creates topics."""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

from kio.schema.errors import ErrorCode

from broker.handlers import handles
from broker.handlers.context import BrokerServices, RequestContext
from broker.protocol.messages import build_response
from broker.server.metadata import topic_name_error

log = logging.getLogger(__name__)
AUTHORIZED_OPERATIONS_OMITTED = -2147483648


def _requested_names(ctx: RequestContext, request: Any) -> list[str | None] | None:
    """Names asked for, or None for every topic (v0: an empty list means all)."""
    topics = request.topics
    if topics is None or (ctx.version == 0 and not topics):
        return None
    names: list[str | None] = []
    for t in topics:
        name = getattr(t, "name", None)
        topic_id = getattr(t, "topic_id", None)
        if name is None and topic_id is not None:
            meta = ctx.services.store.topic_by_id(topic_id)
            name = meta.name if meta else None
        names.append(name)
    return names


def auto_create(services: BrokerServices, name: str) -> bool:
    """Create ``name`` with the broker defaults, as a Metadata request may (Kafka's rule)."""
    cfg = services.config
    if not cfg["auto.create.topics.enable"] or topic_name_error(name):
        return False
    log.info("auto-creating topic %s with %d partitions", name, cfg["num.partitions"])
    services.replicas.create_topic(name, cfg["num.partitions"], {})
    return True


def describe_topic(services: BrokerServices, name: str | None) -> dict[str, Any]:
    meta = services.store.topics.get(name) if name else None
    if meta is None:
        error = ErrorCode.invalid_topic_exception if topic_name_error(name) else (
            ErrorCode.unknown_topic_or_partition
        )
        return {"error_code": error, "name": name, "topic_id": None, "partitions": []}
    partitions = []
    for p in services.replicas.topic_partitions(name):
        partitions.append({
            "error_code": ErrorCode.none,
            "partition_index": p.index,
            "leader_id": p.leader_id,
            "leader_epoch": p.leader_epoch,
            "replica_nodes": p.replicas,
            "isr_nodes": p.isr,
            "offline_replicas": [],
        })
    return {
        "error_code": ErrorCode.none,
        "name": name,
        "topic_id": meta.uuid,
        "is_internal": name.startswith("__"),
        "partitions": partitions,
        "topic_authorized_operations": AUTHORIZED_OPERATIONS_OMITTED,
    }


@handles(3, 0, 12)
async def handle_metadata(ctx: RequestContext, request: Any) -> Any:
    services = ctx.services
    names = _requested_names(ctx, request)
    allow_create = getattr(request, "allow_auto_topic_creation", True)
    if names is None:
        names = sorted(services.store.topics)
    topics = []
    for name in names:
        if name and name not in services.store.topics and allow_create:
            auto_create(services, name)
        topics.append(describe_topic(services, name))
    endpoint = ctx.advertised_endpoint()
    return build_response(request, {
        "throttle_time": timedelta(0),
        "brokers": [{
            "node_id": services.node_id, "host": endpoint.host, "port": endpoint.port,
            "rack": endpoint.rack,
        }],
        "cluster_id": services.store.cluster_id,
        "controller_id": services.node_id,
        "topics": topics,
        "cluster_authorized_operations": AUTHORIZED_OPERATIONS_OMITTED,
    })
