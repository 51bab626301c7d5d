"""Records inside a batch: (de)compression and the per-record varint layout, both ways.

Never on the produce or fetch path: the broker moves client batches as opaque bytes. This is
for the places that must look inside or build a batch: ListOffsets by timestamp (the first
record reaching a timestamp, as Kafka's FileRecords.searchForTimestamp), the log cleaner,
and the broker's own records in internal topics (``__consumer_offsets``).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass, field

import cramjam
import crc32c

from broker.protocol.primitives import write_uvarint
from broker.protocol.records import HEADER_SIZE, LOG_OVERHEAD, NO_PRODUCER_ID, parse_header

_BATCH_HEADER = struct.Struct(">qiibIhiqqqhii")

CODEC_NONE, CODEC_GZIP, CODEC_SNAPPY, CODEC_LZ4, CODEC_ZSTD = range(5)
_XERIAL_MAGIC = b"\x82SNAPPY\x00"


def _snappy(data: bytes) -> bytes:
    # The Java client frames snappy the xerial way (a 16-byte header, then length-prefixed
    # blocks); librdkafka reads both that and raw snappy.
    if data.startswith(_XERIAL_MAGIC):
        out, pos = bytearray(), 16
        while pos < len(data):
            size = int.from_bytes(data[pos : pos + 4], "big")
            pos += 4
            out += bytes(cramjam.snappy.decompress_raw(data[pos : pos + size]))
            pos += size
        return bytes(out)
    return bytes(cramjam.snappy.decompress_raw(data))


def compress(codec: int, data: bytes) -> bytes:
    if codec == CODEC_NONE:
        return data
    if codec == CODEC_GZIP:
        return bytes(cramjam.gzip.compress(data))
    if codec == CODEC_SNAPPY:
        return bytes(cramjam.snappy.compress_raw(data))
    if codec == CODEC_LZ4:
        return bytes(cramjam.lz4.compress(data))
    if codec == CODEC_ZSTD:
        return bytes(cramjam.zstd.compress(data))
    raise ValueError(f"unknown compression codec {codec}")


def decompress(codec: int, data: bytes) -> bytes:
    if codec == CODEC_NONE:
        return data
    if codec == CODEC_GZIP:
        return bytes(cramjam.gzip.decompress(data))
    if codec == CODEC_SNAPPY:
        return _snappy(data)
    if codec == CODEC_LZ4:
        return bytes(cramjam.lz4.decompress(data))
    if codec == CODEC_ZSTD:
        return bytes(cramjam.zstd.decompress(data))
    raise ValueError(f"unknown compression codec {codec}")


def read_varint(buf: bytes, pos: int) -> tuple[int, int]:
    """A zig-zag varint (Kafka's ByteUtils.readVarlong)."""
    raw = shift = 0
    while True:
        b = buf[pos]
        pos += 1
        raw |= (b & 0x7F) << shift
        if not b & 0x80:
            return (raw >> 1) ^ -(raw & 1), pos
        shift += 7


def write_varint(value: int) -> bytes:
    """A zig-zag varint (Kafka's ByteUtils.writeVarlong)."""
    return write_uvarint((value << 1) ^ (value >> 63))


@dataclass(frozen=True, slots=True)
class Record:
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = field(default=())


def _read_bytes(buf: bytes, pos: int) -> tuple[bytes | None, int]:
    length, pos = read_varint(buf, pos)
    if length < 0:
        return None, pos
    return bytes(buf[pos : pos + length]), pos + length


class CorruptRecords(ValueError):
    """A stored batch whose records cannot be read (written before records were checked on
    append, or damaged on disk); its CRC may well be right."""


def read_records(batch: bytes) -> list[Record]:
    """Every record of one whole batch, decompressed and decoded; CorruptRecords if they
    cannot be."""
    try:
        return _read_records(batch)
    except (ValueError, IndexError, struct.error, cramjam.DecompressionError) as e:
        header = parse_header(batch)
        raise CorruptRecords(
            f"records of the batch at offset {header.base_offset} cannot be read: "
            f"{type(e).__name__}: {e}") from None


def _read_records(batch: bytes) -> list[Record]:
    header = parse_header(batch)
    body = decompress(header.compression, batch[HEADER_SIZE : header.size])
    out = []
    pos = 0
    for _ in range(header.record_count):
        length, pos = read_varint(body, pos)
        end = pos + length
        ts_delta, p = read_varint(body, pos + 1)  # skip the attributes byte
        offset_delta, p = read_varint(body, p)
        key, p = _read_bytes(body, p)
        value, p = _read_bytes(body, p)
        count, p = read_varint(body, p)
        headers = []
        for _ in range(count):
            name, p = _read_bytes(body, p)
            header_value, p = _read_bytes(body, p)
            headers.append(((name or b"").decode("utf-8", "replace"), header_value))
        out.append(Record(header.base_offset + offset_delta, header.base_timestamp + ts_delta,
                          key, value, tuple(headers)))
        pos = end
    return out


def record_offsets_and_timestamps(batch: bytes) -> list[tuple[int, int]]:
    """(offset, timestamp) of every record of one whole batch."""
    return [(r.offset, r.timestamp) for r in read_records(batch)]


def _write_bytes(value: bytes | None) -> bytes:
    return write_varint(-1) if value is None else write_varint(len(value)) + value


def encode_batch(
    records: Sequence[Record],
    base_offset: int,
    *,
    codec: int = CODEC_NONE,
    last_offset_delta: int | None = None,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    partition_leader_epoch: int = -1,
    attributes: int = 0,
) -> bytes:
    """A v2 batch of ``records`` (their offsets and timestamps kept as given).

    ``last_offset_delta`` may exceed the record count: a compacted batch keeps its original
    offset range, as Kafka's cleaner does, so offsets after it stay where they were.
    """
    if not records:
        raise ValueError("a batch needs at least one record")
    base_ts = min(r.timestamp for r in records)
    body = bytearray()
    for r in records:
        rec = bytearray(b"\0")  # attributes
        rec += write_varint(r.timestamp - base_ts) + write_varint(r.offset - base_offset)
        rec += _write_bytes(r.key) + _write_bytes(r.value) + write_varint(len(r.headers))
        for name, value in r.headers:
            rec += _write_bytes(name.encode()) + _write_bytes(value)
        body += write_varint(len(rec)) + rec
    payload = compress(codec, bytes(body))
    delta = records[-1].offset - base_offset if last_offset_delta is None else last_offset_delta
    head = bytearray(_BATCH_HEADER.pack(
        base_offset, HEADER_SIZE - LOG_OVERHEAD + len(payload), partition_leader_epoch, 2, 0,
        (attributes & ~0x07) | codec, delta, base_ts, max(r.timestamp for r in records),
        producer_id, producer_epoch, base_sequence, len(records),
    ))
    crc = crc32c.crc32c(payload, crc32c.crc32c(memoryview(head)[21:]))
    struct.pack_into(">I", head, 17, crc)
    return bytes(head) + payload


def first_record_at_or_after(batch: bytes, timestamp: int, min_offset: int = 0
                             ) -> tuple[int, int] | None:
    """(offset, timestamp) of the first record at or after ``min_offset`` (the log start,
    which DeleteRecords can put inside a batch) with timestamp >= ``timestamp``.

    The caller picked the batch because its max timestamp reaches ``timestamp``; for a
    LogAppendTime batch every record carries the batch's max timestamp. None if the only
    records that reach it lie below ``min_offset``.
    """
    header = parse_header(batch)
    if header.attributes & 0x08:
        if header.last_offset < min_offset:
            return None
        return max(header.base_offset, min_offset), header.max_timestamp
    for offset, ts in record_offsets_and_timestamps(batch):
        if ts >= timestamp and offset >= min_offset:
            return offset, ts
    return None
