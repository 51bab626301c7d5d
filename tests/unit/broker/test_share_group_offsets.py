"""A share group's offsets changed by an administrator (KIP-932), through the handlers, the group
coordinator, the share coordinator and the share-partition manager of one broker:
AlterShareGroupOffsets (91) and DeleteShareGroupOffsets (92) only while the group is empty,
what the next member fetches afterwards (the leader had the old state in memory), and
DeleteGroups removing a share group's state with its records. Bad requests get Kafka's codes
and change nothing."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from broker.coordinator.share_state_log import ShareKey
from broker.handlers import groups, share_fetch, share_groups, share_offsets  # noqa: F401
from broker.handlers.context import BrokerServices
from broker.share.share_partition import AckBatch
from tests.support.group_calls import finish_now
from tests.support.handlers import call, make_services, request
from tests.unit.broker.test_share_fetch import (
    ACCEPT,
    GROUP,
    TOPIC,
    acknowledge,
    acquired,
    fetch,
    produce,
    topic_id,
)
from tests.unit.broker.test_share_group_heartbeat import beat

CLOSE = -1


@pytest.fixture
def services(tmp_path: Path) -> BrokerServices:
    services = make_services(tmp_path, **{"share.coordinator.state.topic.num.partitions": "2",
                                          "offsets.topic.num.partitions": "3"})
    asyncio.run(services.replicas.create_topic(TOPIC, 1, {}))
    services.shares.settings.own = lambda group: {"share.auto.offset.reset": "earliest"}
    finish_now(services.groups.ensure_offsets_topic())
    services.groups.load()
    return services


def consume_then_leave(services: BrokerServices, member: str, accepted: int) -> None:
    """``member`` joins, fetches everything, accepts offsets 0 to ``accepted`` - 1, closes
    its share session and leaves: the group is empty, the leader keeps the state."""
    assert beat(services, member, 0, [TOPIC]).error_code == ErrorCode.none
    assert acquired(fetch(services, member, 0))
    if accepted:
        response = acknowledge(services, member, 1, [(0, accepted - 1, [ACCEPT])])
        assert response.error_code == ErrorCode.none
    assert fetch(services, member, CLOSE).error_code == ErrorCode.none
    assert beat(services, member, -1).error_code == ErrorCode.none


def alter(services: BrokerServices, starts: dict[int, int], topic: str = TOPIC,
          group: str = GROUP) -> Any:
    return call(services, request(91, 0, {"group_id": group, "topics": [
        {"topic_name": topic, "partitions": [
            {"partition_index": p, "start_offset": s} for p, s in starts.items()]}]}))


def delete_offsets(services: BrokerServices, topic: str = TOPIC, group: str = GROUP) -> Any:
    return call(services, request(92, 0, {"group_id": group,
                                          "topics": [{"topic_name": topic}]}))


def delete_group(services: BrokerServices) -> ErrorCode:
    (result,) = call(services, request(42, 2, {"groups_names": [GROUP]})).results
    return result.error_code


def stored(services: BrokerServices) -> Any:
    """The share coordinator's state of partition 0 (None: it has none)."""
    return finish_now(services.share_coordinator.read(
        ShareKey(GROUP, topic_id(services), 0))).state


def partition_errors(response: Any) -> list[ErrorCode]:
    return [p.error_code for t in response.responses for p in t.partitions]


def test_offsets_are_reset_while_the_group_is_empty_and_the_next_member_reads_there(
        services: BrokerServices) -> None:
    produce(services, 10)
    assert beat(services, "a", 0, [TOPIC]).error_code == ErrorCode.none
    refused = alter(services, {0: 2})
    assert refused.error_code == ErrorCode.non_empty_group and "1 members" in \
        refused.error_message
    assert partition_errors(refused) == [ErrorCode.non_empty_group]
    assert stored(services) is None  # nothing initialized by the refused request
    assert beat(services, "a", -1).error_code == ErrorCode.none
    consume_then_leave(services, "b", accepted=5)
    before = stored(services)
    assert before.start_offset == 5

    response = alter(services, {0: 2})
    assert response.error_code == ErrorCode.none
    assert partition_errors(response) == [ErrorCode.none]
    after = stored(services)
    assert (after.start_offset, after.batches) == (2, ())
    assert after.state_epoch == before.state_epoch + 1
    # The leader held offsets 5-9 available at the old state epoch: the next member of
    # the group reads from the reset offset, each record a first delivery.
    assert beat(services, "c", 0, [TOPIC]).error_code == ErrorCode.none
    assert acquired(fetch(services, "c", 0)) == [(2, 9, 1)]


def test_deleted_offsets_start_again_where_auto_offset_reset_says(
        services: BrokerServices) -> None:
    produce(services, 10)
    consume_then_leave(services, "a", accepted=10)
    assert stored(services).start_offset == 10
    assert acquired(fetch(services, "a", 0)) == []  # everything is done

    response = delete_offsets(services)
    assert response.error_code == ErrorCode.none
    assert [t.error_code for t in response.responses] == [ErrorCode.none]
    assert stored(services) is None
    assert services.groups.describe_share_group(GROUP).initialized == {}
    again = delete_offsets(services)  # the group has no offsets of the topic any more
    assert [t.error_code for t in again.responses] == [ErrorCode.unknown_topic_or_partition]
    assert acquired(fetch(services, "b", 0)) == [(0, 9, 1)]  # earliest, from the start


def test_deleting_a_share_group_deletes_its_state(services: BrokerServices) -> None:
    produce(services, 4)
    consume_then_leave(services, "a", accepted=4)
    assert beat(services, "b", 0, [TOPIC]).error_code == ErrorCode.none
    assert delete_group(services) == ErrorCode.non_empty_group
    assert stored(services).start_offset == 4  # kept with the group
    assert beat(services, "b", -1).error_code == ErrorCode.none

    assert delete_group(services) == ErrorCode.none
    assert stored(services) is None
    assert services.groups.describe_share_group(GROUP) is None
    # A group of the same name starts afresh (earliest here), not at the old offset 4.
    assert beat(services, "c", 0, [TOPIC]).error_code == ErrorCode.none
    assert acquired(fetch(services, "c", 0)) == [(0, 3, 1)]


def test_bad_offset_changes_are_refused_and_change_nothing(services: BrokerServices) -> None:
    produce(services, 10)
    consume_then_leave(services, "a", accepted=3)
    state = stored(services)
    response = alter(services, {0: -1, 7: 0})
    assert partition_errors(response) == [ErrorCode.invalid_request,
                                          ErrorCode.unknown_topic_or_partition]
    assert stored(services) == state
    unknown = alter(services, {0: 1}, topic="nope")
    assert partition_errors(unknown) == [ErrorCode.unknown_topic_or_partition]
    assert delete_offsets(services, group="nobody").error_code == ErrorCode.group_id_not_found
    assert alter(services, {0: 1}, group="").error_code == ErrorCode.invalid_group_id
    assert stored(services) == state


def test_describing_offsets_of_a_huge_request_is_bounded(services: BrokerServices) -> None:
    """Fuzzing found it (seed 2): a 2 MB DescribeShareGroupOffsets naming a 32 KB group and
    thousands of partitions held the event loop for 39 s, hashing the group id once per
    partition. Partitions the topic does not have are answered without a read, a group id
    too long is refused, and a long valid one is hashed once."""
    produce(services, 1)
    consume_then_leave(services, "a", accepted=1)
    long_group = "g" * 32767

    def describe(group: str, partitions: list[int]) -> Any:
        (answer,) = call(services, request(90, 1, {"groups": [
            {"group_id": group, "topics": [{"topic_name": TOPIC,
                                            "partitions": partitions}]}]})).groups
        return answer

    assert describe("g" * 32768, [0]).error_code == ErrorCode.invalid_group_id
    answer = describe(long_group, [0, *range(1, 20_000)])
    (topic,) = answer.topics
    assert [p.error_code for p in topic.partitions[:2]] == [
        ErrorCode.none, ErrorCode.unknown_topic_or_partition]
    assert len(topic.partitions) == 20_000
    assert describe(GROUP, [0]).topics[0].partitions[0].start_offset == 1


def test_offsets_of_a_group_not_known_yet_make_it_as_kafka_does(
        services: BrokerServices) -> None:
    produce(services, 5)
    assert alter(services, {0: 3}, group="later").error_code == ErrorCode.none
    group = services.groups.describe_share_group("later")
    assert group is not None and not group.members
    assert group.initialized == {topic_id(services): (TOPIC, frozenset({0}))}
    services.groups.load()  # a new coordinator finds it in __consumer_offsets
    assert services.groups.describe_share_group("later").initialized == group.initialized


def test_no_member_joins_while_the_offsets_are_changed(services: BrokerServices) -> None:
    """Resetting or deleting takes several awaited steps: a member let in between would
    start from a half-changed state (DeleteGroups: at share.auto.offset.reset, past records
    never delivered)."""
    produce(services, 1)
    consume_then_leave(services, "a", accepted=0)
    with services.groups.shares.administering(GROUP):
        refused = beat(services, "b", 0, [TOPIC])
        assert refused.error_code == ErrorCode.coordinator_load_in_progress
        assert alter(services, {0: 0}).error_code == ErrorCode.coordinator_load_in_progress
    assert beat(services, "b", 0, [TOPIC]).error_code == ErrorCode.none


def test_a_deleted_state_is_never_matched_by_one_kept_in_memory(
        services: BrokerServices) -> None:
    """The state epoch goes on after a delete: the leader's replaced share-partition (a
    request still holding it) neither acquires nor stores anything, and its epoch cannot
    match the new state's."""
    produce(services, 10)
    consume_then_leave(services, "a", accepted=5)
    old_slot = next(iter(services.shares.slots.values()))
    old_epoch = stored(services).state_epoch
    assert delete_offsets(services).error_code == ErrorCode.none
    assert acquired(fetch(services, "b", 0)) == [(0, 9, 1)]  # started again, earliest
    assert stored(services).state_epoch > old_epoch
    assert old_slot.retired and services.shares.slots[old_slot.key] is not old_slot
    assert services.shares.fetch(old_slot, "c", 100, 1 << 20).acquired == ()
    error, _ = asyncio.run(services.shares.acknowledge(old_slot, "a", [AckBatch(5, 9, [1])]))
    assert error == ErrorCode.not_leader_or_follower
    before = stored(services)
    error, _ = asyncio.run(services.share_coordinator.write(
        old_slot.key, old_epoch, old_slot.leader_epoch, 5, ()))
    assert error == ErrorCode.fenced_state_epoch and stored(services) == before
