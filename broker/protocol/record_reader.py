"""Reading records inside a batch: decompression and the per-record varint layout.

Never on the hot path: the broker moves batches as opaque bytes. This is for the few places
that must look inside one batch, such as ListOffsets by timestamp, which has to name the
first record whose timestamp reaches the target (Kafka's FileRecords.searchForTimestamp).
"""

from __future__ import annotations

import cramjam

from broker.protocol.records import HEADER_SIZE, parse_header

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


def record_offsets_and_timestamps(batch: bytes) -> list[tuple[int, int]]:
    """(offset, timestamp) of every record of one whole batch."""
    header = parse_header(batch)
    body = decompress(header.compression, batch[HEADER_SIZE : header.size])
    out = []
    pos = 0
    for _ in range(header.record_count):
        length, pos = read_varint(body, pos)
        end = pos + length
        ts_delta, p = read_varint(body, pos + 1)  # skip the attributes byte
        offset_delta, _ = read_varint(body, p)
        out.append((header.base_offset + offset_delta, header.base_timestamp + ts_delta))
        pos = end
    return out


def first_record_at_or_after(batch: bytes, timestamp: int) -> tuple[int, int]:
    """(offset, timestamp) of the first record with timestamp >= ``timestamp``.

    The caller picked the batch because its max timestamp reaches ``timestamp``; for a
    LogAppendTime batch every record carries the batch's max timestamp.
    """
    header = parse_header(batch)
    if header.attributes & 0x08:
        return header.base_offset, header.max_timestamp
    for offset, ts in record_offsets_and_timestamps(batch):
        if ts >= timestamp:
            return offset, ts
    return header.last_offset, header.max_timestamp
