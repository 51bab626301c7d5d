"""Records of the internal topic ``__transaction_state``, in Kafka's own formats.

The key is TransactionLogKey v0 (the transactional id); the value TransactionLogValue v0:
producer id and epoch, timeout, state, the partitions in the transaction, and two
timestamps. A null value is a tombstone: the id expired and the compacted topic forgets
it. Being Kafka's formats, the topic reads the same to Kafka's tools (``kafka-dump-log
--transaction-log-decoder``). Sans-IO: bytes in, values out.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

from broker.coordinator.serde import Reader, Writer

TOPIC = "__transaction_state"
KEY_VERSION = 0
VALUE_VERSION = 0


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


def encode_key(transactional_id: str) -> bytes:
    return bytes(Writer().i16(KEY_VERSION).string(transactional_id).buf)


def decode_key(data: bytes) -> str | None:
    """The transactional id, or None for a key version this broker does not know."""
    r = Reader(data)
    if r.i16() != KEY_VERSION:
        return None
    return r.string()


def encode_value(record: TxnRecord) -> bytes:
    w = Writer().i16(VALUE_VERSION).i64(record.producer_id).i16(record.producer_epoch)
    w.i32(record.timeout_ms).i8(int(record.state))
    by_topic: dict[str, list[int]] = {}
    for topic, index in sorted(record.partitions):
        by_topic.setdefault(topic, []).append(index)
    w.i32(len(by_topic))
    for topic, indexes in by_topic.items():
        w.string(topic).i32(len(indexes))
        for index in indexes:
            w.i32(index)
    return bytes(w.i64(record.last_update_ms).i64(record.start_ms).buf)


def decode_value(data: bytes) -> TxnRecord:
    """A v0 value. (v1, Kafka's flexible form with tagged fields, is only written by
    brokers with transaction.version 2, which kafkube does not advertise.)"""
    r = Reader(data)
    version = r.i16()
    if version != VALUE_VERSION:
        raise ValueError(f"TransactionLogValue v{version} is not read by this broker")
    producer_id, epoch, timeout_ms, state = r.i64(), r.i16(), r.i32(), TxnState(r.i8())
    partitions = set()
    count = r.i32()
    for _ in range(max(count, 0)):
        topic = r.string() or ""
        for _ in range(r.i32()):
            partitions.add((topic, r.i32()))
    return TxnRecord(producer_id, epoch, timeout_ms, state, frozenset(partitions), r.i64(),
                     r.i64())
