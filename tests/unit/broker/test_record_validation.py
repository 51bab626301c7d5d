"""The records of a produced batch checked by the topic's rules, on a partition of a real
replica manager: keys on compacted topics, timestamp bounds, and the header's max timestamp
set from the records, as Kafka's LogValidator does. (Malformed records over the wire are in
tests/integration/bad_input/test_bad_records.py.)"""

from __future__ import annotations

import struct
import time
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode

from broker.protocol._recordscan import scan_records
from broker.protocol.batch_codec import CODEC_ZSTD, Record, encode_batch, read_records
from broker.protocol.records import HEADER_SIZE, parse_header
from kafkube.harness.wire import build_batch, recompute_crc
from tests.support.handlers import create, make_services, new_topic

NOW = int(time.time() * 1000)


@pytest.fixture
def partitions(tmp_path: Path):
    services = make_services(tmp_path)
    create(services, 7, new_topic("compacted", 1, configs={"cleanup.policy": "compact"}),
           new_topic("strict", 1, configs={"message.timestamp.before.max.ms": "60000",
                                            "message.timestamp.after.max.ms": "0"}),
           new_topic("stamped", 1, configs={"message.timestamp.type": "LogAppendTime"}),
           new_topic("plain", 1))
    return services.replicas.get


def test_compacted_topics_need_keys(partitions) -> None:
    partition = partitions("compacted", 0)
    keyless = build_batch([(b"k", b"a", (), 0), (None, b"b", (), 0)], NOW)
    outcome = partition.append(keyless, 1 << 20)
    assert outcome.error == ErrorCode.invalid_record
    assert outcome.record_errors == (
        (1, "Compacted topic cannot accept message without key"),)
    assert partition.log.log_end_offset == 0
    assert partition.append(build_batch([(b"k", b"a", (), 0)], NOW), 1 << 20).error == (
        ErrorCode.none)


def test_timestamp_bounds(partitions) -> None:
    now = int(time.time() * 1000)  # the bounds are relative to the broker's clock now
    strict = partitions("strict", 0)
    old = build_batch([(b"k", b"a", (), 0), (b"k", b"b", (), 120_000)], now - 120_000)
    outcome = strict.append(old, 1 << 20)
    assert outcome.error == ErrorCode.invalid_timestamp
    assert [index for index, _ in outcome.record_errors] == [0]
    ahead = build_batch([(b"k", b"a", (), 0), (b"k", b"b", (), 60_000)], now)
    assert [i for i, _ in strict.append(ahead, 1 << 20).record_errors] == [1]
    assert strict.log.log_end_offset == 0
    # NO_TIMESTAMP (-1) is exempt from the bounds, as in Kafka's LogValidator.
    unstamped = build_batch([(b"k", b"a", (), 0)], -1)
    assert strict.append(unstamped, 1 << 20).error == ErrorCode.none
    # Kafka's defaults: any past, an hour ahead. LogAppendTime topics ignore them.
    plain = partitions("plain", 0)
    assert plain.append(build_batch([(b"k", b"a", (), 0)], 0), 1 << 20).error == ErrorCode.none
    far = build_batch([(b"k", b"a", (), 0)], now + 7_200_000)
    assert plain.append(far, 1 << 20).error == ErrorCode.invalid_timestamp
    assert partitions("stamped", 0).append(far, 1 << 20).error == ErrorCode.none


def test_header_max_timestamp_is_the_records(partitions) -> None:
    partition = partitions("plain", 0)
    batch = bytearray(build_batch([(b"k", b"a", (), 5), (b"k", b"b", (), 9)], NOW))
    struct.pack_into(">q", batch, 35, NOW + 1)  # claims less than its records hold
    assert partition.append(recompute_crc(batch), 1 << 20).error == ErrorCode.none
    stored = partition.log.segments[0].read_bytes(0, len(batch))
    assert parse_header(stored).max_timestamp == NOW + 9
    assert stored[HEADER_SIZE:] == bytes(batch[HEADER_SIZE:]), "records stored as received"
    assert recompute_crc(stored) == stored, "the CRC covers the corrected header"
    assert partition.log.offset_for_timestamp(NOW + 7)[:2] == (1, NOW + 9)


def test_compressed_batches_are_checked_inside(partitions) -> None:
    partition = partitions("compacted", 0)
    records = [Record(i, NOW, None if i == 2 else b"k", b"v") for i in range(3)]
    batch = encode_batch(records, 0, codec=CODEC_ZSTD)
    outcome = partition.append(batch, 1 << 20)
    assert outcome.error == ErrorCode.invalid_record
    assert [i for i, _ in outcome.record_errors] == [2]


def test_scan_agrees_with_the_python_reader() -> None:
    """The C walk and batch_codec's reader see the same records."""
    records = [Record(i, NOW + (i * 37) % 11, b"k%d" % i if i % 3 else None, b"v" * i,
                      (("h", b"x"), ("n", None)) if i % 2 else ())
               for i in range(50)]
    batch = encode_batch(records, 0)
    header = parse_header(batch)
    error, index, min_ts, min_index, max_ts, max_index, null_key = scan_records(
        memoryview(batch)[HEADER_SIZE:], header.record_count, header.base_timestamp)
    decoded = read_records(batch)
    stamps = [r.timestamp for r in decoded]
    assert (error, index) == (None, -1)
    assert (min_ts, max_ts) == (min(stamps), max(stamps))
    assert (min_index, max_index) == (stamps.index(min_ts), stamps.index(max_ts))
    assert null_key == next(i for i, r in enumerate(decoded) if r.key is None)
    # Every truncation of the records is an error, never a crash or a read past the end.
    section = bytes(batch[HEADER_SIZE:])
    for cut in range(len(section)):
        assert scan_records(section[:cut], 50, 0)[0] is not None
