"""Share groups (KIP-932): ShareGroupHeartbeat (76) and ShareGroupDescribe (77). The membership
is ``coordinator.share_membership``; these translate the requests, check ACLs (READ on the
group, DESCRIBE on subscribed topics, as Kafka does) and that this broker coordinates the group,
and wait for the group's records to be replicated before answering. Their offsets:
``share_offsets``."""

from __future__ import annotations

import time
from typing import Any

from kio.schema.errors import ErrorCode

from broker.coordinator.share_group import SIMPLE
from broker.coordinator.share_membership import ShareHeartbeat
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
