"""OffsetForLeaderEpoch: where a leader epoch ended in this partition's log (KIP-101/279).

Consumers send it after a leader change to check that their position was not truncated
away (KIP-320), followers to find where their log diverges from the leader's. Like Kafka's
ReplicaManager.lastOffsetForLeaderEpoch, a partition we do not host is
UNKNOWN_TOPIC_OR_PARTITION, a stale or future current_leader_epoch is fenced, and an epoch
the cache cannot place is answered with no error and -1/-1.
"""

from __future__ import annotations

import datetime
from typing import Any

from kio.schema.errors import ErrorCode

from broker.handlers import handles
from broker.handlers.context import RequestContext
from broker.protocol.messages import build_response
from broker.security.acl import Operation, ResourceType
from broker.server.replica_manager import ReplicaManager

NO_THROTTLE = datetime.timedelta(0)


def end_offset(replicas: ReplicaManager, topic: str, index: int, requested: Any
               ) -> dict[str, Any]:
    """One partition's answer; leader_epoch and end_offset stay -1 on errors."""
    partition, error = replicas.leader_for(topic, index)
    if partition is None:
        return {"partition": index, "error_code": error}
    error = partition.check_leader_epoch(requested.current_leader_epoch)
    if error != ErrorCode.none:
        return {"partition": index, "error_code": error}
    log = partition.log
    epoch, offset = log.epoch_cache.end_offset_for(requested.leader_epoch, log.log_end_offset)
    return {
        "partition": index,
        "error_code": ErrorCode.none,
        "leader_epoch": epoch,
        "end_offset": offset,
    }


def _topic_result(replicas: ReplicaManager, topic: Any) -> dict[str, Any]:
    return {
        "topic": topic.topic,
        "partitions": [
            end_offset(replicas, topic.topic, p.partition, p)
            for p in topic.partitions
        ],
    }


@handles(23, 2, 4)
async def offset_for_leader_epoch(ctx: RequestContext, request: Any) -> Any:
    """Answer every partition asked for, from the leader only (followers ask with replica_id
    to find where to truncate, consumers to detect truncation)."""
    replicas = ctx.services.replicas
    # CLUSTER_ACTION (brokers) covers every topic; a consumer needs DESCRIBE on each.
    every_topic = ctx.authorize_cluster(Operation.CLUSTER_ACTION, log_denied=False)
    topics = [
        _topic_result(replicas, topic)
        if every_topic or ctx.authorize(Operation.DESCRIBE, ResourceType.TOPIC, topic.topic)
        else {"topic": topic.topic, "partitions": [
            {"partition": p.partition, "error_code": ErrorCode.topic_authorization_failed}
            for p in topic.partitions]}
        for topic in request.topics
    ]
    return build_response(request, {"throttle_time": NO_THROTTLE, "topics": topics})
