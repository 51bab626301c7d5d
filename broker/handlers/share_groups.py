"""Share groups (KIP-932): ShareGroupHeartbeat (76) and ShareGroupDescribe (77). The membership
is ``coordinator.share_membership``; these translate the requests, check ACLs (READ on the
group, DESCRIBE on subscribed topics, as Kafka does) and that this broker coordinates the group,
and wait for the group's records to be replicated before answering."""

from __future__ import annotations

import time
import uuid
from datetime import timedelta
from typing import Any

from kio.schema.errors import ErrorCode

from broker.coordinator.share_group import SIMPLE
from broker.coordinator.share_membership import ShareHeartbeat
from broker.coordinator.share_state_log import ShareKey
from broker.handlers import handles
from broker.handlers.consumer_groups import (
    describe_refused,
    describe_response,
    described,
    described_error,
    heartbeat_answer,
    heartbeat_error,
    heartbeat_refused,
    operations,
    topic_names,
)
from broker.handlers.context import RequestContext
from broker.handlers.groups import coordinator_of
from broker.protocol.messages import build_response

NO_TIME = timedelta(0)
ZERO_ID = uuid.UUID(int=0)


@handles(76, 1, 1)
async def handle_share_group_heartbeat(ctx: RequestContext, request: Any) -> Any:
    names = request.subscribed_topic_names
    refused = heartbeat_refused(ctx, request.group_id, names)
    if refused is not None:
        return heartbeat_error(request, *refused)
    coordinator = coordinator_of(ctx)
    await coordinator.ensure_offsets_topic()
    hb = ShareHeartbeat(request.group_id, request.member_id, request.member_epoch,
                        request.rack_id, tuple(names) if names is not None else None)
    result = coordinator.share_heartbeat(hb, ctx.header.client_id or "", f"/{ctx.client_host}",
                                         time.monotonic())
    return await heartbeat_answer(ctx, request, result)


@handles(77, 1, 1)
async def handle_share_group_describe(ctx: RequestContext, request: Any) -> Any:
    return describe_response(ctx, request, _describe)


def _describe(ctx: RequestContext, group_id: str, with_operations: bool) -> dict[str, Any]:
    refused = describe_refused(ctx, group_id)
    if refused is not None:
        return described_error(group_id, refused)
    group = coordinator_of(ctx).describe_share_group(group_id)
    if group is None:
        return described_error(group_id, ErrorCode.group_id_not_found,
                               f"Group {group_id} is not a share group.")
    names = topic_names(ctx)
    return {
        "error_code": ErrorCode.none, "group_id": group_id, "group_state": group.state.value,
        "group_epoch": group.group_epoch, "assignment_epoch": group.target_epoch,
        "assignor_name": SIMPLE, "authorized_operations": operations(ctx, group_id,
                                                                     with_operations),
        "members": [
            {"member_id": m.member_id, "rack_id": m.rack_id, "member_epoch": m.member_epoch,
             "client_id": m.client_id, "client_host": m.client_host,
             "subscribed_topic_names": m.subscribed_topic_names,
             "assignment": described(names, m.assigned)}
            for m in group.members.values()],
    }


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
            topics.append({"topic_name": name, "topic_id": ZERO_ID, "partitions": [
                {"partition_index": p, "start_offset": -1, "leader_epoch": -1, "lag": -1,
                 "error_code": ErrorCode.unknown_topic_or_partition, "error_message": None}
                for p in partitions or ()]})
            continue
        answered = []
        for index in partitions if partitions is not None else range(topic.partitions):
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
