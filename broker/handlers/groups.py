"""Group APIs of the classic protocol: find the coordinator, join, sync, heartbeat, leave,
commit and fetch offsets, describe, list and delete groups.

Thin: each handler maps its request (every version) onto the GroupCoordinator and its
answer back onto the response. A group's coordinator is the leader of its partition of
``__consumer_offsets``; a broker that is not answers NOT_COORDINATOR, and clients ask
FindCoordinator again.

Authorization comes first, as in KafkaApis: a principal without the group's permission is
refused with GROUP_AUTHORIZATION_FAILED whichever broker it asks and whether the group
exists or not, and sees offsets only of topics it may describe.
"""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

from kio.schema.errors import ErrorCode

from broker.cluster.internal_topics import partition_for
from broker.coordinator import offsets_topic as ot
from broker.coordinator import transaction_log as txn_log
from broker.coordinator.group import GroupState
from broker.coordinator.group_coordinator import MAX_NAME_BYTES, GroupCoordinator
from broker.coordinator.offsets_topic import OffsetValue
from broker.handlers import handles
from broker.handlers.context import DENIED_MESSAGES, RequestContext, cooperatively
from broker.protocol.messages import build_long_response, build_response
from broker.security.acl import OPERATIONS_OMITTED, Operation, ResourceType
from broker.share.share_admin import ShareGroupAdmin

KEY_TYPE_GROUP = 0
KEY_TYPE_TRANSACTION = 1
NO_TIMEOUT = timedelta(0)


def coordinator_of(ctx: RequestContext) -> GroupCoordinator:
    return ctx.services.groups


def not_ours(ctx: RequestContext, group_id: str | None) -> bool:
    """Another broker coordinates this group. An invalid group id (empty, too long) is
    nobody's: the coordinator refuses it with INVALID_GROUP_ID, as Kafka checks it first."""
    return (bool(group_id) and len(group_id.encode()) <= MAX_NAME_BYTES
            and not coordinator_of(ctx).owns(group_id))


def may(ctx: RequestContext, operation: Operation, group_id: str) -> bool:
    return ctx.authorize(operation, ResourceType.GROUP, group_id)


def _ms(value: timedelta | int) -> int:
    return int(value.total_seconds() * 1000) if isinstance(value, timedelta) else int(value)


@handles(10, 0, 4)
async def handle_find_coordinator(ctx: RequestContext, request: Any) -> Any:
    key_type = getattr(request, "key_type", KEY_TYPE_GROUP)
    keys = getattr(request, "coordinator_keys", None)
    if keys is None:
        keys = (request.key,)

    async def answer(key: str) -> dict[str, Any]:
        if key_type not in (KEY_TYPE_GROUP, KEY_TYPE_TRANSACTION):
            return {"key": key, "error_code": ErrorCode.invalid_request, "node_id": -1,
                    "host": "", "port": -1,
                    "error_message": f"unknown coordinator key type {key_type}"}
        what = "group id" if key_type == KEY_TYPE_GROUP else "transactional id"
        resource, denied = (
            (ResourceType.GROUP, ErrorCode.group_authorization_failed)
            if key_type == KEY_TYPE_GROUP else
            (ResourceType.TRANSACTIONAL_ID, ErrorCode.transactional_id_authorization_failed))
        if not ctx.authorize(Operation.DESCRIBE, resource, key):
            return {"key": key, "error_code": denied, "node_id": -1, "host": "", "port": -1,
                    "error_message": DENIED_MESSAGES[denied]}
        if not key or len(key) > MAX_NAME_BYTES or len(key.encode()) > MAX_NAME_BYTES:
            problem = "empty" if not key else f"longer than {MAX_NAME_BYTES} bytes"
            error = ErrorCode.invalid_group_id if key_type == KEY_TYPE_GROUP else (
                ErrorCode.invalid_request)
            return {"key": key, "error_code": error, "node_id": -1,
                    "host": "", "port": -1, "error_message": f"the {what} is {problem}"}
        services = ctx.services
        if key_type == KEY_TYPE_GROUP:
            coordinator = coordinator_of(ctx)
            await coordinator.ensure_offsets_topic()
            state = services.store.partition(ot.TOPIC,
                                             partition_for(key, coordinator.partitions))
        else:
            transactions = services.transactions
            await transactions.ensure_topic()
            state = services.store.partition(txn_log.TOPIC, transactions.partition_of(key))
        node = state.leader if state is not None else -1
        endpoint = ctx.broker_endpoint(node) if node >= 0 else None
        if endpoint is None:
            return {"key": key, "error_code": ErrorCode.coordinator_not_available,
                    "node_id": -1, "host": "", "port": -1,
                    "error_message": f"the {what}'s partition has no live leader"}
        return {"key": key, "error_code": ErrorCode.none, "node_id": node,
                "host": endpoint.host, "port": endpoint.port, "error_message": None}

    known: dict[str, dict[str, Any]] = {}  # a key asked for again gets the same answer
    answers = []
    async for k in cooperatively(keys):
        if k not in known:
            known[k] = await answer(k)
        answers.append(known[k])
    if ctx.version >= 4:
        return await build_long_response(
            request, {"throttle_time": NO_TIMEOUT, "coordinators": answers}, len(answers))
    return build_response(request, {"throttle_time": NO_TIMEOUT, **answers[0]})


@handles(11, 0, 9)
async def handle_join_group(ctx: RequestContext, request: Any) -> Any:
    if not may(ctx, Operation.READ, request.group_id):
        return build_response(request, {
            "throttle_time": NO_TIMEOUT, "error_code": ErrorCode.group_authorization_failed,
            "generation_id": -1, "protocol_name": None if ctx.version >= 7 else "",
            "leader": "", "member_id": "", "members": [],
        })
    if not_ours(ctx, request.group_id):
        return build_response(request, {
            "throttle_time": NO_TIMEOUT, "error_code": ErrorCode.not_coordinator,
            "generation_id": -1, "protocol_name": "", "leader": "", "member_id": "",
            "members": [],
        })
    session_ms = _ms(request.session_timeout)
    rebalance_ms = _ms(getattr(request, "rebalance_timeout", request.session_timeout))
    result = await coordinator_of(ctx).join_group(
        request.group_id, request.member_id, getattr(request, "group_instance_id", None),
        ctx.header.client_id or "", ctx.client_host, session_ms, rebalance_ms,
        request.protocol_type, [(p.name, p.metadata) for p in request.protocols],
        require_known_member=ctx.version >= 4,
    )
    return build_response(request, {
        "throttle_time": NO_TIMEOUT,
        "error_code": result.error,
        "generation_id": result.generation,
        "protocol_type": result.protocol_type,
        "protocol_name": result.protocol if ctx.version >= 7 or result.protocol else "",
        "leader": result.leader,
        "skip_assignment": result.skip_assignment,
        "member_id": result.member_id,
        # Before v9 a client cannot be told to skip the assignment, so it gets no members.
        "members": [
            {"member_id": m, "group_instance_id": i, "metadata": meta}
            for m, i, meta in result.members
        ] if ctx.version >= 9 or not result.skip_assignment else [],
    })


@handles(14, 0, 5)
async def handle_sync_group(ctx: RequestContext, request: Any) -> Any:
    if not may(ctx, Operation.READ, request.group_id):
        return build_response(request, {"throttle_time": NO_TIMEOUT,
                                        "error_code": ErrorCode.group_authorization_failed,
                                        "assignment": b""})
    if not_ours(ctx, request.group_id):
        return build_response(request, {"throttle_time": NO_TIMEOUT,
                                        "error_code": ErrorCode.not_coordinator,
                                        "assignment": b""})
    result = await coordinator_of(ctx).sync_group(
        request.group_id, request.generation_id, request.member_id,
        getattr(request, "group_instance_id", None), getattr(request, "protocol_type", None),
        getattr(request, "protocol_name", None),
        {a.member_id: a.assignment for a in request.assignments},
    )
    return build_response(request, {
        "throttle_time": NO_TIMEOUT, "error_code": result.error, "assignment": result.assignment,
        "protocol_type": result.protocol_type, "protocol_name": result.protocol,
    })


@handles(12, 0, 4)
async def handle_heartbeat(ctx: RequestContext, request: Any) -> Any:
    if not may(ctx, Operation.READ, request.group_id):
        return build_response(request, {"throttle_time": NO_TIMEOUT,
                                        "error_code": ErrorCode.group_authorization_failed})
    if not_ours(ctx, request.group_id):
        return build_response(request, {"throttle_time": NO_TIMEOUT,
                                        "error_code": ErrorCode.not_coordinator})
    error = coordinator_of(ctx).heartbeat(
        request.group_id, request.generation_id, request.member_id,
        getattr(request, "group_instance_id", None),
    )
    return build_response(request, {"throttle_time": NO_TIMEOUT, "error_code": error})


@handles(13, 0, 5)
async def handle_leave_group(ctx: RequestContext, request: Any) -> Any:
    if not may(ctx, Operation.READ, request.group_id):
        return build_response(request, {"throttle_time": NO_TIMEOUT,
                                        "error_code": ErrorCode.group_authorization_failed,
                                        "members": []})
    if not_ours(ctx, request.group_id):
        return build_response(request, {"throttle_time": NO_TIMEOUT,
                                        "error_code": ErrorCode.not_coordinator, "members": []})
    members = getattr(request, "members", None)
    identities = (
        [(m.member_id, m.group_instance_id) for m in members]
        if members is not None else [(request.member_id, None)]
    )
    error, results = coordinator_of(ctx).leave_group(request.group_id, identities)
    if members is None and results:
        error = results[0][2]  # v0-2: one member, its error is the response's
    return build_response(request, {
        "throttle_time": NO_TIMEOUT, "error_code": error,
        "members": [
            {"member_id": m, "group_instance_id": i, "error_code": e} for m, i, e in results
        ],
    })


@handles(8, 2, 9)
async def handle_offset_commit(ctx: RequestContext, request: Any) -> Any:
    """READ on the group, else every partition is refused; then READ on each topic."""
    services = ctx.services
    now = int(time.time() * 1000)
    max_metadata = services.config["offset.metadata.max.bytes"]
    offsets: dict[tuple[str, int], OffsetValue] = {}
    errors: dict[tuple[str, int], ErrorCode] = {}
    group_allowed = may(ctx, Operation.READ, request.group_id)
    readable = ctx.authorized_names(Operation.READ, ResourceType.TOPIC,
                                (t.name for t in request.topics)) if group_allowed else set()
    for topic in request.topics:
        for p in topic.partitions:
            tp = (topic.name, p.partition_index)
            metadata = p.committed_metadata or ""
            if not group_allowed:
                errors[tp] = ErrorCode.group_authorization_failed
            elif topic.name not in readable:
                errors[tp] = ErrorCode.topic_authorization_failed
            elif services.store.partition(*tp) is None:  # Kafka: the topic must exist
                errors[tp] = ErrorCode.unknown_topic_or_partition
            elif len(metadata.encode()) > max_metadata:
                errors[tp] = ErrorCode.offset_metadata_too_large
            else:
                epoch = getattr(p, "committed_leader_epoch", -1)
                offsets[tp] = OffsetValue(p.committed_offset, epoch, metadata, now)
    if offsets:
        # Old clients commit for the empty group id without asking for a coordinator.
        await coordinator_of(ctx).ensure_offsets_topic()
    if offsets and not_ours(ctx, request.group_id):
        errors.update({tp: ErrorCode.not_coordinator for tp in offsets})
    elif offsets:
        coordinator = coordinator_of(ctx)
        error = coordinator.commit_offsets(
            request.group_id, request.generation_id_or_member_epoch, request.member_id,
            getattr(request, "group_instance_id", None), offsets,
        )
        if error == ErrorCode.none:
            timeout = services.config["offsets.commit.timeout.ms"] / 1000
            error = await coordinator.await_replication(request.group_id, timeout)
        errors.update({tp: error for tp in offsets})
    return build_response(request, {
        "throttle_time": NO_TIMEOUT,
        "topics": [
            {"name": topic.name, "partitions": [
                {"partition_index": p.partition_index,
                 "error_code": errors[(topic.name, p.partition_index)]}
                for p in topic.partitions
            ]}
            for topic in request.topics
        ],
    })


def _fetch_group(
    ctx: RequestContext, group_id: str, topics: Any, require_stable: bool = False,
) -> list[dict[str, Any]]:
    """The topics part of an OffsetFetch answer for one group (None topics: all). With
    ``require_stable`` (KIP-447), a partition whose offset an open transaction is about to
    change answers UNSTABLE_OFFSET_COMMIT, and the consumer asks again.

    Offsets are shown only of topics the principal may describe: a named topic it may not
    is answered TOPIC_AUTHORIZATION_FAILED (after the others, as Kafka lists it); with all
    topics asked for, such topics are left out."""
    coordinator = coordinator_of(ctx)
    if topics is None:
        found = coordinator.fetch_offsets(group_id, None)
        describable = ctx.authorized_names(Operation.DESCRIBE, ResourceType.TOPIC,
                                       (topic for topic, _ in found))
        denied = []
    else:
        describable = ctx.authorized_names(Operation.DESCRIBE, ResourceType.TOPIC,
                                       (t.name for t in topics))
        denied = [t for t in topics if t.name not in describable]
        found = coordinator.fetch_offsets(group_id, [
            (t.name, p) for t in topics if t.name in describable for p in t.partition_indexes])
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for (topic, partition), value in found.items():
        if topic not in describable:
            continue
        if require_stable and coordinator.has_pending_offsets(group_id, (topic, partition)):
            by_topic.setdefault(topic, []).append({
                "partition_index": partition, "committed_offset": -1,
                "committed_leader_epoch": -1, "metadata": "",
                "error_code": ErrorCode.unstable_offset_commit})
            continue
        by_topic.setdefault(topic, []).append({
            "partition_index": partition,
            "committed_offset": value.offset if value else -1,
            "committed_leader_epoch": value.leader_epoch if value else -1,
            "metadata": value.metadata if value else "",
            "error_code": ErrorCode.none,
        })
    for t in denied:
        by_topic.setdefault(t.name, []).extend(
            {"partition_index": p, "committed_offset": -1, "committed_leader_epoch": -1,
             "metadata": "", "error_code": ErrorCode.topic_authorization_failed}
            for p in t.partition_indexes)
    return [{"name": t, "partitions": ps} for t, ps in by_topic.items()]


def _fetch_group_answer(ctx: RequestContext, group_id: str, topics: Any,
                        require_stable: bool, member: tuple[str | None, int] = (None, -1),
                        ) -> dict[str, Any]:
    """One group's OffsetFetch answer: DESCRIBE on the group first, then its coordinator.
    A KIP-848 member (v9: ``member`` is its id and epoch) is checked as for a commit."""
    if not may(ctx, Operation.DESCRIBE, group_id):
        return {"group_id": group_id, "topics": [],
                "error_code": ErrorCode.group_authorization_failed}
    if not_ours(ctx, group_id):
        return {"group_id": group_id, "topics": [], "error_code": ErrorCode.not_coordinator}
    refused = coordinator_of(ctx).consumer_fetch_error(group_id, *member)
    if refused is not None:
        return {"group_id": group_id, "topics": [], "error_code": refused}
    return {"group_id": group_id, "topics": _fetch_group(ctx, group_id, topics, require_stable),
            "error_code": ErrorCode.none}


@handles(9, 1, 9)
async def handle_offset_fetch(ctx: RequestContext, request: Any) -> Any:
    stable = getattr(request, "require_stable", False)
    groups = getattr(request, "groups", None)
    if groups is not None:  # v8+: several groups in one request
        return build_response(request, {
            "throttle_time": NO_TIMEOUT,
            "groups": [_fetch_group_answer(ctx, g.group_id, g.topics, stable,
                                           (getattr(g, "member_id", None),
                                            getattr(g, "member_epoch", -1)))
                       for g in groups],
        })
    # The empty group id is served too, as Kafka does for old clients. Before v2 the
    # response has no error field: a refused group is an empty answer, as in Kafka.
    answer = _fetch_group_answer(ctx, request.group_id, request.topics, stable)
    return build_response(request, {"throttle_time": NO_TIMEOUT, "topics": answer["topics"],
                                    "error_code": answer["error_code"]})


def _group_error(group_id: str, error: ErrorCode) -> dict[str, Any]:
    return {
        "error_code": error, "group_id": group_id,
        "group_state": "", "protocol_type": "", "protocol_data": "", "members": [],
        "authorized_operations": OPERATIONS_OMITTED,
    }


def _describe_group(ctx: RequestContext, group_id: str, with_operations: bool
                    ) -> dict[str, Any]:
    """One group described: DESCRIBE on it first; with ``with_operations`` (v3+), a group
    described without error carries the operations the principal may perform on it."""
    if not may(ctx, Operation.DESCRIBE, group_id):
        return _group_error(group_id, ErrorCode.group_authorization_failed)
    if not_ours(ctx, group_id):
        return _group_error(group_id, ErrorCode.not_coordinator)
    described = _group_description(ctx, group_id)
    if with_operations:
        described["authorized_operations"] = ctx.services.authorizer.authorized_operations(
            ctx.principal, ctx.client_host, ResourceType.GROUP, group_id)
    return described


def _group_description(ctx: RequestContext, group_id: str) -> dict[str, Any]:
    group = coordinator_of(ctx).describe(group_id)
    if group is None:
        return {
            "error_code": ErrorCode.none, "group_id": group_id, "group_state": "Dead",
            "protocol_type": "", "protocol_data": "", "members": [],
            "authorized_operations": OPERATIONS_OMITTED,
        }
    stable = group.is_(GroupState.STABLE)
    return {
        "error_code": ErrorCode.none,
        "group_id": group_id,
        "group_state": group.state.value,
        "protocol_type": group.protocol_type or "",
        "protocol_data": group.protocol or "" if stable else "",
        "members": [
            {"member_id": m.member_id, "group_instance_id": m.group_instance_id,
             "client_id": m.client_id, "client_host": m.client_host,
             "member_metadata": m.metadata_for(group.protocol) if stable else b"",
             "member_assignment": m.assignment if stable else b""}
            for m in group.members.values()
        ],
        "authorized_operations": OPERATIONS_OMITTED,
    }


@handles(15, 0, 5)
async def handle_describe_groups(ctx: RequestContext, request: Any) -> Any:
    with_operations = getattr(request, "include_authorized_operations", False)
    described: list[dict[str, Any]] = []
    known: dict[str, dict[str, Any]] = {}  # a group asked for again gets the same answer
    async for group_id in cooperatively(request.groups):
        if group_id not in known:
            known[group_id] = _describe_group(ctx, group_id, with_operations)
        described.append(known[group_id])
    return await build_long_response(
        request, {"throttle_time": NO_TIMEOUT, "groups": described}, len(described))


# ListGroups' types: a group of JoinGroup/SyncGroup members is "classic", a KIP-848 group
# (ConsumerGroupHeartbeat, classic members included while it migrates) "consumer".
GROUP_TYPE = "classic"
CONSUMER_GROUP_TYPE = "consumer"  # KIP-848
SHARE_GROUP_TYPE = "share"  # KIP-932


@handles(16, 0, 5)
async def handle_list_groups(ctx: RequestContext, request: Any) -> Any:
    """Filters as Kafka applies them, case-insensitively: states (v4+), types (v5+). A
    principal with DESCRIBE on the cluster sees every group, any other only the groups it
    may describe, the rest left out without an error (and unlogged, as Kafka filters)."""
    states = {s.lower() for s in getattr(request, "states_filter", ()) or ()}
    types = {t.lower() for t in getattr(request, "types_filter", ()) or ()}
    everything = ctx.authorize_cluster(Operation.DESCRIBE, log_denied=False)
    coordinator = coordinator_of(ctx)
    listed = [(g.group_id, g.protocol_type or "", g.state.value, GROUP_TYPE)
              for g in coordinator.list_groups()]
    listed += [(g.group_id, "consumer", g.state.value, CONSUMER_GROUP_TYPE)
               for g in coordinator.list_consumer_groups()]
    listed += [(g.group_id, SHARE_GROUP_TYPE, g.state.value, SHARE_GROUP_TYPE)
               for g in coordinator.list_share_groups()]
    groups = [
        {"group_id": group_id, "protocol_type": protocol_type, "group_state": state,
         "group_type": group_type}
        for group_id, protocol_type, state, group_type in listed
        if (not types or group_type in types) and (not states or state.lower() in states)
        and (everything or ctx.authorize(Operation.DESCRIBE, ResourceType.GROUP, group_id,
                                         log_denied=False))
    ]
    return build_response(request, {
        "throttle_time": NO_TIMEOUT, "error_code": ErrorCode.none, "groups": groups,
    })


@handles(42, 0, 2)
async def handle_delete_groups(ctx: RequestContext, request: Any) -> Any:
    """DELETE on each group, else GROUP_AUTHORIZATION_FAILED for it; the others deleted."""
    names = list(dict.fromkeys(request.groups_names))
    deletable = ctx.authorized_names(Operation.DELETE, ResourceType.GROUP, names)
    ours = [g for g in names if g in deletable and not not_ours(ctx, g)]
    coordinator = coordinator_of(ctx)
    shares = [g for g in ours if coordinator.describe_share_group(g) is not None]
    results = coordinator.delete_groups([g for g in ours if g not in shares])
    admin = ShareGroupAdmin(coordinator.shares, ctx.services.shares.persister,
                            ctx.services.store.topics,
                            lambda group_id: coordinator.delete_groups([group_id])[group_id])
    for group_id in shares:  # its delivery state first: if that cannot go, the group stays
        results[group_id] = await admin.delete_group(group_id)
    results.update({g: ErrorCode.not_coordinator for g in names
                    if g in deletable and not_ours(ctx, g)})
    results.update({g: ErrorCode.group_authorization_failed for g in names
                    if g not in deletable})
    return build_response(request, {
        "throttle_time": NO_TIMEOUT,
        "results": [{"group_id": g, "error_code": e} for g, e in results.items()],
    })


@handles(47, 0, 0)
async def handle_offset_delete(ctx: RequestContext, request: Any) -> Any:
    """DELETE on the group, else the whole request is refused; then READ (not DELETE, as
    in Kafka) on each topic, whose partitions are refused without it."""
    if not may(ctx, Operation.DELETE, request.group_id):
        return build_response(request, {"error_code": ErrorCode.group_authorization_failed,
                                        "throttle_time": NO_TIMEOUT, "topics": []})
    readable = ctx.authorized_names(Operation.READ, ResourceType.TOPIC,
                                (t.name for t in request.topics))
    partitions = [(t.name, p.partition_index) for t in request.topics if t.name in readable
                  for p in t.partitions]
    if not_ours(ctx, request.group_id):
        error, results = ErrorCode.not_coordinator, {}
    else:
        error, results = coordinator_of(ctx).delete_offsets(request.group_id, partitions)
    results.update({(t.name, p.partition_index): ErrorCode.topic_authorization_failed
                    for t in request.topics if t.name not in readable for p in t.partitions})
    return build_response(request, {
        "error_code": error,
        "throttle_time": NO_TIMEOUT,
        "topics": [
            {"name": t.name, "partitions": [
                {"partition_index": p.partition_index,
                 "error_code": results.get((t.name, p.partition_index), ErrorCode.none)}
                for p in t.partitions
            ]}
            for t in request.topics
        ] if error == ErrorCode.none else [],
    })
