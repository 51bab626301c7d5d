"""The log layer on temporary directories, with no broker: segments, indexes, recovery."""

from __future__ import annotations

import os
import random
import struct
import time
from pathlib import Path

import pytest

from broker.protocol.batch_codec import record_offsets_and_timestamps
from broker.protocol.records import split_batches
from broker.server.replica_dirs import schedule_removal
from broker.storage.index import PENDING_LIMIT, OffsetIndex
from broker.storage.leader_epoch import LeaderEpochCache
from broker.storage.log import Log, LogConfig, OffsetOutOfRange
from broker.storage.segment import TAIL_BATCHES
from kafkube.harness.wire import build_batch, recompute_crc

TS = 1_700_000_000_000


def batch(n: int, ts: int = TS, size: int = 100, pid: int = -1, seq: int = -1) -> bytes:
    return build_batch(
        [(None, b"v" * size, (), i) for i in range(n)], ts, producer_id=pid, producer_epoch=0,
        base_sequence=seq,
    )


def append(log: Log, data: bytes, epoch: int = 0):
    [header] = split_batches(data)
    return log.append_as_leader(data, header, epoch)


def read_all(log: Log, start: int = 0) -> bytes:
    out = b""
    offset = start
    while offset < log.log_end_offset:
        result = log.read(offset, 1 << 30, log.log_end_offset, True)
        region = result.region
        out += os.pread(region.fd, region.length, region.position)
        offset = result.next_offset
    return out


def small_config(**changes) -> LogConfig:
    base = {"segment_bytes": 4096, "index_interval_bytes": 256, "file_delete_delay_ms": 0}
    return LogConfig(**{**base, **changes})


def test_offsets_roll_and_segment_names(tmp_path: Path):
    log = Log(tmp_path / "t-0", small_config())
    offsets = [append(log, batch(3)).first_offset for _ in range(40)]
    assert offsets == list(range(0, 120, 3))
    assert len(log.segments) > 3
    names = sorted(p.name for p in (tmp_path / "t-0").glob("*.log"))
    assert names[0] == "00000000000000000000.log"
    assert all(len(n) == len("00000000000000000000.log") for n in names)
    assert [s.base_offset for s in log.segments] == [int(n[:20]) for n in names]
    assert all(s.offset_index.entries > 0 for s in log.segments[:-1])
    # Every offset is readable and lands in the batch that holds it.
    for offset in range(120):
        result = log.read(offset, 10_000, log.log_end_offset, True)
        assert result.first_offset == offset - offset % 3


def test_read_respects_max_bytes_and_high_watermark(tmp_path: Path):
    log = Log(tmp_path / "t-0", small_config(segment_bytes=1 << 20))
    sizes = [len(batch(2)) for _ in range(10)]
    for _ in range(10):
        append(log, batch(2))
    one = log.read(0, sizes[0] + 10, log.log_end_offset, True)
    assert (one.region.length, one.next_offset) == (sizes[0], 2)
    # Too small for one batch: nothing, unless min_one_batch (KIP-74).
    assert log.read(0, 10, log.log_end_offset, False).region is None
    assert log.read(0, 10, log.log_end_offset, True).region.length == sizes[0]
    # Stops before the high watermark at a batch boundary.
    capped = log.read(0, 1 << 20, 6, True)
    assert (capped.region.length, capped.next_offset) == (3 * sizes[0], 6)
    assert log.read(6, 1 << 20, 6, True).region is None
    with pytest.raises(OffsetOutOfRange):
        log.read(21, 100, 20, True)


def test_reopen_after_clean_close_keeps_everything(tmp_path: Path):
    log = Log(tmp_path / "t-0", small_config())
    for i in range(30):
        append(log, batch(2, ts=TS + i))
    before = read_all(log)
    end = log.log_end_offset
    log.close()
    log = Log(tmp_path / "t-0", small_config(), clean_shutdown=True)
    assert log.log_end_offset == end
    assert read_all(log) == before
    assert append(log, batch(1)).first_offset == end


def test_recovery_truncates_a_torn_tail_and_rebuilds_indexes(tmp_path: Path):
    directory = tmp_path / "t-0"
    log = Log(directory, small_config())
    for _ in range(30):
        append(log, batch(2))
    good = read_all(log)
    end = log.log_end_offset
    active = log.active_segment.log_path
    log.close()
    with open(active, "ab") as f:
        f.write(batch(5)[:70])  # a batch cut short, as a crash mid-write leaves it
    for index in directory.glob("*.index"):
        index.write_bytes(b"\x00" * 16)  # garbage entries
    log = Log(directory, small_config(), recovery_point=0, clean_shutdown=False)
    assert log.log_end_offset == end
    assert read_all(log) == good
    for offset in range(0, end, 7):
        assert log.read(offset, 1 << 20, end, True).first_offset == offset - offset % 2


def test_recovery_drops_segments_after_a_corrupt_batch(tmp_path: Path):
    directory = tmp_path / "t-0"
    log = Log(directory, small_config())
    for _ in range(40):
        append(log, batch(2))
    second = log.segments[1]
    keep_end = second.base_offset
    log.close()
    with open(second.log_path, "r+b") as f:
        f.seek(70)
        f.write(b"\xff\xff")  # flip bytes inside the first batch: CRC mismatch
    log = Log(directory, small_config(), recovery_point=0, clean_shutdown=False)
    assert log.log_end_offset == keep_end
    assert len(log.segments) == 2 and log.segments[1].size == 0


def test_retention_by_size_and_time(tmp_path: Path):
    log = Log(tmp_path / "t-0", small_config(retention_bytes=8192, retention_ms=-1))
    for i in range(60):
        append(log, batch(2, ts=TS + i))
    assert log.delete_old_segments(now_ms=TS) > 0
    assert log.size_bytes - log.active_segment.size <= 8192
    start = log.log_start_offset
    assert start > 0
    with pytest.raises(OffsetOutOfRange):
        log.read(start - 1, 100, log.log_end_offset, True)
    assert not list((tmp_path / "t-0").glob("*.deleted"))  # delay 0: files gone

    timed = Log(tmp_path / "u-0", small_config(retention_ms=60_000))
    for i in range(60):
        append(timed, batch(2, ts=TS + i * 1000))
    segments = len(timed.segments)
    assert timed.delete_old_segments(now_ms=TS + 59_000) == 0
    # Not past the high watermark: a follower may still need those records.
    hw = timed.segments[3].base_offset
    assert timed.delete_old_segments(now_ms=TS + 10**9, high_watermark=hw) == 3
    # All of it, the active segment too: rolled first, so the log ends in an empty one.
    end = timed.log_end_offset
    assert timed.delete_old_segments(now_ms=TS + 10**9) == segments - 3
    assert timed.log_start_offset == timed.log_end_offset == end
    assert len(timed.segments) == 1 and timed.active_segment.size == 0


def test_offset_for_timestamp_looks_inside_batches(tmp_path: Path):
    log = Log(tmp_path / "t-0", small_config(segment_bytes=1 << 20))
    for b in range(20):
        append(log, batch(5, ts=TS + b * 100))  # records at TS + b*100 + 0..4
    assert log.offset_for_timestamp(TS)[:2] == (0, TS)
    assert log.offset_for_timestamp(TS + 702)[:2] == (37, TS + 702)
    assert log.offset_for_timestamp(TS + 705)[:2] == (40, TS + 800)
    assert log.offset_for_timestamp(TS + 10**6) is None
    assert log.max_timestamp_offset()[:2] == (99, TS + 1904)
    raw = build_batch([(b"k", b"v", (), 7), (None, b"w", (), 3)], TS)
    assert record_offsets_and_timestamps(raw) == [(0, TS + 7), (1, TS + 3)]


def test_max_timestamp_is_the_record_not_the_batch(tmp_path: Path):
    """KIP-734 as Kafka answers it: the first record holding the largest timestamp."""
    log = Log(tmp_path / "t-0", small_config(segment_bytes=1 << 20))
    append(log, batch(4, ts=TS))
    append(log, build_batch([(None, b"a", (), 1000), (None, b"b", (), 3000),
                             (None, b"c", (), 2000)], TS))  # offsets 4, 5, 6
    append(log, batch(2, ts=TS + 100))
    assert log.max_timestamp_offset()[:2] == (5, TS + 3000)
    log.roll()
    append(log, build_batch([(None, b"d", (), 3000), (None, b"e", (), 3000)], TS))
    assert log.max_timestamp_offset()[:2] == (5, TS + 3000)  # the first segment of equals
    log.close()
    reopened = Log(tmp_path / "t-0", small_config(segment_bytes=1 << 20))
    assert reopened.max_timestamp_offset()[:2] == (5, TS + 3000)


def time_index_problems(log: Log) -> list[str]:
    """What DumpLogSegments' time index check reports: each entry must name the last offset
    of a batch whose largest timestamp is the entry's, timestamps strictly increasing."""
    problems = []
    for segment in log.segments:
        batches = {b.header.last_offset: b.header for b in segment.batches_from(0)}
        index = segment.time_index
        previous = -1
        for ts, rel in zip(index._timestamps, index._offsets, strict=True):
            header = batches.get(segment.base_offset + rel)
            if header is None:
                problems.append(f"{segment.base_offset}: offset {rel} is no batch's last")
            elif header.max_timestamp != ts:
                problems.append(f"{segment.base_offset}: {ts} != {header.max_timestamp}")
            if ts <= previous:
                problems.append(f"{segment.base_offset}: {ts} after {previous}")
            previous = ts
        if segment is not log.active_segment and segment.time_index.last_timestamp != (
                segment.max_timestamp):
            problems.append(f"{segment.base_offset}: sealed without its largest timestamp")
    return problems


def test_time_index_entries_are_the_ones_kafka_writes(tmp_path: Path):
    log = Log(tmp_path / "t-0", small_config())
    rng = random.Random(3)
    for _ in range(120):
        deltas = [rng.randrange(0, 50_000) for _ in range(rng.randrange(1, 5))]
        append(log, build_batch([(None, b"v" * 60, (), d) for d in deltas], TS))
    assert len(log.segments) > 3
    assert sum(s.time_index.entries for s in log.segments) > 10
    assert time_index_problems(log) == []
    log.close()
    reopened = Log(tmp_path / "t-0", small_config())
    assert time_index_problems(reopened) == []
    for _ in range(20):
        append(reopened, batch(2, ts=TS + 60_000))
    assert time_index_problems(reopened) == []


def test_producer_state_survives_reopen(tmp_path: Path):
    directory = tmp_path / "t-0"
    log = Log(directory, small_config())
    now = int(time.time() * 1000)  # a producer idle past producer.id.expiration.ms would go
    append(log, batch(3, ts=now, pid=7, seq=0))
    append(log, batch(3, ts=now, pid=7, seq=3))
    log.close()
    log = Log(directory, small_config(), clean_shutdown=False)
    dup = split_batches(batch(3, ts=now, pid=7, seq=3))[0]
    assert log.producer_state.find_duplicate(dup).first_offset == 3
    gap = split_batches(batch(1, pid=7, seq=9))[0]
    assert log.producer_state.check(gap) is not None
    nxt = split_batches(batch(1, pid=7, seq=6))[0]
    assert log.producer_state.check(nxt) is None


def test_leader_epoch_cache(tmp_path: Path):
    cache = LeaderEpochCache(tmp_path)
    cache.assign(0, 0)
    cache.assign(2, 50)
    cache.assign(1, 40)  # older epochs never go backwards
    cache.assign(5, 90)
    assert cache.entries == [(0, 0), (2, 50), (5, 90)]
    assert cache.end_offset_for(0, 120) == (0, 50)
    assert cache.end_offset_for(1, 120) == (0, 50)
    assert cache.end_offset_for(3, 120) == (2, 90)
    assert cache.end_offset_for(5, 120) == (5, 120)
    assert cache.end_offset_for(6, 120) == (-1, -1)  # newer than any known epoch
    (tmp_path / "later").mkdir()
    later = LeaderEpochCache(tmp_path / "later")
    later.assign(4, 30)
    assert later.end_offset_for(2, 50) == (2, 30)  # older than the first: ends where it starts
    assert LeaderEpochCache(tmp_path).entries == cache.entries  # the checkpoint file
    cache.truncate_from_end(60)
    assert cache.entries == [(0, 0), (2, 50)]
    cache.truncate_from_start(55)
    assert cache.entries == [(2, 55)]


def test_epochs_are_stamped_and_checkpointed(tmp_path: Path):
    directory = tmp_path / "t-0"
    log = Log(directory, small_config())
    append(log, batch(2), epoch=0)
    append(log, batch(2), epoch=3)
    assert log.epoch_cache.entries == [(0, 0), (3, 2)]
    raw = read_all(log)
    assert [h.partition_leader_epoch for h in split_batches(raw)] == [0, 3]
    assert (directory / "leader-epoch-checkpoint").read_text() == "0\n2\n0 0\n3 2\n"


def test_log_append_time_restamps_and_keeps_the_crc_valid(tmp_path: Path):
    log = Log(tmp_path / "t-0", small_config(message_timestamp_type="LogAppendTime"))
    result = append(log, batch(3, ts=TS))
    assert result.log_append_time > TS
    [stored] = split_batches(read_all(log))  # validates the recomputed CRC
    assert stored.attributes & 0x08
    assert stored.max_timestamp == result.log_append_time
    assert log.offset_for_timestamp(result.log_append_time)[:2] == (0, result.log_append_time)
    # The header remembered for tail reads is the stamped one, as on disk.
    assert log.active_segment.find(0).header == stored


def test_roll_by_segment_age(tmp_path: Path):
    log = Log(tmp_path / "t-0", small_config(segment_bytes=1 << 20, segment_ms=60_000))
    append(log, batch(2))
    append(log, batch(2))
    assert len(log.segments) == 1
    log.active_segment.created_ms -= 60_000  # the segment is now a minute old
    append(log, batch(2))
    assert [s.base_offset for s in log.segments] == [0, 4]


def test_follower_append_copies_the_leaders_log_across_rolls(tmp_path: Path):
    """A follower writes fetched batches as they are (offsets, epochs), in runs that roll
    at the same size limit, and refuses data that overlaps what it holds."""
    from broker.protocol.records import InvalidRecordError

    leader = Log(tmp_path / "leader-0", small_config())
    for epoch in (0, 0, 1, 1, 1, 3):
        for _ in range(7):
            append(leader, batch(3), epoch)
    fetched = read_all(leader)
    follower = Log(tmp_path / "follower-0", small_config())
    half = sum(h.size for h in split_batches(fetched)[:20])
    assert follower.append_as_follower(fetched[:half]) == 60
    assert follower.append_as_follower(fetched[half:]) == 126 - 60
    assert follower.log_end_offset == leader.log_end_offset == 126
    assert read_all(follower) == fetched
    assert len(follower.segments) > 3
    # The same segments as the leader's, though each fetch brought several segments' worth.
    assert [s.base_offset for s in follower.segments] == [s.base_offset for s in leader.segments]
    assert follower.epoch_cache.entries == leader.epoch_cache.entries == [(0, 0), (1, 42), (3, 105)]
    with pytest.raises(InvalidRecordError):
        follower.append_as_follower(fetched[:half])  # offsets it already has
    follower.close()
    reopened = Log(tmp_path / "follower-0", small_config(), clean_shutdown=False)
    assert read_all(reopened) == fetched


def _scan_find(segment, offset: int):
    """What ``find`` must answer, by reading every header from the start."""
    return next((b for b in segment.batches_from(0) if b.header.last_offset >= offset), None)


def _scan_whole_batches_end(segment, start: int, limit: int, max_offset: int):
    position, next_offset = start, -1
    for b in segment.batches_from(start):
        if next_offset < 0:
            next_offset = b.header.base_offset
        if b.position + b.header.size > limit or b.header.last_offset >= max_offset:
            break
        position, next_offset = b.position + b.header.size, b.header.next_offset
    return position, next_offset


def test_reads_from_the_remembered_tail_agree_with_a_header_scan(tmp_path: Path):
    """The newest batches' positions are kept in memory (TAIL_BATCHES); every answer from
    them must equal the scan from the sparse index, in and out of the tail, after the tail
    was trimmed, and after a truncation and a reopen rebuilt it."""
    rng = random.Random(7)
    log = Log(tmp_path / "t-0", small_config(segment_bytes=1 << 30))
    for _ in range(3 * TAIL_BATCHES):
        append(log, batch(rng.randint(1, 4), size=rng.randint(1, 300)))

    def check(segment) -> None:
        assert 0 < len(segment._tail) <= 2 * TAIL_BATCHES
        batches = list(segment.batches_from(0))
        assert segment._tail == batches[-len(segment._tail):]
        for offset in range(segment.next_offset + 2):
            assert segment.find(offset) == _scan_find(segment, offset), offset
        for _ in range(500):
            start = rng.choice(batches).position
            limit = start + rng.randint(0, 3000)
            max_offset = rng.randint(0, segment.next_offset + 2)
            assert segment.whole_batches_end(start, limit, max_offset) == \
                _scan_whole_batches_end(segment, start, limit, max_offset)

    check(log.active_segment)
    log.truncate_to(log.log_end_offset - 50)
    check(log.active_segment)
    log.close()
    reopened = Log(tmp_path / "t-0", small_config(segment_bytes=1 << 30))
    check(reopened.active_segment)


def test_unreadable_records_on_disk_are_passed_over(tmp_path: Path, caplog):
    """A batch with a right CRC and unreadable records (stored by an older version, or
    fetched from such a leader) leaves searches by timestamp working around it."""
    log = Log(tmp_path / "t-0", small_config(segment_bytes=1 << 20))
    append(log, batch(2, ts=TS))  # offsets 0-1
    bad = bytearray(build_batch([(None, b"x", (), 50)], TS + 1000, base_offset=2))
    bad[-3:] = b"\xff\xff\xff"  # the record's fields now run past its end
    struct.pack_into(">q", bad, 35, TS + 5000)
    log.append_as_follower(recompute_crc(bad))  # followers check CRCs, not records
    append(log, batch(2, ts=TS + 2000))  # offsets 3-4
    assert log.offset_for_timestamp(TS + 1000)[:2] == (3, TS + 2000)
    assert "cannot be read" in caplog.text and "00000000000000000000.log" in caplog.text
    assert log.max_timestamp_offset() is None  # the largest timestamp is in the bad batch


def _open_descriptors_under(directory: Path) -> int:
    fds = Path("/proc/self/fd")
    count = 0
    for fd in fds.iterdir():
        try:
            if str(directory) in os.readlink(fd):
                count += 1
        except OSError:
            pass
    return count


def test_a_segment_holds_one_descriptor_and_its_indexes_reach_the_file(tmp_path: Path):
    """10,000 partitions at three descriptors a segment ran a broker out of its 20,000 open
    files: the indexes keep none open, and their entries are on disk once the segment is
    sealed, flushed or closed (the active segment's are rebuilt after a crash)."""
    directory = tmp_path / "t-0"
    log = Log(directory, small_config())
    for _ in range(200):
        append(log, batch(3))
    assert len(log.segments) > 3
    assert _open_descriptors_under(directory) == len(log.segments)
    sealed = log.segments[0]
    on_disk = sealed.offset_index.path.stat().st_size
    assert on_disk == sealed.offset_index.entries * 8 > 0
    assert sealed.time_index.path.stat().st_size == sealed.time_index.entries * 12
    active = log.active_segment
    log.flush()
    assert active.offset_index.path.stat().st_size == active.offset_index.entries * 8
    log.close()
    assert _open_descriptors_under(directory) == 0
    reopened = Log(directory, small_config())
    assert [s.offset_index.entries for s in reopened.segments] == \
        [s.offset_index.entries for s in log.segments]
    assert reopened.log_end_offset == 600
    reopened.close()


def test_a_new_segment_makes_its_index_files_when_it_has_entries(tmp_path: Path):
    """A new partition makes its log file alone (file creations cost 0.3-0.5 ms of kernel
    time each on the VMs measured): an index file is made by the first write of entries,
    truncated (a leftover at its name is no part of it); a deleted segment's is never made."""
    directory = tmp_path / "t-0"
    directory.mkdir()
    (directory / "00000000000000000000.index").write_bytes(b"x" * 8)  # a leftover
    log = Log(directory, small_config(segment_bytes=1 << 20))
    segment = log.active_segment
    # Neither made nor left: a leftover would be read as this segment's after a restart.
    assert not segment.time_index.path.exists() and not segment.offset_index.path.exists()
    append(log, batch(1))
    log.flush()  # one small batch: no entry is due yet, so no file
    assert not segment.time_index.path.exists()
    while segment.offset_index.entries == 0:
        append(log, batch(3))
    log.flush()
    assert segment.offset_index.path.stat().st_size == segment.offset_index.entries * 8
    assert segment.time_index.path.stat().st_size == segment.time_index.entries * 12
    log.close()
    reopened = Log(directory, small_config(segment_bytes=1 << 20))
    assert reopened.active_segment.offset_index.entries == segment.offset_index.entries
    assert reopened.log_end_offset == log.log_end_offset
    reopened.close()
    unmade = OffsetIndex(directory / "00000000000000000099.index", 99, 1024, new=True)
    unmade.append(100, 0)
    unmade.deleted()  # its segment deleted while the entry waited
    unmade.close()
    assert not unmade.path.exists()


def test_a_log_moved_away_for_removal_writes_nothing_into_a_new_log_at_its_name(
        tmp_path: Path):
    """A deleted topic's directory is renamed at once and its log closed a delay later
    (file.delete.delay.ms); a topic made again meanwhile under the same name has a new log
    at the old paths. Closing the old one wrote its waiting index entries into the new
    one's index, which a restart then trusted: the log ended at offset 0 under 3 records."""
    removals: list = []
    config = small_config(segment_bytes=1 << 20, index_interval_bytes=256)
    old = Log(tmp_path / "t-0", config)
    for _ in range(60):
        append(old, batch(3))
    assert old.active_segment.offset_index.entries > 0
    schedule_removal(old.dir, old, 60.0, lambda _delay, fn: removals.append(fn))
    new = Log(tmp_path / "t-0", config)
    for _ in range(3):
        append(new, batch(1))
    new.flush()
    (remove,) = removals
    remove()  # the old log closed, its files removed
    new.close()
    reopened = Log(tmp_path / "t-0", config)
    assert reopened.log_end_offset == 3
    assert reopened.active_segment.offset_index.entries == \
        new.active_segment.offset_index.entries
    reopened.close()


def test_index_entries_waiting_in_memory_stay_bounded(tmp_path: Path):
    log = Log(tmp_path / "t-0", small_config(segment_bytes=64 << 20, index_interval_bytes=0))
    for _ in range(3000):  # an index entry for each batch: 24,000 bytes of offset index
        append(log, batch(1, size=10))
    index = log.active_segment.offset_index
    assert index.entries >= 2999  # the first batch of a segment is not indexed
    written = index.path.stat().st_size
    assert written > 0 and index.entries * 8 - written < PENDING_LIMIT
    log.close()
    assert index.path.stat().st_size == index.entries * 8


def test_a_rolled_segment_passes_the_recovery_point_only_once_on_disk(tmp_path: Path):
    """Kafka's roll flushes the old segment on a background thread before the recovery
    point passes it; a recovery point ahead of what was fsynced would have a restart after
    a power cut trust a segment whose pages never reached the disk."""
    log = Log(tmp_path / "t-0", small_config())
    for _ in range(60):
        append(log, batch(3))
    assert len(log.segments) > 3
    assert log.recovery_point == 0  # rolled, never synced
    segments, target = log.unsynced_sealed()
    assert segments == log.segments[:-1] and target == log.active_segment.base_offset
    for segment in segments:
        segment.sync_files()
    log.advance_recovery_point(target)
    assert log.recovery_point == target
    assert log.unsynced_sealed() == ([], target)
    # A truncation below the synced offset since: the recovery point does not move past it.
    log.truncate_to(3)
    log.advance_recovery_point(target)
    assert log.recovery_point == 3
    # flush() syncs every segment from the recovery point on, sealed ones included.
    for _ in range(60):
        append(log, batch(3))
    log.flush()
    assert log.recovery_point == log.log_end_offset
    assert log.unsynced_sealed()[0] == []
    log.close()
