"""Records of the internal topic ``__consumer_offsets``, in Kafka's own formats.

Keys carry a version that says what they are (OffsetCommitKey v0/v1: group, topic,
partition; GroupMetadataKey v2: group); values are OffsetCommitValue v3 and
GroupMetadataValue v3 (GroupCoordinatorRecordSerde). A null value is a tombstone, which is
how offsets and groups are deleted, so the compacted topic forgets them. Being Kafka's
formats, the topic reads the same to Kafka's tools. Sans-IO: bytes in, values out.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from broker.cluster.internal_topics import CONSUMER_OFFSETS
from broker.coordinator.serde import Reader, Writer

TOPIC = CONSUMER_OFFSETS
OFFSET_KEY_VERSION = 1
GROUP_KEY_VERSION = 2
OFFSET_VALUE_VERSION = 3
GROUP_VALUE_VERSION = 3

@dataclass(frozen=True, slots=True)
class OffsetKey:
    group: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class GroupKey:
    group: str


@dataclass(frozen=True, slots=True)
class OffsetValue:
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp: int


@dataclass(frozen=True, slots=True)
class MemberValue:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout: int
    session_timeout: int
    subscription: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupValue:
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp: int
    members: tuple[MemberValue, ...]


def encode_key(key: OffsetKey | GroupKey) -> bytes:
    if isinstance(key, OffsetKey):
        w = Writer().i16(OFFSET_KEY_VERSION).string(key.group).string(key.topic)
        return bytes(w.i32(key.partition).buf)
    return bytes(Writer().i16(GROUP_KEY_VERSION).string(key.group).buf)


def decode_key(data: bytes) -> OffsetKey | GroupKey | None:
    """The key, or None for record types this broker does not use (e.g. share groups)."""
    r = Reader(data)
    version = r.i16()
    if version in (0, 1):
        return OffsetKey(r.string() or "", r.string() or "", r.i32())
    if version == GROUP_KEY_VERSION:
        return GroupKey(r.string() or "")
    return None


def encode_offset(value: OffsetValue) -> bytes:
    w = Writer().i16(OFFSET_VALUE_VERSION).i64(value.offset).i32(value.leader_epoch)
    return bytes(w.string(value.metadata).i64(value.commit_timestamp).buf)


def decode_offset(data: bytes) -> OffsetValue:
    r = Reader(data)
    version = r.i16()
    offset = r.i64()
    epoch = r.i32() if version >= 3 else -1
    metadata = r.string() or ""
    timestamp = r.i64()
    return OffsetValue(offset, epoch, metadata, timestamp)


def encode_group(value: GroupValue) -> bytes:
    w = Writer().i16(GROUP_VALUE_VERSION).string(value.protocol_type).i32(value.generation)
    w.string(value.protocol).string(value.leader).i64(value.current_state_timestamp)
    w.i32(len(value.members))
    for m in value.members:
        w.string(m.member_id).string(m.group_instance_id).string(m.client_id)
        w.string(m.client_host).i32(m.rebalance_timeout).i32(m.session_timeout)
        w.blob(m.subscription).blob(m.assignment)
    return bytes(w.buf)


def decode_group(data: bytes) -> GroupValue:
    r = Reader(data)
    version = r.i16()
    protocol_type = r.string() or ""
    generation = r.i32()
    protocol = r.string()
    leader = r.string()
    state_ts = r.i64() if version >= 2 else -1
    members = []
    for _ in range(r.i32()):
        member_id = r.string() or ""
        instance = r.string() if version >= 3 else None
        client_id = r.string() or ""
        host = r.string() or ""
        rebalance = r.i32() if version >= 1 else 0
        session = r.i32()
        subscription, assignment = r.blob(), r.blob()
        members.append(MemberValue(
            member_id, instance, client_id, host, rebalance, session, subscription, assignment
        ))
    return GroupValue(protocol_type, generation, protocol, leader, state_ts, tuple(members))


def subscribed_topics(subscription: bytes) -> set[str]:
    """Topics named in a ConsumerProtocolSubscription (version, then an array of strings)."""
    try:
        r = Reader(subscription)
        r.i16()
        return {r.string() or "" for _ in range(r.i32())}
    except (struct.error, UnicodeDecodeError):
        return set()
