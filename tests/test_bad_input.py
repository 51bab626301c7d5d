"""A live broker against bad input: random frames, truncated and oversize frames, unknown
APIs and versions, corrupt batches, illegal topic names, out-of-range fetches.

Each test keeps one healthy connection open next to the abuse and checks it in the middle
and at the end: bad input from one client must cost that client its connection (or get an
error code), never the broker or its other clients. Error codes are Kafka's.
"""

from __future__ import annotations

import re
import struct
import time
from collections.abc import Iterator
from datetime import timedelta

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.api_versions.v0.request import ApiVersionsRequest as ApiVersionsRequestV0
from kio.schema.fetch.v12.request import FetchRequest, FetchTopic
from kio.schema.list_offsets.v7.request import ListOffsetsRequest, ListOffsetsTopic
from kio.schema.produce.v9.request import ProduceRequest, TopicProduceData

from broker.protocol.batch_codec import CODEC_GZIP, CODEC_LZ4, compress
from broker.protocol.codec import RequestHeader, encode_request
from kafkube.harness.waiting import wait_until
from kafkube.harness.wire import (
    EARLIEST,
    LATEST,
    ConnectionClosed,
    WireClient,
    api_versions_request,
    build_batch,
    create_topic,
    decode_response_exact,
    encode_record,
    fetch,
    fetch_request,
    init_producer_id,
    list_offset,
    list_offsets_request,
    metadata_request,
    parse_batches,
    produce,
    produce_request,
    recompute_crc,
    simple_batch,
    varint,
)

_I32 = struct.Struct(">i")
CLOSE_TIMEOUT = 10.0

# Kafka error codes (org.apache.kafka.common.protocol.Errors)
NONE = 0
OFFSET_OUT_OF_RANGE = 1
CORRUPT_MESSAGE = 2
UNKNOWN_TOPIC_OR_PARTITION = 3
MESSAGE_TOO_LARGE = 10
INVALID_TOPIC_EXCEPTION = 17
INVALID_REQUIRED_ACKS = 21
INVALID_TIMESTAMP = 32
UNSUPPORTED_VERSION = 35
INVALID_RECORD = 87
UNKNOWN_TOPIC_ID = 100


class Healthy:
    """A well-behaved client on its own connection, checked while others misbehave."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self.client = WireClient.connect(bootstrap)
        self.checks = 0

    def check(self) -> None:
        versions = self.client.request(api_versions_request())
        assert versions.error_code == NONE
        assert {a.api_key for a in versions.api_keys} >= {0, 1, 3, 18}
        meta = self.client.request(metadata_request(None))
        assert [b.port for b in meta.brokers] == [int(self.bootstrap.rpartition(":")[2])]
        self.checks += 1


@pytest.fixture
def healthy(broker) -> Iterator[Healthy]:
    h = Healthy(broker.bootstrap)
    h.check()
    yield h
    h.client.close()


def frame(body: bytes) -> bytes:
    return _I32.pack(len(body)) + body


def request_bytes(body, version: int | None = None, correlation_id: int = 7,
                  client_id: str | None = "bad-input") -> bytes:
    """A framed request; ``version`` overrides the header's API version."""
    api_version = body.__version__ if version is None else version
    return encode_request(
        RequestHeader(body.__api_key__, api_version, correlation_id, client_id), body
    )


def assert_closed_silently(client: WireClient, what: str) -> None:
    closed = client.closed_by_peer(CLOSE_TIMEOUT, until_data=True)
    assert client.discarded == 0, f"{what}: answered ({client.discarded} bytes) instead of closed"
    assert closed, f"{what}: connection still open after {CLOSE_TIMEOUT}s"


_LOG_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ ")


def broker_errors(broker) -> list[str]:
    """ERROR log records, each with its traceback: a handler or the network layer crashed
    instead of refusing the input."""
    records: list[str] = []
    in_error = False
    for line in list(broker.output):
        if _LOG_LINE.match(line):
            in_error = " ERROR " in line or " CRITICAL " in line
            if in_error:
                records.append(line)
        elif in_error:
            records[-1] += line  # the traceback of the record above
        elif line.startswith("Traceback"):
            records.append(line)  # an uncaught exception outside logging
            in_error = True
    return records


def log_barrier(broker) -> None:
    """Wait until the broker's log has caught up with everything done so far.

    Log lines reach ``broker.output`` through a pipe and a reader thread, so a connection
    can be closed before the error logged just ahead of the close is visible. A refused
    connection from a known local port logs a line of its own; once that line is there,
    every earlier one is too.
    """
    with WireClient.connect(broker.bootstrap, timeout=CLOSE_TIMEOUT) as client:
        tag = f"127.0.0.1:{client.sock.getsockname()[1]}: closing connection"
        client.send_raw(frame(struct.pack(">hhih", 1000, 0, 1, -1)))
        assert client.closed_by_peer(CLOSE_TIMEOUT)
    wait_until(lambda: any(tag in line for line in list(broker.output)), 10, "the log barrier")


def assert_no_broker_errors(broker) -> None:
    log_barrier(broker)
    errors = broker_errors(broker)
    if errors:
        pytest.fail("the broker logged errors:\n" + "".join(errors), pytrace=False)


def round_trip_with_confluent(bootstrap: str, topic: str, count: int = 5) -> None:
    """A real client produces and consumes ``count`` messages."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                         "message.timeout.ms": 20000})
    reports: list = []
    for i in range(count):
        producer.produce(topic, value=b"rt-%d" % i,
                         on_delivery=lambda err, msg: reports.append((err, msg.offset())))
    assert producer.flush(30) == 0, "confluent producer did not deliver in time"
    assert [err for err, _ in reports] == [None] * count
    first = min(offset for _, offset in reports)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bad-input-check",
                         "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(topic, 0, first)])
        values = []
        deadline = time.monotonic() + 30
        while len(values) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            values.append(msg.value())
        assert values == [b"rt-%d" % i for i in range(count)]
    finally:
        consumer.close()


# -- the batch builder itself --------------------------------------------------------------


def test_build_batch_matches_kafka_python_bytes():
    """Our builder writes the same bytes as an independent client implementation."""
    from kafka.record.default_records import DefaultRecordBatchBuilder

    records = [(b"k", b"v", [("h", b"x"), ("n", None)], 0), (None, b"v2", [], 5),
               (b"", None, [], 300), (b"key" * 50, b"\0" * 200, [("", b"")], 70000)]
    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=0, is_transactional=0, producer_id=7, producer_epoch=3,
        base_sequence=11, batch_size=1 << 20,
    )
    for offset, (key, value, headers, delta) in enumerate(records):
        builder.append(offset, 1_700_000_000_000 + delta, key, value, headers)
    expected = bytes(builder.build())
    # kafka-python stamps partitionLeaderEpoch 0 where the Java producer writes -1.
    ours = build_batch(records, 1_700_000_000_000, 7, 3, 11, partition_leader_epoch=0)
    assert ours == expected
    (batch,) = parse_batches(ours)
    assert [(r.offset, r.key, r.value, list(r.headers)) for r in batch.records] == [
        (i, k, v, list(h)) for i, (k, v, h, _) in enumerate(records)
    ]
    assert batch.max_timestamp == 1_700_000_000_000 + 70000


# -- (a) random frames -------------------------------------------------------------------


def _exemplars() -> list[bytes]:
    """Valid request frames (without size prefix) for the fuzzer to mutate."""
    batch = simple_batch([b"fuzz-1", b"fuzz-2"])
    bodies = [
        api_versions_request(),
        ApiVersionsRequestV0(),
        metadata_request(["fuzz"]),
        metadata_request(None, auto_create=False),
        produce_request("fuzz", batch),
        produce_request("fuzz", batch, acks=0),
        # A topic that never exists, so a mutated fetch cannot long-poll on data.
        fetch_request("fuzz-absent", 0),
        list_offsets_request("fuzz", LATEST),
    ]
    out = [request_bytes(b, correlation_id=1000 + i)[4:] for i, b in enumerate(bodies)]
    out.append(request_bytes(api_versions_request(), version=99)[4:])
    return out


EXEMPLARS = _exemplars()
API_KEYS = [0, 1, 2, 3, 10, 11, 17, 18, 19, 22, 36, 60, 1000, -1, 32767]


@st.composite
def mutated_frames(draw) -> bytes:
    data = bytearray(draw(st.sampled_from(EXEMPLARS)))
    for _ in range(draw(st.integers(1, 4))):
        if not data:
            break
        kind = draw(st.sampled_from(["flip", "set", "delete", "insert", "truncate"]))
        pos = draw(st.integers(0, len(data) - 1))
        if kind == "flip":
            data[pos] ^= 1 << draw(st.integers(0, 7))
        elif kind == "set":
            data[pos] = draw(st.sampled_from([0x00, 0x01, 0x7F, 0x80, 0xFF]))
        elif kind == "delete":
            del data[pos : pos + draw(st.integers(1, 8))]
        elif kind == "insert":
            data[pos:pos] = draw(st.binary(min_size=1, max_size=8))
        else:
            del data[pos:]
    return bytes(data)


random_frames = st.one_of(
    st.binary(max_size=300),
    st.builds(
        lambda key, version, cid, tail: struct.pack(">hhi", key, version, cid) + tail,
        st.sampled_from(API_KEYS) | st.integers(-32768, 32767),
        st.integers(-1, 20),
        st.integers(0, 2**31 - 1),
        st.binary(max_size=300),
    ),
    mutated_frames(),
)


def _expected_response_schema(frame_bytes: bytes) -> tuple[int, int]:
    api_key, version = struct.unpack_from(">hh", frame_bytes)
    if api_key == 18:
        from kio.index import UnknownEntity, load_response_schema

        try:
            load_response_schema(18, version)
        except UnknownEntity:
            return 18, 0  # KIP-511: an unknown ApiVersions version is answered in v0
    return api_key, version


def exchange_random_frame(bootstrap: str, body: bytes) -> str:
    """Send one random frame, then an ApiVersions v0 probe, on a fresh connection.

    Returns "closed" or "answered"; anything else (a malformed or unexpected response, a
    silent open connection) fails. The probe tells an unanswered request (acks=0) from a
    hung connection.
    """
    frame_cid = _I32.unpack_from(body, 4)[0] if len(body) >= 8 else None
    probe_cid = ((frame_cid or 0) + 1) & 0x7FFFFFFF
    probe = request_bytes(ApiVersionsRequestV0(), correlation_id=probe_cid)
    with WireClient.connect(bootstrap, timeout=CLOSE_TIMEOUT) as client:
        try:
            client.send_raw(frame(body) + probe)
        except ConnectionClosed:
            return "closed"  # the broker closed while we were still sending
        answered_frame = False
        for _ in range(2):
            try:
                response = client.recv_frame()
            except ConnectionClosed:
                return "closed"
            (cid,) = _I32.unpack_from(response, 0)
            if cid == probe_cid:
                _, versions = decode_response_exact(response, 18, 0)
                assert versions.error_code == NONE
                return "answered"
            assert cid == frame_cid and not answered_frame, (
                f"unexpected response correlation id {cid} (frame {frame_cid}, probe {probe_cid})"
            )
            answered_frame = True
            api_key, version = _expected_response_schema(body)
            decode_response_exact(response, api_key, version)
        raise AssertionError("more responses than requests")


def test_random_frames_get_a_response_or_a_close(broker, healthy):
    outcomes = {"closed": 0, "answered": 0}
    setup = WireClient.connect(broker.bootstrap)
    create_topic(setup, "fuzz")
    setup.close()

    @settings(max_examples=200, deadline=None, database=None,
              suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
    @given(body=random_frames)
    def one_frame(body: bytes) -> None:
        outcomes[exchange_random_frame(broker.bootstrap, body)] += 1
        if sum(outcomes.values()) % 50 == 0:
            assert broker.alive()
            healthy.check()

    one_frame()
    assert sum(outcomes.values()) >= 200
    assert outcomes["closed"] > 0 and outcomes["answered"] > 0, outcomes
    assert broker.alive()
    assert healthy.checks >= 3, "the healthy connection was not checked during the run"
    with WireClient.connect(broker.bootstrap) as second:
        assert second.request(api_versions_request()).error_code == NONE
        create_topic(second, "after-fuzz")
    round_trip_with_confluent(broker.bootstrap, "after-fuzz")
    healthy.check()
    assert_no_broker_errors(broker)


# -- (b) truncated frames ----------------------------------------------------------------


def test_truncated_requests_close_the_connection(broker, healthy):
    """A valid request cut short, with a size prefix that matches the cut, is refused."""
    with WireClient.connect(broker.bootstrap) as setup:
        create_topic(setup, "trunc")
    bodies = [
        api_versions_request(),
        metadata_request(["trunc"]),
        produce_request("trunc", simple_batch([b"a", b"b"])),
        fetch_request("trunc", 0),
        list_offsets_request("trunc", EARLIEST),
    ]
    for body in bodies:
        full = request_bytes(body)[4:]
        for cut in range(len(full)):
            with WireClient.connect(broker.bootstrap, timeout=CLOSE_TIMEOUT) as client:
                client.send_raw(frame(full[:cut]))
                assert_closed_silently(client, f"{type(body).__name__} cut at {cut}/{len(full)}")
        healthy.check()
    with WireClient.connect(broker.bootstrap) as client:
        # Nothing of the cut produce requests reached the log.
        assert list_offset(client, "trunc") == 0
    assert broker.alive()
    healthy.check()
    assert_no_broker_errors(broker)


# -- (c) frame sizes ---------------------------------------------------------------------


def test_frame_size_limit(broker_factory):
    limit = 1000
    small = broker_factory(**{"socket.request.max.bytes": str(limit)})
    healthy = Healthy(small.bootstrap)
    # The limit is inclusive: a request of exactly `limit` bytes is served.
    base = len(request_bytes(metadata_request(None), client_id="")) - 4
    exact = request_bytes(metadata_request(None), client_id="x" * (limit - base))
    assert len(exact) - 4 == limit
    with WireClient.connect(small.bootstrap) as client:
        client.send_raw(exact)
        _, meta = decode_response_exact(client.recv_frame(), 3, 12)
        assert meta.brokers[0].port == small.port
    # One byte over: closed as soon as the size arrives, without the body ever being sent.
    for size in (limit + 1, 10 * limit, 2**31 - 1):
        with WireClient.connect(small.bootstrap, timeout=CLOSE_TIMEOUT) as client:
            client.send_raw(_I32.pack(size))
            assert_closed_silently(client, f"size prefix {size}")
        healthy.check()
    # Oversize with a partial body following: still refused on the size alone.
    over = request_bytes(metadata_request(None), client_id="x" * (limit - base + 1))
    with WireClient.connect(small.bootstrap, timeout=CLOSE_TIMEOUT) as client:
        client.send_raw(over[:100])
        assert_closed_silently(client, "oversize metadata request")
    assert small.alive()
    healthy.check()
    healthy.client.close()
    assert_no_broker_errors(small)


@pytest.mark.parametrize("size", [-1, -4, -(2**31)])
def test_negative_frame_size_closes(broker, healthy, size):
    with WireClient.connect(broker.bootstrap, timeout=CLOSE_TIMEOUT) as client:
        client.send_raw(_I32.pack(size) + b"\0" * 16)
        assert_closed_silently(client, f"size prefix {size}")
    assert broker.alive()
    healthy.check()


# -- (d) unknown APIs and versions -------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "api_key", "version"),
    [
        pytest.param(b"", 1000, 0, id="unknown-api-key-1000"),
        pytest.param(b"\0\0\0\0", -1, 0, id="negative-api-key"),
        pytest.param(b"", 17, 1, id="sasl-handshake-not-served"),
        pytest.param(None, 0, 2, id="produce-v2-advertised-not-served"),
        pytest.param(None, 0, 13, id="produce-above-max"),
        pytest.param(None, 3, 13, id="metadata-above-max"),
        pytest.param(None, 1, 3, id="fetch-below-min"),
    ],
)
def test_unsupported_api_closes(broker, healthy, body, api_key, version):
    if body is None:
        # A well-formed body of the nearest version kio knows, under the refused version.
        body = {0: produce_request("x", None), 3: metadata_request(None),
                1: fetch_request("x", 0)}[api_key]
        data = request_bytes(body, version=version)
    else:
        data = frame(struct.pack(">hhih", api_key, version, 5, -1) + body)
    with WireClient.connect(broker.bootstrap, timeout=CLOSE_TIMEOUT) as client:
        client.send_raw(data)
        assert_closed_silently(client, f"API {api_key} v{version}")
    healthy.check()
    assert_no_broker_errors(broker)


def _null_array_requests() -> list:
    """Requests with null in a non-nullable array (kio encodes and decodes such nulls).

    Kafka's generated parsers refuse them ("non-nullable field ... was serialized as null"),
    so the request is invalid and the connection closes, as for any unparsable request.
    """
    no_wait = {"max_wait": timedelta(0), "min_bytes": 0}
    return [
        pytest.param(ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=None),
                     id="list-offsets-topics"),
        pytest.param(ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=(
            ListOffsetsTopic(name="nulls", partitions=None),)),
                     id="list-offsets-partitions"),
        pytest.param(ProduceRequest(acks=-1, timeout=timedelta(seconds=5), topic_data=None),
                     id="produce-topics"),
        pytest.param(ProduceRequest(acks=-1, timeout=timedelta(seconds=5), topic_data=(
            TopicProduceData(name="nulls", partition_data=None),)),
                     id="produce-partitions"),
        pytest.param(FetchRequest(**no_wait, topics=None, forgotten_topics_data=()),
                     id="fetch-topics"),
        pytest.param(FetchRequest(**no_wait, topics=(FetchTopic(topic="nulls", partitions=None),),
                                  forgotten_topics_data=()),
                     id="fetch-partitions"),
        pytest.param(FetchRequest(**no_wait, topics=(), forgotten_topics_data=None),
                     id="fetch-forgotten-topics"),
    ]


@pytest.mark.parametrize("body", _null_array_requests())
def test_null_in_a_non_nullable_array_closes_cleanly(broker, healthy, body):
    with WireClient.connect(broker.bootstrap) as setup:
        create_topic(setup, "nulls")
    with WireClient.connect(broker.bootstrap, timeout=CLOSE_TIMEOUT) as client:
        client.send_raw(request_bytes(body))
        assert_closed_silently(client, f"{type(body).__name__} with a null array")
    healthy.check()
    assert_no_broker_errors(broker)


@pytest.mark.parametrize("garbage_body", [False, True])
def test_api_versions_unsupported_version_falls_back_to_v0(broker, healthy, garbage_body):
    expected = healthy.client.request(api_versions_request())
    ranges = sorted((a.api_key, a.min_version, a.max_version) for a in expected.api_keys)
    if garbage_body:
        # KIP-511: the body of an unknown version is not parsed at all.
        data = frame(struct.pack(">hhih", 18, 99, 4242, 3) + b"abc" + b"\xff\x13\x00garbage")
    else:
        data = request_bytes(api_versions_request(), version=99, correlation_id=4242)
    with WireClient.connect(broker.bootstrap) as client:
        client.send_raw(data)
        cid, response = decode_response_exact(client.recv_frame(), 18, 0)
        assert cid == 4242
        assert response.error_code == UNSUPPORTED_VERSION
        assert sorted((a.api_key, a.min_version, a.max_version) for a in response.api_keys) == (
            ranges
        )
        # The connection stays usable: the client retries with a version we serve.
        assert client.request(api_versions_request()).error_code == NONE
    healthy.check()


# -- (e) produce errors ------------------------------------------------------------------


def test_produce_error_codes(broker, healthy):
    with WireClient.connect(broker.bootstrap) as client:
        create_topic(client, "errs")
        good = simple_batch([b"one", b"two", b"three"])

        bad_crc = bytearray(good)
        bad_crc[-2] ^= 0xFF  # inside the last record's value
        r = produce(client, "errs", bytes(bad_crc))
        assert (r.error_code, r.base_offset) == (CORRUPT_MESSAGE, -1)

        wrong_crc_field = bytearray(good)
        wrong_crc_field[17] ^= 0x01
        assert produce(client, "errs", bytes(wrong_crc_field)).error_code == CORRUPT_MESSAGE

        # The CRC covers attributes onwards, so a changed header field is caught too.
        changed_timestamp = bytearray(good)
        changed_timestamp[30] ^= 0x01
        assert produce(client, "errs", bytes(changed_timestamp)).error_code == CORRUPT_MESSAGE

        healthy.check()

        big = simple_batch([b"x" * (1024 * 1024)])  # over the default 1048588
        r = produce(client, "errs", big)
        assert r.error_code == MESSAGE_TOO_LARGE

        # acks=5: nothing is appended, every partition gets INVALID_REQUIRED_ACKS.
        assert produce(client, "errs", good, acks=5).error_code == INVALID_REQUIRED_ACKS
        assert produce(client, "errs", good, acks=-2).error_code == INVALID_REQUIRED_ACKS

        # Produce does not auto-create topics.
        assert produce(client, "no-such-topic", good).error_code == UNKNOWN_TOPIC_OR_PARTITION
        assert produce(client, "errs", good, partition=7).error_code == (
            UNKNOWN_TOPIC_OR_PARTITION
        )
        (absent,) = client.request(metadata_request(None)).topics
        assert absent.name == "errs", "produce created a topic"

        # None of the refusals wrote anything: the first good batch lands at offset 0.
        assert list_offset(client, "errs") == 0
        r = produce(client, "errs", good)
        assert (r.error_code, r.base_offset) == (NONE, 0)
        data = fetch(client, "errs", 0)
        (batch,) = parse_batches(data.records)
        assert [rec.value for rec in batch.records] == [b"one", b"two", b"three"]
    healthy.check()
    assert_no_broker_errors(broker)


def _batch_with(fmt: str, pos: int, value: int, fix_crc: bool = True) -> bytes:
    out = bytearray(simple_batch([b"a", b"b"]))
    struct.pack_into(fmt, out, pos, value)
    return recompute_crc(out) if fix_crc else bytes(out)


TWO = simple_batch([b"a", b"b"])

# (records, Kafka's error code). Kafka's checks: ProduceRequest.validateRecords (exactly one
# v2 batch per partition for produce v3+), UnifiedLog.analyzeAndValidateRecords (baseOffset 0,
# ensureValid: CRC) and LogValidator.validateBatch (offset range vs record count, no control
# batches from clients, a sequence with a producer id).
INVALID_BATCHES = [
    pytest.param(b"", INVALID_RECORD, id="empty"),
    pytest.param(None, INVALID_RECORD, id="null"),
    pytest.param(_batch_with(">I", 17, 0x12345678, fix_crc=False), CORRUPT_MESSAGE,
                 id="crc"),
    pytest.param(TWO[:-3], INVALID_RECORD, id="truncated"),
    pytest.param(TWO[:30], INVALID_RECORD, id="truncated-header"),
    pytest.param(TWO + TWO, INVALID_RECORD, id="two-batches"),
    pytest.param(_batch_with(">b", 16, 1, fix_crc=False), INVALID_RECORD, id="magic-1"),
    pytest.param(_batch_with(">q", 0, 5, fix_crc=False), INVALID_RECORD, id="base-offset-5"),
    pytest.param(_batch_with(">i", 23, 5), INVALID_RECORD, id="last-offset-delta-too-big"),
    pytest.param(_batch_with(">i", 57, 1), INVALID_RECORD, id="record-count-too-small"),
    pytest.param(_batch_with(">i", 57, 0), INVALID_RECORD, id="record-count-zero"),
    pytest.param(_batch_with(">h", 21, 0x20), INVALID_RECORD, id="control-batch"),
]


@pytest.mark.parametrize(("records", "expected"), INVALID_BATCHES)
def test_invalid_batches_are_refused(broker, healthy, records, expected):
    with WireClient.connect(broker.bootstrap) as client:
        create_topic(client, "inv")
        r = produce(client, "inv", records)
        assert r.error_code == expected, r.error_message
        assert r.base_offset == -1
        assert list_offset(client, "inv") == 0, "a refused batch changed the log end offset"
        # The same connection carries on.
        assert produce(client, "inv", simple_batch([b"ok"])).base_offset == 0
    healthy.check()


def _batch_around(payload: bytes, count: int, codec: int = 0) -> bytes:
    """A batch whose header is right for ``payload`` (length, count, codec, CRC), whatever
    the payload holds: what passes the header checks and reaches the records."""
    head = bytearray(simple_batch([b"x"])[:61])
    struct.pack_into(">i", head, 8, 61 - 12 + len(payload))
    struct.pack_into(">h", head, 21, codec)
    struct.pack_into(">i", head, 23, count - 1)
    struct.pack_into(">i", head, 57, count)
    return recompute_crc(bytes(head) + payload)


def _records(*records: bytes) -> bytes:
    return b"".join(records)


_NOW = int(time.time() * 1000)
_A = encode_record(0, 0, b"k", b"a")
_B = encode_record(1, 0, b"k", b"b")

# Records that are not what their valid header (CRC recomputed) says, each with Kafka's
# code: what DefaultRecord.readFrom and LogValidator refuse. Every one of these was stored
# once, and then broke ListOffsets by timestamp and every consumer of the partition.
CORRUPT_RECORDS = [
    pytest.param(bytes.fromhex(
        "000000000000000000000034000000000249d2ae8e000000000004000001a20b69199c000001a20b"
        "69199cffffffffffffffffffffffffffff000000055e0000"), INVALID_RECORD,
        id="five-records-in-three-bytes"),
    pytest.param(_batch_around(bytes(range(40)), 3, codec=2), CORRUPT_MESSAGE,
                 id="snappy-junk"),
    pytest.param(_batch_around(b"\x1f\x8b" + bytes(38), 2, codec=1), CORRUPT_MESSAGE,
                 id="gzip-junk"),
    pytest.param(_batch_around(compress(CODEC_GZIP, b"\x05junk"), 1, codec=1), INVALID_RECORD,
                 id="gzip-of-a-broken-record"),
    pytest.param(_batch_around(compress(CODEC_LZ4, _records(_A, _B)), 3, codec=3),
                 INVALID_RECORD, id="lz4-fewer-records-than-counted"),
    pytest.param(_batch_around(_records(_A, _B) + b"\0\0", 2), INVALID_RECORD,
                 id="trailing-bytes"),
    pytest.param(_batch_around(_records(_A, encode_record(2, 0, b"k", b"b")), 2),
                 INVALID_RECORD, id="offset-delta-skips"),
    pytest.param(_batch_around(varint(len(_A) + 1) + _A[1:] + b"\0\0", 1), INVALID_RECORD,
                 id="record-longer-than-its-fields"),
    pytest.param(_batch_around(varint(6) + b"\0\0\0\0\0" + varint(-3), 1), INVALID_RECORD,
                 id="negative-header-count"),
    pytest.param(_batch_around(varint(7) + b"\0\0\0\0\0\x02" + varint(-1), 1),
                 INVALID_RECORD, id="null-header-key"),
]


@pytest.mark.parametrize(("records", "expected"), CORRUPT_RECORDS)
def test_corrupt_records_are_refused_and_leave_the_partition_readable(
        broker, healthy, records, expected):
    with WireClient.connect(broker.bootstrap) as client:
        create_topic(client, "poison")
        good = build_batch([(b"k", b"v%d" % i, (), i) for i in range(3)], _NOW)
        assert produce(client, "poison", good).error_code == NONE
        r = produce(client, "poison", records)
        assert r.error_code == expected, r.error_message
        assert r.error_message, "a refusal names its reason"
        assert r.base_offset == -1
        assert list_offset(client, "poison") == 3, "a refused batch reached the log"
        # The partition stays readable by timestamp, and the connection carries on.
        assert list_offset(client, "poison", _NOW + 1) == 1
        assert produce(client, "poison", simple_batch([b"ok"])).base_offset == 3
        (after,) = parse_batches(fetch(client, "poison", 3).records)
        assert [rec.value for rec in after.records] == [b"ok"]
    healthy.check()
    assert_no_broker_errors(broker)


def test_record_errors_name_the_record(broker, healthy):
    """Produce v8+ carries Kafka's per-record errors; a timestamp an hour and more ahead
    is refused by Kafka 4's message.timestamp.after.max.ms."""
    with WireClient.connect(broker.bootstrap) as client:
        create_topic(client, "stamps")
        future = build_batch([(b"k", b"a", (), 0), (b"k", b"b", (), 2 * 3_600_000)], _NOW)
        r = produce(client, "stamps", future)
        assert r.error_code == INVALID_TIMESTAMP, r.error_message
        assert [e.batch_index for e in r.record_errors] == [1]
        assert "out of range" in r.record_errors[0].batch_index_error_message
        skipping = _batch_around(_records(_A, encode_record(5, 0, b"k", b"b")), 2)
        r = produce(client, "stamps", skipping)
        assert r.error_code == INVALID_RECORD
        assert [e.batch_index for e in r.record_errors] == [1]
        assert list_offset(client, "stamps") == 0
    healthy.check()


def test_a_frame_declaring_billions_of_elements_is_refused(broker, healthy):
    """Found by the fuzzer: a 69-byte CreateTopics v5 whose topic count is a five-byte
    uvarint made the decoder reserve 130 GB and the broker abort. Declared lengths are
    now checked against the frame first: a framing error, the connection closed."""
    with WireClient.connect(broker.bootstrap) as client:
        client.send_raw(bytes.fromhex(
            "000000410013000500004070000466757a7a008780aafa3c8d8830020566757a7a00000001ffff"
            "0200000000020000000000020566757a7a0566757a7a0000000000010000"))
        assert client.closed_by_peer(CLOSE_TIMEOUT)
    assert broker.alive()
    healthy.check()
    assert_no_broker_errors(broker)


@pytest.mark.parametrize(("version", "frame"), [
    (10, "000000230003000a00000001000178000200000000000000000000000000000001000000000000"),
    (11, "000000220003000b000000010001780002000000000000000000000000000000010000000000"),
    (12, "000000220003000c000000010001780002000000000000000000000000000000010000000000"),
    # found by the fuzzer: neither a name nor an id (the zero UUID)
    (10, "000000260003000a000032da000466757a7a000200000000000000000000000000000000000001000000"),
])
def test_metadata_for_an_unknown_topic_id(broker, healthy, version, frame):
    """A null name with an id the broker does not know: UNKNOWN_TOPIC_ID, in every version
    that can carry an id (the name is not nullable before v12, so it comes back empty)."""
    with WireClient.connect(broker.bootstrap) as client:
        client.send_raw(bytes.fromhex(frame))
        correlation_id, response = decode_response_exact(client.recv_frame(10), 3, version)
        assert correlation_id == int(frame[16:24], 16)
        (topic,) = response.topics
        if topic.topic_id is None or topic.topic_id.int == 0:
            assert topic.error_code == INVALID_TOPIC_EXCEPTION
        else:
            assert topic.error_code == UNKNOWN_TOPIC_ID
            assert topic.topic_id.int == 1
        assert topic.name == ("" if version < 12 else None)
    healthy.check()
    assert_no_broker_errors(broker)


def test_batch_claiming_compression_it_does_not_have_is_refused(broker, healthy):
    with WireClient.connect(broker.bootstrap) as client:
        create_topic(client, "lying-codec")
        r = produce(client, "lying-codec", _batch_with(">h", 21, 1))
        assert r.error_code != NONE
        assert list_offset(client, "lying-codec") == 0
    healthy.check()


# -- (f) topic names ---------------------------------------------------------------------


def test_invalid_topic_names_are_not_created(broker, healthy):
    bad = ["bad topic!", "", ".", "..", "x" * 250, "a/b", "ü"]
    with WireClient.connect(broker.bootstrap) as client:
        response = client.request(metadata_request(bad, auto_create=True))
        assert [(t.name, t.error_code) for t in response.topics] == [
            (name, INVALID_TOPIC_EXCEPTION) for name in bad
        ]
        assert all(not t.partitions for t in response.topics)
        healthy.check()
        # The longest legal name is created, so 250 was refused for its length alone.
        create_topic(client, "x" * 249)
        listed = client.request(metadata_request(None)).topics
        assert [t.name for t in listed] == ["x" * 249]
    assert {p.name for p in broker.log_dir.iterdir() if p.is_dir()} == {"x" * 249 + "-0"}
    healthy.check()


# -- (g) fetch out of range --------------------------------------------------------------


def test_fetch_outside_the_log_is_out_of_range(broker, healthy):
    with WireClient.connect(broker.bootstrap) as client:
        create_topic(client, "range")
        assert produce(client, "range", simple_batch([b"0", b"1", b"2"])).error_code == NONE
        for offset in (4, 1000, 2**62, -1):
            data = fetch(client, "range", offset)
            assert data.error_code == OFFSET_OUT_OF_RANGE, offset
            assert not data.records
            assert data.high_watermark == 3
        healthy.check()
        # The log end itself is in range, with nothing to return yet.
        at_end = fetch(client, "range", 3)
        assert (at_end.error_code, at_end.records or b"") == (NONE, b"")
        (batch,) = parse_batches(fetch(client, "range", 1).records)
        assert [r.offset for r in batch.records] == [0, 1, 2]
    healthy.check()


# -- connections around a bad frame -----------------------------------------------------


def test_pipelined_requests_before_a_bad_frame_are_answered_in_order(broker, healthy):
    """Requests ahead of a malformed frame on the same connection still get their responses
    (the network layer flushes them before closing), in request order."""
    with WireClient.connect(broker.bootstrap, timeout=CLOSE_TIMEOUT) as client:
        first_cid, first = client.encode(metadata_request(None))
        second_cid, second = client.encode(api_versions_request())
        client.send_raw(first + second + frame(b"\x03\xe8\x00\x00garbage"))
        cid, meta = decode_response_exact(client.recv_frame(), 3, 12)
        assert cid == first_cid and meta.brokers
        cid, versions = decode_response_exact(client.recv_frame(), 18, 3)
        assert cid == second_cid and versions.error_code == NONE
        assert client.closed_by_peer(CLOSE_TIMEOUT)
    healthy.check()


def test_producer_id_requests_survive_bad_neighbours(broker, healthy):
    """InitProducerId on the healthy side keeps allocating unique ids between refusals."""
    ids = set()
    for _ in range(3):
        with WireClient.connect(broker.bootstrap, timeout=CLOSE_TIMEOUT) as bad:
            bad.send_raw(frame(b"\x00\x16\x00\x04" + b"\x00" * 3))  # InitProducerId v4, cut
            assert_closed_silently(bad, "cut InitProducerId")
        pid, epoch = init_producer_id(healthy.client)
        assert epoch == 0
        ids.add(pid)
    assert len(ids) == 3
    healthy.check()
