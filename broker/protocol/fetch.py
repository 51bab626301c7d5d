"""A hand-written Fetch codec: FetchRequest v4-v12 in, FetchResponse v4-v12 out.

kio would need the response's records as bytes in memory; here each partition's records
stay a ``FileRegion`` that the network layer sends with ``os.sendfile`` (or one pread when
small), so fetched data never passes through a generic encoder. Only the small framing
around it is built here. Requests are decoded by hand too: a tailing consumer sends one
for every partition as often as data arrives, and kio's reader builds a frozen dataclass
per partition. Field order and encodings follow FetchRequest.json and FetchResponse.json;
flexible (compact, tagged) encoding starts at v12. The codec tests check both directions
byte for byte against kio.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from broker.protocol.file_region import FileRegion
from broker.protocol.primitives import I16, I32, Buffer, Reader, write_uvarint

API_KEY = 1
FLEXIBLE_FROM = 12
VERSIONS = range(4, 13)


@dataclass(slots=True)
class RequestedPartition:
    partition: int
    current_leader_epoch: int  # -1 before v9
    fetch_offset: int
    last_fetched_epoch: int  # -1 before v12
    log_start_offset: int  # -1 before v5 (followers only)
    partition_max_bytes: int


@dataclass(slots=True)
class RequestedTopic:
    topic: str
    partitions: list[RequestedPartition]


@dataclass(slots=True)
class FetchRequest:
    replica_id: int  # >= 0 for a follower
    max_wait_ms: int
    min_bytes: int
    max_bytes: int
    isolation_level: int
    session_id: int  # 0 before v7
    session_epoch: int  # -1 before v7
    topics: list[RequestedTopic]
    forgotten_topics: list[tuple[str, list[int]]]
    rack_id: str


def _partition_layout(version: int) -> struct.Struct:
    """A requested partition's fixed fields: index, current_leader_epoch (v9+),
    fetch_offset, last_fetched_epoch (v12+), log_start_offset (v5+), partition_max_bytes."""
    return struct.Struct(">i" + "i" * (version >= 9) + "q" + "i" * (version >= 12)
                         + "q" * (version >= 5) + "i")


_PARTITION_LAYOUTS = {version: _partition_layout(version) for version in VERSIONS}


def _widen(version: int, fields: tuple[int, ...]) -> tuple[int, ...]:
    """Fields of a version before 12 in ``RequestedPartition``'s order, -1 where absent."""
    if version >= 9:
        index, epoch, offset, start, max_bytes = fields
        return index, epoch, offset, -1, start, max_bytes
    if version >= 5:
        index, offset, start, max_bytes = fields
        return index, -1, offset, -1, start, max_bytes
    index, offset, max_bytes = fields
    return index, -1, offset, -1, -1, max_bytes


def decode_fetch_request(frame: Buffer, pos: int, version: int) -> FetchRequest:
    """The body of a Fetch request starting at ``pos`` (after the request header).

    v12's tagged fields (cluster_id) are skipped: sessions and cluster checks are not kept.
    """
    r = Reader("FetchRequest", frame, pos, version >= FLEXIBLE_FROM)
    layout = _PARTITION_LAYOUTS[version]
    replica_id, max_wait_ms, min_bytes, max_bytes = r.i32(), r.i32(), r.i32(), r.i32()
    isolation_level = r.i8()
    session_id, session_epoch = (r.i32(), r.i32()) if version >= 7 else (0, -1)
    topics = []
    for _ in range(r.array_length("topics")):
        name = r.string("topics.topic")
        partitions = []
        for _ in range(r.array_length("topics.partitions")):
            # One unpack per partition: a consumer of 10,000 partitions names them all in
            # every fetch, and field-by-field reads took ~1 µs a partition.
            fields = r.fixed(layout)
            partitions.append(RequestedPartition(*fields) if version >= 12
                              else RequestedPartition(*_widen(version, fields)))
            r.tagged_fields()
        r.tagged_fields()
        topics.append(RequestedTopic(name, partitions))
    forgotten = []
    if version >= 7:
        for _ in range(r.array_length("forgotten_topics_data")):
            name = r.string("forgotten_topics_data.topic")
            forgotten.append((name, [r.i32() for _ in range(
                r.array_length("forgotten_topics_data.partitions"))]))
            r.tagged_fields()
    rack_id = r.string("rack_id") if version >= 11 else ""
    r.tagged_fields()
    return FetchRequest(replica_id, max_wait_ms, min_bytes, max_bytes, isolation_level,
                        session_id, session_epoch, topics, forgotten, rack_id)


@dataclass(slots=True)
class FetchPartition:
    partition_index: int
    error_code: int
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    records: FileRegion | None
    preferred_read_replica: int = -1
    # (producer id, first offset) of aborted transactions in the records, read_committed only
    aborted_transactions: list[tuple[int, int]] | None = None


@dataclass(slots=True)
class FetchTopic:
    name: str
    partitions: list[FetchPartition] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class EncodedResponse:
    """A complete response frame as bytes and file regions, size prefix included."""

    chunks: list[bytes | FileRegion]
    size: int


# Each partition's fields before its records, by version: partition_index, error_code,
# high_watermark, last_stable_offset, log_start_offset (v5+), the aborted_transactions
# array length (int32 0, or compact varint 1 from v12), preferred_read_replica (v11+).
_PARTITION_HEADER = {
    version: struct.Struct(">ihqq" + ("q" if version >= 5 else "")
                           + ("B" if version >= FLEXIBLE_FROM else "i")
                           + ("i" if version >= 11 else ""))
    for version in VERSIONS
}
# The same fields up to log_start_offset, for a partition with aborted transactions to list.
_PARTITION_OFFSETS = {
    version: struct.Struct(">ihqq" + ("q" if version >= 5 else "")) for version in VERSIONS
}
_ABORTED = struct.Struct(">qq")


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
    fixed, no_aborted = _PARTITION_HEADER[version], 1 if flexible else 0
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
            # One pack for the fixed fields, up to and including the empty
            # aborted_transactions array and preferred_read_replica, in the common case.
            if p.aborted_transactions:
                buf += _aborted_header(version, flexible, p)
            elif version >= 11:
                buf += fixed.pack(p.partition_index, p.error_code, p.high_watermark,
                                  p.last_stable_offset, p.log_start_offset, no_aborted,
                                  p.preferred_read_replica)
            elif version >= 5:
                buf += fixed.pack(p.partition_index, p.error_code, p.high_watermark,
                                  p.last_stable_offset, p.log_start_offset, no_aborted)
            else:
                buf += fixed.pack(p.partition_index, p.error_code, p.high_watermark,
                                  p.last_stable_offset, no_aborted)
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


def _aborted_header(version: int, flexible: bool, p: FetchPartition) -> bytes:
    """A partition's fixed fields with its aborted transactions listed (read_committed)."""
    offsets = (p.partition_index, p.error_code, p.high_watermark, p.last_stable_offset)
    if version >= 5:
        offsets += (p.log_start_offset,)
    out = bytearray(_PARTITION_OFFSETS[version].pack(*offsets))
    aborted = p.aborted_transactions or []
    out += write_uvarint(len(aborted) + 1) if flexible else I32.pack(len(aborted))
    for producer_id, first_offset in aborted:
        out += _ABORTED.pack(producer_id, first_offset)
        if flexible:
            out += b"\0"
    if version >= 11:
        out += I32.pack(p.preferred_read_replica)
    return bytes(out)
