"""ShareGroupHeartbeat and ShareGroupDescribe through the real coordinator and handlers: members
take their share of the partitions at once, share them when they outnumber the partitions,
leave or time out; bad requests are refused with Kafka's codes and store nothing; a new
coordinator loads the group from its records."""

from __future__ import annotations

import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from broker.handlers import consumer_groups, share_groups  # noqa: F401 (registers)
from broker.handlers.context import BrokerServices
from tests.support.group_calls import finish_now
from tests.support.handlers import call, create, make_services, new_topic, request
from tests.unit.broker.test_consumer_group_heartbeat import beat as consumer_beat

GROUP = "queue"
HEARTBEAT, DESCRIBE = 76, 77


@pytest.fixture
def services(tmp_path: Path) -> BrokerServices:
    services = make_services(tmp_path, **{"offsets.topic.num.partitions": "3",
                                          "group.share.max.size": "4"})
    create(services, 7, new_topic("orders", 2))
    finish_now(services.groups.ensure_offsets_topic())
    services.groups.load()
    return services


def beat(services: BrokerServices, member: str, epoch: int, topics: list[str] | None = None,
         group: str = GROUP, **fields: Any) -> Any:
    values: dict[str, Any] = {"group_id": group, "member_id": member, "member_epoch": epoch,
                              "rack_id": None, "subscribed_topic_names": topics}
    values.update(fields)
    return call(services, request(HEARTBEAT, 1, values))


def join(services: BrokerServices, member: str, **fields: Any) -> Any:
    return beat(services, member, 0, ["orders"], **fields)


def partitions(response: Any) -> list[int] | None:
    if response.assignment is None:
        return None
    return sorted(p for tp in response.assignment.topic_partitions for p in tp.partitions)


def describe(services: BrokerServices, group: str = GROUP) -> Any:
    (described,) = call(services, request(DESCRIBE, 1, {
        "group_ids": [group], "include_authorized_operations": False})).groups
    return described


def offsets_end(services: BrokerServices) -> int:
    partition = services.replicas.get("__consumer_offsets", services.groups.partition_of(GROUP))
    return partition.log.log_end_offset


def test_members_split_the_partitions_then_share_them(services: BrokerServices) -> None:
    a = join(services, "a")
    assert (a.error_code, a.member_epoch, partitions(a)) == (ErrorCode.none, 1, [0, 1])
    assert a.heartbeat_interval == timedelta(seconds=5)
    b = join(services, "b")
    assert (b.member_epoch, partitions(b)) == (2, [1])
    again = beat(services, "a", 1)
    assert (again.member_epoch, partitions(again)) == (2, [0])  # at once: nothing to revoke
    c = join(services, "c")  # three members, two partitions: c shares one
    assert partitions(c) in ([0], [1])
    described = describe(services)
    assert (described.group_state, described.group_epoch, described.assignor_name) == \
        ("Stable", 3, "simple")
    assert sorted(m.member_id for m in described.members) == ["a", "b", "c"]


def test_leaving_and_expiring_give_the_partitions_to_the_others(
        services: BrokerServices) -> None:
    join(services, "a")
    join(services, "b")
    assert partitions(beat(services, "a", 1)) == [0]
    left = beat(services, "b", 2, member_epoch=-1)
    assert (left.error_code, left.member_epoch) == (ErrorCode.none, -1)
    assert partitions(beat(services, "a", 2)) == [0, 1]
    join(services, "c")
    services.groups.tick(now=10**9)  # far past every session
    assert describe(services).group_state == "Empty"
    assert beat(services, "c", 4).error_code == ErrorCode.unknown_member_id


BAD = [
    ({"member_id": ""}, "MemberId can't be empty."),
    ({"subscribed_topic_names": None}, "SubscribedTopicNames must be set in first request."),
    ({"member_epoch": -2}, "MemberEpoch is invalid."),
    ({"rack_id": ""}, "RackId can't be empty."),
]


@pytest.mark.parametrize(("fields", "message"), BAD)
def test_bad_requests_are_refused_and_store_nothing(services: BrokerServices, fields: dict,
                                                    message: str) -> None:
    end = offsets_end(services)
    answer = beat(services, **{"member": "a", "epoch": 0, "topics": ["orders"], **fields})
    assert (answer.error_code, answer.error_message) == (ErrorCode.invalid_request, message)
    assert offsets_end(services) == end


def test_stale_epochs_strangers_and_other_kinds_of_group_are_refused(
        services: BrokerServices) -> None:
    join(services, "a")
    join(services, "b")
    assert beat(services, "a", 7).error_code == ErrorCode.fenced_member_epoch
    assert beat(services, "ghost", 1).error_code == ErrorCode.unknown_member_id
    for extra in ("c", "d"):
        join(services, extra)
    full = join(services, "e")
    assert full.error_code == ErrorCode.group_max_size_reached
    consumer_beat(services, "k", 0, join=True)  # the id "g" is a KIP-848 group's
    other = beat(services, "x", 0, ["orders"], group="g")
    assert (other.error_code, other.error_message) == (ErrorCode.group_id_not_found,
                                                       "Group g is not a share group.")
    assert describe(services, "g").error_code == ErrorCode.group_id_not_found


def test_a_new_coordinator_loads_the_group_from_its_records(services: BrokerServices) -> None:
    join(services, "a")
    join(services, "b")
    before = describe(services)
    offsets = services.replicas.get("__consumer_offsets", services.groups.partition_of(GROUP))
    services.groups.on_leadership(offsets, False)
    assert services.groups.describe_share_group(GROUP) is None
    services.groups.on_leadership(offsets, True)
    assert describe(services) == before
    moved = beat(services, "a", 1)  # a takes the target it missed, from the loaded group
    assert (moved.error_code, moved.member_epoch, partitions(moved)) == (ErrorCode.none, 2, [0])


def test_listed_as_share_groups_and_deleted_once_empty(services: BrokerServices) -> None:
    join(services, "a")
    listed = call(services, request(16, 5, {"states_filter": [], "types_filter": ["share"]}))
    assert [(g.group_id, g.group_type, g.group_state) for g in listed.groups] == \
        [(GROUP, "share", "Stable")]
    assert services.groups.delete_groups([GROUP]) == {GROUP: ErrorCode.non_empty_group}
    beat(services, "a", 1, member_epoch=-1)
    assert services.groups.delete_groups([GROUP]) == {GROUP: ErrorCode.none}
    assert services.groups.describe_share_group(GROUP) is None


def test_the_groups_own_session_and_heartbeat_configs_apply(services: BrokerServices) -> None:
    services.groups.shares.settings.own = lambda group: {
        "share.heartbeat.interval.ms": "7000", "share.session.timeout.ms": "50000"} \
        if group == GROUP else {"share.heartbeat.interval.ms": "99000"}
    before = time.monotonic()
    assert join(services, "a").heartbeat_interval == timedelta(seconds=7)
    after = time.monotonic()
    other = beat(services, "b", 0, ["orders"], group="other")
    assert other.heartbeat_interval == timedelta(seconds=15)  # the broker's maximum
    deadline = services.groups.shares.sessions[(GROUP, "a")]
    assert before + 50 <= deadline <= after + 50  # the group's 50 s, not the broker's 45
    services.groups.shares.expire(deadline - 0.001)
    assert "a" in describe_members(services)
    services.groups.shares.expire(deadline)
    assert "a" not in describe_members(services)


def describe_members(services: BrokerServices) -> list[str]:
    return [m.member_id for m in describe(services).members]
