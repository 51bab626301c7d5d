"""Produce: validate and append each partition's batches, answer per partition.

Appends happen synchronously, before any ``await``, so a connection's pipelined produce
requests are applied in order. acks=0 gets no response at all, as in Kafka. acks=all
(-1) first needs an ISR of at least ``min.insync.replicas`` (NOT_ENOUGH_REPLICAS), then
waits, for every partition at once, until the high watermark passes the batch, up to the
request's timeout (Kafka's DelayedProduce).
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

from kio.schema.errors import ErrorCode

from broker.handlers import handles
from broker.handlers.context import RequestContext
from broker.protocol.messages import build_response
from broker.server.partition import ProduceOutcome


def _partition_response(index: int, outcome: ProduceOutcome, log_start: int) -> dict[str, Any]:
    append_time = None
    if outcome.log_append_time >= 0:
        append_time = datetime.fromtimestamp(outcome.log_append_time / 1000, UTC)
    return {
        "index": index,
        "error_code": outcome.error,
        "base_offset": outcome.base_offset,
        "log_append_time": append_time,
        "log_start_offset": log_start,
        "record_errors": [],
        "error_message": outcome.message,
    }


@handles(0, 0, 11, accepts_from=3)
async def handle_produce(ctx: RequestContext, request: Any) -> Any:
    services = ctx.services
    acks = request.acks
    responses = []
    waits: list[tuple[dict[str, Any], Any]] = []  # (partition response, commit wait)
    timeout = max(0.0, request.timeout.total_seconds()) if hasattr(request, "timeout") else 30.0
    for topic in request.topic_data:
        meta = services.store.topics.get(topic.name)
        counters = services.metrics.topic(topic.name) if meta else None
        log_config = services.replicas.log_config(meta) if meta else None
        max_bytes = log_config.max_message_bytes if log_config else 0
        min_isr = log_config.min_insync_replicas if log_config else 1
        partitions = []
        for data in topic.partition_data:
            partition = services.replicas.get(topic.name, data.index)
            if partition is None:
                error = (ErrorCode.not_leader_or_follower
                         if meta is not None and data.index < meta.partitions
                         else ErrorCode.unknown_topic_or_partition)
                partitions.append(_partition_response(data.index, ProduceOutcome(error), -1))
                continue
            if acks not in (-1, 0, 1):
                outcome = ProduceOutcome(ErrorCode.invalid_required_acks)
            else:
                outcome = partition.append(data.records, max_bytes, min_isr, acks)
                if outcome.error == ErrorCode.none and outcome.records:
                    counters.bytes_in.inc(outcome.bytes)
                    counters.messages_in.inc(outcome.records)
            response = _partition_response(data.index, outcome, partition.log.log_start_offset)
            if acks == -1 and outcome.error == ErrorCode.none:
                waits.append(
                    (response, partition.wait_committed(outcome.last_offset, min_isr, timeout))
                )
            partitions.append(response)
        responses.append({"name": topic.name, "partition_responses": partitions})
    if acks == 0:
        for _, wait in waits:
            wait.close()
        return None
    if waits:
        errors = await asyncio.gather(*(wait for _, wait in waits))
        for (response, _), error in zip(waits, errors, strict=True):
            if error != ErrorCode.none:
                response["error_code"] = error
                response["base_offset"] = -1
    return build_response(request, {"responses": responses, "throttle_time": timedelta(0)})
