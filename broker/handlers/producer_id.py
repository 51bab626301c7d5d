"""Producer ids: InitProducerId for idempotent and transactional producers, and
DescribeProducers, what a partition's leader knows of the producers writing to it."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from kio.schema.errors import ErrorCode

from broker.cluster.metadata import ConcurrentUpdate
from broker.handlers import handles
from broker.handlers.context import RequestContext
from broker.handlers.transactions import as_version_knows
from broker.protocol.messages import build_long_response, build_response
from broker.security.acl import Operation, ResourceType


@handles(22, 0, 5)
async def handle_init_producer_id(ctx: RequestContext, request: Any) -> Any:
    def reply(error: ErrorCode, pid: int = -1, epoch: int = -1) -> Any:
        return build_response(request, {
            "throttle_time": timedelta(0), "error_code": error,
            "producer_id": pid, "producer_epoch": epoch,
        })

    if request.transactional_id is not None:
        if not ctx.authorize(Operation.WRITE, ResourceType.TRANSACTIONAL_ID,
                             request.transactional_id):
            return reply(ErrorCode.transactional_id_authorization_failed)
        coordinator = ctx.services.transactions
        named = getattr(request, "producer_id", -1)
        expected = (named, getattr(request, "producer_epoch", -1)) if named >= 0 else None
        timeout_ms = int(request.transaction_timeout.total_seconds() * 1000)
        result = await coordinator.init_producer_id(request.transactional_id, timeout_ms,
                                                    expected)
        return reply(as_version_knows(ctx, result.error, 4), result.producer_id,
                     result.producer_epoch)
    authorizer = ctx.services.authorizer
    if authorizer.enabled and not (
            ctx.authorize_cluster(Operation.IDEMPOTENT_WRITE, log_denied=False)
            or authorizer.may_write_some_topic(ctx.principal, ctx.client_host)):
        return reply(ErrorCode.cluster_authorization_failed)
    # Without a transactional id Kafka always hands out a fresh id with epoch 0, whatever
    # id and epoch the client names (TransactionCoordinator.handleInitProducerId): naming
    # another producer's id must not fence it.
    try:
        return reply(ErrorCode.none, await ctx.services.store.next_producer_id(), 0)
    except ConcurrentUpdate:  # no producer ids to hand out now: the client retries
        return reply(ErrorCode.coordinator_not_available)


@handles(61, 0, 0)
async def handle_describe_producers(ctx: RequestContext, request: Any) -> Any:
    """The active producers of each partition, from this broker's replica's producer state
    (Kafka's activeProducerState, which a follower answers too, as `TransactionsCommand
    --broker-id` asks it): id, epoch, last sequence, the timestamp of its last batch, the
    coordinator epoch of its last marker and where its open transaction starts."""
    replicas = ctx.services.replicas
    topics = []
    seen: set[tuple[str, int]] = set()
    for topic in request.topics:
        partitions = []
        if not ctx.authorize(Operation.READ, ResourceType.TOPIC, topic.name):
            topics.append({"name": topic.name, "partitions": [
                {"partition_index": index, "error_code": ErrorCode.topic_authorization_failed,
                 "active_producers": []} for index in dict.fromkeys(topic.partition_indexes)]})
            continue
        for index in topic.partition_indexes:
            # A partition named twice is answered once: its active producers, thousands
            # perhaps, repeated for each copy would make an answer of billions of entries.
            if (topic.name, index) in seen:
                continue
            seen.add((topic.name, index))
            partition = replicas.get(topic.name, index)
            if partition is None:
                _, error = replicas.leader_for(topic.name, index)  # Kafka's code for why
                partitions.append({"partition_index": index, "error_code": error,
                                   "active_producers": []})
                continue
            producers = [
                {"producer_id": entry.producer_id, "producer_epoch": entry.epoch,
                 "last_sequence": entry.last_sequence,
                 "last_timestamp": entry.last_timestamp,
                 "coordinator_epoch": entry.coordinator_epoch,
                 "current_txn_start_offset": entry.current_txn_first_offset}
                for entry in partition.log.producer_state.producers.values()
            ]
            partitions.append({"partition_index": index, "error_code": ErrorCode.none,
                               "active_producers": producers})
        if partitions or not topic.partition_indexes:
            topics.append({"name": topic.name, "partitions": partitions})
    return await build_long_response(request, {"throttle_time": timedelta(0), "topics": topics},
                                     len(seen))
