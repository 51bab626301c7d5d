"""KIP-848 consumer groups' records in ``__consumer_offsets``, in Kafka 4's formats, so a
coordinator that takes a partition over (or Kafka's own tools) reads every group back.

A key is its record type (int16) and the type's fields; a value is a version (0) and flexible
fields (compact strings and arrays, tagged fields). Types, from Kafka's
``group-coordinator/.../common/message/ConsumerGroup*.json``:

    3  ConsumerGroupMetadata            the group epoch (and tag 0: the metadata hash)
    5  ConsumerGroupMemberMetadata      a member's subscription and client facts
    6  ConsumerGroupTargetAssignmentMetadata   the target's epoch (tag 0: when computed)
    7  ConsumerGroupTargetAssignmentMember     a member's target partitions
    8  ConsumerGroupCurrentMemberAssignment    a member's epochs, state and partitions
    16 ConsumerGroupRegularExpression   a subscribed regex and the topics it resolved to

A null value is a tombstone: the member (or the group) is gone.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass

from broker.coordinator.consumer_group import (
    Assignment,
    ClassicProtocols,
    ConsumerGroup,
    ConsumerMember,
    MemberState,
)
from broker.coordinator.serde import Reader, Writer

GROUP_METADATA, MEMBER_METADATA = 3, 5
TARGET_METADATA, TARGET_MEMBER, CURRENT_ASSIGNMENT, REGULAR_EXPRESSION = 6, 7, 8, 16
TYPES = (GROUP_METADATA, MEMBER_METADATA, TARGET_METADATA, TARGET_MEMBER, CURRENT_ASSIGNMENT,
         REGULAR_EXPRESSION)
VALUE_VERSION = 0


@dataclass(frozen=True, slots=True)
class ConsumerKey:
    """A KIP-848 record's key: its type, the group, and the member id (types 5, 7, 8) or
    the regular expression (type 16), else empty."""

    type: int
    group: str
    name: str = ""


def encode_key(key: ConsumerKey) -> bytes:
    w = Writer().i16(key.type).string(key.group)
    if key.type in (MEMBER_METADATA, TARGET_MEMBER, CURRENT_ASSIGNMENT, REGULAR_EXPRESSION):
        w.string(key.name)
    return bytes(w.buf)


def decode_key(data: bytes) -> ConsumerKey | None:
    """The key of a KIP-848 record, None for other record types."""
    r = Reader(data)
    kind = r.i16()
    if kind not in TYPES:
        return None
    group = r.string() or ""
    if kind in (GROUP_METADATA, TARGET_METADATA):
        return ConsumerKey(kind, group)
    return ConsumerKey(kind, group, r.string() or "")


# -- values ----------------------------------------------------------------------------------


def encode_group_metadata(epoch: int, metadata_hash: int = 0) -> bytes:
    w = Writer().i16(VALUE_VERSION).i32(epoch)
    w.tagged({0: bytes(Writer().i64(metadata_hash).buf)} if metadata_hash else {})
    return bytes(w.buf)


def decode_group_metadata(data: bytes) -> tuple[int, int]:
    """(group epoch, metadata hash)."""
    r = value_reader(data)
    epoch = r.i32()
    tags = r.tagged()
    return epoch, Reader(tags[0]).i64() if 0 in tags else 0


def encode_target_metadata(epoch: int, timestamp_ms: int = 0) -> bytes:
    w = Writer().i16(VALUE_VERSION).i32(epoch)
    w.tagged({0: bytes(Writer().i64(timestamp_ms).buf)} if timestamp_ms else {})
    return bytes(w.buf)


def decode_target_metadata(data: bytes) -> int:
    r = value_reader(data)
    epoch = r.i32()
    r.tagged()
    return epoch


def encode_member_metadata(m: ConsumerMember) -> bytes:
    w = Writer().i16(VALUE_VERSION)
    w.compact_nullable_string(m.instance_id).compact_nullable_string(m.rack_id)
    w.compact_string(m.client_id).compact_string(m.client_host)
    w.compact_length(len(m.subscribed_topic_names))
    for name in m.subscribed_topic_names:
        w.compact_string(name)
    w.compact_nullable_string(m.subscribed_topic_regex).i32(m.rebalance_timeout_ms)
    w.compact_nullable_string(m.server_assignor)
    tags = {}
    if m.classic is not None:
        c = Writer().i32(m.classic.session_timeout_ms).compact_length(len(m.classic.protocols))
        for name, metadata in m.classic.protocols:
            c.compact_string(name).compact_bytes(metadata).tagged({})
        tags[0] = b"\x01" + bytes(c.tagged({}).buf)  # a nullable struct: 1, then the struct
    return bytes(w.tagged(tags).buf)


def decode_member_metadata(member_id: str, data: bytes) -> ConsumerMember:
    """The member's subscription facts; its epochs and partitions come from type 8."""
    r = value_reader(data)
    instance_id, rack_id = r.compact_string(), r.compact_string()
    client_id, client_host = r.compact_string() or "", r.compact_string() or ""
    names = tuple(r.compact_string() or "" for _ in range(r.compact_length() or 0))
    regex, rebalance_timeout_ms, assignor = r.compact_string(), r.i32(), r.compact_string()
    tags = r.tagged()
    classic = None
    if 0 in tags and tags[0][:1] != b"\xff":  # a nullable struct: -1 for null, else 1
        c = Reader(tags[0])
        c.i8()
        session_timeout_ms = c.i32()
        protocols = []
        for _ in range(c.compact_length() or 0):
            name, metadata = c.compact_string() or "", c.compact_bytes()
            c.tagged()
            protocols.append((name, metadata))
        classic = ClassicProtocols(session_timeout_ms, tuple(protocols))
    return ConsumerMember(member_id, instance_id, rack_id, client_id, client_host, names, regex,
                          rebalance_timeout_ms, assignor, classic)


def encode_target_member(partitions: Assignment) -> bytes:
    return bytes(write_topic_partitions(Writer().i16(VALUE_VERSION), partitions).tagged({}).buf)


def decode_target_member(data: bytes) -> Assignment:
    r = value_reader(data)
    partitions = read_topic_partitions(r)
    r.tagged()
    return partitions


def encode_current_assignment(m: ConsumerMember) -> bytes:
    w = Writer().i16(VALUE_VERSION).i32(m.member_epoch).i32(m.previous_member_epoch)
    w.i8(int(m.state))
    write_topic_partitions(w, m.assigned, m.assignment_epochs or None)
    write_topic_partitions(w, m.pending_revocation)
    return bytes(w.tagged({}).buf)


@dataclass(frozen=True, slots=True)
class CurrentAssignment:
    member_epoch: int
    previous_member_epoch: int
    state: MemberState
    assigned: Assignment
    pending_revocation: Assignment
    assignment_epochs: dict[tuple[uuid.UUID, int], int]


def decode_current_assignment(data: bytes) -> CurrentAssignment:
    r = value_reader(data)
    epoch, previous, state = r.i32(), r.i32(), r.i8()
    epochs: dict[tuple[uuid.UUID, int], int] = {}
    assigned = read_topic_partitions(r, epochs)
    pending = read_topic_partitions(r)
    r.tagged()
    known = state in MemberState._value2member_map_
    return CurrentAssignment(epoch, previous, MemberState(state) if known else MemberState.UNKNOWN,
                             assigned, pending, epochs)


def encode_regular_expression(topics: tuple[str, ...], version: int, timestamp_ms: int) -> bytes:
    w = Writer().i16(VALUE_VERSION).compact_length(len(topics))
    for topic in topics:
        w.compact_string(topic)
    return bytes(w.i64(version).i64(timestamp_ms).tagged({}).buf)


def decode_regular_expression(data: bytes) -> tuple[tuple[str, ...], int, int]:
    """(the topics it matched, the metadata version it was resolved at, when)."""
    r = value_reader(data)
    topics = tuple(r.compact_string() or "" for _ in range(r.compact_length() or 0))
    version, timestamp_ms = r.i64(), r.i64()
    r.tagged()
    return topics, version, timestamp_ms


def value_reader(data: bytes) -> Reader:
    r = Reader(data)
    version = r.i16()
    if version != VALUE_VERSION:
        raise ValueError(f"consumer group record value version {version}, expected 0")
    return r


def write_topic_partitions(w: Writer, partitions: Assignment,
                      epochs: Mapping[tuple[uuid.UUID, int], int] | None = None) -> Writer:
    """A compact array of {TopicId, Partitions, tagged fields}, topics in id order; with
    ``epochs``, each partition's assignment epoch in tag 0 (AssignmentEpochs, Kafka 4.3+),
    in the order of the partitions."""
    w.compact_length(len(partitions))
    for topic_id in sorted(partitions, key=lambda t: t.bytes):
        ordered = sorted(partitions[topic_id])
        w.uuid(topic_id).compact_length(len(ordered))
        for p in ordered:
            w.i32(p)
        tags = {}
        if epochs is not None:
            e = Writer().compact_length(len(ordered))
            for p in ordered:
                e.i32(epochs.get((topic_id, p), -1))
            tags[0] = bytes(e.buf)
        w.tagged(tags)
    return w


def read_topic_partitions(r: Reader, epochs: dict[tuple[uuid.UUID, int], int] | None = None
                           ) -> Assignment:
    out: dict[uuid.UUID, frozenset[int]] = {}
    for _ in range(r.compact_length() or 0):
        topic_id = r.uuid()
        ordered = [r.i32() for _ in range(r.compact_length() or 0)]
        out[topic_id] = frozenset(ordered)
        tags = r.tagged()
        if epochs is not None and 0 in tags:
            e = Reader(tags[0])
            for p, epoch in zip(ordered, [e.i32() for _ in range(e.compact_length() or 0)],
                                strict=False):
                epochs[(topic_id, p)] = epoch
    return {t: ps for t, ps in out.items() if ps}


# -- whole records, as the coordinator writes them -------------------------------------------

Entry = tuple[bytes, bytes | None]  # a record's key and value; a None value is a tombstone


def group_metadata_entry(group_id: str, epoch: int, metadata_hash: int) -> Entry:
    return encode_key(ConsumerKey(GROUP_METADATA, group_id)), \
        encode_group_metadata(epoch, metadata_hash)


def target_metadata_entry(group_id: str, epoch: int) -> Entry:
    return encode_key(ConsumerKey(TARGET_METADATA, group_id)), encode_target_metadata(epoch)


def member_metadata_entry(group_id: str, member: ConsumerMember) -> Entry:
    return encode_key(ConsumerKey(MEMBER_METADATA, group_id, member.member_id)), \
        encode_member_metadata(member)


def target_member_entry(group_id: str, member_id: str, target: Assignment) -> Entry:
    return encode_key(ConsumerKey(TARGET_MEMBER, group_id, member_id)), \
        encode_target_member(target)


def current_assignment_entry(group_id: str, member: ConsumerMember) -> Entry:
    return encode_key(ConsumerKey(CURRENT_ASSIGNMENT, group_id, member.member_id)), \
        encode_current_assignment(member)


def member_tombstones(group_id: str, member_id: str) -> list[Entry]:
    return [(encode_key(ConsumerKey(kind, group_id, member_id)), None)
            for kind in (CURRENT_ASSIGNMENT, TARGET_MEMBER, MEMBER_METADATA)]


def group_entries(group: ConsumerGroup) -> list[Entry]:
    """Every record of a whole group, in Kafka's order (ConsumerGroup.createConsumerGroupRecords):
    what a classic group upgraded online is stored as."""
    gid = group.group_id
    entries = [member_metadata_entry(gid, m) for m in group.members.values()]
    entries.append(group_metadata_entry(gid, group.group_epoch, group.metadata_hash))
    entries += [target_member_entry(gid, m, a) for m, a in group.target.items()]
    entries.append(target_metadata_entry(gid, group.target_epoch))
    entries += [current_assignment_entry(gid, m) for m in group.members.values()]
    return entries


def group_tombstones(group: ConsumerGroup) -> list[Entry]:
    """Tombstones of every record of a group (ConsumerGroup.createGroupTombstoneRecords):
    members first, the group epoch last, so a reader replaying them ends with no group."""
    gid = group.group_id
    entries = [t for m in group.members for t in member_tombstones(gid, m)]
    entries.append((encode_key(ConsumerKey(TARGET_METADATA, gid)), None))
    entries.append((encode_key(ConsumerKey(GROUP_METADATA, gid)), None))
    return entries
