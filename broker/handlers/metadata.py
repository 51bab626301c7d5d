"""Metadata: live brokers, the cluster id, the controller, and topics with partition leaders
and ISRs from the cluster image; auto-creates topics. DescribeTopicPartitions (KIP-966), which
Kafka 4's admin client uses to describe topics, answers the same partitions page by page."""

from __future__ import annotations

import logging
import uuid
from datetime import timedelta
from typing import Any

from kio.schema.errors import ErrorCode

from broker.cluster.metadata import ConcurrentUpdate, topic_name_error
from broker.handlers import handles
from broker.handlers.context import BrokerServices, RequestContext, cooperatively
from broker.protocol.messages import build_long_response, build_response
from broker.security.acl import CLUSTER_NAME, SUPPORTED_OPERATIONS, Operation, ResourceType
from broker.server.topic_writes import TopicExists

log = logging.getLogger(__name__)
AUTHORIZED_OPERATIONS_OMITTED = -2147483648
# DescribeTopicPartitions always reports them (no request flag); with no authorizer, every
# topic operation: READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE, DESCRIBE_CONFIGS,
# ALTER_CONFIGS as AclOperation bits.
ALL_TOPIC_OPERATIONS = sum(1 << op for op in (3, 4, 5, 6, 7, 8, 10, 11))


def _requested(ctx: RequestContext, request: Any) -> list[tuple[str | None, Any]] | None:
    """(name, topic id) asked for, or None for every topic (v0: an empty list means all).
    A topic asked for by id (v10+) gets its name from the image, or None if unknown."""
    topics = request.topics
    if topics is None or (ctx.version == 0 and not topics):
        return None
    wanted: dict[tuple[str | None, Any], None] = {}  # once each, as Kafka takes a set
    for t in topics:
        name = getattr(t, "name", None)
        topic_id = getattr(t, "topic_id", None)
        if topic_id is not None and topic_id.int == 0:
            topic_id = None  # the zero UUID: "by name"
        if name is None and topic_id is not None:
            meta = ctx.services.store.topic_by_id(topic_id)
            name = meta.name if meta else None
        wanted[(name, topic_id)] = None
    return list(wanted)


async def auto_create(services: BrokerServices, name: str) -> bool:
    """Create ``name`` with the broker defaults, as a Metadata request may (Kafka's rule)."""
    cfg = services.config
    if not cfg["auto.create.topics.enable"] or topic_name_error(name):
        return False
    services.store.refresh()  # created elsewhere since our last poll?
    if name in services.store.topics:
        return True
    replication_factor = cfg["default.replication.factor"]
    if replication_factor > len(services.store.live_brokers()):
        log.warning("not auto-creating %s: default.replication.factor %d exceeds the %d live "
                    "brokers", name, replication_factor, len(services.store.brokers))
        return False
    log.info("auto-creating topic %s with %d partitions", name, cfg["num.partitions"])
    try:
        await services.replicas.create_topic(name, cfg["num.partitions"], {}, replication_factor)
    except TopicExists:
        pass
    except ConcurrentUpdate as e:  # answered as not there yet: the client asks again
        log.warning("not auto-creating %s now: %s", name, e)
        return False
    return True


def describe_topic(services: BrokerServices, name: str | None) -> dict[str, Any]:
    meta = services.store.topics.get(name) if name else None
    if meta is None:
        error = ErrorCode.invalid_topic_exception if topic_name_error(name) else (
            ErrorCode.unknown_topic_or_partition
        )
        return {"error_code": error, "name": name, "topic_id": None, "partitions": []}
    partitions = []
    live = services.store.brokers
    for index, p in enumerate(meta.assignments):
        partitions.append({
            "error_code": ErrorCode.none if p.leader >= 0 else ErrorCode.leader_not_available,
            "partition_index": index,
            "leader_id": p.leader,
            "leader_epoch": p.leader_epoch,
            "replica_nodes": list(p.replicas),
            "isr_nodes": list(p.isr),
            "offline_replicas": [r for r in p.replicas if r not in live],
        })
    return {
        "error_code": ErrorCode.none,
        "name": name,
        "topic_id": meta.uuid,
        "is_internal": name.startswith("__"),
        "partitions": partitions,
        "topic_authorized_operations": AUTHORIZED_OPERATIONS_OMITTED,
    }


def _leaders_reachable(ctx: RequestContext, described: dict[str, Any],
                       reachable: set[int]) -> None:
    """Kafka's answer for a partition whose leader the client has no address of on its
    listener: no leader, and LISTENER_NOT_FOUND (v6+) if the leader is live but does not
    have that listener (mid-roll of a listener change), else LEADER_NOT_AVAILABLE, so the
    client asks again rather than look for a broker the answer does not list."""
    for partition in described["partitions"]:
        leader = partition["leader_id"]
        if leader < 0 or leader in reachable:
            continue
        live = leader in ctx.services.store.brokers
        partition["error_code"] = ErrorCode.listener_not_found \
            if live and ctx.version >= 6 else ErrorCode.leader_not_available
        partition["leader_id"] = -1


def live_brokers(ctx: RequestContext) -> list[dict[str, Any]]:
    """Registered brokers; ourselves at the address this client reached us on if we
    advertise no host, as other brokers on this machine do by theirs."""
    services = ctx.services
    brokers = []
    for node_id in sorted({services.node_id, *services.store.brokers}):
        endpoint = ctx.broker_endpoint(node_id)
        if endpoint is not None:  # a broker without this listener is not listed (Kafka)
            brokers.append({"node_id": node_id, "host": endpoint.host,
                            "port": endpoint.port, "rack": endpoint.rack})
    return brokers


@handles(3, 0, 12)
async def handle_metadata(ctx: RequestContext, request: Any) -> Any:
    services = ctx.services
    wanted = _requested(ctx, request)
    allow_create = getattr(request, "allow_auto_topic_creation", True)
    authorizer = services.authorizer
    if wanted is None:  # every topic this principal may describe; the others unmentioned
        wanted = [(name, None) for name in sorted(services.store.topics)
                  if not authorizer.enabled or ctx.authorize(
                      Operation.DESCRIBE, ResourceType.TOPIC, name, log_denied=False)]
    with_operations = getattr(request, "include_topic_authorized_operations", False)
    brokers = live_brokers(ctx)
    reachable = {b["node_id"] for b in brokers}
    topics = []
    async for name, topic_id in cooperatively(wanted):
        if name is None and topic_id is not None:
            # Kafka's answer for an id it does not know; the name is not nullable before v12.
            topics.append({"error_code": ErrorCode.unknown_topic_id,
                           "name": None if ctx.version >= 12 else "", "topic_id": topic_id,
                           "partitions": []})
            continue
        if name and authorizer.enabled and not ctx.authorize(
                Operation.DESCRIBE, ResourceType.TOPIC, name):
            # Refused whether or not it exists; asked for by id, its name stays unsaid.
            hidden = topic_id is not None
            topics.append({"error_code": ErrorCode.topic_authorization_failed,
                           "name": (None if ctx.version >= 12 else "") if hidden else name,
                           "topic_id": topic_id, "partitions": []})
            continue
        if name and name not in services.store.topics and allow_create:
            if not _may_create(ctx, name):
                topics.append({"error_code": ErrorCode.topic_authorization_failed,
                               "name": name, "topic_id": None, "partitions": []})
                continue
            await auto_create(services, name)
        described = describe_topic(services, name)
        if described["name"] is None and ctx.version < 12:
            described["name"] = ""  # neither name nor id: refused, in a non-nullable name
        if with_operations and described["error_code"] == ErrorCode.none:
            described["topic_authorized_operations"] = _topic_operations(ctx, name)
        _leaders_reachable(ctx, described, reachable)
        topics.append(described)
    return await build_long_response(request, {
        "throttle_time": timedelta(0),
        "brokers": brokers,
        "cluster_id": services.store.cluster_id,
        "controller_id": services.store.controller_id,
        "topics": topics,
        "cluster_authorized_operations": _cluster_operations(ctx, request),
    }, sum(1 + len(t["partitions"]) for t in topics))


def _may_create(ctx: RequestContext, name: str) -> bool:
    """Auto-creation needs CREATE on the cluster or on the topic (Kafka's order)."""
    return ctx.authorize_cluster(Operation.CREATE, log_denied=False) or ctx.authorize(
        Operation.CREATE, ResourceType.TOPIC, name)


def _topic_operations(ctx: RequestContext, name: str) -> int:
    if not ctx.services.authorizer.enabled:
        return ALL_TOPIC_OPERATIONS
    return ctx.services.authorizer.authorized_operations(
        ctx.principal, ctx.client_host, ResourceType.TOPIC, name)


def _cluster_operations(ctx: RequestContext, request: Any) -> int:
    """Metadata v8-10's cluster operations, when asked for: none without DESCRIBE."""
    if not getattr(request, "include_cluster_authorized_operations", False):
        return AUTHORIZED_OPERATIONS_OMITTED
    authorizer = ctx.services.authorizer
    if not ctx.authorize_cluster(Operation.DESCRIBE):
        return 0
    return authorizer.authorized_operations(ctx.principal, ctx.client_host,
                                            ResourceType.CLUSTER, CLUSTER_NAME) \
        if authorizer.enabled else sum(1 << op for op in SUPPORTED_OPERATIONS[
            ResourceType.CLUSTER])


@handles(75, 0, 0)
async def handle_describe_topic_partitions(ctx: RequestContext, request: Any) -> Any:
    """Topics in name order from the cursor on, at most ``response_partition_limit``
    partitions (and max.request.partition.size.limit), the cursor where the next page
    starts; unknown topics answer with an error only when asked for by name."""
    services = ctx.services
    cursor = request.cursor
    after = cursor.topic_name if cursor is not None else ""
    by_name = bool(request.topics)
    if by_name:
        names = sorted({t.name for t in request.topics if t.name >= after})
        bad_cursor = cursor is not None and cursor.topic_name not in names
    else:
        names = sorted(n for n in services.store.topics if n >= after)
        bad_cursor = False
    if bad_cursor or (cursor is not None and cursor.partition_index < 0):
        return build_response(request, {"throttle_time": timedelta(0), "topics": [
            _topic_page(t.name, ErrorCode.invalid_request) for t in request.topics]})
    remaining = max(min(services.config["max.request.partition.size.limit"],
                        request.response_partition_limit), 1)
    topics: list[dict[str, Any]] = []
    next_cursor = None
    for name in names:
        if not ctx.authorize(Operation.DESCRIBE, ResourceType.TOPIC, name,
                             log_denied=by_name):
            if by_name:
                topics.append(_topic_page(name, ErrorCode.topic_authorization_failed))
            continue
        if remaining == 0:
            next_cursor = {"topic_name": name, "partition_index": 0}
            break
        described = describe_topic(services, name)
        if described["error_code"] != ErrorCode.none:
            if by_name:
                topics.append(_topic_page(name, described["error_code"]))
            continue
        first = cursor.partition_index if cursor is not None and name == after else 0
        partitions = described["partitions"][first : first + remaining]
        page = _topic_page(name, ErrorCode.none, described["topic_id"], [
            {**p, "eligible_leader_replicas": [], "last_known_elr": []} for p in partitions])
        page["topic_authorized_operations"] = _topic_operations(ctx, name)
        topics.append(page)
        if first + len(partitions) < len(described["partitions"]):
            next_cursor = {"topic_name": name, "partition_index": first + len(partitions)}
            break
        remaining -= len(partitions)
    return build_response(request, {"throttle_time": timedelta(0), "topics": topics,
                                    "next_cursor": next_cursor})


def _topic_page(name: str, error: ErrorCode, topic_id: uuid.UUID | None = None,
                partitions: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {"error_code": error, "name": name, "topic_id": topic_id,  # None: the zero UUID
            "is_internal": name.startswith("__"), "partitions": partitions or [],
            "topic_authorized_operations": ALL_TOPIC_OPERATIONS if topic_id else
            AUTHORIZED_OPERATIONS_OMITTED}
