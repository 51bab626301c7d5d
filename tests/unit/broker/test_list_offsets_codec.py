"""The hand-written ListOffsets codec against kio, byte for byte, in every version we serve,
and the malformed requests it must refuse as kio's path did (a framing error, no crash)."""

from __future__ import annotations

import struct
from datetime import timedelta

import pytest
from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode

from broker.protocol.bounds import MAX_ENTRIES
from broker.protocol.codec import RequestHeader, decode_request, encode_request, encode_response
from broker.protocol.list_offsets import (
    VERSIONS,
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsTopic,
    PartitionOffset,
    TopicOffsets,
    encode_list_offsets_response,
)
from broker.protocol.messages import build
from broker.protocol.primitives import ProtocolError


def kio_frame(version: int) -> bytes:
    body = build(load_request_schema(2, version), {
        "replica_id": -1, "isolation_level": 1, "timeout": timedelta(milliseconds=1500),
        "topics": [
            {"name": "orders", "partitions": [
                {"partition_index": 0, "current_leader_epoch": 7, "timestamp": -1},
                {"partition_index": 3, "current_leader_epoch": 7, "timestamp": 1 << 41}]},
            {"name": "é", "partitions": []},
        ]})
    return encode_request(RequestHeader(2, version, 9, "spark"), body)[4:]


@pytest.mark.parametrize("version", VERSIONS)
def test_request_decoder_matches_kio(version: int) -> None:
    request = decode_request(kio_frame(version))
    epoch = 7 if version >= 4 else -1
    assert request.body == ListOffsetsRequest(
        replica_id=-1, isolation_level=1 if version >= 2 else 0,
        topics=[ListOffsetsTopic("orders", [ListOffsetsPartition(0, epoch, -1),
                                            ListOffsetsPartition(3, epoch, 1 << 41)]),
                ListOffsetsTopic("é", [])],
        timeout_ms=1500 if version >= 10 else 0)
    assert (request.header.correlation_id, request.header.client_id) == (9, "spark")
    assert type(request.body).__name__ == "ListOffsetsRequest"  # the request metrics' label


@pytest.mark.parametrize("version", VERSIONS)
def test_truncated_requests_are_refused(version: int) -> None:
    frame = kio_frame(version)
    for cut in range(len(frame) - 1, 12, -1):
        with pytest.raises(ProtocolError):
            decode_request(frame[:cut])


@pytest.mark.parametrize("version", [1, 5, 6, 10])
def test_null_and_oversized_arrays_are_refused(version: int) -> None:
    flexible = version >= 6
    head = struct.pack(">hhih", 2, version, 1, -1) + (b"\0" if flexible else b"")
    fixed = struct.pack(">i", -1) + (b"\x01" if version >= 2 else b"")
    null = b"\0" if flexible else struct.pack(">i", -1)
    with pytest.raises(ProtocolError, match="topics may not be null"):
        decode_request(head + fixed + null)
    name = (b"\x02" if flexible else struct.pack(">h", 1)) + b"t"
    one = b"\x02" if flexible else struct.pack(">i", 1)
    with pytest.raises(ProtocolError, match="partitions may not be null"):
        decode_request(head + fixed + one + name + null)
    # A count of two billion partitions in a 30-byte frame: refused before any is read.
    huge = b"\xff\xff\xff\xff\x07" if flexible else struct.pack(">i", 2**31 - 1)
    with pytest.raises(ProtocolError, match=r"declares 214748364[67] elements"):
        decode_request(head + fixed + one + name + huge)


def test_more_partitions_than_the_entry_limit_are_refused() -> None:
    count = MAX_ENTRIES + 1
    partitions = struct.pack(">iiq", 0, -1, -1) * count
    frame = (struct.pack(">hhih", 2, 4, 1, -1) + struct.pack(">ib", -1, 0)
             + struct.pack(">i", 1) + struct.pack(">h", 1) + b"t"
             + struct.pack(">i", count) + partitions)
    with pytest.raises(ProtocolError, match=f"more than {MAX_ENTRIES} topics and partitions"):
        decode_request(frame)


def test_more_topics_than_the_entry_limit_are_refused() -> None:
    """Empty topics cost 4 bytes each in v6: 200,001 of them fit in a 1 MB frame."""
    count = MAX_ENTRIES + 1
    topic = b"\x02t" + b"\x01" + b"\x00"  # name "t", no partitions, no tagged fields
    frame = (struct.pack(">hhih", 2, 6, 1, -1) + b"\x00" + struct.pack(">ib", -1, 0)
             + b"\xc2\x9a\x0c" + topic * count + b"\x00")  # uvarint(count + 1)
    with pytest.raises(ProtocolError, match=f"more than {MAX_ENTRIES} topics and partitions"):
        decode_request(frame)


@pytest.mark.parametrize("version", VERSIONS)
def test_response_encoder_matches_kio(version: int) -> None:
    topics = [
        TopicOffsets("orders", [PartitionOffset(0, ErrorCode.none, -1, 1 << 40, 3),
                                PartitionOffset(1, ErrorCode.not_leader_or_follower),
                                PartitionOffset(2, ErrorCode.none, 1_700_000_000_000, 5, -1)]),
        TopicOffsets("é", []),
    ]
    expected = build(load_response_schema(2, version), {
        "throttle_time": timedelta(0),
        "topics": [
            {"name": "orders", "partitions": [
                {"partition_index": 0, "error_code": ErrorCode.none, "timestamp": -1,
                 "offset": 1 << 40, "leader_epoch": 3},
                {"partition_index": 1, "error_code": ErrorCode.not_leader_or_follower,
                 "timestamp": -1, "offset": -1, "leader_epoch": -1},
                {"partition_index": 2, "error_code": ErrorCode.none,
                 "timestamp": 1_700_000_000_000, "offset": 5, "leader_epoch": -1}]},
            {"name": "é", "partitions": []},
        ]})
    assert encode_list_offsets_response(version, 11, topics) == encode_response(11, expected)


def test_response_encoder_refuses_versions_it_does_not_know() -> None:
    with pytest.raises(ValueError, match="v11"):
        encode_list_offsets_response(11, 1, [])
