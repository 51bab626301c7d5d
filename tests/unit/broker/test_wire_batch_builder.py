"""The harness's record batch builder (kafkube/harness/wire.py) writes the bytes Kafka's
own clients write."""

from __future__ import annotations

from kafkube.harness.wire import build_batch, parse_batches

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
