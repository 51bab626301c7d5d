"""Admin APIs: CreateTopics, DeleteTopics, CreatePartitions, DescribeCluster.

A single broker is its own controller (controller id = node id), so topic changes are made
from here. The rules deciding them (checks, their order and Kafka's messages) are the
controller's, in ``broker/controller/topic_changes.py``, as Kafka keeps them in
ReplicationControlManager; these handlers only decode a request, authorize it, call those
rules and encode the answer. Configs live in ``configs.py``. No handler awaits: each change
is made before the handler returns.

Authorization is checked where ControllerApis checks it, before a topic's existence, so a
principal learns nothing of topics it may not describe (``ctx.authorized_names`` is the
filtering step Kafka's handlers share).
"""

from __future__ import annotations

import datetime
import functools
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from kio.schema.errors import ErrorCode

from broker.cluster.backend import ClusterImageTooLarge
from broker.cluster.metadata import ConcurrentUpdate
from broker.config.broker_config import BrokerConfig
from broker.controller.placement import PlacementError
from broker.controller.topic_changes import (
    DUPLICATE_NAME_MESSAGE,
    Deletion,
    ManualAssignment,
    NewTopic,
    PartitionsRequest,
    TopicChangeError,
    TopicDefaults,
    TopicRef,
    TopicRequest,
    added_partitions,
    batch_refusal,
    check_new_partitions,
    requested_partitions,
    resolve_deletions,
    validate_new_topic,
)
from broker.handlers import handles
from broker.handlers.configs import topic_value_source
from broker.handlers.context import BrokerServices, RequestContext
from broker.handlers.metadata import live_brokers
from broker.protocol.messages import build_response
from broker.security.acl import CLUSTER_NAME, OPERATIONS_OMITTED, Operation, ResourceType
from broker.server.topic_writes import InvalidPartitions, TopicExists
from kafkube_contract.broker_keys import TOPIC_KEYS
from kafkube_contract.image import TopicMetadata

NO_THROTTLE = datetime.timedelta(0)

# DescribeCluster v1 endpoint types (KIP-919).
BROKER_ENDPOINT = 1
CONTROLLER_ENDPOINT = 2
_ENDPOINT_NAMES = {BROKER_ENDPOINT: "BROKER", CONTROLLER_ENDPOINT: "CONTROLLER"}

DELETION_DISABLED_MESSAGE = "Topic deletion is disabled."
CREATE_DENIED_MESSAGE = "Authorization failed."  # CreateTopics' own (ControllerApis)


def _distinct_by_name(items: Iterable[Any]) -> list[Any]:
    """The first item of each name, in request order: a name gets one result."""
    first: dict[str, Any] = {}
    for item in items:
        first.setdefault(item.name, item)
    return list(first.values())


# -- CreateTopics -----------------------------------------------------------------------


def _topic_request(topic: Any) -> TopicRequest:
    """A CreateTopics topic as the controller rules take it."""
    return TopicRequest(
        topic.name, topic.num_partitions, topic.replication_factor,
        tuple((config.name, config.value) for config in topic.configs),
        tuple(ManualAssignment(a.partition_index, tuple(a.broker_ids))
              for a in topic.assignments or ()),
    )


def _created_configs(config: BrokerConfig, overrides: Mapping[str, str]) -> list[dict[str, Any]]:
    """The effective configs CreateTopics v5+ returns, sorted by name as Kafka does."""
    values = config.topic_values(overrides)
    return [
        {
            "name": name,
            "value": key.render(values[name]),
            "read_only": False,
            "config_source": topic_value_source(config, name, overrides),
            "is_sensitive": False,
        }
        for name, (key, _) in sorted(TOPIC_KEYS.items())
    ]


# KIP-599: a client over its controller_mutation_rate gets this for each topic it would change,
# from the first version of each request that knows the error (CreateTopics v6, DeleteTopics
# v5, CreatePartitions v3); older ones are served and throttled afterwards, as in Kafka.
THROTTLED = TopicChangeError(ErrorCode.throttling_quota_exceeded,
                             "The throttling quota has been exceeded.")
_STRICT_FROM = {19: 6, 20: 5, 37: 3}


def _over_mutation_quota(ctx: RequestContext) -> bool:
    """Whether the client's mutation quota refuses its next topic (its throttle noted)."""
    throttle = ctx.services.client_quotas.mutation_throttle(ctx.principal, ctx.client_id)
    ctx.throttle.add(throttle)
    return throttle > 0 and ctx.version >= _STRICT_FROM[ctx.header.api_key]


def _mutation_charge(ctx: RequestContext) -> Callable[[int], None]:
    """What charges the client's mutation quota with partitions created or deleted, and
    notes the throttle the charge leaves: the request that takes the bucket into debt is
    accepted and throttled (KIP-599), not only the next one."""
    return lambda count: ctx.throttle.add(ctx.services.client_quotas.record_mutations(
        ctx.principal, ctx.client_id, count))


def _creation_error(name: str, error: TopicChangeError) -> dict[str, Any]:
    return {
        "name": name,
        "topic_id": None,
        "error_code": error.code,
        "error_message": error.message,
        "num_partitions": -1,
        "replication_factor": -1,
        "configs": [],
    }


def _validated(services: BrokerServices, topic: TopicRequest) -> NewTopic | TopicChangeError:
    config = services.config
    try:
        return validate_new_topic(
            topic, services.store.topics,
            registered=services.store.live_brokers,
            usable=lambda: len(services.replicas.placement_brokers()),
            defaults=TopicDefaults(config["num.partitions"], config["default.replication.factor"]),
        )
    except TopicChangeError as e:
        return e


def _created(services: BrokerServices, new: NewTopic, topic_id: uuid.UUID | None,
             describable: bool) -> dict[str, Any]:
    """A topic created (or validated). Its configs, partitions and replication factor are
    returned only to a principal that may describe its configs; without that permission the
    topic is created all the same and ``topic_config_error_code`` says why they are missing,
    as ReplicationControlManager answers."""
    result: dict[str, Any] = {
        "name": new.name, "topic_id": topic_id, "error_code": ErrorCode.none,
        "error_message": None, "num_partitions": -1, "replication_factor": -1, "configs": [],
        "topic_config_error_code": ErrorCode.topic_authorization_failed,
    }
    if describable:
        result.update(num_partitions=new.partitions, replication_factor=new.replication_factor,
                      configs=_created_configs(services.config, new.configs),
                      topic_config_error_code=ErrorCode.none)
    return result


def _creation_refusal(name: str, error: Exception) -> TopicChangeError:
    if isinstance(error, TopicExists):
        return TopicChangeError(ErrorCode.topic_already_exists, f"Topic '{name}' already exists.")
    if isinstance(error, PlacementError):
        return TopicChangeError(ErrorCode.invalid_replication_factor, str(error))
    if isinstance(error, ClusterImageTooLarge):
        return TopicChangeError(ErrorCode.policy_violation, str(error))
    if isinstance(error, ConcurrentUpdate):  # the metadata busy or not to be trusted: retriable
        return TopicChangeError(ErrorCode.request_timed_out, str(error))
    raise error


async def _create_all(services: BrokerServices, batch: list[NewTopic]
                      ) -> list[TopicMetadata | Exception]:
    """The request's topics in one image write; where the image would outgrow its store
    (a ConfigMap's 1 MiB), in halves, so those that fit are made and only the rest refused
    (a write per topic would rewrite the largest image once per topic)."""
    if not batch:
        return []
    try:
        return await services.replicas.create_topics(batch)
    except ClusterImageTooLarge as e:
        if len(batch) == 1:
            return [e]
        half = len(batch) // 2
        return [*await _create_all(services, batch[:half]),
                *await _create_all(services, batch[half:])]
    except ConcurrentUpdate as e:
        return [e] * len(batch)


@handles(19, 2, 7)
async def create_topics(ctx: RequestContext, request: Any) -> Any:
    """CreateTopics: one result per distinct name, in request order.

    A name given twice is refused as a whole (ControllerApis does that before the controller
    sees the request), then each other name needs CREATE on the cluster or on the topic
    (TOPIC_AUTHORIZATION_FAILED, whether the topic exists or not). A request adding more
    than MAX_PARTITIONS_PER_BATCH partitions in the topics it may create is refused for
    every topic, as Kafka fails the whole request then. Each topic is checked, and charged
    to the client's mutation quota, in order (``applyPartitionChangeQuota``); those that
    pass are created in one write.
    """
    services = ctx.services
    counts = Counter(topic.name for topic in request.topics)
    topics = [_topic_request(topic) for topic in _distinct_by_name(request.topics)]
    singles = [topic.name for topic in topics if counts[topic.name] == 1]
    if ctx.authorize_cluster(Operation.CREATE, log_denied=False):
        creatable = set(singles)
    else:
        creatable = ctx.authorized_names(Operation.CREATE, ResourceType.TOPIC, singles)
    batch = [topic for topic in topics if topic.name in creatable]
    refusal = batch_refusal(requested_partitions(batch, services.config["num.partitions"]))
    if refusal is not None:
        results = [_creation_error(topic.name, refusal) for topic in topics]
        return build_response(request, {"throttle_time": NO_THROTTLE, "topics": results})
    describable = ctx.authorized_names(Operation.DESCRIBE_CONFIGS, ResourceType.TOPIC, singles,
                                   log_denied=False)
    duplicate = TopicChangeError(ErrorCode.invalid_request, DUPLICATE_NAME_MESSAGE)
    denied = TopicChangeError(ErrorCode.topic_authorization_failed, CREATE_DENIED_MESSAGE)
    charge = _mutation_charge(ctx)
    answers: dict[str, dict[str, Any]] = {}
    to_create: list[NewTopic] = []
    for topic in topics:
        checked = (duplicate if counts[topic.name] > 1 else denied
                   if topic.name not in creatable else THROTTLED
                   if _over_mutation_quota(ctx) else _validated(services, topic))
        if isinstance(checked, TopicChangeError):
            answers[topic.name] = _creation_error(topic.name, checked)
        elif request.validate_only:  # Kafka makes up an id that never exists; zero is honest
            answers[topic.name] = _created(services, checked, None, topic.name in describable)
        else:
            charge(checked.partitions)
            to_create.append(checked)
    for new, outcome in zip(to_create, await _create_all(services, to_create), strict=True):
        answers[new.name] = (
            _created(services, new, outcome.uuid, new.name in describable)
            if isinstance(outcome, TopicMetadata)
            else _creation_error(new.name, _creation_refusal(new.name, outcome)))
    results = [answers[topic.name] for topic in topics]
    return build_response(request, {"throttle_time": ctx.throttle_time, "topics": results})


# -- DeleteTopics -----------------------------------------------------------------------


def _deletion(result: Deletion) -> dict[str, Any]:
    return {"name": result.name, "topic_id": result.topic_id, "error_code": result.code,
            "error_message": result.message}


def _delete_refs(request: Any) -> list[TopicRef]:
    """The topics named: v1-5 list names, v6 names or ids (zero id = None)."""
    topics = getattr(request, "topics", None)
    if topics is None:
        return [TopicRef(name) for name in request.topic_names]
    return [TopicRef(topic.name, topic.topic_id) for topic in topics]


@handles(20, 1, 6)
async def delete_topics(ctx: RequestContext, request: Any) -> Any:
    """DeleteTopics by name (v1-5) or by name or id (v6).

    With delete.topic.enable=false Kafka refuses every topic: INVALID_REQUEST below v3 (those
    clients do not know TOPIC_DELETION_DISABLED), TOPIC_DELETION_DISABLED from v3. DELETE on
    the cluster allows every topic; else each needs DESCRIBE and DELETE on itself.
    """
    services = ctx.services
    refs = _delete_refs(request)
    if not services.config["delete.topic.enable"]:
        code = ErrorCode.topic_deletion_disabled if ctx.version >= 3 else ErrorCode.invalid_request
        results = [_deletion(Deletion(ref.name, ref.topic_id, code, DELETION_DISABLED_MESSAGE))
                   for ref in refs]
        return build_response(request, {"throttle_time": NO_THROTTLE, "responses": results})
    everything = ctx.authorize_cluster(Operation.DELETE, log_denied=False)

    @functools.cache  # a topic named and given by id is one decision, logged once
    def may(operation: Operation, name: str) -> bool:
        return everything or ctx.authorize(operation, ResourceType.TOPIC, name)

    plan = resolve_deletions(services.store.image, refs,
                             may_describe=lambda name: may(Operation.DESCRIBE, name),
                             may_delete=lambda name: may(Operation.DELETE, name))
    refused = [_deletion(refused) for refused in plan.refused]
    charge = _mutation_charge(ctx)
    outcomes: dict[uuid.UUID, Deletion] = {}  # in the order of the targets
    for topic_id, name in plan.targets.items():  # checked and charged in order, as created
        if _over_mutation_quota(ctx):
            outcomes[topic_id] = Deletion(name, topic_id, THROTTLED.code, THROTTLED.message)
            continue
        held = services.store.topics.get(name)
        charge(held.partitions if held is not None else 0)
        outcomes[topic_id] = Deletion(name, topic_id, ErrorCode.none, None)
    doomed = [(d.name, i) for i, d in outcomes.items() if d.code == ErrorCode.none]
    try:  # one write for the request, as Kafka's controller appends one batch
        await services.replicas.delete_topics([(name, str(i)) for name, i in doomed])
    except ConcurrentUpdate as e:
        outcomes.update((i, Deletion(name, i, ErrorCode.request_timed_out, str(e)))
                        for name, i in doomed)
        doomed = []
    for name, _ in doomed:
        if name not in services.store.topics:  # not one of the same name made meanwhile
            services.groups.delete_topic_offsets(name)
            services.metrics.forget_topic(name)
    results = refused + [_deletion(outcome) for outcome in outcomes.values()]
    return build_response(request, {"throttle_time": ctx.throttle_time, "responses": results})


# -- CreatePartitions -------------------------------------------------------------------


def _partitions_request(topic: Any) -> PartitionsRequest:
    """A CreatePartitions topic as the controller rules take it."""
    assignments = None
    if topic.assignments is not None:
        assignments = tuple(tuple(a.broker_ids) for a in topic.assignments)
    return PartitionsRequest(topic.name, topic.count, assignments)


def _partitions_result(name: str, code: ErrorCode, message: str | None) -> dict[str, Any]:
    return {"name": name, "error_code": code, "error_message": message}


async def _add_partitions(services: BrokerServices, topic: PartitionsRequest,
                          validate_only: bool) -> dict[str, Any]:
    try:
        check_new_partitions(services.store.topics, services.store.live_brokers, topic)
    except TopicChangeError as e:
        return _partitions_result(topic.name, e.code, e.message)
    if not validate_only:
        layout = list(topic.assignments) if topic.assignments is not None else None
        try:
            await services.replicas.create_partitions(topic.name, topic.count, layout)
        except PlacementError as e:
            return _partitions_result(topic.name, ErrorCode.invalid_replication_factor, str(e))
        except ClusterImageTooLarge as e:
            return _partitions_result(topic.name, ErrorCode.policy_violation, str(e))
        except ConcurrentUpdate as e:
            return _partitions_result(topic.name, ErrorCode.request_timed_out, str(e))
        except InvalidPartitions as e:
            return _partitions_result(topic.name, ErrorCode.invalid_partitions, str(e))
    return _partitions_result(topic.name, ErrorCode.none, None)


@handles(37, 0, 3)
async def create_partitions(ctx: RequestContext, request: Any) -> Any:
    """CreatePartitions: grow topics; a name given twice is refused, as in ControllerApis,
    and each other name needs ALTER on the topic (checked before its existence). A request
    adding more than MAX_PARTITIONS_PER_BATCH partitions is refused before opening any log.
    """
    services = ctx.services
    counts = Counter(topic.name for topic in request.topics)
    topics = [_partitions_request(topic) for topic in _distinct_by_name(request.topics)]
    alterable = ctx.authorized_names(Operation.ALTER, ResourceType.TOPIC,
                                 [t.name for t in topics if counts[t.name] == 1])
    refusal = batch_refusal(sum(added_partitions(services.store.topics, t)
                                for t in topics if t.name in alterable))
    results = []
    for topic in topics:
        if counts[topic.name] > 1:
            results.append(_partitions_result(topic.name, ErrorCode.invalid_request,
                                              DUPLICATE_NAME_MESSAGE))
        elif topic.name not in alterable:
            results.append(_partitions_result(topic.name, ErrorCode.topic_authorization_failed,
                                              None))
        elif refusal is not None:
            results.append(_partitions_result(topic.name, refusal.code, refusal.message))
        elif _over_mutation_quota(ctx):
            results.append(_partitions_result(topic.name, THROTTLED.code, THROTTLED.message))
        else:
            added = added_partitions(services.store.topics, topic)
            result = await _add_partitions(services, topic, request.validate_only)
            if result["error_code"] == ErrorCode.none and not request.validate_only:
                _mutation_charge(ctx)(added)
            results.append(result)
    return build_response(request, {"throttle_time": ctx.throttle_time, "results": results})


# -- DescribeCluster --------------------------------------------------------------------


def _endpoint_type_error(endpoint_type: int, version: int) -> tuple[ErrorCode, str] | None:
    """AuthHelper.computeDescribeClusterResponse: a broker listener describes brokers only;
    (error code, message) for an endpoint type it does not serve."""
    if endpoint_type not in _ENDPOINT_NAMES:
        code = ErrorCode.unsupported_endpoint_type if version else ErrorCode.invalid_request
        return code, f"Unsupported endpoint type {endpoint_type}"
    if endpoint_type != BROKER_ENDPOINT:
        code = ErrorCode.mismatched_endpoint_type if version else ErrorCode.invalid_request
        return (
            code,
            "The request was sent to an endpoint of type BROKER, but we wanted an endpoint of "
            f"type {_ENDPOINT_NAMES[endpoint_type]}",
        )
    return None


@handles(60, 0, 1)
async def describe_cluster(ctx: RequestContext, request: Any) -> Any:
    """DescribeCluster: the live brokers and the active controller."""
    endpoint_type = getattr(request, "endpoint_type", BROKER_ENDPOINT)
    error = _endpoint_type_error(endpoint_type, ctx.version)
    if error is not None:
        code, message = error
        return build_response(request, {
            "throttle_time": NO_THROTTLE,
            "error_code": code,
            "error_message": message,
            "cluster_id": "",
            "brokers": [],
        })
    services = ctx.services
    return build_response(request, {
        "throttle_time": NO_THROTTLE,
        "error_code": ErrorCode.none,
        "error_message": None,
        "endpoint_type": endpoint_type,
        "cluster_id": services.store.cluster_id,
        "controller_id": services.store.controller_id,
        "brokers": [
            {"broker_id": b["node_id"], "host": b["host"], "port": b["port"], "rack": b["rack"]}
            for b in live_brokers(ctx)
        ],
        "cluster_authorized_operations": _cluster_operations(ctx, request),
    })


def _cluster_operations(ctx: RequestContext, request: Any) -> int:
    """The cluster operations the principal may perform, when asked: none without DESCRIBE
    on the cluster, every one the cluster has without an authorizer (AuthHelper)."""
    if not request.include_cluster_authorized_operations:
        return OPERATIONS_OMITTED
    if not ctx.authorize_cluster(Operation.DESCRIBE):
        return 0
    return ctx.services.authorizer.authorized_operations(
        ctx.principal, ctx.client_host, ResourceType.CLUSTER, CLUSTER_NAME)
