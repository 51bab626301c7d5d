"""Transaction APIs: the coordinator's (AddPartitionsToTxn, AddOffsetsToTxn, EndTxn,
DescribeTransactions, ListTransactions), the group coordinator's TxnOffsetCommit, and the
partition leader's WriteTxnMarkers.

Thin, as the group handlers are: each maps its request (every version) onto the
TransactionCoordinator, the GroupCoordinator or the partitions, and the answer back. A
transactional id's coordinator is the leader of its partition of ``__transaction_state``;
any other broker answers NOT_COORDINATOR and the client asks FindCoordinator again.

transaction.version 2 (KIP-890 part 2) comes with EndTxn v5 (every EndTxn bumps the epoch and
answers with it) and TxnOffsetCommit v5 (the group coordinator adds the group's partition
to the transaction itself, as a partition leader does for Produce v12, through
AddPartitionsToTxn v4+ with verify_only false).
"""

from __future__ import annotations

import asyncio
import re
from datetime import UTC, datetime, timedelta
from typing import Any

from kio.schema.errors import ErrorCode

from broker.coordinator import offsets_topic as ot
from broker.coordinator.offsets_topic import OffsetValue
from broker.coordinator.transaction_coordinator import TransactionCoordinator, TxnMetadata
from broker.coordinator.transaction_log import TopicPartition, TxnState
from broker.coordinator.txn_end import TV2, EndDecision
from broker.handlers import handles
from broker.handlers.context import RequestContext
from broker.protocol.messages import build_response
from broker.security.acl import Operation, ResourceType
from broker.server.partition import Partition
from broker.server.txn_verification import as_offset_commit_error, needs_verification
from broker.storage.producer_state import NOT_VERIFIED, VerificationGuard

NO_TIMEOUT = timedelta(0)
# An empty AddPartitionsToTxn or a failed one leaves its other partitions untried.
_NOT_ATTEMPTED = ErrorCode.operation_not_attempted


def _coordinator(ctx: RequestContext) -> TransactionCoordinator:
    return ctx.services.transactions


def as_version_knows(ctx: RequestContext, error: ErrorCode, since: int) -> ErrorCode:
    """PRODUCER_FENCED came with version ``since`` of the API; older clients get
    INVALID_PRODUCER_EPOCH for it, as Kafka answers them."""
    if error == ErrorCode.producer_fenced and ctx.version < since:
        return ErrorCode.invalid_producer_epoch
    return error


def _partition_results(partitions: list[TopicPartition], errors: dict[TopicPartition, ErrorCode],
                       ) -> list[dict[str, Any]]:
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for tp in partitions:
        by_topic.setdefault(tp[0], []).append(
            {"partition_index": tp[1], "partition_error_code": errors[tp]})
    return [{"name": topic, "results_by_partition": results}
            for topic, results in by_topic.items()]


def _refused_partitions(ctx: RequestContext, transactional_id: str,
                        partitions: list[TopicPartition]) -> dict[TopicPartition, ErrorCode]:
    """A client's AddPartitionsToTxn as Kafka authorizes it: WRITE on the transactional id
    (else every partition TRANSACTIONAL_ID_AUTHORIZATION_FAILED), WRITE on each topic; an
    internal topic is never added this way (AddOffsetsToTxn adds the group's). Empty: all
    allowed."""
    if not ctx.authorize(Operation.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id):
        return dict.fromkeys(partitions, ErrorCode.transactional_id_authorization_failed)
    denied = {topic for topic, _ in partitions if topic.startswith("__")
              or not ctx.authorize(Operation.WRITE, ResourceType.TOPIC, topic)}
    if not denied:
        return {}
    return {tp: ErrorCode.topic_authorization_failed if tp[0] in denied else _NOT_ATTEMPTED
            for tp in partitions}


async def _add_partitions(ctx: RequestContext, transactional_id: str, producer_id: int,
                          producer_epoch: int, topics: Any, verify_only: bool,
                          from_broker: bool = False) -> dict[TopicPartition, ErrorCode]:
    """One transaction's partitions, each with its error (Kafka's rules: unknown topics
    fail with UNKNOWN_TOPIC_OR_PARTITION and the rest are not attempted). ``from_broker``:
    a leader's request for a transaction.version 2 producer (the leader authorized it)."""
    partitions = [(t.name, p) for t in topics for p in t.partitions]
    if not verify_only and not from_broker and (
            refused := _refused_partitions(ctx, transactional_id, partitions)):
        return refused
    unknown = {tp for tp in partitions if ctx.services.store.partition(*tp) is None}
    if unknown:
        return {tp: ErrorCode.unknown_topic_or_partition if tp in unknown else _NOT_ATTEMPTED
                for tp in partitions}
    coordinator = _coordinator(ctx)
    if verify_only:
        return coordinator.verify_partitions(transactional_id, producer_id, producer_epoch,
                                             partitions)
    error = await coordinator.add_partitions(transactional_id, producer_id, producer_epoch,
                                             partitions, TV2 if from_broker else 0)
    return dict.fromkeys(partitions, error)


@handles(24, 0, 5)
async def handle_add_partitions_to_txn(ctx: RequestContext, request: Any) -> Any:
    if ctx.version < 4:  # a client's request: one transaction
        topics = request.v3_and_below_topics
        partitions = [(t.name, p) for t in topics for p in t.partitions]
        errors = await _add_partitions(
            ctx, request.v3_and_below_transactional_id, request.v3_and_below_producer_id,
            request.v3_and_below_producer_epoch, topics, verify_only=False)
        errors = {tp: as_version_knows(ctx, e, 2) for tp, e in errors.items()}
        return build_response(request, {
            "throttle_time": NO_TIMEOUT,
            "results_by_topic_v3_and_below": _partition_results(partitions, errors),
        })
    # v4+: the batched form brokers send to verify (KIP-890) or, for transaction.version 2
    # producers, to add (verify_only false), one result per transaction.
    if not ctx.authorize_cluster(Operation.CLUSTER_ACTION):
        return build_response(request, {
            "throttle_time": NO_TIMEOUT, "error_code": ErrorCode.cluster_authorization_failed,
            "results_by_transaction": []})
    results = []
    for txn in request.transactions:
        partitions = [(t.name, p) for t in txn.topics for p in t.partitions]
        errors = await _add_partitions(ctx, txn.transactional_id, txn.producer_id,
                                       txn.producer_epoch, txn.topics, txn.verify_only,
                                       from_broker=True)
        results.append({"transactional_id": txn.transactional_id,
                        "topic_results": _partition_results(partitions, errors)})
    return build_response(request, {"throttle_time": NO_TIMEOUT, "error_code": ErrorCode.none,
                                    "results_by_transaction": results})


@handles(25, 0, 4)
async def handle_add_offsets_to_txn(ctx: RequestContext, request: Any) -> Any:
    if not ctx.authorize(Operation.WRITE, ResourceType.TRANSACTIONAL_ID,
                         request.transactional_id):
        return build_response(request, {
            "throttle_time": NO_TIMEOUT,
            "error_code": ErrorCode.transactional_id_authorization_failed})
    if not ctx.authorize(Operation.READ, ResourceType.GROUP, request.group_id):
        return build_response(request, {"throttle_time": NO_TIMEOUT,
                                        "error_code": ErrorCode.group_authorization_failed})
    error = await _coordinator(ctx).add_offsets(
        request.transactional_id, request.producer_id, request.producer_epoch,
        request.group_id, ctx.services.groups.partitions)
    return build_response(request, {"throttle_time": NO_TIMEOUT,
                                    "error_code": as_version_knows(ctx, error, 2)})


@handles(26, 0, 5)
async def handle_end_txn(ctx: RequestContext, request: Any) -> Any:
    decision = EndDecision(ErrorCode.transactional_id_authorization_failed)
    if ctx.authorize(Operation.WRITE, ResourceType.TRANSACTIONAL_ID, request.transactional_id):
        decision = await _coordinator(ctx).end_transaction(
            request.transactional_id, request.producer_id, request.producer_epoch,
            request.committed, bump=ctx.version >= 5)
    values: dict[str, Any] = {"throttle_time": NO_TIMEOUT,
                              "error_code": as_version_knows(ctx, decision.error, 2)}
    if ctx.version >= 5:  # the producer's id and epoch from now on
        values.update(producer_id=decision.producer_id, producer_epoch=decision.producer_epoch)
    return build_response(request, values)


@handles(28, 0, 5)
async def handle_txn_offset_commit(ctx: RequestContext, request: Any) -> Any:
    services = ctx.services
    now = int(datetime.now(UTC).timestamp() * 1000)
    max_metadata = services.config["offset.metadata.max.bytes"]
    offsets: dict[tuple[str, int], OffsetValue] = {}
    errors: dict[tuple[str, int], ErrorCode] = {}
    refused = _refused_offset_commit(ctx, request)
    for topic in request.topics:
        topic_allowed = refused is None and ctx.authorize(
            Operation.READ, ResourceType.TOPIC, topic.name)
        for p in topic.partitions:
            tp = (topic.name, p.partition_index)
            metadata = p.committed_metadata or ""
            if refused is not None:
                errors[tp] = refused
            elif not topic_allowed:
                errors[tp] = ErrorCode.topic_authorization_failed
            elif services.store.partition(*tp) is None:
                errors[tp] = ErrorCode.unknown_topic_or_partition
            elif len(metadata.encode()) > max_metadata:
                errors[tp] = ErrorCode.offset_metadata_too_large
            else:
                epoch = getattr(p, "committed_leader_epoch", -1)
                offsets[tp] = OffsetValue(p.committed_offset, epoch, metadata, now)
    if offsets:
        errors.update(dict.fromkeys(offsets, await _commit_offsets(ctx, request, offsets)))
    return build_response(request, {
        "throttle_time": NO_TIMEOUT,
        "topics": [
            {"name": topic.name, "partitions": [
                {"partition_index": p.partition_index,
                 "error_code": errors[(topic.name, p.partition_index)]}
                for p in topic.partitions]}
            for topic in request.topics
        ],
    })


def _refused_offset_commit(ctx: RequestContext, request: Any) -> ErrorCode | None:
    """TxnOffsetCommit needs WRITE on the transactional id and READ on the group; either
    refused refuses every partition, as in Kafka."""
    if not ctx.authorize(Operation.WRITE, ResourceType.TRANSACTIONAL_ID,
                         request.transactional_id):
        return ErrorCode.transactional_id_authorization_failed
    if not ctx.authorize(Operation.READ, ResourceType.GROUP, request.group_id):
        return ErrorCode.group_authorization_failed
    return None


async def _commit_offsets(ctx: RequestContext, request: Any,
                          offsets: dict[tuple[str, int], OffsetValue]) -> ErrorCode:
    groups = ctx.services.groups
    if not groups.owns(request.group_id):
        return ErrorCode.not_coordinator
    error, guard = await _verify_offsets_partition(ctx, request)
    if error != ErrorCode.none:
        return error
    error = groups.txn_commit_offsets(
        request.group_id, request.producer_id, request.producer_epoch,
        getattr(request, "generation_id", -1), getattr(request, "member_id", ""),
        getattr(request, "group_instance_id", None), offsets, guard)
    if error != ErrorCode.none:
        return error
    timeout = ctx.services.config["offsets.commit.timeout.ms"] / 1000
    return await groups.await_replication(request.group_id, timeout)


async def _verify_offsets_partition(ctx: RequestContext, request: Any
                                    ) -> tuple[ErrorCode, VerificationGuard | None]:
    """KIP-890 for offsets: the group's partition of ``__consumer_offsets`` must be in the
    producer's open transaction (AddOffsetsToTxn), or a late TxnOffsetCommit would open a
    transaction there that no marker ends, and OffsetFetch with require_stable would
    answer UNSTABLE_OFFSET_COMMIT forever. From v5 (transaction.version 2) the coordinator
    is asked to add it instead, which the producer no longer does."""
    services = ctx.services
    transactional_id = getattr(request, "transactional_id", None)
    if not transactional_id or (ctx.version < 5 and not services.config[
            "transaction.partition.verification.enable"]):
        return ErrorCode.none, None
    index = services.groups.partition_of(request.group_id)
    partition = services.replicas.get(ot.TOPIC, index)
    if not needs_verification(partition, request.producer_id, request.producer_epoch):
        return ErrorCode.none, NOT_VERIFIED
    assert partition is not None
    # Before the question: a marker written while it is out voids it (see Partition.append),
    # unless it is an add, answered only after the previous transaction's markers (produce.py).
    add = ctx.version >= 5
    guard = partition.log.producer_state.start_verification(
        request.producer_id, request.producer_epoch, voidable=not add)
    guard = None if add else guard
    answers = await services.verifier.verify(transactional_id, request.producer_id,
                                             request.producer_epoch, [(ot.TOPIC, index)],
                                             add=add)
    return as_offset_commit_error(answers[(ot.TOPIC, index)]), guard


@handles(27, 1, 2)
async def handle_write_txn_markers(ctx: RequestContext, request: Any) -> Any:
    """A coordinator's markers, written by this broker as the partitions' leader. The
    offsets a transaction committed for a group take effect as its marker reaches the
    group's partition of ``__consumer_offsets``. Appends happen before the first await,
    then each waits until its ISR holds it (acks=all, as Kafka appends markers)."""
    replicas = ctx.services.replicas
    timeout = ctx.services.config["request.timeout.ms"] / 1000
    waits: list[tuple[int, str, int, Partition, int]] = []
    results: dict[tuple[int, str, int], ErrorCode] = {}
    if not (ctx.authorize_cluster(Operation.ALTER, log_denied=False)
            or ctx.authorize_cluster(Operation.CLUSTER_ACTION)):
        return build_response(request, {"markers": [
            {"producer_id": marker.producer_id, "topics": [
                {"name": topic.name, "partitions": [
                    {"partition_index": index,
                     "error_code": ErrorCode.cluster_authorization_failed}
                    for index in topic.partition_indexes]}
                for topic in marker.topics]}
            for marker in request.markers]})
    for m, marker in enumerate(request.markers):
        for topic in marker.topics:
            for index in topic.partition_indexes:
                partition, error = replicas.leader_for(topic.name, index)
                if partition is None:
                    results[(m, topic.name, index)] = error
                    continue
                outcome = partition.append_marker(marker.producer_id, marker.producer_epoch,
                                                  marker.transaction_result,
                                                  marker.coordinator_epoch,
                                                  getattr(marker, "transaction_version", 0))
                results[(m, topic.name, index)] = outcome.error
                if outcome.error != ErrorCode.none:
                    continue
                if topic.name == ot.TOPIC:
                    ctx.services.groups.complete_transaction(
                        index, marker.producer_id, marker.transaction_result)
                waits.append((m, topic.name, index, partition, outcome.last_offset))
    done = await asyncio.gather(*(p.wait_committed(last, p.log.config.min_insync_replicas,
                                                   timeout)
                                  for _, _, _, p, last in waits))
    for (m, name, index, _, _), error in zip(waits, done, strict=True):
        results[(m, name, index)] = error
    return build_response(request, {"markers": [
        {"producer_id": marker.producer_id, "topics": [
            {"name": topic.name, "partitions": [
                {"partition_index": index, "error_code": results[(m, topic.name, index)]}
                for index in topic.partition_indexes]}
            for topic in marker.topics]}
        for m, marker in enumerate(request.markers)
    ]})


def _describe(ctx: RequestContext, transactional_id: str) -> dict[str, Any]:
    found: TxnMetadata | ErrorCode = ErrorCode.transactional_id_authorization_failed
    if ctx.authorize(Operation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, transactional_id):
        found = _coordinator(ctx).describe(transactional_id)
    if isinstance(found, ErrorCode):
        return {"error_code": found, "transactional_id": transactional_id,
                "transaction_state": "", "transaction_timeout": NO_TIMEOUT,
                "transaction_start_time": _instant(0),
                "producer_id": -1, "producer_epoch": -1, "topics": []}
    record = found.record
    by_topic: dict[str, list[int]] = {}
    for topic, index in sorted(record.partitions):
        if ctx.authorize(Operation.DESCRIBE, ResourceType.TOPIC, topic, log_denied=False):
            by_topic.setdefault(topic, []).append(index)
    return {
        "error_code": ErrorCode.none, "transactional_id": transactional_id,
        "transaction_state": found.state.label,
        "transaction_timeout": timedelta(milliseconds=record.timeout_ms),
        "transaction_start_time": _instant(record.start_ms),
        "producer_id": record.producer_id, "producer_epoch": record.producer_epoch,
        "topics": [{"topic": t, "partitions": ps} for t, ps in by_topic.items()],
    }


def _instant(ms: int) -> datetime:
    """kio's datetime for an int64 of milliseconds; -1 (no transaction open) included."""
    return datetime.fromtimestamp(0, UTC) + timedelta(milliseconds=ms)


@handles(65, 0, 0)
async def handle_describe_transactions(ctx: RequestContext, request: Any) -> Any:
    return build_response(request, {
        "throttle_time": NO_TIMEOUT,
        "transaction_states": [_describe(ctx, t) for t in request.transactional_ids],
    })


@handles(66, 0, 2)
async def handle_list_transactions(ctx: RequestContext, request: Any) -> Any:
    states = set(request.state_filters)
    known = {s.label for s in TxnState}
    unknown = sorted(states - known)
    pattern = getattr(request, "transactional_id_pattern", None)
    error = ErrorCode.none
    matches = _match_all
    if pattern:
        try:
            compiled = re.compile(pattern)
            matches = lambda txn_id: compiled.fullmatch(txn_id) is not None  # noqa: E731
        except re.error:
            error = ErrorCode.invalid_request
    if ctx.services.authorizer.enabled:  # ids the principal may not describe: unlisted
        wanted = matches
        matches = lambda txn_id: wanted(txn_id) and ctx.authorize(  # noqa: E731
            Operation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, txn_id, log_denied=False)
    found: list[TxnMetadata] = [] if error != ErrorCode.none else _coordinator(ctx).list(
        states & known, set(request.producer_id_filters),
        getattr(request, "duration_filter", -1), matches)
    if states and not states & known:
        found = []
    return build_response(request, {
        "throttle_time": NO_TIMEOUT, "error_code": error, "unknown_state_filters": unknown,
        "transaction_states": [
            {"transactional_id": m.transactional_id, "producer_id": m.record.producer_id,
             "transaction_state": m.state.label} for m in found],
    })


def _match_all(_: str) -> bool:
    return True
