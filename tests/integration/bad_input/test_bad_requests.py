"""A live broker against illegal topic names, out-of-range fetches and bad frames among
good ones: Kafka's error codes, and every client but the offender served."""

from __future__ import annotations

from kafkube.harness.wire import (
    WireClient,
    api_versions_request,
    create_topic,
    decode_response_exact,
    fetch,
    init_producer_id,
    metadata_request,
    parse_batches,
    produce,
    simple_batch,
)
from tests.integration.bad_input.frames import (
    INVALID_TOPIC_EXCEPTION,
    NONE,
    OFFSET_OUT_OF_RANGE,
    assert_closed_silently,
)
from tests.support.broker_log import CLOSE_TIMEOUT, frame

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
