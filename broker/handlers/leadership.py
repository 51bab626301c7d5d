"""ElectLeaders, AlterPartitionReassignments and ListPartitionReassignments.

Each is one compare-and-set on the cluster image, built from the controller's pure
functions, so it is safe from any broker (ZooKeeper-era Kafka let every broker write these
requests for the controller too). A reassignment only starts here: the replicas to add join
as followers, and the controller completes it once they are all in the ISR (KIP-455).

All three are cluster operations in Kafka (ALTER, ALTER, DESCRIBE on the cluster); without
the permission the whole request is refused with CLUSTER_AUTHORIZATION_FAILED, at the top
and on every partition it names, as each request's error response puts it.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import timedelta
from typing import Any

from kio.schema.errors import ErrorCode

from broker.cluster.image import ClusterImage
from broker.cluster.metadata import ConcurrentUpdate
from broker.controller.elections import choose_leader
from broker.controller.topic_changes import (
    Outcome,
    Reassignment,
    TopicChangeError,
    apply_reassignments,
)
from broker.handlers import handles
from broker.handlers.context import RequestContext
from broker.protocol.messages import build_response
from broker.security.acl import Operation
from kafkube_contract.image import NO_LEADER, PartitionState

NO_THROTTLE = timedelta(0)
PREFERRED, UNCLEAN = 0, 1
DENIED = ErrorCode.cluster_authorization_failed


def _elect(state: PartitionState | None, election_type: int, live: set[int]) -> PartitionState:
    """The partition after the election; TopicChangeError with Kafka's error for it if none."""
    if state is None:
        raise TopicChangeError(ErrorCode.unknown_topic_or_partition,
                               "This server does not host this topic-partition.")
    if election_type == PREFERRED:
        preferred = state.preferred_leader
        if state.leader == preferred:
            raise TopicChangeError(ErrorCode.election_not_needed,
                                   "Leader election not needed for topic partition.")
        if preferred not in live or preferred not in state.isr:
            raise TopicChangeError(ErrorCode.preferred_leader_not_available,
                                   f"Failed to elect leader for partition. Preferred replica "
                                   f"{preferred} is not live or not in the ISR {list(state.isr)}.")
        return state.with_leader(preferred)
    if state.leader != NO_LEADER and state.leader in live:
        raise TopicChangeError(ErrorCode.election_not_needed,
                               "Leader election not needed for topic partition.")
    leader = choose_leader(state, live, unclean=True)
    if leader == NO_LEADER:
        raise TopicChangeError(ErrorCode.eligible_leaders_not_available,
                               "Failed to elect leader for partition: no live replica.")
    isr = state.isr if leader in state.isr else (leader,)
    return state.with_leader(leader, isr)


def _requested(image: ClusterImage, topics: Iterable[Any] | None) -> list[tuple[str, int]]:
    if topics is None:
        return [(name, i) for name, t in sorted(image.topics.items())
                for i in range(t.partitions)]
    return [(t.topic, p) for t in topics for p in t.partitions]


@handles(43, 0, 2)
async def elect_leaders(ctx: RequestContext, request: Any) -> Any:
    if not ctx.authorize_cluster(Operation.ALTER):
        message = ctx.not_authorized()
        return build_response(request, {
            "throttle_time": NO_THROTTLE, "error_code": DENIED,
            "replica_election_results": [
                {"topic": t.topic, "partition_result": [
                    {"partition_id": p, "error_code": DENIED, "error_message": message}
                    for p in t.partitions]}
                for t in request.topic_partitions or ()
            ],
        })
    election_type = getattr(request, "election_type", PREFERRED)
    store = ctx.services.store
    results: dict[tuple[str, int], tuple[ErrorCode, str | None]] = {}
    everything = request.topic_partitions is None

    def change(image: ClusterImage) -> ClusterImage | None:
        results.clear()
        live = set(store.live_brokers())
        out = image
        for topic, index in _requested(image, request.topic_partitions):
            try:
                state = _elect(image.partition(topic, index), election_type, live)
            except TopicChangeError as e:
                results[(topic, index)] = (e.code, e.message)
                continue
            out = out.with_partition(topic, index, state)
            results[(topic, index)] = (ErrorCode.none, None)
        return out if out is not image else None

    try:
        await store.update(change)
    except ConcurrentUpdate as e:
        return build_response(request, {"throttle_time": NO_THROTTLE,
                                        "error_code": ErrorCode.request_timed_out,
                                        "replica_election_results": [], "message": str(e)})
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for (topic, index), (code, message) in results.items():
        if everything and code == ErrorCode.election_not_needed:
            continue  # Kafka reports only the partitions it acted on when asked for all
        by_topic.setdefault(topic, []).append(
            {"partition_id": index, "error_code": code, "error_message": message}
        )
    return build_response(request, {
        "throttle_time": NO_THROTTLE,
        "error_code": ErrorCode.none,
        "replica_election_results": [
            {"topic": t, "partition_result": ps} for t, ps in by_topic.items()
        ],
    })


@handles(45, 0, 0)
async def alter_partition_reassignments(ctx: RequestContext, request: Any) -> Any:
    if not ctx.authorize_cluster(Operation.ALTER):
        message = ctx.not_authorized()
        return build_response(request, {
            "throttle_time": NO_THROTTLE, "error_code": DENIED, "error_message": message,
            "responses": [
                {"name": t.name, "partitions": [
                    {"partition_index": p.partition_index, "error_code": DENIED,
                     "error_message": message}
                    for p in t.partitions]}
                for t in request.topics
            ],
        })
    store = ctx.services.store
    reassignments = [
        Reassignment(topic.name, p.partition_index,
                     None if p.replicas is None else tuple(p.replicas))
        for topic in request.topics for p in topic.partitions
    ]
    results: dict[tuple[str, int], Outcome] = {}

    def change(image: ClusterImage) -> ClusterImage | None:
        decided = apply_reassignments(image, reassignments, store.live_brokers())
        results.clear()
        results.update(decided.outcomes)
        return decided.image

    try:
        await store.update(change)
    except ConcurrentUpdate as e:
        return build_response(request, {"throttle_time": NO_THROTTLE,
                                        "error_code": ErrorCode.request_timed_out,
                                        "error_message": str(e), "responses": []})
    return build_response(request, {
        "throttle_time": NO_THROTTLE,
        "error_code": ErrorCode.none,
        "error_message": None,
        "responses": [
            {"name": topic.name, "partitions": [
                {"partition_index": p.partition_index,
                 "error_code": results[(topic.name, p.partition_index)].code,
                 "error_message": results[(topic.name, p.partition_index)].message}
                for p in topic.partitions
            ]}
            for topic in request.topics
        ],
    })


@handles(46, 0, 0)
async def list_partition_reassignments(ctx: RequestContext, request: Any) -> Any:
    if not ctx.authorize_cluster(Operation.DESCRIBE):
        return build_response(request, {
            "throttle_time": NO_THROTTLE, "error_code": DENIED,
            "error_message": ctx.not_authorized(),
            "topics": [
                {"name": t.name, "partitions": [
                    {"partition_index": i, "replicas": [], "adding_replicas": [],
                     "removing_replicas": []}
                    for i in t.partition_indexes]}
                for t in request.topics or ()
            ],
        })
    image = ctx.services.store.image
    if request.topics is None:
        wanted = [(name, i) for name, t in sorted(image.topics.items())
                  for i in range(t.partitions)]
    else:
        wanted = [(t.name, i) for t in request.topics for i in t.partition_indexes]
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for topic, index in wanted:
        state = image.partition(topic, index)
        if state is None or not (state.adding or state.removing):
            continue
        by_topic.setdefault(topic, []).append({
            "partition_index": index, "replicas": list(state.replicas),
            "adding_replicas": list(state.adding), "removing_replicas": list(state.removing),
        })
    return build_response(request, {
        "throttle_time": NO_THROTTLE, "error_code": ErrorCode.none, "error_message": None,
        "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()],
    })
