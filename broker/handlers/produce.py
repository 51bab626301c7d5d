"""Produce: validate and append each partition's batches, answer per partition.

Appends happen synchronously, before any ``await``, so a connection's pipelined produce
requests are applied in order. acks=0 gets no response at all, as in Kafka. acks=all
(-1) first needs an ISR of at least ``min.insync.replicas`` (NOT_ENOUGH_REPLICAS), then
waits, for every partition at once, until the high watermark passes the batch, up to the
request's timeout (Kafka's DelayedProduce).

The request arrives decoded by ``broker.protocol.produce`` (its records are views into the
request frame) and the answer leaves encoded by it: this is the broker's busiest path.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

from kio.schema.errors import ErrorCode

from broker.handlers import handles
from broker.handlers.context import RequestContext
from broker.protocol.produce import (
    PartitionResponse,
    ProduceRequest,
    TopicResponse,
    encode_produce_response,
)


@handles(0, 0, 11, accepts_from=3)
async def handle_produce(ctx: RequestContext, request: ProduceRequest) -> bytes | None:
    services = ctx.services
    replicas = services.replicas
    acks = request.acks
    responses = []
    waits: list[tuple[PartitionResponse, Coroutine[Any, Any, ErrorCode]]] = []
    timeout = max(0.0, request.timeout_ms / 1000)
    for topic in request.topic_data:
        name = topic.name
        meta = services.store.topics.get(name)
        log_config = replicas.log_config(meta) if meta else None
        max_bytes = log_config.max_message_bytes if log_config else 0
        min_isr = log_config.min_insync_replicas if log_config else 1
        partitions = []
        bytes_in = messages_in = 0
        for data in topic.partition_data:
            index = data.index
            partition = replicas.get(name, index)
            if partition is None:
                error = (ErrorCode.not_leader_or_follower
                         if meta is not None and index < meta.partitions
                         else ErrorCode.unknown_topic_or_partition)
                partitions.append(PartitionResponse(index, error))
                continue
            if acks not in (-1, 0, 1):
                partitions.append(PartitionResponse(index, ErrorCode.invalid_required_acks))
                continue
            outcome = partition.append(data.records, max_bytes, min_isr, acks)
            response = PartitionResponse(
                index, outcome.error, outcome.base_offset, outcome.log_append_time,
                partition.log.log_start_offset, outcome.message, outcome.record_errors,
            )
            partitions.append(response)
            if outcome.error == ErrorCode.none:
                bytes_in += outcome.bytes
                messages_in += outcome.records
                if acks == -1:
                    waits.append((response, partition.wait_committed(
                        outcome.last_offset, min_isr, timeout)))
        if messages_in:
            counters = services.metrics.topic(name)
            counters.bytes_in.inc(bytes_in)
            counters.messages_in.inc(messages_in)
        responses.append(TopicResponse(name, partitions))
    if acks == 0:
        return None
    if waits:
        errors = await asyncio.gather(*(wait for _, wait in waits))
        for (response, _), error in zip(waits, errors, strict=True):
            if error != ErrorCode.none:
                response.error_code = error
                response.base_offset = -1
    return encode_produce_response(ctx.version, ctx.header.correlation_id, responses)
