"""The share coordinator's APIs, which share-partition leaders call on the broker coordinating
a share-partition's state (KIP-932): InitializeShareGroupState (83), ReadShareGroupState (84),
WriteShareGroupState (85), DeleteShareGroupState (86), ReadShareGroupStateSummary (87). Brokers
only: CLUSTER_ACTION on the cluster, as Kafka requires of inter-broker requests."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from kio.schema.errors import ErrorCode

from broker.coordinator.group_store import MAX_NAME_BYTES
from broker.coordinator.share_state_log import RecordState, ShareKey, StateBatch
from broker.handlers import handles
from broker.handlers.context import RequestContext
from broker.protocol.messages import build_response
from broker.security.acl import Operation, ResourceType

PartitionAnswer = Callable[[ShareKey, Any], Awaitable[dict[str, Any]]]


async def _each(ctx: RequestContext, request: Any, answer: PartitionAnswer,
                refused: dict[str, Any]) -> Any:
    """Answer every partition of the request, or refuse them all (not a broker, or no share
    coordinator here)."""
    allowed = ctx.authorize(Operation.CLUSTER_ACTION, ResourceType.CLUSTER, "kafka-cluster")
    coordinator = ctx.services.share_coordinator
    results = []
    for topic in request.topics:
        partitions = []
        for p in topic.partitions:
            if not request.group_id or len(request.group_id.encode()) > MAX_NAME_BYTES or \
                    topic.topic_id is None or p.partition < 0:
                partitions.append({"partition": p.partition, **refused,
                                   "error_code": ErrorCode.invalid_request})
                continue
            key = ShareKey(request.group_id, topic.topic_id, p.partition)
            if not allowed:
                partitions.append({"partition": p.partition, **refused,
                                   "error_code": ErrorCode.cluster_authorization_failed})
            elif coordinator is None:
                partitions.append({"partition": p.partition, **refused,
                                   "error_code": ErrorCode.coordinator_not_available})
            else:
                partitions.append({"partition": p.partition, **await answer(key, p)})
        results.append({"topic_id": topic.topic_id, "partitions": partitions})
    return build_response(request, {"results": results})


@handles(83, 0, 0)
async def handle_initialize_share_group_state(ctx: RequestContext, request: Any) -> Any:
    coordinator = ctx.services.share_coordinator

    async def answer(key: ShareKey, p: Any) -> dict[str, Any]:
        assert coordinator is not None
        error, message = await coordinator.initialize(key, p.state_epoch, p.start_offset)
        return {"error_code": error, "error_message": message}
    return await _each(ctx, request, answer, {"error_message": None})


@handles(84, 0, 0)
async def handle_read_share_group_state(ctx: RequestContext, request: Any) -> Any:
    coordinator = ctx.services.share_coordinator
    empty = {"error_message": None, "state_epoch": 0, "start_offset": -1, "state_batches": []}

    async def answer(key: ShareKey, p: Any) -> dict[str, Any]:
        assert coordinator is not None
        result = await coordinator.read(key, p.leader_epoch)
        if result.error != ErrorCode.none or result.state is None:
            return {**empty, "error_code": result.error, "error_message": result.message,
                    "state_epoch": result.deleted_epoch}
        s = result.state
        return {"error_code": ErrorCode.none, "error_message": None,
                "state_epoch": s.state_epoch, "start_offset": s.start_offset,
                "state_batches": [{"first_offset": b.first_offset, "last_offset": b.last_offset,
                                   "delivery_state": int(b.state),
                                   "delivery_count": b.delivery_count} for b in s.batches]}
    return await _each(ctx, request, answer, empty)


@handles(85, 0, 1)
async def handle_write_share_group_state(ctx: RequestContext, request: Any) -> Any:
    coordinator = ctx.services.share_coordinator

    async def answer(key: ShareKey, p: Any) -> dict[str, Any]:
        assert coordinator is not None
        try:
            batches = tuple(StateBatch(b.first_offset, b.last_offset,
                                       RecordState(b.delivery_state), b.delivery_count)
                            for b in p.state_batches)
        except ValueError as e:
            return {"error_code": ErrorCode.invalid_request, "error_message": str(e)}
        error, message = await coordinator.write(
            key, p.state_epoch, p.leader_epoch, p.start_offset, batches,
            getattr(p, "delivery_complete_count", -1))
        return {"error_code": error, "error_message": message}
    return await _each(ctx, request, answer, {"error_message": None})


@handles(86, 0, 0)
async def handle_delete_share_group_state(ctx: RequestContext, request: Any) -> Any:
    coordinator = ctx.services.share_coordinator

    async def answer(key: ShareKey, p: Any) -> dict[str, Any]:
        assert coordinator is not None
        return {"error_code": await coordinator.delete(key), "error_message": None}
    return await _each(ctx, request, answer, {"error_message": None})


@handles(87, 0, 1)
async def handle_read_share_group_state_summary(ctx: RequestContext, request: Any) -> Any:
    coordinator = ctx.services.share_coordinator
    empty = {"error_message": None, "state_epoch": 0, "leader_epoch": -1, "start_offset": -1,
             "delivery_complete_count": -1}

    async def answer(key: ShareKey, p: Any) -> dict[str, Any]:
        assert coordinator is not None
        result = await coordinator.read(key)
        if result.error != ErrorCode.none or result.state is None:
            return {**empty, "error_code": result.error, "error_message": result.message}
        s = result.state
        return {**empty, "error_code": ErrorCode.none, "state_epoch": s.state_epoch,
                "leader_epoch": s.leader_epoch, "start_offset": s.start_offset,
                "delivery_complete_count": s.delivery_complete_count}
    return await _each(ctx, request, answer, empty)
