"""The consumer's embedded protocol of the classic group protocol: the subscription a consumer
puts in its JoinGroup's protocol metadata and the assignment SyncGroup hands back
(Kafka's ConsumerProtocolSubscription and ConsumerProtocolAssignment schemas).

The classic coordinator never looks inside them: the group's leader assigns. A KIP-848 group
with classic members (online migration) must read them, as Kafka's does: the subscription
says which topics the member wants and which partitions it still owns, and the coordinator
writes the member's assignment itself.

Subscription: version (int16), topics (array of strings), user data (nullable bytes), from
v1 the owned partitions (array of topic, partitions), from v2 the generation (int32), from
v3 the rack (nullable string). Assignment: version (int16), partitions (array of topic,
partitions), user data (nullable bytes). Non-flexible; later versions only add fields.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass

from broker.coordinator.serde import Reader, Writer

TopicPartitions = tuple[tuple[str, tuple[int, ...]], ...]


class MalformedProtocol(ValueError):
    """The bytes are not a consumer subscription or assignment."""


@dataclass(frozen=True, slots=True)
class Subscription:
    version: int
    topics: tuple[str, ...]
    owned: TopicPartitions = ()
    rack_id: str | None = None


def decode_subscription(data: bytes) -> Subscription:
    r = Reader(data)
    try:
        version = r.i16()
        if version < 0:
            raise MalformedProtocol(f"subscription version {version}")
        topics = tuple(_string(r) for _ in range(_count(r)))
        _nullable_bytes(r)  # user data: the client-side assignor's, not ours
        owned: TopicPartitions = ()
        rack = None
        if version >= 1:
            owned = _topic_partitions(r)
        if version >= 2:
            r.i32()  # the generation the owned partitions are of
        if version >= 3:
            rack = r.string()
    except (struct.error, UnicodeDecodeError) as e:
        raise MalformedProtocol(f"truncated or invalid subscription: {e}") from None
    if r.pos > len(data):
        raise MalformedProtocol("truncated subscription")
    return Subscription(version, topics, owned, rack)


def encode_subscription(s: Subscription) -> bytes:
    """A subscription as a consumer sends it (tests and tools speak as one)."""
    w = Writer().i16(s.version).i32(len(s.topics))
    for topic in s.topics:
        w.string(topic)
    w.i32(-1)  # no user data
    if s.version >= 1:
        w.i32(len(s.owned))
        for topic, parts in s.owned:
            w.string(topic).i32(len(parts))
            for p in parts:
                w.i32(p)
    if s.version >= 2:
        w.i32(-1)
    if s.version >= 3:
        w.string(s.rack_id)
    return bytes(w.buf)


def subscription_version(data: bytes) -> int:
    """The version a member's subscription is in: its assignment is written in the same
    one (Kafka does), so an old client can read it."""
    try:
        return max(0, Reader(data).i16())
    except struct.error:
        return 0


def encode_assignment(version: int, partitions: Iterable[tuple[str, Iterable[int]]]) -> bytes:
    w = Writer().i16(max(0, min(version, 3)))
    items = [(topic, sorted(parts)) for topic, parts in sorted(partitions)]
    w.i32(len(items))
    for topic, parts in items:
        w.string(topic).i32(len(parts))
        for p in parts:
            w.i32(p)
    w.i32(-1)  # no user data
    return bytes(w.buf)


def decode_assignment(data: bytes) -> TopicPartitions:
    """The partitions of an assignment; none for empty bytes (a member that has not synced
    since the last rebalance)."""
    if not data:
        return ()
    r = Reader(data)
    try:
        r.i16()
        parts = _topic_partitions(r)
    except (struct.error, UnicodeDecodeError) as e:
        raise MalformedProtocol(f"truncated or invalid assignment: {e}") from None
    if r.pos > len(data):
        raise MalformedProtocol("truncated assignment")
    return parts


def _count(r: Reader) -> int:
    n = r.i32()
    if n < 0:
        return 0
    if n > len(r.data) - r.pos:  # every element takes at least a byte
        raise MalformedProtocol(f"an array of {n} elements in {len(r.data)} bytes")
    return n


def _string(r: Reader) -> str:
    s = r.string()
    if s is None or r.pos > len(r.data):
        raise MalformedProtocol("a topic name is null or truncated")
    return s


def _nullable_bytes(r: Reader) -> None:
    n = r.i32()
    if n > len(r.data) - r.pos:
        raise MalformedProtocol("truncated user data")
    r.pos += max(n, 0)


def _topic_partitions(r: Reader) -> TopicPartitions:
    out = []
    for _ in range(_count(r)):
        topic = _string(r)
        out.append((topic, tuple(r.i32() for _ in range(_count(r)))))
    return tuple(out)
