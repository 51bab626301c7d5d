"""Produce: validate and append each partition's batches, answer per partition.

Appends happen synchronously, before any ``await``, so a connection's pipelined produce
requests are applied in order. The one exception is a transaction's first batch in a
partition: its leader first asks the coordinator whether the partition is in the
transaction, or from v12 to add it (KIP-890, ``broker.server.txn_verification``). That
request takes a turn in its connection's ``AppendOrder`` and every later produce request
of the connection waits for it to have appended, as Kafka, which reads a connection's next
request only after answering the last, would have it.

acks=0 gets no response at all, as in Kafka. acks=all (-1) first needs an ISR of at least
``min.insync.replicas`` (NOT_ENOUGH_REPLICAS), then waits, for every partition at once,
until the high watermark passes the batch, up to the request's timeout (Kafka's
DelayedProduce).

The request arrives decoded by ``broker.protocol.produce`` (its records are views into the
request frame) and the answer leaves encoded by it: this is the broker's busiest path.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
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
from broker.protocol.records import ATTR_TRANSACTIONAL, HEADER_SIZE, BatchHeader, parse_header
from broker.security.acl import Operation, ResourceType
from broker.server.partition import Partition
from broker.server.txn_verification import as_produce_error, needs_verification
from broker.storage.producer_state import NOT_VERIFIED, VerificationGuard

# From v12 a transactional producer runs transaction.version 2 and sends no
# AddPartitionsToTxn: the leader has the coordinator add the partition (KIP-890 part 2).
TV2_PRODUCE = 12


def _transactional(records: bytes | memoryview | None) -> bool:
    return bool(records) and len(records) >= HEADER_SIZE \
        and bool(records[22] & ATTR_TRANSACTIONAL)


def _unverified(partition: Partition | None, records: bytes | memoryview | None
                ) -> BatchHeader | None:
    """The header of a transactional batch whose producer has no transaction open in this
    partition yet: the writes KIP-890 has the leader check first."""
    if not _transactional(records):
        return None
    header = parse_header(records)
    if not needs_verification(partition, header.producer_id, header.producer_epoch):
        return None
    return header


def _unauthorized_transaction(ctx: RequestContext, request: ProduceRequest
                              ) -> dict[tuple[str, int], ErrorCode]:
    """Transactional batches need WRITE on their transactional id; without it every
    partition is refused (TRANSACTIONAL_ID_AUTHORIZATION_FAILED), as Kafka does."""
    if not ctx.services.authorizer.enabled or not any(
            _transactional(data.records) for topic in request.topic_data
            for data in topic.partition_data):
        return {}
    transactional_id = request.transactional_id
    if transactional_id is not None and ctx.authorize(
            Operation.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id):
        return {}
    return {(topic.name, data.index): ErrorCode.transactional_id_authorization_failed
            for topic in request.topic_data for data in topic.partition_data}


def _without_transactional_id(request: ProduceRequest) -> dict[tuple[str, int], ErrorCode]:
    """A transactional batch in a request that names no transactional id: Kafka refuses
    the request (TRANSACTIONAL_ID_AUTHORIZATION_FAILED), as no coordinator vouches for it."""
    if any(_transactional(data.records) for topic in request.topic_data
           for data in topic.partition_data):
        return {(topic.name, data.index): ErrorCode.transactional_id_authorization_failed
                for topic in request.topic_data for data in topic.partition_data}
    return {}


def _to_verify(ctx: RequestContext, request: ProduceRequest
               ) -> dict[tuple[int, int], dict[tuple[str, int], int]]:
    """(producer id, epoch) -> the partitions whose batches the coordinator must vouch for
    before they are appended, each with its batch's first sequence."""
    services = ctx.services
    if not _verifying(ctx, request):
        return {}
    wanted: dict[tuple[int, int], dict[tuple[str, int], int]] = {}
    for topic in request.topic_data:
        for data in topic.partition_data:
            header = _unverified(services.replicas.get(topic.name, data.index), data.records)
            if header is not None:
                wanted.setdefault((header.producer_id, header.producer_epoch), {})[
                    (topic.name, data.index)] = header.base_sequence
    return wanted


def _verifying(ctx: RequestContext, request: ProduceRequest) -> bool:
    """Transactional batches here are checked with the coordinator (KIP-890)."""
    return request.transactional_id is not None and (
        ctx.version >= TV2_PRODUCE
        or ctx.services.config["transaction.partition.verification.enable"])


async def _verify(ctx: RequestContext, request: ProduceRequest,
                  guards: dict[tuple[str, int], VerificationGuard | None]
                  ) -> dict[tuple[str, int], ErrorCode]:
    """The partitions whose transactional batches the coordinator did not vouch for. Each
    asked about gets its guard in ``guards`` before the question goes out: a marker written
    meanwhile drops it, and the batch is then refused at its append. Not so for an add
    (transaction.version 2): the coordinator answers it only once the producer's previous
    transaction has all its markers, so the marker met meanwhile is that one's, and a late
    batch is fenced by the epoch every EndTxn bumps."""
    services = ctx.services
    assert request.transactional_id is not None
    asked = _to_verify(ctx, request)
    add = ctx.version >= TV2_PRODUCE
    for (producer_id, epoch), sequences in asked.items():
        for tp, sequence in sequences.items():
            partition = services.replicas.get(*tp)
            assert partition is not None  # _to_verify found it leading
            guard = partition.log.producer_state.start_verification(
                producer_id, epoch, sequence, voidable=not add)
            guards[tp] = None if add else guard
    failed: dict[tuple[str, int], ErrorCode] = {}
    for (producer_id, epoch), sequences in asked.items():
        answers = await services.verifier.verify(request.transactional_id, producer_id, epoch,
                                                 list(sequences), add=add)
        failed.update({tp: e for tp, e in answers.items() if e != ErrorCode.none})
    return failed


@handles(0, 0, 12, accepts_from=3)
async def handle_produce(ctx: RequestContext, request: ProduceRequest) -> bytes | None:
    refused = _unauthorized_transaction(ctx, request)
    transactional = request.transactional_id is not None
    if not refused and not transactional:
        refused = _without_transactional_id(request)
    verify = not refused and _verifying(ctx, request)
    # A partition not asked about had its transaction open when looked at: it must still.
    guards: dict[tuple[str, int], VerificationGuard | None] | None = (
        defaultdict(lambda: NOT_VERIFIED) if verify else None)
    order = ctx.append_order
    if order.busy or (verify and _to_verify(ctx, request)):
        async with order.turn():  # taken before the first await: in arrival order
            if guards is not None:  # asked after the turns before: they may have opened some
                refused = await _verify(ctx, request, guards)
            responses, waits = _append(ctx, request, refused, guards)
    else:
        responses, waits = _append(ctx, request, refused, guards)
    # The whole request counts against producer_byte_rate, refused or not (Kafka's
    # request.sizeInBytes); with acks=0 the muted connection is the only throttle.
    throttle = ctx.throttle.add(ctx.services.client_quotas.record_produce(
        ctx.principal, ctx.client_id, ctx.size))
    if request.acks == 0:
        return None
    if waits:
        errors = await asyncio.gather(*(wait for _, wait in waits))
        for (response, _), error in zip(waits, errors, strict=True):
            if error != ErrorCode.none:
                response.error_code = error
                response.base_offset = -1
    return encode_produce_response(ctx.version, ctx.header.correlation_id, responses,
                                   throttle_time_ms=throttle)


def _append(ctx: RequestContext, request: ProduceRequest,
            refused: dict[tuple[str, int], ErrorCode],
            guards: dict[tuple[str, int], VerificationGuard | None] | None = None,
            ) -> tuple[list[TopicResponse],
                       list[tuple[PartitionResponse, Coroutine[Any, Any, ErrorCode]]]]:
    """Append every partition's batches not ``refused``, with no ``await``: the answers,
    and for acks=all the waits for the high watermark to pass them."""
    services = ctx.services
    replicas = services.replicas
    acks = request.acks
    responses = []
    waits: list[tuple[PartitionResponse, Coroutine[Any, Any, ErrorCode]]] = []
    timeout = max(0.0, request.timeout_ms / 1000)
    authorizer = services.authorizer
    for topic in request.topic_data:
        name = topic.name
        if authorizer.enabled and not ctx.authorize(Operation.WRITE, ResourceType.TOPIC, name):
            responses.append(TopicResponse(name, [
                PartitionResponse(data.index, ErrorCode.topic_authorization_failed)
                for data in topic.partition_data]))
            continue
        meta = services.store.topics.get(name)
        log_config = replicas.log_config(meta) if meta else None
        max_bytes = log_config.max_message_bytes if log_config else 0
        min_isr = log_config.min_insync_replicas if log_config else 1
        partitions = []
        bytes_in = messages_in = 0
        for data in topic.partition_data:
            index = data.index
            partition = replicas.opened(name, index)
            if partition is None:
                error = (ErrorCode.kafka_storage_error if (name, index) in replicas.offline
                         else ErrorCode.not_leader_or_follower
                         if meta is not None and index < meta.partitions
                         else ErrorCode.unknown_topic_or_partition)
                partitions.append(PartitionResponse(index, error))
                continue
            if acks not in (-1, 0, 1):
                partitions.append(PartitionResponse(index, ErrorCode.invalid_required_acks))
                continue
            if (name, index) in refused:
                error, message = as_produce_error(refused[(name, index)], ctx.version)
                partitions.append(PartitionResponse(index, error, error_message=message))
                continue
            outcome = partition.append(data.records, max_bytes, min_isr, acks,
                                       verified=None if guards is None else guards[(name, index)])
            response = PartitionResponse(
                index, outcome.error, outcome.base_offset, outcome.log_append_time,
                partition.log.log_start_offset, outcome.message, outcome.record_errors,
            )
            partitions.append(response)
            if outcome.error == ErrorCode.none:
                bytes_in += outcome.bytes
                partition.leader_bytes_in += outcome.bytes
                messages_in += outcome.records
                if acks == -1:
                    waits.append((response, partition.wait_committed(
                        outcome.last_offset, min_isr, timeout)))
        if messages_in:
            counters = services.metrics.topic(name)
            counters.bytes_in.inc(bytes_in)
            counters.messages_in.inc(messages_in)
        responses.append(TopicResponse(name, partitions))
    return responses, waits
