"""A live broker against bad frames: random and truncated frames, oversize and negative
frame sizes, unknown APIs and versions.

Each test keeps one healthy connection open next to the abuse and checks it in the middle
and at the end: bad input from one client must cost that client its connection (or get an
error code), never the broker or its other clients. Error codes are Kafka's.
"""

from __future__ import annotations

import struct
from datetime import timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.api_versions.v0.request import ApiVersionsRequest as ApiVersionsRequestV0
from kio.schema.fetch.v12.request import FetchRequest, FetchTopic
from kio.schema.list_offsets.v7.request import ListOffsetsRequest, ListOffsetsTopic
from kio.schema.produce.v9.request import ProduceRequest, TopicProduceData

from kafkube.harness.wire import (
    EARLIEST,
    LATEST,
    ConnectionClosed,
    WireClient,
    api_versions_request,
    create_topic,
    decode_response_exact,
    fetch_request,
    list_offset,
    list_offsets_request,
    metadata_request,
    produce_request,
    simple_batch,
)
from tests.integration.bad_input.frames import (
    NONE,
    UNSUPPORTED_VERSION,
    Healthy,
    assert_closed_silently,
    request_bytes,
    round_trip_with_confluent,
)
from tests.support.broker_log import CLOSE_TIMEOUT, INT32, assert_no_broker_errors, frame

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
    frame_cid = INT32.unpack_from(body, 4)[0] if len(body) >= 8 else None
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
            (cid,) = INT32.unpack_from(response, 0)
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
            client.send_raw(INT32.pack(size))
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
        client.send_raw(INT32.pack(size) + b"\0" * 16)
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
