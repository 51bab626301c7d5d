"""The sans-IO codec: framing, header versions, and the hand-written Fetch and Produce codecs."""

from __future__ import annotations

import os
import struct
import typing
from datetime import timedelta

import pytest
from kio.index import load_request_schema, load_response_schema
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.errors import ErrorCode

from broker.protocol.batch_codec import Record, encode_batch, read_records
from broker.protocol.codec import (
    FrameReader,
    FrameTooLarge,
    ProtocolError,
    RequestHeader,
    UnsupportedRequest,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
)
from broker.protocol.fetch import FetchPartition, FetchTopic, encode_fetch_response
from broker.protocol.file_region import FileRegion
from broker.protocol.messages import build
from broker.protocol.produce import PartitionResponse, TopicResponse, encode_produce_response
from broker.protocol.records import InvalidRecordError, split_batches
from kafkube.harness.wire import build_batch


def test_frame_reader_splits_and_limits():
    frames = FrameReader(100)
    data = struct.pack(">i", 3) + b"abc" + struct.pack(">i", 2) + b"de"
    assert frames.feed(data[:5]) == []
    assert frames.feed(data[5:]) == [b"abc", b"de"]
    # Byte by byte, and an empty frame between two others.
    stream = data[:7] + struct.pack(">i", 0) + data[7:]
    one_at_a_time = FrameReader(100)
    got = [f for i in range(len(stream)) for f in one_at_a_time.feed(stream[i : i + 1])]
    assert got == [b"abc", b"", b"de"]
    assert one_at_a_time.buffered == 0
    with pytest.raises(FrameTooLarge):
        FrameReader(100).feed(struct.pack(">i", 101))
    with pytest.raises(FrameTooLarge):
        FrameReader(100).feed(struct.pack(">i", -1))


def test_frame_reader_can_be_filled_in_place():
    """The network layer receives the rest of a large frame straight into its buffer (of
    the frame's whole size), and cannot report more bytes than the frame misses."""
    frames = FrameReader(1 << 20)
    body = bytes(range(256)) * 1000
    assert frames.unfilled(1) is None  # no frame started yet
    assert frames.feed(struct.pack(">i", len(body)) + body[:100]) == []
    assert frames.in_progress == len(body)
    assert frames.unfilled(len(body)) is None  # fewer bytes than that are missing
    with pytest.raises(ValueError):  # more than the frame misses: refused, nothing counted
        frames.filled(len(body))
    filled, done = 100, []
    while not done:
        view = frames.unfilled(1000)
        assert view is not None and len(view) == len(body) - filled
        take = min(len(view), 50_000)
        view[:take] = body[filled : filled + take]
        del view
        filled += take
        done = frames.filled(take)
    assert done == [body]
    assert frames.buffered == 0 and frames.unfilled(1) is None and frames.in_progress is None
    with pytest.raises(ValueError):  # no frame in progress
        frames.filled(1)
    # Bytes fed after an in-place fill start the next frame as usual.
    assert frames.feed(struct.pack(">i", 2) + b"ok") == [b"ok"]


def _resident_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_a_frame_received_in_place_costs_memory_as_its_bytes_arrive():
    """The room ``unfilled`` gives is the whole declared frame at once (no copies as it
    grows), but not set, so what a client declared and never sent is not memory."""
    frames = FrameReader(100 << 20)
    assert frames.feed(struct.pack(">i", 100 << 20) + b"x" * 100_000) == []
    before = _resident_bytes()
    view = frames.unfilled(64 << 10)
    assert view is not None and len(view) == (100 << 20) - 100_000
    view[: 1 << 20] = b"y" * (1 << 20)  # 1 MiB of the 100 arrives
    assert _resident_bytes() - before < 8 << 20
    assert frames.filled(1 << 20) == []
    for start in range(1 << 20, len(view), 1 << 20):  # the rest, a MiB at a time
        view[start : start + (1 << 20)] = b"z" * len(view[start : start + (1 << 20)])
    del view
    (frame,) = frames.filled((100 << 20) - 100_000 - (1 << 20))
    assert frame[:100_000] == b"x" * 100_000 and frame[100_000 : 100_000 + (1 << 20)] == \
        b"y" * (1 << 20) and frame.endswith(b"z" * 1000) and len(frame) == 100 << 20


def test_frame_memory_grows_with_the_bytes_that_arrive():
    """A frame declared at the maximum and barely sent holds little memory."""
    frames = FrameReader(100 << 20)
    assert frames.feed(struct.pack(">i", 100 << 20) + b"x" * 10) == []
    assert frames.in_progress == 100 << 20
    assert frames.allocated <= 64 << 10
    chunk = b"y" * (1 << 20)
    for _ in range(3):
        assert frames.feed(chunk) == []
    assert 3 << 20 < frames.allocated <= 8 << 20  # doubling, not the declared size
    # What arrives at once is taken at once; the rest grows it to its size, no further.
    small = FrameReader(1 << 20)
    assert small.feed(struct.pack(">i", 200_000) + b"z" * 150_000) == []
    assert small.allocated == 150_000
    assert small.feed(b"z" * 10) == []
    assert small.allocated == 200_000
    assert small.feed(b"z" * 49_990) == [b"z" * 200_000]


def test_request_round_trip_and_errors():
    body = ApiVersionsRequest(client_software_name="t", client_software_version="1")
    frame = encode_request(RequestHeader(18, 3, 42, "me"), body)[4:]
    request = decode_request(frame)
    assert request.header == RequestHeader(18, 3, 42, "me")
    assert request.body == body
    with pytest.raises(ProtocolError):
        decode_request(frame[:-3])
    with pytest.raises(UnsupportedRequest) as info:
        decode_request(struct.pack(">hhi", 18, 99, 7) + b"\xff\xff")
    assert (info.value.api_key, info.value.api_version, info.value.correlation_id) == (18, 99, 7)


def test_api_versions_response_always_uses_header_v0():
    schema = load_response_schema(18, 3)
    response = build(
        schema, {"error_code": ErrorCode.none, "api_keys": [], "throttle_time": timedelta(0)}
    )
    encoded = encode_response(9, response)
    # size, correlation id, then directly the body: no tagged-field byte after the id.
    assert encoded[4:8] == struct.pack(">i", 9)
    assert encoded[8:10] == b"\x00\x00"
    assert decode_response(encoded[4:], 18, 3) == (9, response)


@pytest.mark.parametrize("version", range(4, 13))
def test_fetch_encoder_matches_kio(tmp_path, version):
    records = build_batch([(b"k", b"v" * 50, (), 0)], 1_700_000_000_000)
    path = tmp_path / "seg"
    path.write_bytes(b"junk" + records + b"tail")
    fd = os.open(path, os.O_RDONLY)
    try:
        topics = [
            FetchTopic("a", [
                FetchPartition(0, 0, 10, 10, 0, FileRegion(fd, 4, len(records))),
                FetchPartition(1, 1, -1, -1, -1, None),
            ]),
            FetchTopic("b", [FetchPartition(3, 0, 5, 5, 2, FileRegion(fd, 4, 0))]),
            FetchTopic("c", [FetchPartition(0, 0, 12, 9, 0, FileRegion(fd, 4, len(records)),
                                            aborted_transactions=[(7, 1), (8, 4)])]),
        ]
        encoded = encode_fetch_response(version, 77, topics)
        wire = b"".join(
            c if isinstance(c, bytes) else os.pread(c.fd, c.length, c.position)
            for c in encoded.chunks
        )
    finally:
        os.close(fd)
    assert len(wire) == encoded.size
    schema = load_response_schema(1, version)
    expected = build(schema, {
        "throttle_time": timedelta(0), "error_code": ErrorCode.none, "session_id": 0,
        "responses": [
            {"topic": "a", "partitions": [
                {"partition_index": 0, "error_code": ErrorCode.none, "high_watermark": 10,
                 "last_stable_offset": 10, "log_start_offset": 0, "aborted_transactions": (),
                 "records": records},
                {"partition_index": 1, "error_code": ErrorCode.offset_out_of_range,
                 "high_watermark": -1,
                 "last_stable_offset": -1, "log_start_offset": -1, "aborted_transactions": (),
                 "records": b""},
            ]},
            {"topic": "b", "partitions": [
                {"partition_index": 3, "error_code": ErrorCode.none, "high_watermark": 5,
                 "last_stable_offset": 5, "log_start_offset": 2, "aborted_transactions": (),
                 "records": b""},
            ]},
            {"topic": "c", "partitions": [
                {"partition_index": 0, "error_code": ErrorCode.none, "high_watermark": 12,
                 "last_stable_offset": 9, "log_start_offset": 0, "aborted_transactions": [
                     {"producer_id": 7, "first_offset": 1},
                     {"producer_id": 8, "first_offset": 4}],
                 "records": records},
            ]},
        ],
    })
    assert wire == encode_response(77, expected)


def test_batch_validation():
    good = build_batch([(None, b"x", (), 0), (b"k", None, (("h", b"1"),), 5)], 1000)
    [header] = split_batches(good)
    assert (header.record_count, header.last_offset_delta, header.max_timestamp) == (2, 1, 1005)
    bad_crc = bytearray(good)
    bad_crc[-1] ^= 0xFF
    with pytest.raises(InvalidRecordError, match="CRC"):
        split_batches(bytes(bad_crc))
    with pytest.raises(InvalidRecordError, match="truncated"):
        split_batches(good[:-1])
    bad_magic = bytearray(good)
    bad_magic[16] = 1
    with pytest.raises(InvalidRecordError, match="magic"):
        split_batches(bytes(bad_magic))
    with pytest.raises(InvalidRecordError):
        split_batches(b"")


@pytest.mark.parametrize("codec", range(5))
def test_batch_codec_round_trip(codec):
    records = [
        Record(10, 1000, b"k", b"v" * 300, (("h", b"1"), ("n", None))),
        Record(11, 995, None, None),
        Record(14, 1010, b"k2", b""),
    ]
    raw = encode_batch(records, 10, codec=codec, producer_id=5, producer_epoch=1,
                       base_sequence=7, last_offset_delta=6)
    [header] = split_batches(raw)  # a whole batch with a valid CRC
    assert (header.base_offset, header.last_offset, header.record_count) == (10, 16, 3)
    assert (header.compression, header.producer_id, header.base_sequence) == (codec, 5, 7)
    assert header.max_timestamp == 1010
    assert read_records(raw) == records
    if codec == 0:
        oracle = build_batch(
            [(b"k", b"v" * 300, (("h", b"1"), ("n", None)), 5), (None, None, (), 0)], 995
        )
        mine = encode_batch([Record(0, 1000, b"k", b"v" * 300, (("h", b"1"), ("n", None))),
                             Record(1, 995, None, None)], 0)
        assert mine == oracle


@pytest.mark.parametrize("version", range(3, 13))
@pytest.mark.parametrize("transactional_id", [None, "tx-é"])
def test_produce_request_decoder_matches_kio(version, transactional_id):
    batch = build_batch([(b"k", b"v" * 20, (), 0)], 1_700_000_000_000)
    schema = load_request_schema(0, version)
    topic_cls = typing.get_type_hints(schema)["topic_data"].__args__[0]
    partition_cls = typing.get_type_hints(topic_cls)["partition_data"].__args__[0]
    body = schema(transactional_id=transactional_id, acks=-1, timeout=timedelta(seconds=7),
                  topic_data=(
                      topic_cls(name="a", partition_data=(
                          partition_cls(index=0, records=batch),
                          partition_cls(index=5, records=None))),
                      topic_cls(name="b", partition_data=()),
                  ))
    frame = encode_request(RequestHeader(0, version, 3, "c"), body)[4:]
    request = decode_request(frame).body
    assert (request.transactional_id, request.acks, request.timeout_ms) == (
        transactional_id, -1, 7000)
    assert [(t.name, [(p.index, None if p.records is None else bytes(p.records))
                      for p in t.partition_data]) for t in request.topic_data] == [
        ("a", [(0, batch), (5, None)]), ("b", [])]
    for cut in range(len(frame) - 1, len(frame) - 40, -7):  # truncated anywhere: refused
        with pytest.raises(ProtocolError):
            decode_request(frame[:cut])


@pytest.mark.parametrize("version", [3, 9])
def test_produce_request_decoder_refuses_null_arrays(version):
    flexible = version >= 9
    head = struct.pack(">hhih", 0, version, 1, -1) + (b"\0" if flexible else b"")
    txn_acks_timeout = (b"\0" if flexible else b"\xff\xff") + struct.pack(">hi", 1, 1000)
    null_array = b"\0" if flexible else struct.pack(">i", -1)
    with pytest.raises(ProtocolError, match="topic_data may not be null"):
        decode_request(head + txn_acks_timeout + null_array)
    one = b"\x02" if flexible else struct.pack(">i", 1)
    name = (b"\x02" if flexible else struct.pack(">h", 1)) + b"t"
    with pytest.raises(ProtocolError, match="partition_data may not be null"):
        decode_request(head + txn_acks_timeout + one + name + null_array)


@pytest.mark.parametrize("version", range(3, 13))
def test_produce_response_encoder_matches_kio(version):
    topics = [
        TopicResponse("a", [PartitionResponse(0, 0, 42, -1, 3),
                            PartitionResponse(1, ErrorCode.corrupt_message, -1, -1, -1,
                                              "CRC mismatch"),
                            PartitionResponse(2, ErrorCode.invalid_record, -1, -1, -1,
                                              "bad records", ((1, "no key"), (4, "bad")))]),
        TopicResponse("b", []),
    ]
    expected = build(load_response_schema(0, version), {
        "throttle_time": timedelta(0),
        "responses": [
            {"name": "a", "partition_responses": [
                {"index": 0, "error_code": ErrorCode.none, "base_offset": 42,
                 "log_append_time": None, "log_start_offset": 3, "record_errors": (),
                 "error_message": None},
                {"index": 1, "error_code": ErrorCode.corrupt_message, "base_offset": -1,
                 "log_append_time": None, "log_start_offset": -1, "record_errors": (),
                 "error_message": "CRC mismatch"},
                {"index": 2, "error_code": ErrorCode.invalid_record, "base_offset": -1,
                 "log_append_time": None, "log_start_offset": -1,
                 "record_errors": ({"batch_index": 1, "batch_index_error_message": "no key"},
                                   {"batch_index": 4, "batch_index_error_message": "bad"})
                 if version >= 8 else (),
                 "error_message": "bad records"},
            ]},
            {"name": "b", "partition_responses": []},
        ],
    })
    assert encode_produce_response(version, 11, topics) == encode_response(11, expected)


@pytest.mark.parametrize("version", range(4, 13))
def test_fetch_request_decoder_matches_kio(version):
    schema = load_request_schema(1, version)
    body = build(schema, {
        "cluster_id": None, "replica_id": 2, "max_wait": timedelta(milliseconds=500),
        "min_bytes": 1, "max_bytes": 52428800, "isolation_level": 1, "session_id": 9,
        "session_epoch": 4, "rack_id": "r1",
        "topics": [
            {"topic": "a", "partitions": [
                {"partition": 0, "current_leader_epoch": 3, "fetch_offset": 1 << 40,
                 "last_fetched_epoch": 2, "log_start_offset": 7, "partition_max_bytes": 1024},
                {"partition": 5, "current_leader_epoch": 3, "fetch_offset": 0,
                 "last_fetched_epoch": 2, "log_start_offset": 0, "partition_max_bytes": 1},
            ]},
            {"topic": "b", "partitions": []},
        ],
        "forgotten_topics_data": [{"topic": "old", "partitions": [1, 2]}],
    })
    frame = encode_request(RequestHeader(1, version, 3, "c"), body)[4:]
    got = decode_request(frame).body
    assert (got.replica_id, got.max_wait_ms, got.min_bytes, got.max_bytes,
            got.isolation_level) == (2, 500, 1, 52428800, 1)
    assert (got.session_id, got.session_epoch) == ((9, 4) if version >= 7 else (0, -1))
    assert got.forgotten_topics == ([("old", [1, 2])] if version >= 7 else [])
    assert got.rack_id == ("r1" if version >= 11 else "")
    expected = []
    for topic in body.topics:
        expected.append((topic.topic, [
            (p.partition, getattr(p, "current_leader_epoch", -1), p.fetch_offset,
             getattr(p, "last_fetched_epoch", -1), getattr(p, "log_start_offset", -1),
             p.partition_max_bytes) for p in topic.partitions]))
    assert [(t.topic, [(p.partition, p.current_leader_epoch, p.fetch_offset,
                        p.last_fetched_epoch, p.log_start_offset, p.partition_max_bytes)
                       for p in t.partitions]) for t in got.topics] == expected
    for cut in range(len(frame) - 1, len(frame) - 60, -5):  # truncated anywhere: refused
        with pytest.raises(ProtocolError):
            decode_request(frame[:cut])
