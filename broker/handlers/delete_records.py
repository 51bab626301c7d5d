"""DeleteRecords: move partitions' log start offsets forward (Kafka's deleteRecords).

Every partition's log start moves first, before any wait, so the request's changes are
made in order with the connection's other requests; then the answer waits, as Kafka's
DelayedDeleteRecords does, until each partition's low watermark (the smallest log start of
its replicas on live brokers) reaches the requested offset, or the request's timeout ends
with REQUEST_TIMED_OUT. Followers learn the new start from their fetch responses and
report theirs in their next fetch. Each topic needs DELETE, checked before its
existence (TOPIC_AUTHORIZATION_FAILED either way).
"""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta
from typing import Any

from kio.schema.errors import ErrorCode

from broker.handlers import handles
from broker.handlers.context import RequestContext
from broker.protocol.messages import build_response
from broker.security.acl import Operation, ResourceType

log = logging.getLogger(__name__)


@handles(21, 0, 2)
async def handle_delete_records(ctx: RequestContext, request: Any) -> Any:
    replicas = ctx.services.replicas
    timeout = max(0.0, request.timeout.total_seconds())
    results: dict[tuple[str, int], dict[str, Any]] = {}
    waits = []
    deletable = ctx.authorized_names(Operation.DELETE, ResourceType.TOPIC,
                                 (t.name for t in request.topics))
    for topic in request.topics:
        for p in topic.partitions:
            key = (topic.name, p.partition_index)
            if topic.name not in deletable:
                results[key] = {"low_watermark": -1,
                                "error_code": ErrorCode.topic_authorization_failed}
                continue
            partition, error = replicas.leader_for(topic.name, p.partition_index)
            if partition is None:
                results[key] = {"low_watermark": -1, "error_code": error}
                continue
            target, error, message = partition.delete_records(p.offset)
            if error != ErrorCode.none:
                log.info("DeleteRecords %s-%d to %d refused: %s (%s)", topic.name,
                         p.partition_index, p.offset, error.name, message)
                results[key] = {"low_watermark": -1, "error_code": error}
                continue
            waits.append((key, replicas.wait_low_watermark(partition, target, timeout)))
    outcomes = await asyncio.gather(*(wait for _, wait in waits))
    for (key, _), (low, error) in zip(waits, outcomes, strict=True):
        results[key] = {"low_watermark": low, "error_code": error}
    return build_response(request, {
        "throttle_time": timedelta(0),
        "topics": [
            {"name": topic.name, "partitions": [
                {"partition_index": p.partition_index, **results[(topic.name, p.partition_index)]}
                for p in topic.partitions
            ]}
            for topic in request.topics
        ],
    })
