"""Record batch v2 headers: read, validate and patch without touching the records.

A batch travels through the broker as opaque bytes. Only its 61-byte header is parsed,
and only the fields that the broker owns (base offset, partition leader epoch, and for
LogAppendTime the max timestamp) are rewritten. The CRC-32C covers bytes 21.. so the
first two rewrites never require recomputing it (DefaultRecordBatch.java).
"""

from __future__ import annotations

import struct
from typing import NamedTuple

import crc32c

HEADER_SIZE = 61
LOG_OVERHEAD = 12  # baseOffset (8) + batchLength (4): the bytes not counted in batchLength
MAGIC_V2 = 2
MIN_BATCH_LENGTH = HEADER_SIZE - LOG_OVERHEAD

ATTR_COMPRESSION_MASK = 0x07
ATTR_TIMESTAMP_TYPE = 0x08
ATTR_TRANSACTIONAL = 0x10
ATTR_CONTROL = 0x20

NO_PRODUCER_ID = -1
NO_SEQUENCE = -1

# baseOffset, batchLength, partitionLeaderEpoch, magic, crc, attributes, lastOffsetDelta,
# baseTimestamp, maxTimestamp, producerId, producerEpoch, baseSequence, recordCount
_HEADER = struct.Struct(">qiibIhiqqqhii")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_U32 = struct.Struct(">I")
_I16 = struct.Struct(">h")


# Kafka's answers to a bad produce payload: CORRUPT_MESSAGE (2) when bytes were damaged
# (CRC, impossible length), INVALID_RECORD (87) when a producer sent something not allowed.
CORRUPT_MESSAGE = 2
INVALID_RECORD = 87

# What a compressed batch's payload starts with, per codec (gzip, lz4 frame, zstd frame).
# Snappy has no fixed magic in its raw form, so it is not checked.
_COMPRESSED_MAGIC = {1: b"\x1f\x8b", 3: b"\x04\x22\x4d\x18", 4: b"\x28\xb5\x2f\xfd"}


class InvalidRecordError(ValueError):
    """The bytes are not an acceptable v2 record batch; the message says which check failed,
    ``record_errors`` which records (index in the batch, reason), as Produce v8+ reports."""

    def __init__(self, message: str, code: int = INVALID_RECORD,
                 record_errors: tuple[tuple[int, str], ...] = ()) -> None:
        super().__init__(message)
        self.code = code
        self.record_errors = record_errors


class BatchHeader(NamedTuple):
    """The 61-byte header of a v2 record batch, field for field.

    A named tuple rather than a dataclass: the broker builds one per batch it appends or
    scans, and a tuple is built from ``struct.unpack`` output several times faster.
    """

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @property
    def size(self) -> int:
        """Bytes the batch occupies in a log, header included."""
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> int:
        return self.attributes & ATTR_COMPRESSION_MASK

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & ATTR_TRANSACTIONAL)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & ATTR_CONTROL)

    @property
    def last_sequence(self) -> int:
        if self.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        # Sequences wrap at Int32.MAX_VALUE, as in DefaultRecordBatch.incrementSequence.
        return (self.base_sequence + self.last_offset_delta) % (2**31)


def parse_header(buf: bytes | bytearray | memoryview, pos: int = 0) -> BatchHeader:
    """Parse the header at ``pos``; the caller makes sure HEADER_SIZE bytes are there."""
    return BatchHeader._make(_HEADER.unpack_from(buf, pos))


def validate_batch(buf: bytes | bytearray | memoryview, pos: int, end: int,
                   allow_empty: bool = False) -> BatchHeader:
    """Check one batch starting at ``pos`` and ending at or before ``end``.

    Checks what Kafka checks before appending a v2 batch (LogValidator / ensureValid):
    a whole batch is present, magic 2, at least one record, and the CRC-32C matches.
    ``allow_empty`` accepts a batch of no records, which a log may hold (a compacted
    producer's last batch header) but a producer may not send.
    Raises InvalidRecordError naming the check that failed.
    """
    if end - pos < HEADER_SIZE:
        raise InvalidRecordError(
            f"truncated batch: {end - pos} bytes, header needs {HEADER_SIZE}"
        )
    header = parse_header(buf, pos)
    if header.magic != MAGIC_V2:
        raise InvalidRecordError(f"unsupported record batch magic {header.magic}")
    if header.batch_length < MIN_BATCH_LENGTH:
        raise InvalidRecordError(
            f"batch length {header.batch_length} is below the header size", CORRUPT_MESSAGE
        )
    if pos + header.size > end:
        raise InvalidRecordError(
            f"truncated batch: length says {header.size} bytes, {end - pos} present"
        )
    if header.record_count < (0 if allow_empty else 1) or header.last_offset_delta < 0:
        raise InvalidRecordError(
            f"batch with {header.record_count} records and lastOffsetDelta "
            f"{header.last_offset_delta}"
        )
    actual = crc32c.crc32c(memoryview(buf)[pos + 21 : pos + header.size])
    if actual != header.crc:
        raise InvalidRecordError(
            f"CRC mismatch: header {header.crc:#010x}, computed {actual:#010x}", CORRUPT_MESSAGE
        )
    return header


def split_batches(buf: bytes | bytearray | memoryview,
                  allow_empty: bool = False) -> list[BatchHeader]:
    """Validate every batch of a record set; return their headers in order."""
    headers = []
    pos, end = 0, len(buf)
    while pos < end:
        header = validate_batch(buf, pos, end, allow_empty)
        headers.append(header)
        pos += header.size
    if not headers:
        raise InvalidRecordError("empty record set")
    return headers


def validate_produce_payload(buf: bytes | bytearray | memoryview) -> BatchHeader:
    """Check one partition's records in a Produce request (v3+), as Kafka does.

    Exactly one v2 batch, base offset 0, a record count that matches its offset range, no
    control batch (only coordinators write those), a sequence whenever there is a producer
    id, a known codec whose payload starts like that codec. Header checks only: records
    are never parsed or decompressed here.
    """
    headers = split_batches(buf)
    if len(headers) != 1:
        raise InvalidRecordError(f"produce v3+ carries exactly one batch, got {len(headers)}")
    header = headers[0]
    if header.base_offset != 0:
        raise InvalidRecordError(f"base offset should be 0, got {header.base_offset}")
    if header.record_count != header.last_offset_delta + 1:
        raise InvalidRecordError(
            f"inconsistent batch offset range: {header.record_count} records, "
            f"lastOffsetDelta {header.last_offset_delta}"
        )
    if header.is_control:
        raise InvalidRecordError("clients may not write control batches")
    if header.producer_id != NO_PRODUCER_ID and header.base_sequence < 0:
        raise InvalidRecordError(
            f"invalid sequence number {header.base_sequence} for producer {header.producer_id}"
        )
    codec = header.compression
    if codec > 4:
        raise InvalidRecordError(f"unknown compression codec {codec}")
    magic = _COMPRESSED_MAGIC.get(codec)
    if magic is not None and bytes(buf[HEADER_SIZE : HEADER_SIZE + len(magic)]) != magic:
        raise InvalidRecordError(f"records are not in the batch's declared codec {codec}")
    return header


def stamp_header(
    batch: bytes | bytearray | memoryview,
    base_offset: int,
    leader_epoch: int,
    log_append_time: int | None = None,
    max_timestamp: int | None = None,
) -> bytearray:
    """A copy of the batch's 61-byte header with the broker's fields written in.

    Base offset and partition leader epoch lie outside the CRC. For LogAppendTime the
    timestamp-type bit and maxTimestamp change too, and a CreateTime batch whose
    maxTimestamp is not its records' largest gets theirs (``max_timestamp``), as Kafka's
    LogValidator sets it; then the CRC is recomputed, continuing from the header over the
    untouched records (no copy of the records is made).
    """
    head = bytearray(batch[:HEADER_SIZE])
    _I64.pack_into(head, 0, base_offset)
    _I32.pack_into(head, 12, leader_epoch)
    if log_append_time is not None:
        (attributes,) = _I16.unpack_from(head, 21)
        _I16.pack_into(head, 21, attributes | ATTR_TIMESTAMP_TYPE)
        max_timestamp = log_append_time
    elif max_timestamp is None or max_timestamp == _I64.unpack_from(head, 35)[0]:
        return head
    _I64.pack_into(head, 35, max_timestamp)
    (length,) = _I32.unpack_from(head, 8)
    crc = crc32c.crc32c(memoryview(head)[21:])
    crc = crc32c.crc32c(memoryview(batch)[HEADER_SIZE : length + LOG_OVERHEAD], crc)
    _U32.pack_into(head, 17, crc)
    return head
