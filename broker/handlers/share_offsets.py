"""The offsets of share groups (KIP-932): DescribeShareGroupOffsets (90) reads each
share-partition's start offset and lag from the share coordinator; AlterShareGroupOffsets (91)
and DeleteShareGroupOffsets (92) change them while the group is empty (``share.share_admin``).
``kafka-share-groups.sh --describe``, ``--reset-offsets``, ``--delete-offsets``."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

from kio.schema.errors import ErrorCode

from broker.coordinator.group_store import MAX_NAME_BYTES
from broker.coordinator.share_state_log import ShareKey
from broker.handlers import handles
from broker.handlers.consumer_groups import describe_refused
from broker.handlers.context import RequestContext
from broker.handlers.groups import coordinator_of, may, not_ours
from broker.protocol.messages import build_response
from broker.security.acl import Operation, ResourceType
from broker.share.share_admin import AdminOutcome, ShareGroupAdmin

NO_TIME = timedelta(0)


@handles(90, 0, 1)
async def handle_describe_share_group_offsets(ctx: RequestContext, request: Any) -> Any:
    """Each share-partition's start offset and lag (v1: records past it not yet done), read
    from the share coordinator (kafka-share-groups.sh --describe). Topics null: every
    partition the group has been assigned."""
    groups = [await _offsets(ctx, g) for g in request.groups]
    return build_response(request, {"throttle_time": NO_TIME, "groups": groups})


async def _offsets(ctx: RequestContext, requested: Any) -> dict[str, Any]:
    group_id = requested.group_id
    refused = describe_refused(ctx, group_id)
    if refused is None and (not group_id or len(group_id.encode()) > MAX_NAME_BYTES):
        refused = ErrorCode.invalid_group_id
    if refused is not None:
        return {"group_id": group_id, "topics": [], "error_code": refused,
                "error_message": None}
    services = ctx.services
    group = coordinator_of(ctx).describe_share_group(group_id)
    if requested.topics is None:  # every partition the group has share state of
        wanted = [(name, sorted(parts)) for name, parts in sorted(
            group.initialized.values())] if group is not None else []
    else:
        wanted = [(t.topic_name, list(t.partitions)) for t in requested.topics]
    topics = []
    for name, partitions in wanted:
        topic = services.store.topics.get(name)
        if topic is None:
            topics.append({"topic_name": name, "topic_id": None, "partitions": [
                {"partition_index": p, "start_offset": -1, "leader_epoch": -1, "lag": -1,
                 "error_code": ErrorCode.unknown_topic_or_partition, "error_message": None}
                for p in partitions or ()]})
            continue
        answered = []
        for index in dict.fromkeys(partitions if partitions is not None
                                   else range(topic.partitions)):
            if not 0 <= index < topic.partitions:  # nothing to read: no hash, no round trip
                answered.append({"partition_index": index, "start_offset": -1,
                                 "leader_epoch": -1, "lag": -1, "error_message": None,
                                 "error_code": ErrorCode.unknown_topic_or_partition})
                continue
            error, start, epoch, done = await services.shares.persister.summary(
                ShareKey(group_id, topic.uuid, index))
            lag = -1
            state = services.store.partition(name, index)
            if error == ErrorCode.none and start >= 0 and done >= 0 and state is not None:
                lag = max(0, _high_watermark(ctx, name, index, start) - start - done)
            answered.append({"partition_index": index, "start_offset": start,
                             "leader_epoch": epoch, "lag": lag, "error_code": error,
                             "error_message": None})
        topics.append({"topic_name": name, "topic_id": topic.uuid, "partitions": answered})
    return {"group_id": group_id, "topics": topics, "error_code": ErrorCode.none,
            "error_message": None}


def _high_watermark(ctx: RequestContext, topic: str, index: int, fallback: int) -> int:
    """The partition's high watermark if this broker holds a replica of it (the lag is an
    estimate otherwise, as a follower's is)."""
    partition = ctx.services.replicas.get(topic, index)
    return partition.high_watermark if partition is not None else fallback


def _topic_id(ctx: RequestContext, name: str) -> uuid.UUID | None:
    topic = ctx.services.store.topics.get(name)
    return topic.uuid if topic is not None else None  # None: the zero id on the wire


def _admin(ctx: RequestContext) -> ShareGroupAdmin:
    services = ctx.services
    return ShareGroupAdmin(coordinator_of(ctx).shares, services.shares.persister,
                           services.store.topics)


def _group_refused(ctx: RequestContext, group_id: str, operation: Operation
                   ) -> AdminOutcome | None:
    if not may(ctx, operation, group_id):
        return AdminOutcome((ErrorCode.group_authorization_failed, None))
    if not group_id or len(group_id.encode()) > MAX_NAME_BYTES:
        return AdminOutcome((ErrorCode.invalid_group_id, "The group id is empty or too long."))
    if not_ours(ctx, group_id):
        return AdminOutcome((ErrorCode.not_coordinator, None))
    return None


@handles(91, 0, 0)
async def handle_alter_share_group_offsets(ctx: RequestContext, request: Any) -> Any:
    """Start share-partitions of an empty share group again at the given offsets: READ on
    the group, READ on each topic (TOPIC_AUTHORIZATION_FAILED for its partitions)."""
    group_id = request.group_id
    readable = ctx.authorized_names(Operation.READ, ResourceType.TOPIC,
                                    (t.topic_name for t in request.topics))
    wanted: dict[str, dict[int, int]] = {}
    for t in request.topics:
        if t.topic_name in readable:
            wanted.setdefault(t.topic_name, {}).update(
                (p.partition_index, p.start_offset) for p in t.partitions)
    outcome = _group_refused(ctx, group_id, Operation.READ) or \
        await _admin(ctx).alter_offsets(group_id, wanted)
    error, message = outcome.outcome
    topics = []
    for t in request.topics:
        done = outcome.topics.get(t.topic_name)
        partitions = []
        for p in t.partitions:
            if error != ErrorCode.none:  # the whole request's (the group's) error
                code, text = error, message
            elif t.topic_name not in readable:
                code, text = ErrorCode.topic_authorization_failed, None
            else:
                code, text = done.partitions[p.partition_index] if done else (error, message)
            partitions.append({"partition_index": p.partition_index, "error_code": code,
                               "error_message": text})
        topics.append({"topic_name": t.topic_name,
                       "topic_id": _topic_id(ctx, t.topic_name),
                       "partitions": partitions})
    return build_response(request, {"throttle_time": NO_TIME, "error_code": error,
                                    "error_message": message, "responses": topics})


@handles(92, 0, 0)
async def handle_delete_share_group_offsets(ctx: RequestContext, request: Any) -> Any:
    """Forget an empty share group's state of whole topics: DELETE on the group, READ on
    each topic."""
    group_id = request.group_id
    names = list(dict.fromkeys(t.topic_name for t in request.topics))
    readable = ctx.authorized_names(Operation.READ, ResourceType.TOPIC, names)
    outcome = _group_refused(ctx, group_id, Operation.DELETE) or \
        await _admin(ctx).delete_offsets(group_id, [n for n in names if n in readable])
    error, message = outcome.outcome
    topics = []
    for name in names:
        done = outcome.topics.get(name)
        if error != ErrorCode.none:
            code, text = error, message
        elif name not in readable:
            code, text = ErrorCode.topic_authorization_failed, None
        elif done is None:
            code, text = error, message
        else:
            code, text = done.outcome
        topics.append({"topic_name": name, "topic_id": _topic_id(ctx, name),
                       "error_code": code, "error_message": text})
    return build_response(request, {"throttle_time": NO_TIME, "error_code": error,
                                    "error_message": message, "responses": topics})
