"""Unit tests for the controller's topic rules (broker/controller/topic_changes.py).

No broker, no I/O: inputs are request values, ClusterImage values and broker ids. The
messages are Kafka's (ReplicationControlManager, ControllerApis), which clients show to
people, so they are asserted word for word.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Collection

import pytest
from kio.schema.errors import ErrorCode

from broker.cluster.image import ClusterImage
from broker.controller.topic_changes import (
    DUPLICATE_NAME_MESSAGE,
    MAX_PARTITIONS_PER_BATCH,
    TOO_MANY_PARTITIONS_MESSAGE,
    TOPIC_DENIED_MESSAGE,
    UNKNOWN_TOPIC_ID_MESSAGE,
    UNKNOWN_TOPIC_MESSAGE,
    Deletion,
    ManualAssignment,
    NewTopic,
    Outcome,
    PartitionsRequest,
    Reassignment,
    TopicChangeError,
    TopicDefaults,
    TopicRef,
    TopicRequest,
    added_partitions,
    apply_reassignments,
    batch_refusal,
    check_manual_replicas,
    check_new_name,
    check_new_partitions,
    creation_configs,
    reassign_partition,
    requested_partitions,
    resolve_deletions,
    validate_new_topic,
)
from broker.handlers.context import DENIED_MESSAGES
from kafkube_contract.image import PartitionState, TopicMetadata

DEFAULTS = TopicDefaults(partitions=3, replication_factor=1)
LIVE = (1, 2, 3)


def topic(name: str, partitions: int = 1, rf: int = 1, topic_id: str | None = None
          ) -> TopicMetadata:
    states = tuple(PartitionState(tuple(range(1, rf + 1)), tuple(range(1, rf + 1)), 1)
                   for _ in range(partitions))
    return TopicMetadata(name, topic_id or str(uuid.uuid4()), {}, states)


def image_of(*topics: TopicMetadata) -> ClusterImage:
    return ClusterImage(topics={t.name: t for t in topics})


def refused(call: Callable[[], object]) -> tuple[ErrorCode, str]:
    with pytest.raises(TopicChangeError) as e:
        call()
    return e.value.code, e.value.message


def unused() -> Collection[int]:
    raise AssertionError("the brokers were read though no check needs them")


def validate(request: TopicRequest, existing: Collection[str] = (),
             registered: Collection[int] = LIVE, usable: int = 3) -> NewTopic:
    return validate_new_topic(request, existing, registered=lambda: registered,
                              usable=lambda: usable, defaults=DEFAULTS)


# -- manual replicas ----------------------------------------------------------------------


def test_manual_replicas_are_checked_in_ascending_broker_order() -> None:
    assert refused(lambda: check_manual_replicas(LIVE, [9, 7], None)) == (
        ErrorCode.invalid_replica_assignment,
        "The manual partition assignment includes broker 7, but no such broker is registered.")
    assert refused(lambda: check_manual_replicas(LIVE, [2, 1, 2], None)) == (
        ErrorCode.invalid_replica_assignment,
        "The manual partition assignment includes the broker 2 more than once.")
    assert refused(lambda: check_manual_replicas(LIVE, [], None)) == (
        ErrorCode.invalid_replica_assignment,
        "The manual partition assignment includes an empty replica list.")


def test_manual_replicas_keep_the_replication_factor() -> None:
    check_manual_replicas(LIVE, [3, 1], 2)
    assert refused(lambda: check_manual_replicas(LIVE, [1], 2)) == (
        ErrorCode.invalid_replica_assignment,
        "The manual partition assignment includes a partition with 1 replica(s), but this is "
        "not consistent with previous partitions, which have 2 replica(s).")


def test_batch_limit() -> None:
    assert batch_refusal(MAX_PARTITIONS_PER_BATCH) is None
    refusal = batch_refusal(MAX_PARTITIONS_PER_BATCH + 1)
    assert refusal is not None
    assert (refusal.code, refusal.message) == (ErrorCode.policy_violation,
                                               TOO_MANY_PARTITIONS_MESSAGE)


# -- CreateTopics -------------------------------------------------------------------------


def test_requested_partitions_counts_defaults_and_assignments_but_not_invalid_counts() -> None:
    topics = [
        TopicRequest("a", 5),
        TopicRequest("b"),  # the default
        TopicRequest("c", 0),  # refused later, adds none
        TopicRequest("d", assignments=(ManualAssignment(0, (1,)), ManualAssignment(1, (2,)))),
    ]
    assert requested_partitions(topics, 7) == 5 + 7 + 0 + 2


def test_new_topic_with_defaults() -> None:
    assert validate(TopicRequest("t", configs=(("cleanup.policy", "compact"),))) == NewTopic(
        "t", 3, 1, {"cleanup.policy": "compact"})
    assert validate(TopicRequest("t", 2, 3)) == NewTopic("t", 2, 3, {})


def test_an_existing_topic_is_reported_over_a_bad_name() -> None:
    bad = "x" * 300
    assert refused(lambda: validate(TopicRequest(bad), existing={bad})) == (
        ErrorCode.topic_already_exists, f"Topic '{bad}' already exists.")
    code, _ = refused(lambda: validate(TopicRequest(bad)))
    assert code == ErrorCode.invalid_topic_exception


def test_dot_and_underscore_names_collide() -> None:
    check_new_name({"a_b"}, "a-b")
    assert refused(lambda: check_new_name({"x", "a_b"}, "a.b")) == (
        ErrorCode.invalid_topic_exception, "Topic 'a.b' collides with existing topic: a_b")


def test_configs_are_refused_whole() -> None:
    assert refused(lambda: creation_configs([("retention.ms", None), ("x", None)])) == (
        ErrorCode.invalid_config, "Null value not supported for topic configs: retention.ms,x")
    code, _ = refused(lambda: creation_configs([("retention.ms", "1"), ("no.such", "1")]))
    assert code == ErrorCode.invalid_config
    assert creation_configs([("retention.ms", "1"), ("retention.ms", "2")]) == {
        "retention.ms": "2"}


def test_invalid_counts() -> None:
    assert refused(lambda: validate(TopicRequest("t", 1, 0))) == (
        ErrorCode.invalid_replication_factor,
        "Replication factor must be larger than 0, or -1 to use the default value.")
    assert refused(lambda: validate(TopicRequest("t", -2, 1))) == (
        ErrorCode.invalid_partitions,
        "Number of partitions was set to an invalid non-positive value.")


def test_replication_factor_is_bounded_by_the_usable_brokers() -> None:
    assert refused(lambda: validate(TopicRequest("t", 1, 3), usable=2)) == (
        ErrorCode.invalid_replication_factor,
        "Unable to replicate the partition 3 time(s): The target replication factor of 3 "
        "cannot be reached because only 2 broker(s) are registered.")


def test_manual_layout_is_sorted_by_partition() -> None:
    request = TopicRequest("t", assignments=(ManualAssignment(1, (2, 3)),
                                             ManualAssignment(0, (1, 2))))
    assert validate(request, usable=0) == NewTopic("t", 2, 2, {}, [(1, 2), (2, 3)])


@pytest.mark.parametrize(("request_", "expected"), [
    (TopicRequest("t", -1, 2, assignments=(ManualAssignment(0, (1,)),)),
     (ErrorCode.invalid_request, "A manual partition assignment was specified, but "
                                 "replication factor was not set to -1.")),
    (TopicRequest("t", 1, -1, assignments=(ManualAssignment(0, (1,)),)),
     (ErrorCode.invalid_request, "A manual partition assignment was specified, but "
                                 "numPartitions was not set to -1.")),
    (TopicRequest("t", assignments=(ManualAssignment(0, (1,)), ManualAssignment(0, (2,)))),
     (ErrorCode.invalid_replica_assignment,
      "Found multiple manual partition assignments for partition 0")),
    (TopicRequest("t", assignments=(ManualAssignment(0, (1,)), ManualAssignment(2, (2,)))),
     (ErrorCode.invalid_replica_assignment,
      "partitions should be a consecutive 0-based integer sequence")),
])
def test_bad_manual_layouts(request_: TopicRequest, expected: tuple[ErrorCode, str]) -> None:
    assert refused(lambda: validate(request_)) == expected


def test_brokers_are_read_only_when_a_check_needs_them() -> None:
    with pytest.raises(TopicChangeError):
        validate_new_topic(TopicRequest("t"), {"t"}, registered=unused,
                           usable=lambda: len(unused()), defaults=DEFAULTS)
    manual = TopicRequest("t", assignments=(ManualAssignment(0, (1,)),))
    assert validate_new_topic(manual, (), registered=lambda: LIVE, usable=lambda: len(unused()),
                              defaults=DEFAULTS).partitions == 1


# -- CreatePartitions ---------------------------------------------------------------------


def test_added_partitions() -> None:
    topics = {"t": topic("t", 2)}
    assert added_partitions(topics, PartitionsRequest("t", 5)) == 3
    assert added_partitions(topics, PartitionsRequest("t", 1)) == 0
    assert added_partitions(topics, PartitionsRequest("missing", 5)) == 0


def test_new_partitions_must_grow_an_existing_topic() -> None:
    topics = {"t": topic("t", 2)}
    check_new_partitions(topics, unused, PartitionsRequest("t", 3))
    assert refused(lambda: check_new_partitions(topics, unused, PartitionsRequest("u", 3))) == (
        ErrorCode.unknown_topic_or_partition, UNKNOWN_TOPIC_MESSAGE)
    assert refused(lambda: check_new_partitions(topics, unused, PartitionsRequest("t", 2))) == (
        ErrorCode.invalid_partitions, "Topic already has 2 partition(s).")
    assert refused(lambda: check_new_partitions(topics, unused, PartitionsRequest("t", 1))) == (
        ErrorCode.invalid_partitions,
        "The topic t currently has 2 partition(s); 1 would not be an increase.")


def test_new_partition_assignments() -> None:
    topics = {"t": topic("t", 1, rf=2)}
    check_new_partitions(topics, lambda: LIVE, PartitionsRequest("t", 3, ((1, 2), (2, 3))))
    assert refused(lambda: check_new_partitions(
        topics, lambda: LIVE, PartitionsRequest("t", 3, ((1, 2),)))) == (
        ErrorCode.invalid_replica_assignment,
        "Attempted to add 2 additional partition(s), but only 1 assignment(s) were specified.")
    code, message = refused(lambda: check_new_partitions(
        topics, lambda: LIVE, PartitionsRequest("t", 2, ((1,),))))
    assert code == ErrorCode.invalid_replica_assignment
    assert "which have 2 replica(s)" in message


# -- DeleteTopics -------------------------------------------------------------------------


def allow(_: str) -> bool:
    return True


def test_the_denied_message_is_the_handlers() -> None:
    assert DENIED_MESSAGES[ErrorCode.topic_authorization_failed] == TOPIC_DENIED_MESSAGE


def test_deletion_by_name_and_by_id() -> None:
    a, b = topic("a"), topic("b")
    plan = resolve_deletions(image_of(a, b), [TopicRef("a"), TopicRef(None, b.uuid)],
                             allow, allow)
    assert plan.refused == []
    assert list(plan.targets.items()) == [(b.uuid, "b"), (a.uuid, "a")]  # ids resolved first


def test_deletion_refusals() -> None:
    a = topic("a")
    missing = uuid.uuid4()
    plan = resolve_deletions(image_of(a), [
        TopicRef("a", a.uuid), TopicRef(None), TopicRef("x"), TopicRef("x"),
        TopicRef(None, missing), TopicRef("gone"),
    ], allow, allow)
    assert plan.targets == {}
    assert plan.refused == [
        Deletion("a", a.uuid, ErrorCode.invalid_request,
                 "You may not specify both topic name and topic id."),
        Deletion(None, None, ErrorCode.invalid_request,
                 "Neither topic name nor id were specified."),
        Deletion(None, missing, ErrorCode.unknown_topic_id, UNKNOWN_TOPIC_ID_MESSAGE),
        Deletion("x", None, ErrorCode.invalid_request, DUPLICATE_NAME_MESSAGE),
        Deletion("gone", None, ErrorCode.unknown_topic_or_partition, UNKNOWN_TOPIC_MESSAGE),
    ]


def test_a_name_whose_id_was_given_deletes_nothing() -> None:
    a = topic("a")
    plan = resolve_deletions(image_of(a), [TopicRef(None, a.uuid), TopicRef("a")], allow, allow)
    assert plan.targets == {}
    assert plan.refused == [Deletion(
        "a", a.uuid, ErrorCode.invalid_request,
        "The provided topic name maps to an ID that was already supplied.")]


def test_deletion_hides_what_the_principal_may_not_describe() -> None:
    secret, open_ = topic("secret"), topic("open")
    image = image_of(secret, open_)

    def may_describe(name: str) -> bool:
        return name == "open"

    def may_delete(_: str) -> bool:
        return False

    denied = ErrorCode.topic_authorization_failed
    plan = resolve_deletions(image, [
        TopicRef(None, secret.uuid), TopicRef(None, open_.uuid), TopicRef("secret"),
        TopicRef("nonexistent"), TopicRef("open"),
    ], may_describe, may_delete)
    assert plan.targets == {}
    assert plan.refused == [
        Deletion(None, secret.uuid, denied, TOPIC_DENIED_MESSAGE),
        Deletion("open", open_.uuid, denied, TOPIC_DENIED_MESSAGE),
        Deletion("secret", None, denied, TOPIC_DENIED_MESSAGE),
        Deletion("nonexistent", None, denied, TOPIC_DENIED_MESSAGE),
        Deletion("open", None, denied, TOPIC_DENIED_MESSAGE),
    ]


# -- AlterPartitionReassignments ----------------------------------------------------------


def test_reassignment_starts_and_cancels() -> None:
    state = PartitionState((1,), (1,), 1)
    moving = reassign_partition(state, [2], LIVE)
    assert moving.adding == (2,)
    assert moving.removing == (1,)
    assert reassign_partition(moving, None, LIVE).replicas == (1,)


def test_reassignment_refusals() -> None:
    state = PartitionState((1,), (1,), 1)
    assert refused(lambda: reassign_partition(None, [1], LIVE)) == (
        ErrorCode.unknown_topic_or_partition, "The partition does not exist.")
    assert refused(lambda: reassign_partition(state, None, LIVE)) == (
        ErrorCode.no_reassignment_in_progress, "No ongoing reassignment for this partition.")
    code, _ = refused(lambda: reassign_partition(state, [9], LIVE))
    assert code == ErrorCode.invalid_replica_assignment


def test_apply_reassignments_goes_on_past_a_refusal() -> None:
    image = image_of(topic("t", 2))
    change = apply_reassignments(image, [
        Reassignment("t", 0, None), Reassignment("t", 1, (2,)), Reassignment("u", 0, (1,)),
    ], LIVE)
    assert change.outcomes == {
        ("t", 0): Outcome(ErrorCode.no_reassignment_in_progress,
                          "No ongoing reassignment for this partition."),
        ("t", 1): Outcome(ErrorCode.none),
        ("u", 0): Outcome(ErrorCode.unknown_topic_or_partition, "The partition does not exist."),
    }
    assert change.image is not None
    moved = change.image.partition("t", 1)
    assert moved is not None and moved.adding == (2,)
    assert image.partition("t", 1) == PartitionState((1,), (1,), 1)  # the input is untouched


def test_apply_reassignments_without_a_change_writes_nothing() -> None:
    image = image_of(topic("t"))
    change = apply_reassignments(image, [Reassignment("t", 0, None)], LIVE)
    assert change.image is None


def test_new_partitions_take_the_replication_factor_a_reassignment_moves_to() -> None:
    # Partition 0 moves from (1, 2) to (3, 4): replicas is the union of old and new
    # mid-move (KIP-455), and the topic's replication factor is still 2.
    moving = PartitionState((3, 4, 1, 2), (1, 2), 1, adding=(3, 4), removing=(1, 2))
    topics = {"t": TopicMetadata("t", str(uuid.uuid4()), {}, (moving,))}
    check_new_partitions(topics, lambda: (1, 2, 3, 4), PartitionsRequest("t", 2, ((3, 4),)))
    code, message = refused(lambda: check_new_partitions(
        topics, lambda: (1, 2, 3, 4), PartitionsRequest("t", 2, ((1, 2, 3, 4),))))
    assert code == ErrorCode.invalid_replica_assignment
    assert "which have 2 replica(s)" in message
