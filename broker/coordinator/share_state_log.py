"""Records of the internal topic ``__share_group_state``, in Kafka's formats (the share
coordinator's ShareSnapshot and ShareUpdate), keyed by share-partition: group, topic id and
partition.

A ShareSnapshot holds a share-partition's whole stored state: its state epoch (bumped when the
state is initialized again, e.g. offsets reset), the leader epoch of the last writer, the
start offset (SPSO) and the runs of offsets past it that are not plain "available, never
delivered". A ShareUpdate holds a change to merge into the last snapshot; kafkube's leaders
send the whole in-flight window with each write, so kafkube writes snapshots only, and reads
both. Sans-IO: bytes in, values out.
"""

from __future__ import annotations

import base64
import enum
import uuid
from dataclasses import dataclass

from broker.coordinator.serde import Reader, Writer

TOPIC = "__share_group_state"
SNAPSHOT, UPDATE = 0, 1
NO_COUNT = -1  # DeliveryCompleteCount not known


class RecordState(enum.IntEnum):
    """Kafka's RecordState of a record in a share-partition; AVAILABLE, ACKNOWLEDGED and
    ARCHIVED are stored as these bytes (ACQUIRED is not: a lock does not survive a failover)."""

    AVAILABLE = 0
    ACQUIRED = 1
    ACKNOWLEDGED = 2
    ARCHIVED = 4


@dataclass(frozen=True, slots=True)
class StateBatch:
    """A run of offsets in one stored state and delivery count."""

    first_offset: int
    last_offset: int
    state: RecordState
    delivery_count: int


@dataclass(frozen=True, slots=True)
class ShareKey:
    group_id: str
    topic_id: uuid.UUID
    partition: int

    def coordinator_suffix(self) -> str:
        """``coordinator_key`` after ``group_id``: hashed apart, the group's part once."""
        topic = base64.urlsafe_b64encode(self.topic_id.bytes).decode().rstrip("=")
        return f":{topic}:{self.partition}"

    def coordinator_key(self) -> str:
        """Kafka's SharePartitionKey.asCoordinatorKey (the topic id as Kafka prints it), whose
        Java hash places the share-partition's state in a partition of the topic."""
        topic = base64.urlsafe_b64encode(self.topic_id.bytes).decode().rstrip("=")
        return f"{self.group_id}:{topic}:{self.partition}"


@dataclass(frozen=True, slots=True)
class ShareSnapshot:
    state_epoch: int
    leader_epoch: int
    start_offset: int
    batches: tuple[StateBatch, ...] = ()
    snapshot_epoch: int = 0
    create_timestamp: int = 0
    write_timestamp: int = 0
    delivery_complete_count: int = NO_COUNT


def encode_key(kind: int, key: ShareKey) -> bytes:
    w = Writer().i16(kind).string(key.group_id).uuid(key.topic_id).i32(key.partition)
    return bytes(w.buf)


def decode_key(data: bytes) -> tuple[int, ShareKey] | None:
    r = Reader(data)
    kind = r.i16()
    if kind not in (SNAPSHOT, UPDATE):
        return None
    return kind, ShareKey(r.string() or "", r.uuid(), r.i32())


def _batches(w: Writer, batches: tuple[StateBatch, ...]) -> Writer:
    w.compact_length(len(batches))
    for b in batches:
        w.i64(b.first_offset).i64(b.last_offset).i8(int(b.state)).i16(b.delivery_count)
        w.tagged({})
    return w


def _read_batches(r: Reader) -> tuple[StateBatch, ...]:
    out = []
    for _ in range(r.compact_length() or 0):
        first, last, state, count = r.i64(), r.i64(), r.i8(), r.i16()
        r.tagged()
        out.append(StateBatch(first, last, RecordState(state), count))
    return tuple(out)


def _count_tag(count: int) -> dict[int, bytes]:
    return {0: bytes(Writer().i32(count).buf)} if count != NO_COUNT else {}


def encode_snapshot(s: ShareSnapshot) -> bytes:
    w = Writer().i16(0).i32(s.snapshot_epoch).i32(s.state_epoch).i32(s.leader_epoch)
    w.i64(s.start_offset).i64(s.create_timestamp).i64(s.write_timestamp)
    return bytes(_batches(w, s.batches).tagged(_count_tag(s.delivery_complete_count)).buf)


def decode_snapshot(data: bytes) -> ShareSnapshot:
    r = _value(data)
    snapshot_epoch, state_epoch, leader_epoch = r.i32(), r.i32(), r.i32()
    start, created, written = r.i64(), r.i64(), r.i64()
    batches = _read_batches(r)
    tags = r.tagged()
    count = Reader(tags[0]).i32() if 0 in tags else NO_COUNT
    return ShareSnapshot(state_epoch, leader_epoch, start, batches, snapshot_epoch, created,
                         written, count)


def decode_update(data: bytes) -> tuple[int, int, int, tuple[StateBatch, ...]]:
    """(snapshot epoch, leader epoch, start offset, batches) of a ShareUpdate."""
    r = _value(data)
    snapshot_epoch, leader_epoch, start = r.i32(), r.i32(), r.i64()
    batches = _read_batches(r)
    r.tagged()
    return snapshot_epoch, leader_epoch, start, batches


def encode_update(snapshot_epoch: int, leader_epoch: int, start_offset: int,
                  batches: tuple[StateBatch, ...]) -> bytes:
    """A ShareUpdate, as Kafka's share coordinator writes between snapshots (tests)."""
    w = Writer().i16(0).i32(snapshot_epoch).i32(leader_epoch).i64(start_offset)
    return bytes(_batches(w, batches).tagged({}).buf)


def merged(snapshot: ShareSnapshot, leader_epoch: int, start_offset: int,
           batches: tuple[StateBatch, ...]) -> ShareSnapshot:
    """A snapshot with an update merged in (Kafka's PersisterStateBatchCombiner): the update's
    runs win where they overlap, and nothing before the new start offset stays."""
    start = max(start_offset, snapshot.start_offset) if start_offset >= 0 \
        else snapshot.start_offset
    per_offset: dict[int, tuple[RecordState, int]] = {}
    for b in (*snapshot.batches, *batches):
        for offset in range(max(b.first_offset, start), b.last_offset + 1):
            per_offset[offset] = (b.state, b.delivery_count)
    runs: list[StateBatch] = []
    for offset in sorted(per_offset):
        state, count = per_offset[offset]
        last = runs[-1] if runs else None
        if last is not None and last.last_offset == offset - 1 and last.state == state \
                and last.delivery_count == count:
            runs[-1] = StateBatch(last.first_offset, offset, state, count)
        else:
            runs.append(StateBatch(offset, offset, state, count))
    return ShareSnapshot(snapshot.state_epoch, max(leader_epoch, snapshot.leader_epoch), start,
                         tuple(runs), snapshot.snapshot_epoch, snapshot.create_timestamp,
                         snapshot.write_timestamp, snapshot.delivery_complete_count)


def _value(data: bytes) -> Reader:
    r = Reader(data)
    version = r.i16()
    if version != 0:
        raise ValueError(f"share state record value version {version}, expected 0")
    return r
