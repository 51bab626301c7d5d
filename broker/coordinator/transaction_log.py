"""Records of the internal topic ``__transaction_state``, in Kafka's own formats.

The key is TransactionLogKey v0 (the transactional id); the value TransactionLogValue v0:
producer id and epoch, timeout, state, the partitions in the transaction, and two
timestamps. A transaction of transaction.version 2 is written as v1, Kafka's flexible form,
whose tagged fields add the producer id before an exhausted one was replaced, the id that
replaces it once the transaction completes, and the client's transaction version (a new
coordinator must know to bump the epoch, and whose retry to accept). A null value is a
tombstone: the id expired and the compacted topic forgets
it. Being Kafka's formats, the topic reads the same to Kafka's tools (``kafka-dump-log
--transaction-log-decoder``). Sans-IO: bytes in, values out.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import IntEnum

from broker.cluster.internal_topics import TRANSACTION_STATE
from broker.coordinator.serde import Reader, Writer

TOPIC = TRANSACTION_STATE
KEY_VERSION = 0
VALUE_VERSION = 0
FLEXIBLE_VALUE_VERSION = 1
NO_PRODUCER_ID = -1
# TransactionLogValue v1's tagged fields
_TAG_PREVIOUS_PRODUCER_ID, _TAG_NEXT_PRODUCER_ID, _TAG_CLIENT_VERSION = 0, 1, 2
_I16 = struct.Struct(">h")
_I64 = struct.Struct(">q")


class TxnState(IntEnum):
    """Kafka's TransactionState, with its ids as stored in the log."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def label(self) -> str:
        """The name DescribeTransactions and ListTransactions answer with."""
        return "".join(part.capitalize() for part in self.name.split("_"))


TopicPartition = tuple[str, int]


@dataclass(frozen=True, slots=True)
class TxnRecord:
    """One transactional id's state as the log holds it (TransactionLogValue)."""

    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState
    partitions: frozenset[TopicPartition]
    last_update_ms: int
    start_ms: int  # -1 when no transaction is open
    # transaction.version 2 (written as v1 only then):
    client_version: int = 0  # 2: every EndTxn bumps the epoch
    previous_producer_id: int = NO_PRODUCER_ID  # before an exhausted id was replaced
    next_producer_id: int = NO_PRODUCER_ID  # replaces the exhausted id when this completes


def encode_key(transactional_id: str) -> bytes:
    return bytes(Writer().i16(KEY_VERSION).string(transactional_id).buf)


def decode_key(data: bytes) -> str | None:
    """The transactional id, or None for a key version this broker does not know."""
    r = Reader(data)
    if r.i16() != KEY_VERSION:
        return None
    return r.string()


def encode_value(record: TxnRecord) -> bytes:
    # v1 (Kafka writes it from transaction.version 1 on) when a field only it has is set.
    flexible = record.client_version >= 2 or record.next_producer_id != NO_PRODUCER_ID \
        or record.previous_producer_id != NO_PRODUCER_ID
    w = Writer().i16(FLEXIBLE_VALUE_VERSION if flexible else VALUE_VERSION)
    w.i64(record.producer_id).i16(record.producer_epoch)
    w.i32(record.timeout_ms).i8(int(record.state))
    by_topic: dict[str, list[int]] = {}
    for topic, index in sorted(record.partitions):
        by_topic.setdefault(topic, []).append(index)
    if flexible:
        w.uvarint(len(by_topic) + 1)
        for topic, indexes in by_topic.items():
            w.compact_string(topic).uvarint(len(indexes) + 1)
            for index in indexes:
                w.i32(index)
            w.tagged({})
    else:
        w.i32(len(by_topic))
        for topic, indexes in by_topic.items():
            w.string(topic).i32(len(indexes))
            for index in indexes:
                w.i32(index)
    w.i64(record.last_update_ms).i64(record.start_ms)
    if flexible:
        tags = {_TAG_CLIENT_VERSION: _I16.pack(record.client_version)}
        if record.previous_producer_id != NO_PRODUCER_ID:
            tags[_TAG_PREVIOUS_PRODUCER_ID] = _I64.pack(record.previous_producer_id)
        if record.next_producer_id != NO_PRODUCER_ID:
            tags[_TAG_NEXT_PRODUCER_ID] = _I64.pack(record.next_producer_id)
        w.tagged(tags)
    return bytes(w.buf)


def decode_value(data: bytes) -> TxnRecord:
    """A v0 or v1 value (v1: Kafka's flexible form, tagged fields it does not know skipped)."""
    r = Reader(data)
    version = r.i16()
    if version not in (VALUE_VERSION, FLEXIBLE_VALUE_VERSION):
        raise ValueError(f"TransactionLogValue v{version} is not read by this broker")
    flexible = version == FLEXIBLE_VALUE_VERSION
    producer_id, epoch, timeout_ms, state = r.i64(), r.i16(), r.i32(), TxnState(r.i8())
    partitions = set()
    count = r.uvarint() - 1 if flexible else r.i32()
    for _ in range(max(count, 0)):
        topic = (r.compact_string() if flexible else r.string()) or ""
        for _ in range(r.uvarint() - 1 if flexible else r.i32()):
            partitions.add((topic, r.i32()))
        if flexible:
            r.tagged()
    last_update_ms, start_ms = r.i64(), r.i64()
    tags = r.tagged() if flexible else {}

    def tag(number: int, codec: struct.Struct, default: int) -> int:
        return codec.unpack(tags[number])[0] if number in tags else default

    return TxnRecord(producer_id, epoch, timeout_ms, state, frozenset(partitions),
                     last_update_ms, start_ms, tag(_TAG_CLIENT_VERSION, _I16, 0),
                     tag(_TAG_PREVIOUS_PRODUCER_ID, _I64, NO_PRODUCER_ID),
                     tag(_TAG_NEXT_PRODUCER_ID, _I64, NO_PRODUCER_ID))
