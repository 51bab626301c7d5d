"""KIP-848 records decode to what was encoded (Kafka's reading of the same bytes is checked in
tests/integration/test_consumer_group_records.py), and other record types are not ours."""

from __future__ import annotations

import dataclasses
import uuid

import pytest

from broker.coordinator import offsets_topic
from broker.coordinator.consumer_group import (
    ClassicProtocols,
    ConsumerMember,
    MemberState,
    assignment,
)
from broker.coordinator.consumer_records import (
    CURRENT_ASSIGNMENT,
    GROUP_METADATA,
    MEMBER_METADATA,
    REGULAR_EXPRESSION,
    TARGET_MEMBER,
    TARGET_METADATA,
    ConsumerKey,
    decode_current_assignment,
    decode_group_metadata,
    decode_key,
    decode_member_metadata,
    decode_regular_expression,
    decode_target_member,
    decode_target_metadata,
    encode_current_assignment,
    encode_group_metadata,
    encode_key,
    encode_member_metadata,
    encode_regular_expression,
    encode_target_member,
    encode_target_metadata,
)

A, B = uuid.UUID(int=7), uuid.UUID(int=9)


@pytest.mark.parametrize("key", [
    ConsumerKey(GROUP_METADATA, "g"), ConsumerKey(TARGET_METADATA, "grüppe"),
    ConsumerKey(MEMBER_METADATA, "g", "m"), ConsumerKey(TARGET_MEMBER, "g", "m"),
    ConsumerKey(CURRENT_ASSIGNMENT, "g", "m"), ConsumerKey(REGULAR_EXPRESSION, "g", "a|b.*"),
])
def test_keys_round_trip(key: ConsumerKey) -> None:
    assert decode_key(encode_key(key)) == key


def test_classic_records_are_not_ours() -> None:
    assert decode_key(offsets_topic.encode_key(offsets_topic.GroupKey("g"))) is None
    assert decode_key(offsets_topic.encode_key(offsets_topic.OffsetKey("g", "t", 0))) is None


@pytest.mark.parametrize("member", [
    ConsumerMember("m", client_id="c", client_host="/h", subscribed_topic_names=("t",),
                   rebalance_timeout_ms=300000),
    ConsumerMember("m", "i", "r", "c", "/h", (), "t.*", 1, "range",
                   ClassicProtocols(10000, (("range", b"x"), ("cooperative-sticky", b"")))),
])
def test_member_metadata_round_trips(member: ConsumerMember) -> None:
    assert decode_member_metadata("m", encode_member_metadata(member)) == member


def test_assignments_and_epochs_round_trip() -> None:
    member = ConsumerMember("m", member_epoch=12, previous_member_epoch=11,
                            state=MemberState.UNRELEASED_PARTITIONS,
                            assigned=assignment([(A, 0), (B, 3), (B, 1)]),
                            pending_revocation=assignment([(A, 5)]),
                            assignment_epochs={(A, 0): 9, (B, 1): 12, (B, 3): 11})
    current = decode_current_assignment(encode_current_assignment(member))
    assert dataclasses.astuple(current) == (12, 11, MemberState.UNRELEASED_PARTITIONS,
                                            member.assigned, member.pending_revocation,
                                            member.assignment_epochs)
    assert decode_target_member(encode_target_member(member.assigned)) == member.assigned
    assert decode_group_metadata(encode_group_metadata(4)) == (4, 0)
    assert decode_group_metadata(encode_group_metadata(4, -99)) == (4, -99)
    assert decode_target_metadata(encode_target_metadata(4, 1234)) == 4
    assert decode_regular_expression(encode_regular_expression(("a", "b"), 8, 9)) == (
        ("a", "b"), 8, 9)


def test_an_unknown_value_version_is_refused() -> None:
    with pytest.raises(ValueError, match="value version 1"):
        decode_group_metadata(b"\x00\x01" + encode_group_metadata(4)[2:])
