"""Admin APIs: CreateTopics, DeleteTopics, CreatePartitions, DescribeCluster.

A single broker is its own controller (controller id = node id), so topic changes are decided
here, with the checks, their order and the messages of Kafka's KRaft controller
(ControllerApis and ReplicationControlManager); configs live in ``configs.py``. Clients act
on the error codes and show the messages to people, so both are Kafka's. No handler awaits:
each change is made before the handler returns.

Authorization is checked where ControllerApis checks it, before a topic's existence, so a
principal learns nothing of topics it may not describe (``ctx.authorized_names`` is the
filtering step Kafka's handlers share).
"""

from __future__ import annotations

import datetime
import functools
import uuid
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from broker.cluster.backend import ClusterImageTooLarge
from broker.cluster.metadata import (
    ClusterMetadata,
    ConcurrentUpdate,
    TopicMetadata,
    topic_name_error,
)
from broker.config.broker_config import (
    TOPIC_KEYS,
    BrokerConfig,
    ConfigError,
    validate_topic_configs,
)
from broker.controller.placement import PlacementError
from broker.handlers import handles
from broker.handlers.configs import topic_value_source
from broker.handlers.context import DENIED_MESSAGES, BrokerServices, RequestContext
from broker.handlers.metadata import live_brokers
from broker.protocol.messages import build_response
from broker.security.acl import CLUSTER_NAME, OPERATIONS_OMITTED, Operation, ResourceType
from broker.server.replica_manager import InvalidPartitions, TopicExists

NO_THROTTLE = datetime.timedelta(0)
# ReplicationControlManager.MAX_PARTITIONS_PER_BATCH: one request may not create more.
MAX_PARTITIONS_PER_BATCH = 10_000


# DescribeCluster v1 endpoint types (KIP-919).
BROKER_ENDPOINT = 1
CONTROLLER_ENDPOINT = 2
_ENDPOINT_NAMES = {BROKER_ENDPOINT: "BROKER", CONTROLLER_ENDPOINT: "CONTROLLER"}

UNKNOWN_TOPIC_MESSAGE = "This server does not host this topic-partition."
UNKNOWN_TOPIC_ID_MESSAGE = "This server does not host this topic ID."
DELETION_DISABLED_MESSAGE = "Topic deletion is disabled."
TOO_MANY_PARTITIONS_MESSAGE = "Excessively large number of partitions per request."
DUPLICATE_NAME_MESSAGE = "Duplicate topic name."
CREATE_DENIED_MESSAGE = "Authorization failed."  # CreateTopics' own (ControllerApis)
TOPIC_DENIED = DENIED_MESSAGES[ErrorCode.topic_authorization_failed]


class ApiError(Exception):
    """One request item refused with a Kafka error code (Kafka's ApiException)."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def _distinct_by_name(items: Iterable[Any]) -> list[Any]:
    """The first item of each name, in request order: a name gets one result."""
    first: dict[str, Any] = {}
    for item in items:
        first.setdefault(item.name, item)
    return list(first.values())


# -- replica assignments ----------------------------------------------------------------


def check_manual_replicas(
    registered: Collection[int], broker_ids: Sequence[int], replication_factor: int | None
) -> None:
    """ReplicationControlManager.validateManualPartitionAssignment over the live brokers.

    Brokers are checked in ascending order, as Kafka does, so a message names the same broker.
    """
    if not broker_ids:
        raise ApiError(
            ErrorCode.invalid_replica_assignment,
            "The manual partition assignment includes an empty replica list.",
        )
    previous = None
    for broker_id in sorted(broker_ids):
        if broker_id not in registered:
            raise ApiError(
                ErrorCode.invalid_replica_assignment,
                f"The manual partition assignment includes broker {broker_id}, but no such "
                "broker is registered.",
            )
        if broker_id == previous:
            raise ApiError(
                ErrorCode.invalid_replica_assignment,
                f"The manual partition assignment includes the broker {broker_id} more than "
                "once.",
            )
        previous = broker_id
    if replication_factor is not None and len(broker_ids) != replication_factor:
        raise ApiError(
            ErrorCode.invalid_replica_assignment,
            f"The manual partition assignment includes a partition with {len(broker_ids)} "
            "replica(s), but this is not consistent with previous partitions, which have "
            f"{replication_factor} replica(s).",
        )


# -- CreateTopics -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class NewTopic:
    name: str
    partitions: int
    replication_factor: int
    configs: dict[str, str]
    assignments: list[tuple[int, ...]] | None = None  # None: placed by the controller rules


def _requested_partitions(topics: Iterable[Any], default_partitions: int) -> int:
    """The partitions a CreateTopics request may create (validateTotalNumberOfPartitions)."""
    total = 0
    for topic in topics:
        if topic.assignments:
            total += len(topic.assignments)
        elif topic.num_partitions == -1:
            total += default_partitions
        elif topic.num_partitions > 0:
            total += topic.num_partitions
    return total


def _check_new_name(existing: Mapping[str, TopicMetadata], name: str) -> None:
    """Topic.validate, then the '.'/'_' collision check: both map to the same metric names."""
    error = topic_name_error(name)
    if error is not None:
        raise ApiError(ErrorCode.invalid_topic_exception, error)
    if "." not in name and "_" not in name:
        return
    unified = name.replace(".", "_")
    for other in existing:
        if other.replace(".", "_") == unified:
            raise ApiError(
                ErrorCode.invalid_topic_exception,
                f"Topic '{name}' collides with existing topic: {other}",
            )


def _creation_configs(configs: Iterable[Any]) -> dict[str, str]:
    """The topic's config overrides, refused whole if any is null, unknown or invalid."""
    nulls = [config.name for config in configs if config.value is None]
    if nulls:
        raise ApiError(
            ErrorCode.invalid_config,
            "Null value not supported for topic configs: " + ",".join(nulls),
        )
    values = {config.name: config.value for config in configs}
    try:
        validate_topic_configs(values)
    except ConfigError as e:
        raise ApiError(ErrorCode.invalid_config, str(e)) from None
    return values


def _manual_layout(registered: Collection[int], topic: Any) -> tuple[int, int]:
    """(partitions, replication factor) of an explicit replica assignment."""
    if topic.replication_factor != -1:
        raise ApiError(
            ErrorCode.invalid_request,
            "A manual partition assignment was specified, but replication factor was not set "
            "to -1.",
        )
    if topic.num_partitions != -1:
        raise ApiError(
            ErrorCode.invalid_request,
            "A manual partition assignment was specified, but numPartitions was not set to -1.",
        )
    replication_factor: int | None = None
    indexes: set[int] = set()
    for assignment in topic.assignments:
        if assignment.partition_index in indexes:
            raise ApiError(
                ErrorCode.invalid_replica_assignment,
                "Found multiple manual partition assignments for partition "
                f"{assignment.partition_index}",
            )
        check_manual_replicas(registered, assignment.broker_ids, replication_factor)
        replication_factor = len(assignment.broker_ids)
        indexes.add(assignment.partition_index)
    if indexes != set(range(len(indexes))):
        raise ApiError(
            ErrorCode.invalid_replica_assignment,
            "partitions should be a consecutive 0-based integer sequence",
        )
    assert replication_factor is not None  # assignments is not empty
    return len(indexes), replication_factor


def _default_layout(config: BrokerConfig, topic: Any, live: int) -> tuple[int, int]:
    """(partitions, replication factor) from the request, -1 meaning the broker default."""
    if topic.replication_factor < -1 or topic.replication_factor == 0:
        raise ApiError(
            ErrorCode.invalid_replication_factor,
            "Replication factor must be larger than 0, or -1 to use the default value.",
        )
    if topic.num_partitions < -1 or topic.num_partitions == 0:
        raise ApiError(
            ErrorCode.invalid_partitions,
            "Number of partitions was set to an invalid non-positive value.",
        )
    partitions = topic.num_partitions
    if partitions == -1:
        partitions = config["num.partitions"]
    replication_factor = topic.replication_factor
    if replication_factor == -1:
        replication_factor = config["default.replication.factor"]
    if replication_factor > live:
        raise ApiError(
            ErrorCode.invalid_replication_factor,
            f"Unable to replicate the partition {replication_factor} time(s): The target "
            f"replication factor of {replication_factor} cannot be reached because only "
            f"{live} broker(s) are registered.",
        )
    return partitions, replication_factor


def validate_new_topic(services: BrokerServices, topic: Any) -> NewTopic:
    """Every check of ReplicationControlManager.createTopics, in its order."""
    existing = services.store.topics
    if topic.name in existing:  # Kafka reports this over any name error
        raise ApiError(ErrorCode.topic_already_exists, f"Topic '{topic.name}' already exists.")
    _check_new_name(existing, topic.name)
    configs = _creation_configs(topic.configs)
    registered = services.store.live_brokers()
    if topic.assignments:
        partitions, replication_factor = _manual_layout(registered, topic)
        layout = [
            tuple(a.broker_ids)
            for a in sorted(topic.assignments, key=lambda a: a.partition_index)
        ]
        return NewTopic(topic.name, partitions, replication_factor, configs, layout)
    usable = len(services.replicas.placement_brokers())  # live, not cordoned (KIP-1066)
    partitions, replication_factor = _default_layout(services.config, topic, usable)
    return NewTopic(topic.name, partitions, replication_factor, configs)


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


def _creation_error(name: str, error: ApiError) -> dict[str, Any]:
    return {
        "name": name,
        "topic_id": None,
        "error_code": error.code,
        "error_message": error.message,
        "num_partitions": -1,
        "replication_factor": -1,
        "configs": [],
    }


async def _create_topic(services: BrokerServices, topic: Any, validate_only: bool,
                        describable: bool) -> dict[str, Any]:
    """One topic created (or validated). Its configs, partitions and replication factor are
    returned only to a principal that may describe its configs; without that permission the
    topic is created all the same and ``topic_config_error_code`` says why they are missing,
    as ReplicationControlManager answers."""
    try:
        new = validate_new_topic(services, topic)
    except ApiError as e:
        return _creation_error(topic.name, e)
    topic_id = None  # Kafka makes up an id that never exists for validate_only; zero is honest
    if not validate_only:
        try:
            created = await services.replicas.create_topic(
                new.name, new.partitions, new.configs, new.replication_factor, new.assignments
            )
        except TopicExists:
            return _creation_error(topic.name, ApiError(
                ErrorCode.topic_already_exists, f"Topic '{topic.name}' already exists."))
        except PlacementError as e:
            return _creation_error(topic.name, ApiError(
                ErrorCode.invalid_replication_factor, str(e)))
        except ClusterImageTooLarge as e:
            return _creation_error(topic.name, ApiError(ErrorCode.policy_violation, str(e)))
        except ConcurrentUpdate as e:  # the metadata busy or not to be trusted: retriable
            return _creation_error(topic.name, ApiError(ErrorCode.request_timed_out, str(e)))
        topic_id = created.uuid
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


@handles(19, 2, 7)
async def create_topics(ctx: RequestContext, request: Any) -> Any:
    """CreateTopics: one result per distinct name, in request order.

    A name given twice is refused as a whole (ControllerApis does that before the controller
    sees the request), then each other name needs CREATE on the cluster or on the topic
    (TOPIC_AUTHORIZATION_FAILED, whether the topic exists or not). A request adding more
    than MAX_PARTITIONS_PER_BATCH partitions in the topics it may create is refused for
    every topic, as Kafka fails the whole request then.
    """
    services = ctx.services
    counts = Counter(topic.name for topic in request.topics)
    topics = _distinct_by_name(request.topics)
    singles = [topic.name for topic in topics if counts[topic.name] == 1]
    if ctx.authorize_cluster(Operation.CREATE, log_denied=False):
        creatable = set(singles)
    else:
        creatable = ctx.authorized_names(Operation.CREATE, ResourceType.TOPIC, singles)
    batch = [topic for topic in topics if topic.name in creatable]
    if _requested_partitions(batch, services.config["num.partitions"]) > MAX_PARTITIONS_PER_BATCH:
        refusal = ApiError(ErrorCode.policy_violation, TOO_MANY_PARTITIONS_MESSAGE)
        results = [_creation_error(topic.name, refusal) for topic in topics]
        return build_response(request, {"throttle_time": NO_THROTTLE, "topics": results})
    describable = ctx.authorized_names(Operation.DESCRIBE_CONFIGS, ResourceType.TOPIC, singles,
                                   log_denied=False)
    duplicate = ApiError(ErrorCode.invalid_request, DUPLICATE_NAME_MESSAGE)
    denied = ApiError(ErrorCode.topic_authorization_failed, CREATE_DENIED_MESSAGE)
    results = [
        _creation_error(topic.name, duplicate) if counts[topic.name] > 1
        else _creation_error(topic.name, denied) if topic.name not in creatable
        else await _create_topic(services, topic, request.validate_only,
                                 topic.name in describable)
        for topic in topics
    ]
    return build_response(request, {"throttle_time": NO_THROTTLE, "topics": results})


# -- DeleteTopics -----------------------------------------------------------------------

TopicRef = tuple[str | None, uuid.UUID | None]


def _deletion(
    name: str | None, topic_id: uuid.UUID | None, code: ErrorCode, message: str | None
) -> dict[str, Any]:
    return {"name": name, "topic_id": topic_id, "error_code": code, "error_message": message}


def _delete_refs(request: Any) -> list[TopicRef]:
    """(name, id) of each topic named: v1-5 list names, v6 names or ids (zero id = None)."""
    topics = getattr(request, "topics", None)
    if topics is None:
        return [(name, None) for name in request.topic_names]
    return [(topic.name, topic.topic_id) for topic in topics]


def _resolve_deletions(
    store: ClusterMetadata, refs: Sequence[TopicRef], may: Callable[[Operation, str], bool],
) -> tuple[list[dict[str, Any]], dict[uuid.UUID, str]]:
    """The refusals, and the topics to delete by id, as ControllerApis.deleteTopics decides.

    Ids are resolved before names, so a name whose topic was also given by id is refused
    (and, as in Kafka, that topic is not deleted). ``may(operation, name)`` says whether the
    principal may DESCRIBE or DELETE a topic: one it may not describe is refused with
    TOPIC_AUTHORIZATION_FAILED whether it exists or not, and given by id, without its name.
    """
    results: list[dict[str, Any]] = []
    names: Counter[str] = Counter()
    ids: Counter[uuid.UUID] = Counter()
    for name, topic_id in refs:
        if name is not None and topic_id is not None:
            results.append(_deletion(name, topic_id, ErrorCode.invalid_request,
                                     "You may not specify both topic name and topic id."))
        elif name is not None:
            names[name] += 1
        elif topic_id is not None:
            ids[topic_id] += 1
        else:
            results.append(_deletion(None, None, ErrorCode.invalid_request,
                                     "Neither topic name nor id were specified."))
    denied = ErrorCode.topic_authorization_failed
    targets: dict[uuid.UUID, str] = {}
    for topic_id, count in ids.items():
        topic = store.topic_by_id(topic_id)
        if count > 1:
            results.append(_deletion(None, topic_id, ErrorCode.invalid_request,
                                     "Duplicate topic id."))
        elif topic is None:
            results.append(_deletion(None, topic_id, ErrorCode.unknown_topic_id,
                                     UNKNOWN_TOPIC_ID_MESSAGE))
        elif not may(Operation.DELETE, topic.name):
            shown = topic.name if may(Operation.DESCRIBE, topic.name) else None
            results.append(_deletion(shown, topic_id, denied, TOPIC_DENIED))
        else:
            targets[topic_id] = topic.name
    for name, count in names.items():
        topic = store.topics.get(name)
        if count > 1:
            results.append(_deletion(name, None, ErrorCode.invalid_request,
                                     DUPLICATE_NAME_MESSAGE))
        elif not may(Operation.DESCRIBE, name):
            results.append(_deletion(name, None, denied, TOPIC_DENIED))
        elif topic is None:
            results.append(_deletion(name, None, ErrorCode.unknown_topic_or_partition,
                                     UNKNOWN_TOPIC_MESSAGE))
        elif not may(Operation.DELETE, name):
            results.append(_deletion(name, None, denied, TOPIC_DENIED))
        elif topic.uuid in targets:
            del targets[topic.uuid]
            results.append(_deletion(name, topic.uuid, ErrorCode.invalid_request,
                                     "The provided topic name maps to an ID that was already "
                                     "supplied."))
        else:
            targets[topic.uuid] = name
    return results, targets


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
        results = [_deletion(name, tid, code, DELETION_DISABLED_MESSAGE) for name, tid in refs]
        return build_response(request, {"throttle_time": NO_THROTTLE, "responses": results})
    everything = ctx.authorize_cluster(Operation.DELETE, log_denied=False)

    @functools.cache  # a topic named and given by id is one decision, logged once
    def may(operation: Operation, name: str) -> bool:
        return everything or ctx.authorize(operation, ResourceType.TOPIC, name)

    results, targets = _resolve_deletions(services.store, refs, may)
    for topic_id, name in targets.items():
        try:
            await services.replicas.delete_topic(name, str(topic_id))
        except ConcurrentUpdate as e:
            results.append(_deletion(name, topic_id, ErrorCode.request_timed_out, str(e)))
            continue
        if name not in services.store.topics:  # not one of the same name made meanwhile
            services.groups.delete_topic_offsets(name)
            services.metrics.forget_topic(name)
        results.append(_deletion(name, topic_id, ErrorCode.none, None))
    return build_response(request, {"throttle_time": NO_THROTTLE, "responses": results})


# -- CreatePartitions -------------------------------------------------------------------


def _added_partitions(store: ClusterMetadata, topic: Any) -> int:
    meta = store.topics.get(topic.name)
    return max(0, topic.count - meta.partitions) if meta is not None else 0


def check_new_partitions(services: BrokerServices, topic: Any) -> None:
    """ReplicationControlManager.createPartitions' checks for one topic."""
    meta = services.store.topics.get(topic.name)
    if meta is None:
        raise ApiError(ErrorCode.unknown_topic_or_partition, UNKNOWN_TOPIC_MESSAGE)
    current = meta.partitions
    if topic.count == current:
        raise ApiError(ErrorCode.invalid_partitions,
                       f"Topic already has {current} partition(s).")
    if topic.count < current:
        raise ApiError(
            ErrorCode.invalid_partitions,
            f"The topic {topic.name} currently has {current} partition(s); {topic.count} "
            "would not be an increase.",
        )
    if topic.assignments is None:
        return
    additional = topic.count - current
    if len(topic.assignments) != additional:
        raise ApiError(
            ErrorCode.invalid_replica_assignment,
            f"Attempted to add {additional} additional partition(s), but only "
            f"{len(topic.assignments)} assignment(s) were specified.",
        )
    replication_factor = len(meta.assignments[0].replicas) if meta.assignments else None
    for assignment in topic.assignments:
        check_manual_replicas(services.store.live_brokers(), assignment.broker_ids,
                              replication_factor)


def _partitions_result(name: str, code: ErrorCode, message: str | None) -> dict[str, Any]:
    return {"name": name, "error_code": code, "error_message": message}


async def _add_partitions(services: BrokerServices, topic: Any, validate_only: bool
                         ) -> dict[str, Any]:
    try:
        check_new_partitions(services, topic)
    except ApiError as e:
        return _partitions_result(topic.name, e.code, e.message)
    if not validate_only:
        layout = None
        if topic.assignments is not None:
            layout = [tuple(a.broker_ids) for a in topic.assignments]
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
    and each other name needs ALTER on the topic (checked before its existence).

    Kafka has no clean limit here (its record list overflows); we refuse a request adding
    more than MAX_PARTITIONS_PER_BATCH partitions like CreateTopics, before opening any log.
    """
    services = ctx.services
    counts = Counter(topic.name for topic in request.topics)
    topics = _distinct_by_name(request.topics)
    alterable = ctx.authorized_names(Operation.ALTER, ResourceType.TOPIC,
                                 [t.name for t in topics if counts[t.name] == 1])
    added = sum(_added_partitions(services.store, t) for t in topics if t.name in alterable)
    results = []
    for topic in topics:
        if counts[topic.name] > 1:
            results.append(_partitions_result(topic.name, ErrorCode.invalid_request,
                                              DUPLICATE_NAME_MESSAGE))
        elif topic.name not in alterable:
            results.append(_partitions_result(topic.name, ErrorCode.topic_authorization_failed,
                                              None))
        elif added > MAX_PARTITIONS_PER_BATCH:
            results.append(_partitions_result(topic.name, ErrorCode.policy_violation,
                                              TOO_MANY_PARTITIONS_MESSAGE))
        else:
            results.append(await _add_partitions(services, topic, request.validate_only))
    return build_response(request, {"throttle_time": NO_THROTTLE, "results": results})


# -- DescribeCluster --------------------------------------------------------------------


def _endpoint_type_error(endpoint_type: int, version: int) -> ApiError | None:
    """AuthHelper.computeDescribeClusterResponse: a broker listener describes brokers only."""
    if endpoint_type not in _ENDPOINT_NAMES:
        code = ErrorCode.unsupported_endpoint_type if version else ErrorCode.invalid_request
        return ApiError(code, f"Unsupported endpoint type {endpoint_type}")
    if endpoint_type != BROKER_ENDPOINT:
        code = ErrorCode.mismatched_endpoint_type if version else ErrorCode.invalid_request
        return ApiError(
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
        return build_response(request, {
            "throttle_time": NO_THROTTLE,
            "error_code": error.code,
            "error_message": error.message,
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
