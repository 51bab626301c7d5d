"""Produce: validate and append each partition's batches, answer per partition.

Appends happen synchronously, before any ``await``, so a connection's pipelined produce
requests are applied in order. acks=0 gets no response at all, as in Kafka.
"""

from __future__ import annotations

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
    for topic in request.topic_data:
        meta = services.store.topics.get(topic.name)
        counters = services.metrics.topic(topic.name) if meta else None
        max_bytes = services.replicas.log_config(meta).max_message_bytes if meta else 0
        partitions = []
        for data in topic.partition_data:
            partition = services.replicas.get(topic.name, data.index)
            if partition is None:
                outcome = ProduceOutcome(ErrorCode.unknown_topic_or_partition)
                partitions.append(_partition_response(data.index, outcome, -1))
                continue
            if acks not in (-1, 0, 1):
                outcome = ProduceOutcome(ErrorCode.invalid_required_acks)
            else:
                outcome = partition.append(data.records, max_bytes)
                if outcome.error == ErrorCode.none and outcome.records:
                    counters.bytes_in.inc(outcome.bytes)
                    counters.messages_in.inc(outcome.records)
            partitions.append(
                _partition_response(data.index, outcome, partition.log.log_start_offset)
            )
        responses.append({"name": topic.name, "partition_responses": partitions})
    if acks == 0:
        return None
    return build_response(request, {"responses": responses, "throttle_time": timedelta(0)})
