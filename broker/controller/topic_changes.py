"""How CreateTopics, CreatePartitions, DeleteTopics and AlterPartitionReassignments are decided.

These are the rules of Kafka's ReplicationControlManager (and the part of ControllerApis that
resolves DeleteTopics' names and ids): the checks, their order and their messages. Clients
act on the error codes and show the messages to people, so both are Kafka's, word for word.

Why here and pure: the rules belong to the controller, not to the request handlers, and as
functions over the cluster image and plain values they can be tested without a broker. The
inputs are the request items decoded into the dataclasses below, the image (or its topics),
the ids of the live brokers and, for DeleteTopics, the principal's permissions as two
predicates (authorization stays with the handlers). A refusal is a ``TopicChangeError`` with
Kafka's error code and message; a success is a value (the topic to create, the topics to
delete, the next image). The handlers only decode, authorize, call these and encode.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

from broker.cluster.image import ClusterImage
from broker.cluster.metadata import topic_name_error
from broker.config.broker_config import validate_topic_configs
from broker.controller.elections import cancel_reassignment, start_reassignment
from kafkube_contract.config_keys import ConfigError
from kafkube_contract.image import PartitionState, TopicMetadata

# ReplicationControlManager.MAX_PARTITIONS_PER_BATCH: one request may not create more.
MAX_PARTITIONS_PER_BATCH = 10_000

UNKNOWN_TOPIC_MESSAGE = "This server does not host this topic-partition."
UNKNOWN_TOPIC_ID_MESSAGE = "This server does not host this topic ID."
TOO_MANY_PARTITIONS_MESSAGE = "Excessively large number of partitions per request."
DUPLICATE_NAME_MESSAGE = "Duplicate topic name."
TOPIC_DENIED_MESSAGE = "Topic authorization failed."


class TopicChangeError(Exception):
    """One topic or partition refused, with Kafka's error code and a message naming the cause
    (Kafka's ApiException): the handler puts both in that item's result."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


# -- replica assignments ----------------------------------------------------------------


def check_manual_replicas(
    registered: Collection[int], broker_ids: Sequence[int], replication_factor: int | None
) -> None:
    """ReplicationControlManager.validateManualPartitionAssignment over the live brokers.

    Brokers are checked in ascending order, as Kafka does, so a message names the same broker.
    ``replication_factor`` is that of the partitions before this one (None: no check), as a
    topic's partitions must all have as many replicas.
    """
    if not broker_ids:
        raise TopicChangeError(
            ErrorCode.invalid_replica_assignment,
            "The manual partition assignment includes an empty replica list.",
        )
    previous = None
    for broker_id in sorted(broker_ids):
        if broker_id not in registered:
            raise TopicChangeError(
                ErrorCode.invalid_replica_assignment,
                f"The manual partition assignment includes broker {broker_id}, but no such "
                "broker is registered.",
            )
        if broker_id == previous:
            raise TopicChangeError(
                ErrorCode.invalid_replica_assignment,
                f"The manual partition assignment includes the broker {broker_id} more than "
                "once.",
            )
        previous = broker_id
    if replication_factor is not None and len(broker_ids) != replication_factor:
        raise TopicChangeError(
            ErrorCode.invalid_replica_assignment,
            f"The manual partition assignment includes a partition with {len(broker_ids)} "
            "replica(s), but this is not consistent with previous partitions, which have "
            f"{replication_factor} replica(s).",
        )


def batch_refusal(partitions: int) -> TopicChangeError | None:
    """The refusal of a request adding ``partitions`` in all, if that is over the batch limit.

    Kafka refuses the whole CreateTopics request then, so one huge request cannot hold the
    controller; CreatePartitions has no clean limit in Kafka (its record list overflows), so
    we apply the same one before opening any log.
    """
    if partitions > MAX_PARTITIONS_PER_BATCH:
        return TopicChangeError(ErrorCode.policy_violation, TOO_MANY_PARTITIONS_MESSAGE)
    return None


# -- CreateTopics -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ManualAssignment:
    """One partition's replicas as a CreateTopics request fixes them."""

    partition_index: int
    broker_ids: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class TopicRequest:
    """One CreateTopics topic as asked. -1 partitions or replication factor means the broker
    default; ``configs`` keeps the request's order and its null values, which are refused."""

    name: str
    num_partitions: int = -1
    replication_factor: int = -1
    configs: tuple[tuple[str, str | None], ...] = ()
    assignments: tuple[ManualAssignment, ...] = ()


@dataclass(frozen=True, slots=True)
class TopicDefaults:
    """The broker defaults a -1 in CreateTopics stands for (num.partitions and
    default.replication.factor)."""

    partitions: int
    replication_factor: int


@dataclass(frozen=True, slots=True)
class NewTopic:
    """A topic that passed every check: what the controller is to create."""

    name: str
    partitions: int
    replication_factor: int
    configs: dict[str, str]
    assignments: list[tuple[int, ...]] | None = None  # None: placed by the controller rules


def requested_partitions(topics: Iterable[TopicRequest], default_partitions: int) -> int:
    """The partitions a CreateTopics request may create (validateTotalNumberOfPartitions):
    an invalid count adds none, as the topic will be refused anyway."""
    total = 0
    for topic in topics:
        if topic.assignments:
            total += len(topic.assignments)
        elif topic.num_partitions == -1:
            total += default_partitions
        elif topic.num_partitions > 0:
            total += topic.num_partitions
    return total


def check_new_name(existing: Collection[str], name: str) -> None:
    """Topic.validate, then the '.'/'_' collision check: both map to the same metric names."""
    error = topic_name_error(name)
    if error is not None:
        raise TopicChangeError(ErrorCode.invalid_topic_exception, error)
    if "." not in name and "_" not in name:
        return
    unified = name.replace(".", "_")
    for other in existing:
        if other.replace(".", "_") == unified:
            raise TopicChangeError(
                ErrorCode.invalid_topic_exception,
                f"Topic '{name}' collides with existing topic: {other}",
            )


def creation_configs(configs: Iterable[tuple[str, str | None]]) -> dict[str, str]:
    """The topic's config overrides, refused whole if any is null, unknown or invalid: a
    topic is never created with part of what was asked."""
    pairs = list(configs)
    nulls = [name for name, value in pairs if value is None]
    if nulls:
        raise TopicChangeError(
            ErrorCode.invalid_config,
            "Null value not supported for topic configs: " + ",".join(nulls),
        )
    values = {name: value for name, value in pairs if value is not None}
    try:
        validate_topic_configs(values)
    except ConfigError as e:
        raise TopicChangeError(ErrorCode.invalid_config, str(e)) from None
    return values


def manual_layout(registered: Collection[int], topic: TopicRequest) -> tuple[int, int]:
    """(partitions, replication factor) of an explicit replica assignment, which must leave
    both counts at -1, name each partition once, 0 to n-1, and give each as many replicas."""
    if topic.replication_factor != -1:
        raise TopicChangeError(
            ErrorCode.invalid_request,
            "A manual partition assignment was specified, but replication factor was not set "
            "to -1.",
        )
    if topic.num_partitions != -1:
        raise TopicChangeError(
            ErrorCode.invalid_request,
            "A manual partition assignment was specified, but numPartitions was not set to -1.",
        )
    replication_factor: int | None = None
    indexes: set[int] = set()
    for assignment in topic.assignments:
        if assignment.partition_index in indexes:
            raise TopicChangeError(
                ErrorCode.invalid_replica_assignment,
                "Found multiple manual partition assignments for partition "
                f"{assignment.partition_index}",
            )
        check_manual_replicas(registered, assignment.broker_ids, replication_factor)
        replication_factor = len(assignment.broker_ids)
        indexes.add(assignment.partition_index)
    if indexes != set(range(len(indexes))):
        raise TopicChangeError(
            ErrorCode.invalid_replica_assignment,
            "partitions should be a consecutive 0-based integer sequence",
        )
    if replication_factor is None:
        raise ValueError("manual_layout needs at least one assignment")
    return len(indexes), replication_factor


def default_layout(defaults: TopicDefaults, topic: TopicRequest, usable: int) -> tuple[int, int]:
    """(partitions, replication factor) from the request, -1 meaning the broker default; the
    replication factor may not exceed the ``usable`` brokers (live and not cordoned)."""
    if topic.replication_factor < -1 or topic.replication_factor == 0:
        raise TopicChangeError(
            ErrorCode.invalid_replication_factor,
            "Replication factor must be larger than 0, or -1 to use the default value.",
        )
    if topic.num_partitions < -1 or topic.num_partitions == 0:
        raise TopicChangeError(
            ErrorCode.invalid_partitions,
            "Number of partitions was set to an invalid non-positive value.",
        )
    partitions = topic.num_partitions
    if partitions == -1:
        partitions = defaults.partitions
    replication_factor = topic.replication_factor
    if replication_factor == -1:
        replication_factor = defaults.replication_factor
    if replication_factor > usable:
        raise TopicChangeError(
            ErrorCode.invalid_replication_factor,
            f"Unable to replicate the partition {replication_factor} time(s): The target "
            f"replication factor of {replication_factor} cannot be reached because only "
            f"{usable} broker(s) are registered.",
        )
    return partitions, replication_factor


def validate_new_topic(
    topic: TopicRequest,
    existing: Collection[str],
    *,
    registered: Callable[[], Collection[int]],
    usable: Callable[[], int],
    defaults: TopicDefaults,
) -> NewTopic:
    """Every check of ReplicationControlManager.createTopics, in its order.

    ``existing`` are the topic names of the image. The brokers are read only when a check
    needs them, as each read asks the broker registry: ``registered()`` the live brokers
    (a manual assignment may use any), ``usable()`` how many of them new replicas may be
    placed on (live and not cordoned, KIP-1066).
    """
    if topic.name in existing:  # Kafka reports this over any name error
        raise TopicChangeError(ErrorCode.topic_already_exists,
                               f"Topic '{topic.name}' already exists.")
    check_new_name(existing, topic.name)
    configs = creation_configs(topic.configs)
    if topic.assignments:
        partitions, replication_factor = manual_layout(registered(), topic)
        layout = [
            tuple(a.broker_ids)
            for a in sorted(topic.assignments, key=lambda a: a.partition_index)
        ]
        return NewTopic(topic.name, partitions, replication_factor, configs, layout)
    partitions, replication_factor = default_layout(defaults, topic, usable())
    return NewTopic(topic.name, partitions, replication_factor, configs)


# -- CreatePartitions -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PartitionsRequest:
    """One CreatePartitions topic: the partition count wanted in all and, optionally, the
    replicas of each partition added."""

    name: str
    count: int
    assignments: tuple[tuple[int, ...], ...] | None = None


def added_partitions(topics: Mapping[str, TopicMetadata], request: PartitionsRequest) -> int:
    """How many partitions ``request`` would add (none for an unknown topic or a decrease),
    for the batch limit."""
    meta = topics.get(request.name)
    return max(0, request.count - meta.partitions) if meta is not None else 0


def check_new_partitions(
    topics: Mapping[str, TopicMetadata],
    registered: Callable[[], Collection[int]],
    request: PartitionsRequest,
) -> None:
    """ReplicationControlManager.createPartitions' checks for one topic: it exists, the count
    grows, and any manual assignment covers exactly the new partitions with as many replicas
    as the topic's first partition has, on live brokers (``registered()``, read only for a
    manual assignment, as each read asks the broker registry)."""
    meta = topics.get(request.name)
    if meta is None:
        raise TopicChangeError(ErrorCode.unknown_topic_or_partition, UNKNOWN_TOPIC_MESSAGE)
    current = meta.partitions
    if request.count == current:
        raise TopicChangeError(ErrorCode.invalid_partitions,
                               f"Topic already has {current} partition(s).")
    if request.count < current:
        raise TopicChangeError(
            ErrorCode.invalid_partitions,
            f"The topic {request.name} currently has {current} partition(s); {request.count} "
            "would not be an increase.",
        )
    if request.assignments is None:
        return
    additional = request.count - current
    if len(request.assignments) != additional:
        raise TopicChangeError(
            ErrorCode.invalid_replica_assignment,
            f"Attempted to add {additional} additional partition(s), but only "
            f"{len(request.assignments)} assignment(s) were specified.",
        )
    # The first partition's target replicas: mid-reassignment its ``replicas`` also holds
    # those leaving (KIP-455).
    replication_factor = (len(meta.assignments[0].target_replicas) if meta.assignments
                          else None)
    live = registered()
    for broker_ids in request.assignments:
        check_manual_replicas(live, broker_ids, replication_factor)


# -- DeleteTopics -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TopicRef:
    """A topic named in DeleteTopics: by name (v1-5), or by name or id (v6)."""

    name: str | None
    topic_id: uuid.UUID | None = None


@dataclass(frozen=True, slots=True)
class Deletion:
    """One DeleteTopics result: the topic as shown to the principal and its error."""

    name: str | None
    topic_id: uuid.UUID | None
    code: ErrorCode
    message: str | None


@dataclass(frozen=True, slots=True)
class DeletionPlan:
    """The refusals, and the topics to delete (id -> name), in the order decided."""

    refused: list[Deletion] = field(default_factory=list)
    targets: dict[uuid.UUID, str] = field(default_factory=dict)


def resolve_deletions(
    image: ClusterImage,
    refs: Sequence[TopicRef],
    may_describe: Callable[[str], bool],
    may_delete: Callable[[str], bool],
) -> DeletionPlan:
    """The refusals, and the topics to delete by id, as ControllerApis.deleteTopics decides.

    Ids are resolved before names, so a name whose topic was also given by id is refused
    (and, as in Kafka, that topic is not deleted). A topic the principal may not describe is
    refused with TOPIC_AUTHORIZATION_FAILED whether it exists or not, and given by id,
    without its name: a principal learns nothing of topics it may not see. The predicates
    are asked in Kafka's order, as the handler may log each denial.
    """
    plan = DeletionPlan()
    refused = plan.refused
    names: Counter[str] = Counter()
    ids: Counter[uuid.UUID] = Counter()
    for ref in refs:
        if ref.name is not None and ref.topic_id is not None:
            refused.append(Deletion(ref.name, ref.topic_id, ErrorCode.invalid_request,
                                    "You may not specify both topic name and topic id."))
        elif ref.name is not None:
            names[ref.name] += 1
        elif ref.topic_id is not None:
            ids[ref.topic_id] += 1
        else:
            refused.append(Deletion(None, None, ErrorCode.invalid_request,
                                    "Neither topic name nor id were specified."))
    denied = ErrorCode.topic_authorization_failed
    targets = plan.targets
    for topic_id, count in ids.items():
        topic = image.topic_by_id(topic_id)
        if count > 1:
            refused.append(Deletion(None, topic_id, ErrorCode.invalid_request,
                                    "Duplicate topic id."))
        elif topic is None:
            refused.append(Deletion(None, topic_id, ErrorCode.unknown_topic_id,
                                    UNKNOWN_TOPIC_ID_MESSAGE))
        elif not may_delete(topic.name):
            shown = topic.name if may_describe(topic.name) else None
            refused.append(Deletion(shown, topic_id, denied, TOPIC_DENIED_MESSAGE))
        else:
            targets[topic_id] = topic.name
    for name, count in names.items():
        topic = image.topics.get(name)
        if count > 1:
            refused.append(Deletion(name, None, ErrorCode.invalid_request,
                                    DUPLICATE_NAME_MESSAGE))
        elif not may_describe(name):
            refused.append(Deletion(name, None, denied, TOPIC_DENIED_MESSAGE))
        elif topic is None:
            refused.append(Deletion(name, None, ErrorCode.unknown_topic_or_partition,
                                    UNKNOWN_TOPIC_MESSAGE))
        elif not may_delete(name):
            refused.append(Deletion(name, None, denied, TOPIC_DENIED_MESSAGE))
        elif topic.uuid in targets:
            del targets[topic.uuid]
            refused.append(Deletion(name, topic.uuid, ErrorCode.invalid_request,
                                    "The provided topic name maps to an ID that was already "
                                    "supplied."))
        else:
            targets[topic.uuid] = name
    return plan


# -- AlterPartitionReassignments --------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Reassignment:
    """One partition of AlterPartitionReassignments: its new replicas, or None to cancel."""

    topic: str
    partition: int
    replicas: tuple[int, ...] | None


@dataclass(frozen=True, slots=True)
class Outcome:
    """One item's result: Kafka's error code (NONE for success) and message."""

    code: ErrorCode
    message: str | None = None


@dataclass(frozen=True, slots=True)
class ReassignmentChange:
    """The image after a request's reassignments (None: nothing changed, nothing to write)
    and each partition's outcome."""

    image: ClusterImage | None
    outcomes: dict[tuple[str, int], Outcome]


def reassign_partition(
    state: PartitionState | None, replicas: Sequence[int] | None, live: Collection[int]
) -> PartitionState:
    """One partition's reassignment started (to ``replicas``) or cancelled (None), KIP-455.

    The replicas to add join as followers; the controller completes the move once they are
    all in the ISR. Cancelling needs a reassignment in progress.
    """
    if state is None:
        raise TopicChangeError(ErrorCode.unknown_topic_or_partition,
                               "The partition does not exist.")
    if replicas is None:
        if not state.adding and not state.removing:
            raise TopicChangeError(ErrorCode.no_reassignment_in_progress,
                                   "No ongoing reassignment for this partition.")
        return cancel_reassignment(state, set(live))
    check_manual_replicas(live, replicas, None)
    return start_reassignment(state, tuple(replicas))


def apply_reassignments(
    image: ClusterImage, reassignments: Iterable[Reassignment], live: Collection[int]
) -> ReassignmentChange:
    """Every reassignment of a request applied in order to ``image``: a refused one leaves its
    partition as it was and the others go ahead, as Kafka answers per partition. A partition
    named twice sees the first change and the last outcome is reported."""
    out = image
    outcomes: dict[tuple[str, int], Outcome] = {}
    for item in reassignments:
        key = (item.topic, item.partition)
        try:
            new = reassign_partition(out.partition(item.topic, item.partition),
                                     item.replicas, live)
        except TopicChangeError as e:
            outcomes[key] = Outcome(e.code, e.message)
            continue
        out = out.with_partition(item.topic, item.partition, new)
        outcomes[key] = Outcome(ErrorCode.none)
    return ReassignmentChange(out if out is not image else None, outcomes)
