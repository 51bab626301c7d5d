"""ConsumerGroupHeartbeat and ConsumerGroupDescribe (KIP-848) through their handlers, against a
real coordinator and replica manager on a temp dir: joining, the revoke-then-assign hand-over
between two members, leaving, session expiry, and the bad input Kafka refuses (with nothing
written to __consumer_offsets)."""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from broker.coordinator.consumer_membership import Heartbeat
from broker.handlers import api_versions, consumer_groups, features  # noqa: F401 (registers)
from broker.handlers.context import BrokerServices
from tests.support.group_calls import finish_now
from tests.support.handlers import call, create, make_services, new_topic, request

HEARTBEAT, DESCRIBE = 68, 69
GROUP = "g"


@pytest.fixture
def services(tmp_path: Path) -> BrokerServices:
    services = make_services(tmp_path, **{"offsets.topic.num.partitions": "3"})
    create(services, 7, new_topic("orders", 4))
    finish_now(services.groups.ensure_offsets_topic())
    services.groups.load()  # it leads every offsets partition: it coordinates every group
    return services


def topic_id(services: BrokerServices) -> Any:
    return services.store.topics["orders"].uuid


def beat(services: BrokerServices, member: str, epoch: int, *, owned: list[int] | None = None,
         join: bool = False, version: int = 1, **fields: Any) -> Any:
    values: dict[str, Any] = {"group_id": GROUP, "member_id": member, "member_epoch": epoch,
                              "rebalance_timeout": timedelta(milliseconds=-1),
                              "topic_partitions": None}
    if join:
        values.update(rebalance_timeout=timedelta(seconds=30), subscribed_topic_names=["orders"],
                      topic_partitions=[])
    if owned is not None:
        values["topic_partitions"] = [{"topic_id": topic_id(services), "partitions": owned}]
    values.update(fields)
    return call(services, request(HEARTBEAT, version, values))


def partitions(response: Any) -> list[int] | None:
    if response.assignment is None:
        return None
    return sorted(p for tp in response.assignment.topic_partitions for p in tp.partitions)


def offsets_end(services: BrokerServices) -> int:
    partition = services.replicas.get("__consumer_offsets",
                                      services.groups.partition_of(GROUP))
    return partition.log.log_end_offset


def describe(services: BrokerServices) -> Any:
    (group,) = call(services, request(DESCRIBE, 1, {
        "group_ids": [GROUP], "include_authorized_operations": False})).groups
    return group


def test_a_member_joins_and_gets_every_partition(services: BrokerServices) -> None:
    joined = beat(services, "a", 0, join=True)
    assert (joined.error_code, joined.member_id, joined.member_epoch) == (ErrorCode.none, "a", 1)
    assert joined.heartbeat_interval == timedelta(seconds=5)
    assert partitions(joined) == [0, 1, 2, 3]
    again = beat(services, "a", 1)
    assert (again.member_epoch, again.assignment) == (1, None)  # nothing changed: none sent
    group = describe(services)
    assert (group.group_state, group.group_epoch, group.assignment_epoch) == ("Stable", 1, 1)
    assert group.assignor_name == "uniform"
    (member,) = group.members
    assert (member.member_id, member.member_epoch, member.subscribed_topic_names) == (
        "a", 1, ("orders",))
    assert [p for tp in member.assignment.topic_partitions for p in tp.partitions] == [0, 1, 2, 3]


def test_a_second_member_gets_partitions_only_once_the_first_revoked_them(
        services: BrokerServices) -> None:
    beat(services, "a", 0, join=True)
    b = beat(services, "b", 0, join=True)
    assert (b.member_epoch, partitions(b)) == (2, [])  # a still holds them: nothing yet
    assert describe(services).group_state == "Reconciling"

    a = beat(services, "a", 1, owned=[0, 1, 2, 3])
    assert (a.member_epoch, len(partitions(a))) == (1, 2)  # keep two, give two up
    kept = partitions(a)
    assert partitions(beat(services, "b", 2)) is None  # still held

    a = beat(services, "a", 1, owned=kept)  # revoked
    assert (a.member_epoch, partitions(a)) == (2, None)
    b = beat(services, "b", 2, owned=[])
    assert sorted(partitions(b) + kept) == [0, 1, 2, 3]
    assert describe(services).group_state == "Stable"


def test_leaving_hands_the_partitions_to_the_others(services: BrokerServices) -> None:
    beat(services, "a", 0, join=True)
    beat(services, "b", 0, join=True)
    a = beat(services, "a", 1, owned=[0, 1, 2, 3])
    beat(services, "a", 1, owned=partitions(a))
    left = beat(services, "a", -1)
    assert (left.error_code, left.member_epoch) == (ErrorCode.none, -1)
    b = beat(services, "b", 2, owned=[])
    assert (b.member_epoch, partitions(b)) == (3, [0, 1, 2, 3])
    assert [m.member_id for m in describe(services).members] == ["b"]


def test_a_silent_member_is_removed_after_its_session(services: BrokerServices) -> None:
    started = time.monotonic()
    beat(services, "a", 0, join=True)
    beat(services, "b", 0, join=True)
    services.groups.tick(now=started + 44)
    assert len(describe(services).members) == 2
    # b heartbeats 40 s on (the coordinator is driven at that moment); a stays silent.
    alive = services.groups.consumer_heartbeat(Heartbeat(GROUP, "b", 2), "c", "/h",
                                               started + 40, 1)
    assert alive.error == ErrorCode.none
    services.groups.tick(now=started + 46)
    assert [m.member_id for m in describe(services).members] == ["b"]
    gone = beat(services, "a", 1)
    assert gone.error_code == ErrorCode.unknown_member_id


@pytest.mark.parametrize("fields,error,message", [
    ({"server_assignor": "sticky"}, ErrorCode.unsupported_assignor,
     "ServerAssignor sticky is not supported. Supported assignors: uniform, range."),
    ({"subscribed_topic_regex": "orders[", "subscribed_topic_names": None},
     ErrorCode.invalid_regular_expression, "SubscribedTopicRegex `orders[` is not a valid"),
    ({"rebalance_timeout": timedelta(milliseconds=-1)}, ErrorCode.invalid_request,
     "RebalanceTimeoutMs must be provided in first request."),
    ({"subscribed_topic_names": None}, ErrorCode.invalid_request,
     "Either SubscribedTopicNames or SubscribedTopicRegex must be non-null"),
    ({"member_id": ""}, ErrorCode.invalid_request, "MemberId can't be empty."),
    ({"instance_id": ""}, ErrorCode.invalid_request, "InstanceId can't be empty."),
    ({"member_epoch": -3}, ErrorCode.invalid_request, "MemberEpoch is invalid."),
    ({"subscribed_topic_names": ["x" * 40000]}, ErrorCode.invalid_request, "longer than"),
], ids=["assignor", "regex", "rebalance-timeout", "subscription", "member-id", "instance-id",
        "epoch", "oversized"])
def test_bad_joins_are_refused_and_store_nothing(services: BrokerServices, fields: dict,
                                                 error: ErrorCode, message: str) -> None:
    before = offsets_end(services)
    member = fields.pop("member_id", "a")
    epoch = fields.pop("member_epoch", 0)
    response = beat(services, member, epoch, join=True, **fields)
    assert response.error_code == error
    assert message in response.error_message
    assert offsets_end(services) == before
    assert services.groups.describe_consumer_group(GROUP) is None


def test_stale_epochs_and_strangers_are_fenced(services: BrokerServices) -> None:
    beat(services, "a", 0, join=True)
    before = offsets_end(services)
    ahead = beat(services, "a", 5)
    assert ahead.error_code == ErrorCode.fenced_member_epoch
    assert "greater member epoch (5)" in ahead.error_message
    assert beat(services, "stranger", 1).error_code == ErrorCode.unknown_member_id
    assert beat(services, "stranger", -1).error_code == ErrorCode.unknown_member_id
    other = call(services, request(HEARTBEAT, 1, {
        "group_id": "nobody", "member_id": "a", "member_epoch": 1,
        "rebalance_timeout": timedelta(milliseconds=-1), "topic_partitions": None}))
    assert other.error_code == ErrorCode.group_id_not_found
    assert offsets_end(services) == before


def test_describing_an_unknown_group(services: BrokerServices) -> None:
    group = describe(services)
    assert (group.error_code, group.error_message) == (
        ErrorCode.group_id_not_found, "Group g not found.")


def test_a_new_coordinator_resumes_the_group_from_its_records(services: BrokerServices) -> None:
    """Mid hand-over (a revoking, b waiting), the offsets partition is unloaded and loaded
    again from its log, as on a coordinator failover; the hand-over then completes."""
    beat(services, "a", 0, join=True, instance_id="host-a")
    beat(services, "b", 0, join=True)
    kept = partitions(beat(services, "a", 1, owned=[0, 1, 2, 3]))
    before = describe(services)
    offsets = services.replicas.get("__consumer_offsets", services.groups.partition_of(GROUP))
    services.groups.on_leadership(offsets, False)
    assert services.groups.describe_consumer_group(GROUP) is None
    services.groups.on_leadership(offsets, True)
    assert describe(services) == before  # epochs, states, members, both assignments
    group = services.groups.describe_consumer_group(GROUP)
    assert group.static_members == {"host-a": "a"}
    assert {tp[1] for tp, owner in group.owners.items() if owner == "a"} == {0, 1, 2, 3}

    a = beat(services, "a", 1, owned=kept)
    assert a.member_epoch == 2
    b = beat(services, "b", 2, owned=[])
    assert sorted(partitions(b) + kept) == [0, 1, 2, 3]
    assert describe(services).group_state == "Stable"


def commit_partition(services: BrokerServices, member: str, epoch: int, partition: int,
                     offset: int = 7) -> ErrorCode:
    response = call(services, request(8, 9, {
        "group_id": GROUP, "generation_id_or_member_epoch": epoch, "member_id": member,
        "group_instance_id": None, "retention_time": timedelta(milliseconds=-1),
        "topics": [{"name": "orders", "partitions": [
            {"partition_index": partition, "committed_offset": offset,
             "committed_leader_epoch": -1, "committed_metadata": None}]}]}))
    return response.topics[0].partitions[0].error_code


def commit(services: BrokerServices, member: str, epoch: int, offset: int = 7) -> ErrorCode:
    return commit_partition(services, member, epoch, 0, offset)


def test_only_a_member_at_its_epoch_commits(services: BrokerServices) -> None:
    beat(services, "a", 0, join=True)
    assert commit(services, "a", 1) == ErrorCode.none
    beat(services, "b", 0, join=True)  # the group epoch moves on; a is still at 1
    assert commit(services, "a", 1) == ErrorCode.none
    assert commit(services, "a", 2) == ErrorCode.stale_member_epoch
    assert commit(services, "b", 1) == ErrorCode.stale_member_epoch
    assert commit(services, "nobody", 1) == ErrorCode.unknown_member_id
    # a gives two partitions up and moves to epoch 2, keeping the two it had since epoch 1:
    # a commit of those sent at epoch 1 still counts (Kafka 4.3+); one it never held does not.
    a = beat(services, "a", 1, owned=[0, 1, 2, 3])
    beat(services, "a", 1, owned=partitions(a))
    assert services.groups.describe_consumer_group(GROUP).members["a"].member_epoch == 2
    kept, gone = partitions(a)[0], ({0, 1, 2, 3} - set(partitions(a))).pop()
    assert commit_partition(services, "a", 1, kept) == ErrorCode.none
    assert commit_partition(services, "a", 1, gone) == ErrorCode.stale_member_epoch
    assert commit_partition(services, "a", 2, kept) == ErrorCode.none
    assert commit(services, "", -1) == ErrorCode.unknown_member_id  # a group with members
    assert services.groups.fetch_offsets(GROUP, [("orders", 0)])[("orders", 0)].offset == 7
    assert GROUP not in services.groups.groups  # no classic group made on the way


def test_list_groups_shows_consumer_groups_with_their_type(services: BrokerServices) -> None:
    beat(services, "a", 0, join=True)
    listed = call(services, request(16, 5, {"states_filter": [], "types_filter": []})).groups
    assert [(g.group_id, g.protocol_type, g.group_state, g.group_type) for g in listed] == [
        (GROUP, "consumer", "Stable", "consumer")]
    classic_only = call(services, request(16, 5, {"states_filter": [],
                                                  "types_filter": ["Classic"]})).groups
    assert classic_only == ()


def test_a_consumer_group_is_deleted_only_once_empty(services: BrokerServices) -> None:
    beat(services, "a", 0, join=True)
    assert commit(services, "a", 1) == ErrorCode.none

    def delete() -> ErrorCode:
        (result,) = call(services, request(42, 2, {"groups_names": [GROUP]})).results
        return result.error_code

    assert delete() == ErrorCode.non_empty_group
    beat(services, "a", -1)
    assert delete() == ErrorCode.none
    assert services.groups.describe_consumer_group(GROUP) is None
    assert services.groups.fetch_offsets(GROUP, [("orders", 0)])[("orders", 0)] is None
    offsets = services.replicas.get("__consumer_offsets", services.groups.partition_of(GROUP))
    services.groups.on_leadership(offsets, False)
    services.groups.on_leadership(offsets, True)  # the tombstones hold after a reload
    assert services.groups.describe_consumer_group(GROUP) is None
    assert delete() == ErrorCode.group_id_not_found


def test_the_protocol_is_listed_and_served_only_with_group_version_1(
        services: BrokerServices) -> None:
    def listed() -> set[int]:
        response = call(services, request(18, 3, {"client_software_name": "t",
                                                  "client_software_version": "1"}))
        return {k.api_key for k in response.api_keys}

    assert {HEARTBEAT, DESCRIBE} <= listed()  # a new cluster starts at group.version 1
    downgraded = call(services, request(57, 1, {
        "timeout": timedelta(seconds=5), "validate_only": False, "feature_updates": [
            {"feature": "group.version", "max_version_level": 0, "upgrade_type": 2}]}))
    assert downgraded.error_code == ErrorCode.none
    services.store.refresh()
    assert not {HEARTBEAT, DESCRIBE} & listed()
    refused = beat(services, "a", 0, join=True)
    assert refused.error_code == ErrorCode.unsupported_version
    assert "group.version is 0" in refused.error_message


def test_an_offset_fetch_of_a_member_is_checked_like_a_commit(services: BrokerServices) -> None:
    beat(services, "a", 0, join=True)
    assert commit(services, "a", 1, offset=9) == ErrorCode.none

    def fetch(member: str | None, epoch: int) -> Any:
        (group,) = call(services, request(9, 9, {"require_stable": False, "groups": [
            {"group_id": GROUP, "member_id": member, "member_epoch": epoch,
             "topics": [{"name": "orders", "partition_indexes": [0]}]}]})).groups
        return group

    assert fetch("a", 1).topics[0].partitions[0].committed_offset == 9
    assert fetch(None, -1).topics[0].partitions[0].committed_offset == 9  # an admin's fetch
    assert fetch("a", 7).error_code == ErrorCode.stale_member_epoch
    assert fetch("nobody", 1).error_code == ErrorCode.unknown_member_id


def test_a_regex_subscription_is_matched_in_linear_time(services: BrokerServices) -> None:
    """A pattern that makes a backtracking engine take exponential time is matched by RE2 in
    microseconds (Kafka uses RE2/J for the same reason); the group gets the topics it names."""
    create(services, 7, new_topic("a" * 200 + "b", 1))
    started = time.monotonic()
    joined = beat(services, "a", 0, join=True, subscribed_topic_names=None,
                  subscribed_topic_regex="(a|aa)+")
    assert time.monotonic() - started < 5  # Python's re: about 2**100 steps on that name
    assert (joined.error_code, partitions(joined)) == (ErrorCode.none, [])
    regex = beat(services, "b", 0, join=True, subscribed_topic_names=None,
                 subscribed_topic_regex="ord.*")
    assert regex.error_code == ErrorCode.none
    assert describe(services).members[1].subscribed_topic_regex == "ord.*"


def classic_join(services: BrokerServices) -> Any:
    """A JoinGroup v4+ of a new member: answered at once (MEMBER_ID_REQUIRED) when accepted."""
    async def join() -> Any:
        return await services.groups.join_group(GROUP, "", None, "c", "127.0.0.1", 10000,
                                                10000, "consumer", [("range", b"")], True)
    return asyncio.run(join())


def test_a_classic_member_joins_a_live_consumer_group_as_its_member(
        services: BrokerServices) -> None:
    """As in Kafka 4, the consumer group serves it (tests/unit/broker/test_group_migration.py
    follows it further); once the last member left, the id may become a classic group's."""
    beat(services, "a", 0, join=True)
    assert commit(services, "a", 1, offset=4) == ErrorCode.none
    assert classic_join(services).error == ErrorCode.member_id_required
    assert GROUP not in services.groups.groups
    assert services.groups.describe_consumer_group(GROUP) is not None
    beat(services, "a", -1)
    assert classic_join(services).error == ErrorCode.member_id_required  # a classic group now
    assert services.groups.describe_consumer_group(GROUP) is None
    assert services.groups.fetch_offsets(GROUP, [("orders", 0)])[("orders", 0)].offset == 4


def test_a_live_consumer_group_keeps_old_offsets_and_its_subscribed_ones(
        services: BrokerServices) -> None:
    beat(services, "a", 0, join=True)
    assert commit(services, "a", 1) == ErrorCode.none
    assert services.groups.expire_offsets(now_ms=int(time.time() * 1000) + 10**12) == 0
    _, results = services.groups.delete_offsets(GROUP, [("orders", 0)])
    assert results[("orders", 0)] == ErrorCode.group_subscribed_to_topic
    listed = call(services, request(16, 5, {"states_filter": [], "types_filter": []})).groups
    assert [g.group_id for g in listed] == [GROUP]  # once, as a consumer group


def test_a_member_cannot_change_its_instance_id(services: BrokerServices) -> None:
    beat(services, "a", 0, join=True, instance_id="host-a")
    moved = beat(services, "a", 1, instance_id="host-b")
    assert moved.error_code == ErrorCode.fenced_instance_id
    group = services.groups.describe_consumer_group(GROUP)
    assert group.static_members == {"host-a": "a"}


def test_a_static_member_back_under_a_new_id_does_not_rebalance(
        services: BrokerServices) -> None:
    beat(services, "a", 0, join=True, instance_id="host-a")
    epoch = describe(services).group_epoch
    beat(services, "a", -2, instance_id="host-a")
    back = beat(services, "a2", 0, join=True, instance_id="host-a")
    assert back.error_code == ErrorCode.none
    assert partitions(back) == [0, 1, 2, 3]
    assert describe(services).group_epoch == epoch
    assert [m.member_id for m in describe(services).members] == ["a2"]


def test_the_groups_own_session_and_heartbeat_configs_apply(services: BrokerServices) -> None:
    """consumer.session.timeout.ms / consumer.heartbeat.interval.ms of the group (kafka-configs
    --entity-type groups) over the broker's, clamped into its min/max keys."""
    services.groups.consumers.settings.own = lambda group: {
        "consumer.session.timeout.ms": "55000", "consumer.heartbeat.interval.ms": "1000"}
    started = time.monotonic()
    answer = beat(services, "a", 0, join=True)
    assert answer.heartbeat_interval == timedelta(seconds=5)  # below the broker's minimum
    services.groups.tick(now=started + 54)
    assert len(describe(services).members) == 1  # past the broker's 45 s, within the 55
    services.groups.tick(now=time.monotonic() + 55)
    assert not describe(services).members
