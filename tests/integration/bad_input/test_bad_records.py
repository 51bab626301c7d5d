"""A live broker against bad produce requests: invalid and corrupt batches and records,
frames declaring billions of elements, unknown topic ids, false compression claims;
refused with Kafka's error codes, the partition left readable, a healthy connection
served all along."""

from __future__ import annotations

import struct
import time

import pytest

from broker.protocol.batch_codec import CODEC_GZIP, CODEC_LZ4, compress
from kafkube.harness.wire import (
    WireClient,
    build_batch,
    create_topic,
    decode_response_exact,
    encode_record,
    fetch,
    list_offset,
    metadata_request,
    parse_batches,
    produce,
    recompute_crc,
    simple_batch,
    varint,
)
from tests.integration.bad_input.frames import (
    CORRUPT_MESSAGE,
    INVALID_RECORD,
    INVALID_REQUIRED_ACKS,
    INVALID_TIMESTAMP,
    INVALID_TOPIC_EXCEPTION,
    MESSAGE_TOO_LARGE,
    NONE,
    UNKNOWN_TOPIC_ID,
    UNKNOWN_TOPIC_OR_PARTITION,
)
from tests.support.broker_log import CLOSE_TIMEOUT, assert_no_broker_errors

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
