"""Kafka 4's consumer group protocol (KIP-848): ConsumerGroupHeartbeat (68) and
ConsumerGroupDescribe (69). The membership itself is ``coordinator.consumer_membership``;
these translate the requests, check ACLs (READ on the group, DESCRIBE on subscribed topics,
as Kafka does) and that this broker coordinates the group, and wait for the group's records
to be replicated before answering, as Kafka's coordinator does.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from kio.schema.errors import ErrorCode

from broker.cluster.features import GROUP_VERSION
from broker.coordinator.consumer_group import Assignment, assignment
from broker.coordinator.consumer_membership import Heartbeat, HeartbeatResult
from broker.handlers import handles
from broker.handlers.context import RequestContext
from broker.handlers.groups import coordinator_of, may, not_ours
from broker.protocol.messages import build_response
from broker.security.acl import OPERATIONS_OMITTED, Operation, ResourceType

NO_TIME = timedelta(0)


def _ms(value: timedelta) -> int:
    return round(value.total_seconds() * 1000)


def _owned(topic_partitions: Any) -> Assignment | None:
    if topic_partitions is None:
        return None
    return assignment((tp.topic_id, p) for tp in topic_partitions for p in tp.partitions
                      if tp.topic_id is not None)


def topic_partitions(a: Assignment) -> list[dict[str, Any]]:
    return [{"topic_id": topic_id, "partitions": sorted(parts)}
            for topic_id, parts in sorted(a.items(), key=lambda i: i[0].bytes)]


@handles(68, 0, 1)
async def handle_consumer_group_heartbeat(ctx: RequestContext, request: Any) -> Any:
    if ctx.services.store.image.features.get(GROUP_VERSION, 0) < 1:
        return heartbeat_error(
            request, ErrorCode.unsupported_version,
            "The consumer group protocol is off in this cluster: group.version is 0 "
            "(kafka-features.sh upgrade --feature group.version=1 turns it on).")
    names = request.subscribed_topic_names
    refused = heartbeat_refused(ctx, request.group_id, names)
    if refused is not None:
        return heartbeat_error(request, *refused)
    coordinator = coordinator_of(ctx)
    await coordinator.ensure_offsets_topic()
    hb = Heartbeat(
        request.group_id, request.member_id, request.member_epoch, request.instance_id,
        request.rack_id, _ms(request.rebalance_timeout),
        tuple(names) if names is not None else None,
        getattr(request, "subscribed_topic_regex", None), request.server_assignor,
        _owned(request.topic_partitions))
    result = coordinator.consumer_heartbeat(hb, ctx.header.client_id or "",
                                            f"/{ctx.client_host}", time.monotonic(),
                                            ctx.version)
    return await heartbeat_answer(ctx, request, result)


def heartbeat_error(request: Any, error: ErrorCode, message: str | None = None) -> Any:
    return build_response(request, {"throttle_time": NO_TIME, "error_code": error,
                                    "error_message": message, "member_epoch": -1,
                                    "heartbeat_interval": NO_TIME})


def heartbeat_refused(ctx: RequestContext, group_id: str, names: Any
                      ) -> tuple[ErrorCode, str | None] | None:
    """Why a group heartbeat is refused before the coordinator sees it, as Kafka checks:
    READ on the group, DESCRIBE on every subscribed topic, the group coordinated here."""
    if not may(ctx, Operation.READ, group_id):
        return ErrorCode.group_authorization_failed, None
    if names and ctx.services.authorizer.enabled:
        denied = set(names) - ctx.authorized_names(Operation.DESCRIBE, ResourceType.TOPIC,
                                                   names)
        if denied:
            return (ErrorCode.topic_authorization_failed,
                    f"Not authorized to describe topics: {', '.join(sorted(denied))}.")
    if not_ours(ctx, group_id):
        return ErrorCode.not_coordinator, None
    return None


async def heartbeat_answer(ctx: RequestContext, request: Any, result: HeartbeatResult) -> Any:
    """The response to a heartbeat the coordinator took, once its records are replicated
    (Kafka answers when the write is committed)."""
    if result.error == ErrorCode.none:
        stored = await coordinator_of(ctx).await_replication(
            request.group_id, ctx.services.config["offsets.commit.timeout.ms"] / 1000)
        if stored != ErrorCode.none:
            return heartbeat_error(request, stored)
    if result.error != ErrorCode.none:
        return heartbeat_error(request, result.error, result.message)
    values: dict[str, Any] = {
        "member_id": result.member_id, "member_epoch": result.member_epoch,
        "heartbeat_interval": timedelta(milliseconds=result.heartbeat_interval_ms)}
    if result.assignment is not None:
        values["assignment"] = {"topic_partitions": topic_partitions(result.assignment)}
    return build_response(request, {"throttle_time": NO_TIME, "error_code": ErrorCode.none,
                                    **values})


@handles(69, 0, 1)
async def handle_consumer_group_describe(ctx: RequestContext, request: Any) -> Any:
    return describe_response(ctx, request, _describe)


def describe_response(ctx: RequestContext, request: Any,
                      describe_one: Callable[[RequestContext, str, bool], dict[str, Any]]
                      ) -> Any:
    """ConsumerGroupDescribe's and ShareGroupDescribe's answer: each group once."""
    groups = [describe_one(ctx, group_id, request.include_authorized_operations)
              for group_id in dict.fromkeys(request.group_ids)]
    return build_response(request, {"throttle_time": NO_TIME, "groups": groups})


def _describe(ctx: RequestContext, group_id: str, with_operations: bool) -> dict[str, Any]:
    refused = describe_refused(ctx, group_id)
    if refused is not None:
        return described_error(group_id, refused)
    coordinator = coordinator_of(ctx)
    group = coordinator.describe_consumer_group(group_id)
    if group is None:
        return described_error(group_id, ErrorCode.group_id_not_found,
                               f"Group {group_id} not found.")
    names = topic_names(ctx)
    return {
        "error_code": ErrorCode.none, "group_id": group_id,
        "group_state": group.state.value, "group_epoch": group.group_epoch,
        "assignment_epoch": group.target_epoch,
        "assignor_name": group.preferred_assignor(coordinator.default_assignor),
        "authorized_operations": operations(ctx, group_id, with_operations),
        "members": [
            {"member_id": m.member_id, "instance_id": m.instance_id, "rack_id": m.rack_id,
             "member_epoch": m.member_epoch, "client_id": m.client_id,
             "client_host": m.client_host, "subscribed_topic_names": m.subscribed_topic_names,
             "subscribed_topic_regex": m.subscribed_topic_regex,
             "assignment": described(names, m.assigned),
             "target_assignment": described(names, group.target.get(m.member_id, {})),
             "member_type": 0 if m.classic is not None else 1}
            for m in group.members.values()],
    }


def described_error(group_id: str, code: ErrorCode, message: str | None = None
                    ) -> dict[str, Any]:
    return {"error_code": code, "error_message": message, "group_id": group_id,
            "group_state": "", "group_epoch": -1, "assignment_epoch": -1,
            "assignor_name": "", "members": [], "authorized_operations": OPERATIONS_OMITTED}


def describe_refused(ctx: RequestContext, group_id: str) -> ErrorCode | None:
    if not may(ctx, Operation.DESCRIBE, group_id):
        return ErrorCode.group_authorization_failed
    if not_ours(ctx, group_id):
        return ErrorCode.not_coordinator
    return None


def topic_names(ctx: RequestContext) -> dict[Any, str]:
    return {t.uuid: name for name, t in ctx.services.store.topics.items()}


def described(names: dict[Any, str], a: Assignment) -> dict[str, Any]:
    """An assignment as the describe responses give it: topics by id and name."""
    return {"topic_partitions": [
        {"topic_id": topic_id, "topic_name": names[topic_id], "partitions": sorted(parts)}
        for topic_id, parts in sorted(a.items(), key=lambda i: i[0].bytes)
        if topic_id in names]}


def operations(ctx: RequestContext, group_id: str, with_operations: bool) -> int:
    if not with_operations:
        return OPERATIONS_OMITTED
    return ctx.services.authorizer.authorized_operations(
        ctx.principal, ctx.client_host, ResourceType.GROUP, group_id)
