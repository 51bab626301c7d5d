"""A hand-written FetchResponse encoder (v4-v12) whose records are file regions.

kio would need the records as bytes in memory; here each partition's records stay a
``FileRegion`` that the network layer sends with ``os.sendfile``, so fetched data never
enters Python. Only the small framing around it is built here. Field order and encodings
follow FetchResponse.json; flexible (compact, tagged) encoding starts at v12. The codec
tests check this byte for byte against kio's generic encoder.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from broker.protocol.primitives import I16, I32, I64, write_uvarint
from broker.storage.segment import FileRegion

FLEXIBLE_FROM = 12


@dataclass(slots=True)
class FetchPartition:
    partition_index: int
    error_code: int
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    records: FileRegion | None
    preferred_read_replica: int = -1


@dataclass(slots=True)
class FetchTopic:
    name: str
    partitions: list[FetchPartition] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class EncodedResponse:
    """A complete response frame as bytes and file regions, size prefix included."""

    chunks: list[bytes | FileRegion]
    size: int


def encode_fetch_response(
    version: int,
    correlation_id: int,
    topics: list[FetchTopic],
    error_code: int = 0,
    session_id: int = 0,
    throttle_time_ms: int = 0,
) -> EncodedResponse:
    if not 4 <= version <= 12:
        raise ValueError(f"FetchResponse v{version} is not encoded here")
    flexible = version >= FLEXIBLE_FROM
    chunks: list[bytes | FileRegion] = []
    buf = bytearray()

    def array_len(n: int) -> bytes:
        return write_uvarint(n + 1) if flexible else I32.pack(n)

    def string(s: str) -> bytes:
        raw = s.encode()
        return (write_uvarint(len(raw) + 1) if flexible else I16.pack(len(raw))) + raw

    buf += I32.pack(correlation_id)
    if flexible:
        buf += b"\0"  # response header v1: no tagged fields
    buf += I32.pack(throttle_time_ms)
    if version >= 7:
        buf += I16.pack(error_code) + I32.pack(session_id)
    buf += array_len(len(topics))
    for topic in topics:
        buf += string(topic.name)
        buf += array_len(len(topic.partitions))
        for p in topic.partitions:
            buf += I32.pack(p.partition_index) + I16.pack(p.error_code)
            buf += I64.pack(p.high_watermark) + I64.pack(p.last_stable_offset)
            if version >= 5:
                buf += I64.pack(p.log_start_offset)
            buf += array_len(0)  # aborted_transactions: none (no transactions yet)
            if version >= 11:
                buf += I32.pack(p.preferred_read_replica)
            region = p.records
            length = region.length if region is not None else 0
            buf += write_uvarint(length + 1) if flexible else I32.pack(length)
            if length:
                chunks.append(bytes(buf))
                chunks.append(region)
                buf = bytearray()
            if flexible:
                buf += b"\0"  # partition tagged fields
        if flexible:
            buf += b"\0"  # topic tagged fields
    if flexible:
        buf += b"\0"  # response tagged fields
    chunks.append(bytes(buf))
    body = sum(len(c) if isinstance(c, bytes) else c.length for c in chunks)
    chunks.insert(0, I32.pack(body))
    return EncodedResponse(chunks, body + 4)
