"""Share groups' records in ``__consumer_offsets``, in Kafka 4's formats (the
ShareGroup*Key/Value schemas), so a coordinator taking a partition over rebuilds each share
group where it was:

    10 ShareGroupMemberMetadata          a member's rack, client and subscription
    11 ShareGroupMetadata                the group epoch and the subscribed topics' hash
    12 ShareGroupTargetAssignmentMetadata   the epoch the target was computed for
    13 ShareGroupTargetAssignmentMember  a member's target partitions
    14 ShareGroupCurrentMemberAssignment  a member's epochs and partitions
    15 ShareGroupStatePartitionMetadata  the partitions whose share state is initialized

Keys: the type (int16), the group id and, for 10, 13 and 14, the member id (int16-length
strings). Values: version 0, flexible (compact strings and arrays, tagged fields).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass

from broker.coordinator.consumer_group import Assignment
from broker.coordinator.consumer_records import (
    Entry,
    read_topic_partitions,
    value_reader,
    write_topic_partitions,
)
from broker.coordinator.serde import Reader, Writer
from broker.coordinator.share_group import ShareGroup, ShareMember

MEMBER_METADATA, GROUP_METADATA, TARGET_METADATA = 10, 11, 12
TARGET_MEMBER, CURRENT_ASSIGNMENT, STATE_PARTITIONS = 13, 14, 15
TYPES = (MEMBER_METADATA, GROUP_METADATA, TARGET_METADATA, TARGET_MEMBER, CURRENT_ASSIGNMENT,
         STATE_PARTITIONS)
_PER_MEMBER = (MEMBER_METADATA, TARGET_MEMBER, CURRENT_ASSIGNMENT)
STABLE = 0  # MemberState in record 14: share members are always at their target


@dataclass(frozen=True, slots=True)
class ShareKey:
    type: int
    group: str
    member_id: str = ""


def encode_key(key: ShareKey) -> bytes:
    w = Writer().i16(key.type).string(key.group)
    if key.type in _PER_MEMBER:
        w.string(key.member_id)
    return bytes(w.buf)


def decode_key(data: bytes) -> ShareKey | None:
    r = Reader(data)
    kind = r.i16()
    if kind not in TYPES:
        return None
    group = r.string() or ""
    return ShareKey(kind, group, r.string() or "" if kind in _PER_MEMBER else "")


def encode_member_metadata(m: ShareMember) -> bytes:
    w = Writer().i16(0).compact_nullable_string(m.rack_id)
    w.compact_string(m.client_id).compact_string(m.client_host)
    w.compact_length(len(m.subscribed_topic_names))
    for name in m.subscribed_topic_names:
        w.compact_string(name)
    return bytes(w.tagged({}).buf)


def decode_member_metadata(member_id: str, data: bytes) -> ShareMember:
    r = value_reader(data)
    rack_id = r.compact_string()
    client_id, client_host = r.compact_string() or "", r.compact_string() or ""
    names = tuple(r.compact_string() or "" for _ in range(r.compact_length() or 0))
    r.tagged()
    return ShareMember(member_id, rack_id, client_id, client_host, names)


def encode_group_metadata(epoch: int, metadata_hash: int) -> bytes:
    return bytes(Writer().i16(0).i32(epoch).i64(metadata_hash).tagged({}).buf)


def decode_group_metadata(data: bytes) -> tuple[int, int]:
    r = value_reader(data)
    epoch, metadata_hash = r.i32(), r.i64()
    r.tagged()
    return epoch, metadata_hash


def encode_target_metadata(epoch: int) -> bytes:
    return bytes(Writer().i16(0).i32(epoch).tagged({}).buf)


def decode_target_metadata(data: bytes) -> int:
    r = value_reader(data)
    epoch = r.i32()
    r.tagged()
    return epoch


def encode_target_member(partitions: Assignment) -> bytes:
    return bytes(write_topic_partitions(Writer().i16(0), partitions).tagged({}).buf)


def decode_target_member(data: bytes) -> Assignment:
    r = value_reader(data)
    partitions = read_topic_partitions(r)
    r.tagged()
    return partitions


def encode_current_assignment(m: ShareMember) -> bytes:
    w = Writer().i16(0).i32(m.member_epoch).i32(m.previous_member_epoch).i8(STABLE)
    return bytes(write_topic_partitions(w, m.assigned).tagged({}).buf)


def decode_current_assignment(data: bytes) -> tuple[int, int, Assignment]:
    """(member epoch, previous member epoch, assigned partitions)."""
    r = value_reader(data)
    epoch, previous = r.i32(), r.i32()
    r.i8()
    assigned = read_topic_partitions(r)
    r.tagged()
    return epoch, previous, assigned


def encode_state_partitions(initialized: Mapping[uuid.UUID, tuple[str, frozenset[int]]]
                            ) -> bytes:
    """ShareGroupStatePartitionMetadata: the partitions whose share state the group has
    (InitializedTopics); kafkube initializes a partition's state on its first fetch, so
    none is ever "initializing", and deleting topics are not tracked."""
    w = Writer().i16(0).compact_length(0).compact_length(len(initialized))
    for topic_id in sorted(initialized, key=lambda t: t.bytes):
        name, partitions = initialized[topic_id]
        w.uuid(topic_id).compact_string(name).compact_length(len(partitions))
        for p in sorted(partitions):
            w.i32(p)
        w.tagged({})
    return bytes(w.compact_length(0).tagged({}).buf)


def decode_state_partitions(data: bytes) -> dict[uuid.UUID, tuple[str, frozenset[int]]]:
    r = value_reader(data)
    out: dict[uuid.UUID, tuple[str, frozenset[int]]] = {}
    for _ in range(2):  # initializing, then initialized: both have state (or will)
        for _ in range(r.compact_length() or 0):
            topic_id, name = r.uuid(), r.compact_string() or ""
            parts = frozenset(r.i32() for _ in range(r.compact_length() or 0))
            r.tagged()
            known = out.get(topic_id, (name, frozenset()))[1]
            out[topic_id] = (name, known | parts)
    for _ in range(r.compact_length() or 0):  # deleting
        r.uuid()
        r.compact_string()
        r.tagged()
    r.tagged()
    return out


# -- whole records -------------------------------------------------------------------------


def member_metadata_entry(group_id: str, m: ShareMember) -> Entry:
    return encode_key(ShareKey(MEMBER_METADATA, group_id, m.member_id)), \
        encode_member_metadata(m)


def group_metadata_entry(group: ShareGroup) -> Entry:
    return encode_key(ShareKey(GROUP_METADATA, group.group_id)), \
        encode_group_metadata(group.group_epoch, group.metadata_hash)


def target_metadata_entry(group: ShareGroup) -> Entry:
    return encode_key(ShareKey(TARGET_METADATA, group.group_id)), \
        encode_target_metadata(group.target_epoch)


def target_member_entry(group_id: str, member_id: str, target: Assignment) -> Entry:
    return encode_key(ShareKey(TARGET_MEMBER, group_id, member_id)), \
        encode_target_member(target)


def current_assignment_entry(group_id: str, m: ShareMember) -> Entry:
    return encode_key(ShareKey(CURRENT_ASSIGNMENT, group_id, m.member_id)), \
        encode_current_assignment(m)


def member_tombstones(group_id: str, member_id: str) -> list[Entry]:
    return [(encode_key(ShareKey(kind, group_id, member_id)), None)
            for kind in (CURRENT_ASSIGNMENT, TARGET_MEMBER, MEMBER_METADATA)]


def state_partitions_entry(group: ShareGroup) -> Entry:
    return encode_key(ShareKey(STATE_PARTITIONS, group.group_id)), \
        encode_state_partitions(group.initialized)


def group_tombstones(group: ShareGroup) -> list[Entry]:
    """Every record of an (empty) group: what DeleteGroups writes."""
    gid = group.group_id
    return [*(t for m in group.members for t in member_tombstones(gid, m)),
            (encode_key(ShareKey(TARGET_METADATA, gid)), None),
            (encode_key(ShareKey(STATE_PARTITIONS, gid)), None),
            (encode_key(ShareKey(GROUP_METADATA, gid)), None)]
