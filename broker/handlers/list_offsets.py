"""ListOffsets: earliest, latest, max-timestamp, or the first offset at a timestamp.

v8 adds EARLIEST_LOCAL (-4) and v9 LATEST_TIERED (-5) for tiered storage (KIP-405,
KIP-1005), v10 a timeout for remote reads. With no remote tier every record is local, so
-4 answers the log start offset and -5 what Kafka answers with tiering off: offset -1.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from kio.schema.errors import ErrorCode

from broker.handlers import handles
from broker.handlers.context import RequestContext
from broker.protocol.messages import build_response
from broker.security.acl import Operation, ResourceType
from broker.server.partition import Partition

LATEST = -1
EARLIEST = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL = -4
LATEST_TIERED = -5


def _lookup(partition: Partition, timestamp: int, read_committed: bool) -> dict[str, Any]:
    """read_committed clients see the log up to its last stable offset, as they fetch."""
    log = partition.log
    end = partition.last_stable_offset if read_committed else partition.high_watermark
    if timestamp == LATEST:
        return {"offset": end, "timestamp": -1,
                "leader_epoch": log.epoch_cache.latest_epoch}
    if timestamp in (EARLIEST, EARLIEST_LOCAL):
        start = log.log_start_offset
        return {"offset": start, "timestamp": -1, "leader_epoch": log.epoch_cache.epoch_for(start)}
    if timestamp == LATEST_TIERED:
        return {"offset": -1, "timestamp": -1, "leader_epoch": -1}
    if timestamp == MAX_TIMESTAMP:
        found = log.max_timestamp_offset()
    elif timestamp < 0:
        return {"error_code": ErrorCode.invalid_request}
    else:
        found = log.offset_for_timestamp(timestamp)
    if found is None or found[0] >= end:
        return {"offset": -1, "timestamp": -1, "leader_epoch": -1}
    offset, ts, batch_epoch = found
    return {"offset": offset, "timestamp": ts, "leader_epoch": batch_epoch}


@handles(2, 1, 10)
async def handle_list_offsets(ctx: RequestContext, request: Any) -> Any:
    read_committed = getattr(request, "isolation_level", 0) == 1
    topics = []
    for topic in request.topics:
        partitions = []
        if not ctx.authorize(Operation.DESCRIBE, ResourceType.TOPIC, topic.name):
            topics.append({"name": topic.name, "partitions": [
                {"partition_index": p.partition_index,
                 "error_code": ErrorCode.topic_authorization_failed}
                for p in topic.partitions]})
            continue
        for p in topic.partitions:
            partition, error = ctx.services.replicas.leader_for(topic.name, p.partition_index)
            result: dict[str, Any] = {"partition_index": p.partition_index}
            if partition is None:
                result["error_code"] = error
            else:
                error = partition.check_leader_epoch(getattr(p, "current_leader_epoch", -1))
                if error != ErrorCode.none:
                    result["error_code"] = error
                else:
                    result["error_code"] = ErrorCode.none
                    result.update(_lookup(partition, p.timestamp, read_committed))
            partitions.append(result)
        topics.append({"name": topic.name, "partitions": partitions})
    return build_response(request, {"throttle_time": timedelta(0), "topics": topics})
