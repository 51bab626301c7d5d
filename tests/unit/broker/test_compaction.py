"""Log compaction: the cleaner on temporary logs and crash leftovers.

Time is controlled by the ``now_ms`` the cleaner functions take, never by sleeping.
"""

from __future__ import annotations

import asyncio
import os
import shutil
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode

from broker.config.broker_config import BrokerConfig
from broker.protocol.batch_codec import (
    CODEC_GZIP,
    CODEC_LZ4,
    CODEC_NONE,
    CODEC_SNAPPY,
    CODEC_ZSTD,
    Record,
    encode_batch,
    read_records,
)
from broker.protocol.records import HEADER_SIZE, parse_header, split_batches
from broker.server.log_manager import CLEANER_CHECKPOINT
from broker.server.replica_dirs import TopicPartition as TP
from broker.server.replica_dirs import read_offset_checkpoint
from broker.server.replica_manager import ReplicaManager
from broker.storage.cleaner import (
    CleanTarget,
    LogCleaner,
    clean_log,
    cleanable_range,
    plan_cleaning,
)
from broker.storage.cleaner_rewrite import execute_plan
from broker.storage.log import Log, LogConfig
from broker.storage.segment import SWAP_SUFFIX
from kafkube.harness.wire import recompute_crc
from tests.support.in_process import open_replicas

TS = 1_700_000_000_000
NOW = TS + 3_600_000  # when the tests' cleaner runs
Pair = tuple[bytes | None, bytes | None]


# -- helpers -------------------------------------------------------------------------------


def kv_batch(
    pairs: list[Pair], ts: int = TS, codec: int = CODEC_NONE, pid: int = -1, seq: int = -1
) -> bytes:
    """A producer's batch of (key, value) records, offsets 0.. and one timestamp each."""
    records = [Record(i, ts + i, k, v) for i, (k, v) in enumerate(pairs)]
    return encode_batch(
        records, 0, codec=codec, producer_id=pid, producer_epoch=0 if pid >= 0 else -1,
        base_sequence=seq,
    )


def append(log: Log, data: bytes, epoch: int = 0) -> int:
    [header] = split_batches(data)
    return log.append_as_leader(data, header, epoch).first_offset


def compact_config(**changes) -> LogConfig:
    base = {
        "segment_bytes": 1200, "index_interval_bytes": 256, "file_delete_delay_ms": 0,
        "cleanup_policy": ("compact",), "delete_retention_ms": 60_000,
    }
    return LogConfig(**{**base, **changes})


def consume(log: Log, start: int = 0) -> list[Record]:
    """What a consumer fetching from ``start`` until the log end sees, fetch by fetch."""
    out: list[Record] = []
    offset = start
    while offset < log.log_end_offset:
        result = log.read(offset, 1 << 20, log.log_end_offset, True)
        region = result.region
        assert region is not None, f"nothing readable at {offset}"
        data = os.pread(region.fd, region.length, region.position)
        for header in split_batches(data):
            batch = data[: header.size]
            data = data[header.size :]
            out += [r for r in read_records(batch) if r.offset >= offset]
        assert result.next_offset > offset
        offset = result.next_offset
    offsets = [r.offset for r in out]
    assert offsets == sorted(set(offsets)), "offsets must strictly increase"
    return out


def latest_per_key(records: list[Record]) -> dict[bytes | None, bytes | None]:
    return {r.key: r.value for r in records if r.key is not None}


def fill(log: Log, rounds: int, keys: int, per_batch: int = 4, codec: int = CODEC_NONE) -> None:
    """``rounds`` updates of each of ``keys`` keys, values naming key and round."""
    pairs = [(b"key-%d" % k, b"v%d-%d" % (k, r)) for r in range(rounds) for k in range(keys)]
    for i in range(0, len(pairs), per_batch):
        append(log, kv_batch(pairs[i : i + per_batch], codec=codec))


def expected_after_clean(before: list[Record], end: int) -> list[tuple[int, bytes | None]]:
    """(offset, key) that must survive: the latest per key below ``end``, all records after."""
    latest: dict[bytes | None, int] = {}
    for r in before:
        if r.offset < end and r.key is not None:
            latest[r.key] = r.offset
    return [
        (r.offset, r.key) for r in before
        if r.offset >= end or r.key is None or latest[r.key] == r.offset
    ]


# -- compaction ----------------------------------------------------------------------------


def test_cleaning_keeps_only_the_latest_value_of_each_key(tmp_path: Path):
    log = Log(tmp_path / "t-0", compact_config())
    fill(log, rounds=40, keys=6)
    append(log, kv_batch([(None, b"keyless")]))
    fill(log, rounds=2, keys=6)
    before = consume(log)
    segments_before = len(log.segments)
    active = log.active_segment
    active_bytes = active.log_path.read_bytes()
    assert segments_before > 5

    result = clean_log(log, None, NOW)

    assert result is not None and not result.aborted
    assert result.end_offset == active.base_offset
    after = consume(log)
    assert [(r.offset, r.key) for r in after] == expected_after_clean(before, result.end_offset)
    assert latest_per_key(after) == latest_per_key(before)
    assert len(after) < len(before) / 4
    assert any(r.key is None for r in after), "records without a key are kept"
    # The active segment is the same object with the same bytes.
    assert log.active_segment is active
    assert active.log_path.read_bytes() == active_bytes
    assert log.log_start_offset == 0
    # Every offset still reads, from the first batch that reaches it.
    for offset in range(log.log_end_offset):
        found = log.read(offset, 1 << 20, log.log_end_offset, True)
        first = parse_header(os.pread(found.region.fd, HEADER_SIZE, found.region.position))
        assert first.last_offset >= offset
    # The now small clean segments merge on the next pass, which changes nothing else.
    again = clean_log(log, result.end_offset, NOW)
    assert again is not None and again.end_offset == result.end_offset
    assert len(log.segments) < segments_before / 2
    assert consume(log) == after
    # Nothing but live segment files remains, and a reopened log reads the same.
    for path in (tmp_path / "t-0").iterdir():
        assert path.name == "leader-epoch-checkpoint" or path.suffix in (
            ".log", ".index", ".timeindex", ".txnindex"
        ), path.name
    log.close()
    reopened = Log(tmp_path / "t-0", compact_config(), clean_shutdown=False)
    assert consume(reopened) == after


def test_a_second_pass_uses_the_checkpoint(tmp_path: Path):
    log = Log(tmp_path / "t-0", compact_config())
    fill(log, rounds=20, keys=4)
    log.roll()
    first = clean_log(log, None, NOW)
    assert first is not None
    clean = cleanable_range(log, first.end_offset, NOW)
    assert (clean.first_dirty, clean.dirty_bytes) == (first.end_offset, 0)
    fill(log, rounds=20, keys=4)
    fill(log, rounds=1, keys=2)
    log.roll()
    dirty = cleanable_range(log, first.end_offset, NOW)
    assert dirty.dirty_bytes > 0 and dirty.clean_bytes > 0 and 0 < dirty.ratio < 1
    second = clean_log(log, first.end_offset, NOW)
    assert second is not None and second.end_offset == log.active_segment.base_offset
    after = consume(log)
    assert len(after) == 4  # one record per key: everything is below the active segment
    assert latest_per_key(after) == {
        b"key-0": b"v0-0", b"key-1": b"v1-0", b"key-2": b"v2-19", b"key-3": b"v3-19",
    }


def test_tombstones_go_only_after_delete_retention(tmp_path: Path):
    log = Log(tmp_path / "t-0", compact_config(delete_retention_ms=10_000))
    append(log, kv_batch([(b"a", b"1"), (b"b", b"1"), (b"a", b"2")]))
    append(log, kv_batch([(b"a", None), (b"c", b"1")]))
    log.roll()
    append(log, kv_batch([(b"d", b"1")]))

    first = clean_log(log, None, NOW)
    # First pass: older values of a go, its tombstone stays, and its clock starts now.
    assert first is not None and first.tombstone_expiry_ms == NOW + 10_000
    assert [(r.key, r.value) for r in consume(log)] == [
        (b"b", b"1"), (b"a", None), (b"c", b"1"), (b"d", b"1"),
    ]
    again = clean_log(log, first.end_offset, NOW + 10_000)
    assert again is not None and again.stats.tombstones_dropped == 0
    assert (b"a", None) in [(r.key, r.value) for r in consume(log)]

    # The background cleaner waits for the expiry, then cleans without new dirty bytes.
    cleaner = LogCleaner()
    cleaner.checkpoints["t"] = first.end_offset
    cleaner._tombstone_expiry["t"] = first.tombstone_expiry_ms
    target = CleanTarget("t", log, log.log_end_offset)
    assert cleaner.choose([target], NOW + 10_000) is None
    assert cleaner.choose([target], NOW + 10_001) is not None
    done = asyncio.run(cleaner.clean_filthiest([target], NOW + 10_001))
    assert done is not None and done.stats.tombstones_dropped == 1
    assert done.tombstone_expiry_ms is None
    assert [(r.key, r.value) for r in consume(log)] == [(b"b", b"1"), (b"c", b"1"), (b"d", b"1")]
    assert cleaner.choose([target], NOW + 10**9) is None


def test_records_within_min_compaction_lag_wait(tmp_path: Path):
    log = Log(tmp_path / "t-0", compact_config(min_compaction_lag_ms=60_000))
    fill(log, rounds=10, keys=2)  # timestamps TS + small
    log.roll()
    recent = log.log_end_offset
    for r in range(10):
        append(log, kv_batch([(b"key-0", b"late-%d" % r)] * 4, ts=NOW - 1000))
    log.roll()
    append(log, kv_batch([(b"x", b"y")]))
    found = cleanable_range(log, None, NOW)
    assert log.segments[0].base_offset < found.first_uncleanable <= recent
    result = clean_log(log, None, NOW)
    assert result is not None and result.end_offset == found.first_uncleanable
    after = consume(log)
    assert [r.value for r in after if r.offset >= recent][:4] == [b"late-0"] * 4
    assert cleanable_range(log, None, NOW + 60_000).first_uncleanable == (
        log.active_segment.base_offset
    )


def test_high_watermark_bounds_the_cleanable_range(tmp_path: Path):
    log = Log(tmp_path / "t-0", compact_config())
    fill(log, rounds=40, keys=3)
    assert len(log.segments) >= 4
    hw = log.segments[2].base_offset + 1
    found = cleanable_range(log, None, NOW, max_offset=hw)
    assert found.first_uncleanable == log.segments[2].base_offset


@pytest.mark.parametrize(
    "codec", [CODEC_NONE, CODEC_GZIP, CODEC_SNAPPY, CODEC_LZ4, CODEC_ZSTD],
    ids=["none", "gzip", "snappy", "lz4", "zstd"],
)
def test_compressed_and_idempotent_batches_are_re_encoded_faithfully(tmp_path: Path, codec: int):
    log = Log(tmp_path / "t-0", compact_config(segment_bytes=1 << 20))
    seq = 0
    for r in range(6):
        pairs = [(b"a", b"a%d" % r), (b"b%d" % r, b"only"), (b"c", b"c%d" % r)]
        append(log, kv_batch(pairs, codec=codec, pid=42, seq=seq))
        seq += len(pairs)
    whole = kv_batch([(b"solo", b"1"), (b"solo2", b"1")], codec=codec, pid=42, seq=seq)
    append(log, whole)
    log.roll()
    append(log, kv_batch([(b"z", b"z")]))
    stored = _segment_bytes(log, 0)
    originals = split_batches(stored)

    result = clean_log(log, None, NOW)

    assert result is not None
    raw = _segment_bytes(log, 0)
    cleaned = split_batches(raw)  # validates every CRC
    assert [h.base_offset for h in cleaned] == [h.base_offset for h in originals]
    for old, new in zip(originals, cleaned, strict=True):
        assert new.compression == codec
        assert (new.last_offset_delta, new.base_sequence) == (old.last_offset_delta,
                                                              old.base_sequence)
        assert (new.producer_id, new.producer_epoch) == (42, 0)
        assert new.partition_leader_epoch == old.partition_leader_epoch
    assert [h.record_count for h in cleaned] == [1] * 5 + [3, 2]
    assert raw.endswith(stored[-len(whole) :])  # kept whole: copied byte for byte
    assert latest_per_key(consume(log)) == {
        **{b"b%d" % r: b"only" for r in range(6)}, b"a": b"a5", b"c": b"c5",
        b"solo": b"1", b"solo2": b"1", b"z": b"z",
    }


def test_log_append_time_batches_keep_their_timestamp(tmp_path: Path):
    log = Log(tmp_path / "t-0", compact_config(message_timestamp_type="LogAppendTime"))
    append(log, kv_batch([(b"a", b"1"), (b"b", b"1")]))
    append(log, kv_batch([(b"a", b"2")]))
    log.roll()
    stamped = split_batches(_segment_bytes(log, 0))[0].max_timestamp
    clean_log(log, None, NOW)
    [first, _] = split_batches(_segment_bytes(log, 0))
    assert first.record_count == 1 and first.attributes & 0x08
    assert first.max_timestamp == stamped


def test_an_empty_group_keeps_the_log_start(tmp_path: Path):
    log = Log(tmp_path / "t-0", compact_config(segment_bytes=200))
    append(log, kv_batch([(b"a", b"1")] * 3))
    append(log, kv_batch([(b"a", b"2")] * 3))
    append(log, kv_batch([(b"a", b"3")] * 3))
    log.roll()
    append(log, kv_batch([(b"b", b"1")]))
    clean_log(log, None, NOW)
    assert log.log_start_offset == 0
    assert [(r.offset, r.value) for r in consume(log)] == [(8, b"3"), (9, b"1")]


def test_a_batch_with_undecodable_records_is_kept_as_is(tmp_path: Path):
    log = Log(tmp_path / "t-0", compact_config())
    good = kv_batch([(b"a", b"1")])
    broken = recompute_crc(good[:HEADER_SIZE] + b"\xff" * (len(good) - HEADER_SIZE))
    append(log, broken)
    append(log, kv_batch([(b"a", b"2"), (b"a", b"3")]))
    log.roll()
    append(log, kv_batch([(b"b", b"1")]))
    stored = _segment_bytes(log, 0)[: len(broken)]
    result = clean_log(log, None, NOW)
    assert result is not None
    raw = _segment_bytes(log, 0)
    assert raw.startswith(stored)
    assert [h.base_offset for h in split_batches(raw)] == [0, 1]
    assert [r.value for r in read_records(raw[len(broken) :])] == [b"3"]


def test_compact_only_logs_are_not_deleted_by_retention(tmp_path: Path):
    compact = Log(tmp_path / "c-0", compact_config(retention_ms=1))
    both = Log(tmp_path / "b-0", compact_config(retention_ms=1, cleanup_policy=("compact",
                                                                                "delete")))
    for log in (compact, both):
        fill(log, rounds=20, keys=3)
        assert len(log.segments) > 1
    assert compact.delete_old_segments(now_ms=NOW) == 0
    assert both.delete_old_segments(now_ms=NOW) > 0


# -- crashes -------------------------------------------------------------------------------


def _segment_bytes(log: Log, index: int) -> bytes:
    return log.segments[index].log_path.read_bytes()


def _crash_mid_swap(log: Log, checkpoint: int, retire_old: bool) -> tuple[int, int]:
    """Do what replace_segments does for a merged group, stopping after the .swap rename (and
    optionally after retiring the old files), then drop everything as a crash would.

    Returns the offset range the group covered.
    """
    plan = plan_cleaning(log, cleanable_range(log, checkpoint, NOW), NOW)
    assert plan is not None
    staged = execute_plan(plan)
    merged = next(s for s in staged if s.new is not None and len(s.old) > 1)
    after = log.segments[log.segments.index(merged.old[-1]) + 1]
    covered = (merged.old[0].base_offset, after.base_offset)
    merged.new.change_suffix(SWAP_SUFFIX)
    if retire_old:
        for segment in merged.old:
            segment.mark_deleted()
    for item in staged:
        if item.new is not None:
            item.new.close()
    log.close()
    return covered


@pytest.mark.parametrize("retire_old", [False, True], ids=["before-retiring", "after-retiring"])
def test_an_interrupted_swap_is_completed_on_load(tmp_path: Path, retire_old: bool):
    directory = tmp_path / "t-0"
    log = Log(directory, compact_config())
    fill(log, rounds=30, keys=5)
    log.roll()
    first = clean_log(log, None, NOW)  # leaves small clean segments, merged by the next pass
    assert first is not None
    fill(log, rounds=30, keys=3)  # keys 3 and 4 stay in the clean part
    log.roll()
    before = consume(log)
    shutil.copytree(directory, tmp_path / "reference")
    reference = Log(tmp_path / "reference", compact_config())
    clean_log(reference, first.end_offset, NOW)
    want = consume(reference)

    start, end = _crash_mid_swap(log, first.end_offset, retire_old)
    assert list(directory.glob(f"*{SWAP_SUFFIX}")) and list(directory.glob("*.cleaned"))

    reopened = Log(directory, compact_config(), clean_shutdown=False)
    assert not list(directory.glob(f"*{SWAP_SUFFIX}")) and not list(directory.glob("*.cleaned"))
    assert not list(directory.glob("*.deleted"))
    got = consume(reopened)
    # The swapped group is as the full pass made it; the rest still holds every record.
    assert [r for r in got if start <= r.offset < end] == [
        r for r in want if start <= r.offset < end
    ]
    assert [r for r in got if not start <= r.offset < end] == [
        r for r in before if not start <= r.offset < end
    ]
    assert reopened.log_start_offset == 0
    # Cleaning again, from the checkpoint that had not moved, finishes the job.
    clean_log(reopened, first.end_offset, NOW)
    assert consume(reopened) == want


def test_leftover_cleaned_files_are_discarded(tmp_path: Path):
    directory = tmp_path / "t-0"
    log = Log(directory, compact_config())
    fill(log, rounds=10, keys=3)
    before = consume(log)
    log.close()
    for suffix in (".log", ".index", ".timeindex", ".txnindex"):
        (directory / f"{0:020d}{suffix}.cleaned").write_bytes(b"\x00" * 100)
    reopened = Log(directory, compact_config(), clean_shutdown=False)
    assert not list(directory.glob("*.cleaned"))
    assert consume(reopened) == before


# -- the replica manager's cleaner checkpoint -----------------------------------------------


def _replicas(log_dir: Path) -> ReplicaManager:
    config = BrokerConfig.from_dict({"log.dirs": str(log_dir), "log.segment.bytes": "1200"})
    _, replicas = open_replicas(config)
    return replicas


def test_cleaner_checkpoint_survives_a_restart(tmp_path: Path):
    replicas = _replicas(tmp_path)
    asyncio.run(replicas.create_topic("plain", 1, {}))
    asyncio.run(replicas.create_topic("table", 1, {"cleanup.policy": "compact",
                                                   "min.cleanable.dirty.ratio": "0.3"}))
    for name in ("plain", "table"):
        partition = replicas.get(name, 0)
        for r in range(20):
            batch = kv_batch([(b"k%d" % k, b"%d" % r) for k in range(3)])
            assert partition.append(batch, 1 << 20).error == ErrorCode.none
        partition.log.roll()
    result = asyncio.run(replicas.logs.clean_logs(NOW))
    assert result is not None and result.end_offset == 60
    assert asyncio.run(replicas.logs.clean_logs(NOW)) is None  # nothing dirty is left
    assert len(consume(replicas.get("plain", 0).log)) == 60  # delete policy: not compacted
    checkpoint = tmp_path / CLEANER_CHECKPOINT
    assert checkpoint.read_text() == "0\n1\ntable 0 60\n"
    asyncio.run(replicas.shutdown())

    restarted = _replicas(tmp_path)
    assert restarted.logs.cleaner.checkpoints[TP("table", 0)] == 60
    assert read_offset_checkpoint(checkpoint) == {TP("table", 0): 60}
    assert asyncio.run(restarted.logs.clean_logs(NOW)) is None
    partition = restarted.get("table", 0)
    assert partition.append(kv_batch([(b"k0", b"new")] * 5), 1 << 20).error == ErrorCode.none
    partition.log.roll()
    again = asyncio.run(restarted.logs.clean_logs(NOW))
    assert again is not None and again.end_offset == 65
    assert latest_per_key(consume(partition.log)) == {b"k0": b"new", b"k1": b"19", b"k2": b"19"}
    asyncio.run(restarted.delete_topic("table"))
    assert read_offset_checkpoint(checkpoint) == {}
    asyncio.run(restarted.shutdown())
