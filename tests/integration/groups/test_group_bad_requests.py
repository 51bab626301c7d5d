"""Bad group requests get Kafka's error codes and the broker keeps serving: bad ids and
timeouts, the empty group id, names too long to store."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from kafkube.harness.wire import WireClient, create_topic
from tests.integration.groups.group_clients import NO_DELAY
from tests.integration.groups.group_requests import (
    LEAVE_GROUP,
    LIST_GROUPS,
    OFFSET_COMMIT,
    commit,
    delete_groups,
    find_coordinator,
    heartbeat,
    join,
    offset_fetch,
    req,
    sync,
)
from tests.support.broker_log import assert_no_broker_errors

# --------------------------------------------------------------------------- 6. bad input


def test_group_request_errors(broker_factory):
    broker = broker_factory(**NO_DELAY)
    with WireClient.connect(broker.bootstrap) as client:
        create_topic(client, "committed")
        find_coordinator(client, "g")
        # v4+: the first JoinGroup only hands out a member id (KIP-394).
        first = join(client, "g")
        assert first.error_code == ErrorCode.member_id_required and first.member_id
        joined = join(client, "g", first.member_id)
        assert joined.error_code == ErrorCode.none, joined
        member, generation = joined.member_id, joined.generation_id
        assert joined.leader == member and [m.member_id for m in joined.members] == [member]
        synced = sync(client, "g", generation, member, {member: b"assignment"})
        assert (synced.error_code, synced.assignment) == (ErrorCode.none, b"assignment")

        assert commit(client, "g", generation, member, "committed") == ErrorCode.none
        assert commit(client, "g", generation + 1, member, "committed") == (
            ErrorCode.illegal_generation)
        assert commit(client, "g", generation, "stranger", "committed") == (
            ErrorCode.unknown_member_id)
        assert heartbeat(client, "g", generation + 1, member) == ErrorCode.illegal_generation
        assert heartbeat(client, "g", generation, "stranger") == ErrorCode.unknown_member_id
        assert sync(client, "g", generation + 1, member).error_code == (
            ErrorCode.illegal_generation)

        # No protocol in common with the group, or another protocol type.
        assert join(client, "g", protocols=("roundrobin",), version=3).error_code == (
            ErrorCode.inconsistent_group_protocol)
        assert join(client, "g", protocol_type="connect", version=3).error_code == (
            ErrorCode.inconsistent_group_protocol)
        # Session timeouts outside group.{min,max}.session.timeout.ms (6 s, 30 min).
        for session_ms in (5999, 1_800_001):
            assert join(client, "g", session_ms=session_ms).error_code == (
                ErrorCode.invalid_session_timeout), session_ms
        # A static member id that does not match the instance's: fenced.
        static = join(client, "s", instance_id="i-1")
        assert static.error_code == ErrorCode.none, static
        assert join(client, "s", "other-id", instance_id="i-1").error_code == (
            ErrorCode.fenced_instance_id)

        assert delete_groups(client, "g", "nobody") == {
            "g": ErrorCode.non_empty_group, "nobody": ErrorCode.group_id_not_found,
        }
        left = client.request(req(LEAVE_GROUP, 2, {"group_id": "g", "member_id": member}))
        assert left.error_code == ErrorCode.none
        assert offset_fetch(client, "g", "committed", 1) == {0: 1}
        assert delete_groups(client, "g") == {"g": ErrorCode.none}
        assert offset_fetch(client, "g", "committed", 1) == {0: -1}
        assert delete_groups(client, "g") == {"g": ErrorCode.group_id_not_found}
        listed = client.request(req(LIST_GROUPS, 4, {"states_filter": []}))
        assert [g.group_id for g in listed.groups] == ["s"], listed
        # v5 (KIP-848): every group here is a classic one; type filters are case-blind.
        typed = client.request(req(LIST_GROUPS, 5, {"states_filter": [],
                                                    "types_filter": ["Classic"]}))
        assert [(g.group_id, g.group_type) for g in typed.groups] == [("s", "classic")]
        consumer = client.request(req(LIST_GROUPS, 5, {"states_filter": [],
                                                       "types_filter": ["consumer"]}))
        assert consumer.groups == ()
    assert_no_broker_errors(broker)


def test_empty_group_id_is_invalid(broker_factory):
    """Kafka refuses the empty group id in every membership API (isValidGroupId)."""
    broker = broker_factory(**NO_DELAY)
    with WireClient.connect(broker.bootstrap) as client:
        assert join(client, "").error_code == ErrorCode.invalid_group_id
        assert join(client, "", "some-member").error_code == ErrorCode.invalid_group_id
        assert sync(client, "", 1, "some-member").error_code == ErrorCode.invalid_group_id
        assert heartbeat(client, "", 1, "some-member") == ErrorCode.invalid_group_id
        left = client.request(req(LEAVE_GROUP, 2, {"group_id": "", "member_id": "some-member"}))
        assert left.error_code == ErrorCode.invalid_group_id
    assert_no_broker_errors(broker)


def test_empty_group_id_is_accepted_for_offsets(broker_factory):
    """Kafka keeps OffsetCommit and OffsetFetch working for the empty group id, for old
    clients that commit without a group ("For backwards compatibility, we support offset
    commits for the empty groupId", GroupCoordinatorService.commitOffsets)."""
    broker = broker_factory(**NO_DELAY)
    with WireClient.connect(broker.bootstrap) as client:
        create_topic(client, "anonymous")
        assert commit(client, "", -1, "", "anonymous", offset=42) == ErrorCode.none
        assert offset_fetch(client, "", "anonymous", 1) == {0: 42}
    assert_no_broker_errors(broker)


def test_names_too_long_to_store_are_refused_up_front(broker_factory):
    """A flexible request can carry a 40,000-character name; the offsets topic and the
    legacy responses cannot hold one. Such names are refused before any state exists, so
    ListGroups v0 keeps working for everyone."""
    broker = broker_factory(**NO_DELAY)
    huge = "g" * 40_000
    with WireClient.connect(broker.bootstrap) as client:
        create_topic(client, "named")
        response = client.request(req(OFFSET_COMMIT, 9, {
            "group_id": huge, "generation_id_or_member_epoch": -1, "member_id": "",
            "group_instance_id": None,
            "topics": [{"name": "named", "partitions": [
                {"partition_index": 0, "committed_offset": 5, "committed_leader_epoch": -1,
                 "committed_metadata": ""}]}]}))
        assert response.topics[0].partitions[0].error_code == ErrorCode.invalid_group_id
        assert join(client, huge, version=9).error_code == ErrorCode.invalid_group_id
        find_coordinator(client, "ok")
        assert join(client, "ok", instance_id="i" * 40_000, version=9).error_code == (
            ErrorCode.invalid_request)
        assert join(client, "ok", protocol_type="p" * 40_000, version=9).error_code == (
            ErrorCode.invalid_request)
        assert join(client, "ok", protocols=("r" * 40_000,), version=9).error_code == (
            ErrorCode.invalid_request)
        for version in (0, 2, 5):
            listed = client.request(req(LIST_GROUPS, version, {"states_filter": [],
                                                               "types_filter": []}))
            assert listed.error_code == ErrorCode.none and listed.groups == (), listed
        # A commit for a topic the cluster does not have is refused, as Kafka refuses it.
        assert commit(client, "ok", -1, "", "no-such-topic") == (
            ErrorCode.unknown_topic_or_partition)
    assert_no_broker_errors(broker)
