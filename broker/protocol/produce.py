"""A hand-written Produce codec: ProduceRequest v3-v12 in, ProduceResponse v3-v12 out.

Produce is the request a producer sends most often: with ``linger.ms`` of a millisecond or
so, a thousand a second, each with a small batch for each of many partitions. kio's generic
reader and writer build a frozen dataclass per topic and partition and copy each batch out
of the frame; here each partition's records stay a view into the request frame, and the
response is written directly from the handler's results, in one pass. Field order and
encodings follow ProduceRequest.json and ProduceResponse.json: flexible (compact, tagged)
encoding from v9; v12 is v11 on the wire (it tells the leader the producer runs
transaction.version 2). The codec tests check both directions byte for byte against kio.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from broker.protocol.primitives import I16, I32, Buffer, Reader, write_uvarint

API_KEY = 0
FLEXIBLE_FROM = 9
VERSIONS = range(3, 13)


@dataclass(slots=True)
class PartitionData:
    index: int
    records: memoryview | None  # one record batch (v3+), a view into the request frame


@dataclass(slots=True)
class TopicData:
    name: str
    partition_data: list[PartitionData]


@dataclass(slots=True)
class ProduceRequest:
    transactional_id: str | None
    acks: int
    timeout_ms: int
    topic_data: list[TopicData]


@dataclass(slots=True)
class PartitionResponse:
    index: int
    error_code: int
    base_offset: int = -1
    log_append_time_ms: int = -1
    log_start_offset: int = -1
    error_message: str | None = None
    record_errors: tuple[tuple[int, str], ...] = ()  # (batch index, message), v8+


@dataclass(slots=True)
class TopicResponse:
    name: str
    partitions: list[PartitionResponse]


def decode_produce_request(frame: Buffer, pos: int, version: int) -> ProduceRequest:
    """The body of a Produce request starting at ``pos`` (after the request header)."""
    r = Reader("ProduceRequest", frame, pos, version >= FLEXIBLE_FROM)
    transactional_id = r.nullable_string("transactional_id")
    acks = r.i16()
    timeout_ms = r.i32()
    topics = []
    for _ in range(r.array_length("topic_data")):
        name = r.string("topic_data.name")
        partitions = []
        for _ in range(r.array_length("topic_data.partition_data")):
            index = r.i32()
            partitions.append(PartitionData(index, r.nullable_bytes()))
            r.tagged_fields()
        r.tagged_fields()
        topics.append(TopicData(name, partitions))
    r.tagged_fields()
    return ProduceRequest(transactional_id, acks, timeout_ms, topics)


# A partition's fixed fields: index, error_code, base_offset, log_append_time_ms, and from
# v5 log_start_offset.
_PARTITION_FIELDS = struct.Struct(">ihqq")
_PARTITION_FIELDS_V5 = struct.Struct(">ihqqq")


def encode_produce_response(version: int, correlation_id: int, topics: list[TopicResponse],
                            throttle_time_ms: int = 0) -> bytes:
    """The whole response frame: size prefix, response header and body."""
    if version not in VERSIONS:
        raise ValueError(f"ProduceResponse v{version} is not encoded here")
    flexible = version >= FLEXIBLE_FROM
    pack_i32, pack_i16 = I32.pack, I16.pack
    fixed = _PARTITION_FIELDS_V5 if version >= 5 else _PARTITION_FIELDS
    out = [b"", pack_i32(correlation_id)]
    if flexible:
        out.append(b"\0")  # response header v1: no tagged fields

    def length(n: int) -> bytes:
        return write_uvarint(n + 1) if flexible else pack_i32(n)

    def string(s: str | None) -> bytes:
        if s is None:
            return b"\0" if flexible else b"\xff\xff"
        raw = s.encode()
        return (write_uvarint(len(raw) + 1) if flexible else pack_i16(len(raw))) + raw

    no_record_errors = length(0)
    out.append(length(len(topics)))
    for topic in topics:
        out.append(string(topic.name))
        out.append(length(len(topic.partitions)))
        for p in topic.partitions:
            if version >= 5:
                out.append(fixed.pack(p.index, p.error_code, p.base_offset,
                                      p.log_append_time_ms, p.log_start_offset))
            else:
                out.append(fixed.pack(p.index, p.error_code, p.base_offset,
                                      p.log_append_time_ms))
            if version >= 8:
                if p.record_errors:
                    out.append(length(len(p.record_errors)))
                    for index, message in p.record_errors:
                        out.append(pack_i32(index) + string(message))
                        if flexible:
                            out.append(b"\0")
                else:
                    out.append(no_record_errors)
                out.append(string(p.error_message))
            if flexible:
                out.append(b"\0")
        if flexible:
            out.append(b"\0")
    out.append(pack_i32(throttle_time_ms))
    if flexible:
        out.append(b"\0")
    body = b"".join(out)
    return pack_i32(len(body)) + body
