"""ListOffsets: earliest, latest, max-timestamp, or the first offset at a timestamp.

v8 adds EARLIEST_LOCAL (-4) and v9 LATEST_TIERED (-5) for tiered storage (KIP-405,
KIP-1005), v10 a timeout for remote reads. With no remote tier every record is local, so
-4 answers the log start offset and -5 what Kafka answers with tiering off: offset -1.
Requests and answers go through the hand-written codec of ``broker.protocol.list_offsets``:
Spark's source sends two of them for every poll.
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from broker.handlers import handles
from broker.handlers.context import RequestContext
from broker.protocol.list_offsets import (
    ListOffsetsRequest,
    PartitionOffset,
    TopicOffsets,
    encode_list_offsets_response,
)
from broker.security.acl import Operation, ResourceType
from broker.server.partition import Partition

LATEST = -1
EARLIEST = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL = -4
LATEST_TIERED = -5


def _lookup(partition: Partition, index: int, timestamp: int,
            read_committed: bool) -> PartitionOffset:
    """read_committed clients see the log up to its last stable offset, as they fetch."""
    log = partition.log
    end = partition.last_stable_offset if read_committed else partition.high_watermark
    none = ErrorCode.none
    if timestamp == LATEST:
        return PartitionOffset(index, none, -1, end, log.epoch_cache.latest_epoch)
    if timestamp in (EARLIEST, EARLIEST_LOCAL):
        start = log.log_start_offset
        return PartitionOffset(index, none, -1, start, log.epoch_cache.epoch_for(start))
    if timestamp == LATEST_TIERED:
        return PartitionOffset(index, none)
    if timestamp == MAX_TIMESTAMP:
        found = log.max_timestamp_offset()
    elif timestamp < 0:
        return PartitionOffset(index, ErrorCode.invalid_request)
    else:
        found = log.offset_for_timestamp(timestamp)
    if found is None or found[0] >= end:
        return PartitionOffset(index, none)
    offset, ts, batch_epoch = found
    return PartitionOffset(index, none, ts, offset, batch_epoch)


@handles(2, 1, 10)
async def handle_list_offsets(ctx: RequestContext, request: ListOffsetsRequest) -> bytes:
    read_committed = request.isolation_level == 1
    leader_for = ctx.services.replicas.leader_for
    topics = []
    for topic in request.topics:
        if not ctx.authorize(Operation.DESCRIBE, ResourceType.TOPIC, topic.name):
            topics.append(TopicOffsets(topic.name, [
                PartitionOffset(p.partition_index, ErrorCode.topic_authorization_failed)
                for p in topic.partitions]))
            continue
        partitions = []
        for p in topic.partitions:
            partition, error = leader_for(topic.name, p.partition_index)
            if partition is not None:
                error = partition.check_leader_epoch(p.current_leader_epoch)
            if partition is None or error != ErrorCode.none:
                partitions.append(PartitionOffset(p.partition_index, error))
            else:
                partitions.append(_lookup(partition, p.partition_index, p.timestamp,
                                          read_committed))
        topics.append(TopicOffsets(topic.name, partitions))
    return encode_list_offsets_response(ctx.version, ctx.header.correlation_id, topics)
