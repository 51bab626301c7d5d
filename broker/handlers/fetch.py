"""Fetch: long-polling reads served as file regions, sent by sendfile.

The response waits until ``min_bytes`` are available or ``max_wait`` passes (Kafka's
DelayedFetch), and respects ``max_bytes`` across partitions and ``partition_max_bytes``
per partition, always returning at least the first batch of the first partition with data
(KIP-74) so a batch larger than the limits cannot stall a consumer. Sessions are not kept:
``session_id`` 0 tells clients to send full fetches (KIP-227 allows it).

Only the leader serves fetches. Consumers read up to the high watermark; a follower
(``replica_id`` >= 0) reads up to the log end, and its fetch offset tells the leader how far
it has replicated, which moves the high watermark and may return it to the ISR.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

from broker.handlers import handles
from broker.handlers.context import RequestContext
from broker.protocol.fetch import (
    EncodedResponse,
    FetchPartition,
    FetchRequest,
    FetchTopic,
    encode_fetch_response,
)
from broker.server.partition import Partition
from broker.storage.log import OffsetOutOfRange


@dataclass(slots=True)
class _Pass:
    """What one pass over the requested partitions found."""

    topics: list[FetchTopic] = field(default_factory=list)
    total: int = 0
    watched: list[Partition] = field(default_factory=list)
    sent: list[tuple[str, int, int]] = field(default_factory=list)  # topic, bytes, records


def _read_all(ctx: RequestContext, request: FetchRequest, max_bytes: int, first: bool) -> _Pass:
    replicas = ctx.services.replicas
    follower = request.replica_id if request.replica_id >= 0 else None
    found = _Pass()
    for topic in request.topics:
        out = FetchTopic(topic.topic)
        for p in topic.partitions:
            partition = replicas.get(topic.topic, p.partition)
            if partition is None:
                out.partitions.append(
                    FetchPartition(p.partition, ErrorCode.unknown_topic_or_partition, -1, -1, -1,
                                   None)
                )
                continue
            log = partition.log
            error = partition.check_leader_epoch(p.current_leader_epoch)
            if error == ErrorCode.none and not partition.is_leader:
                error = ErrorCode.not_leader_or_follower
            if error == ErrorCode.none and follower is not None and first:
                replicas.record_follower_fetch(partition, follower, p.fetch_offset)
            hw = partition.high_watermark
            region = None
            throttle = replicas.throttle_for(partition, follower) if follower is not None else None
            if error == ErrorCode.none:
                budget = min(p.partition_max_bytes, max(0, max_bytes - found.total))
                min_one = found.total == 0
                if throttle is not None:
                    budget = min(budget, throttle.allowance())
                    min_one = min_one and budget > 0
                try:
                    result = partition.read(p.fetch_offset, budget, min_one,
                                            up_to_log_end=follower is not None)
                except OffsetOutOfRange:
                    error = ErrorCode.offset_out_of_range
                else:
                    region = result.region
                    found.watched.append(partition)
                    if region is not None and region.length:
                        if throttle is not None:
                            throttle.record(region.length)
                        found.total += region.length
                        records = result.next_offset - max(p.fetch_offset, result.first_offset)
                        found.sent.append((topic.topic, region.length, records))
            out.partitions.append(
                FetchPartition(p.partition, error, hw, hw, log.log_start_offset, region)
            )
        found.topics.append(out)
    return found


@handles(1, 4, 12)
async def handle_fetch(ctx: RequestContext, request: FetchRequest) -> EncodedResponse:
    max_bytes = min(request.max_bytes, ctx.services.config["fetch.max.bytes"])
    deadline = time.monotonic() + request.max_wait_ms / 1000
    first = True
    while True:
        found = _read_all(ctx, request, max_bytes, first)
        first = False
        remaining = deadline - time.monotonic()
        if found.total >= request.min_bytes or remaining <= 0 or not found.watched:
            break
        await ctx.services.replicas.wait_for_data(found.watched, remaining)
    metrics = ctx.services.metrics
    for topic, size, records in found.sent if request.replica_id < 0 else ():
        counters = metrics.topic(topic)
        counters.bytes_out.inc(size)
        counters.messages_out.inc(records)
    return encode_fetch_response(ctx.version, ctx.header.correlation_id, found.topics)
