"""Out of file descriptors (EMFILE): refused where nothing was changed yet, the dir online;
after a partial change, the dir offline as for any I/O error (a log that continued would
not be what it says).

``os.open`` (and ``io.open``) is made to fail with EMFILE for chosen files, as the kernel
does once the process holds RLIMIT_NOFILE descriptors (the integration test lowers the real
limit of a broker process)."""

from __future__ import annotations

import asyncio
import errno
import io
import os
from collections.abc import Callable
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode

from broker.config.broker_config import BrokerConfig
from kafkube.harness.wire import build_batch
from tests.support.in_process import open_replicas

REAL_OPEN, REAL_IO_OPEN = os.open, io.open


def fail_opens(monkeypatch: pytest.MonkeyPatch, matches: Callable[[str], bool],
               times: int) -> list[str]:
    """The next ``times`` opens (``os.open``, and ``io.open`` under pathlib's) of a path
    ``matches`` accepts fail with EMFILE; the list names the paths refused."""
    refused: list[str] = []

    def refuse(path: object) -> None:
        if len(refused) < times and matches(str(path)):
            refused.append(str(path))
            raise OSError(errno.EMFILE, "Too many open files", str(path))

    def opener(path, flags, mode=0o777, *, dir_fd=None):  # os.open's signature
        refuse(path)
        return REAL_OPEN(path, flags, mode, dir_fd=dir_fd)

    def io_opener(file, *args, **kwargs):
        refuse(file)
        return REAL_IO_OPEN(file, *args, **kwargs)

    monkeypatch.setattr(os, "open", opener)
    monkeypatch.setattr(io, "open", io_opener)
    return refused


def _batch(i: int) -> bytes:
    return build_batch([(None, b"x" * 200, (), 0)], 1_700_000_000_000 + i)


def _one_partition(tmp_path: Path, configs: dict[str, str]):
    config = BrokerConfig.from_dict({"log.dirs": str(tmp_path / "a"), "node.id": "0"})
    _, replicas = open_replicas(config)
    asyncio.run(replicas.create_topic("t", 1, configs, 1, [(0,)]))
    return config, replicas, replicas.get("t", 0)


@pytest.mark.parametrize("failing", [".log", ".timeindex"])
def test_a_roll_out_of_descriptors_is_refused_and_the_next_append_rolls(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failing: str) -> None:
    """The new segment's file, or the sealed one's index written out: either way before
    the batch is written."""
    _, replicas, partition = _one_partition(tmp_path, {"segment.bytes": "300"})
    assert partition.append(_batch(0), 1 << 20).error == ErrorCode.none
    refused = fail_opens(monkeypatch, lambda p: p.endswith(failing), 1)
    outcome = partition.append(_batch(1), 1 << 20)  # needs a new segment: its open fails
    assert refused and outcome.error == ErrorCode.kafka_storage_error
    assert "too many open files" in (outcome.message or "")
    assert not replicas.logs.failures.offline and replicas.get("t", 0) is partition
    assert replicas.logs.failures.refused_for_files == 1
    for i in range(2, 4):  # descriptors again: the roll happens, nothing skipped
        assert partition.append(_batch(i), 1 << 20).error == ErrorCode.none
    assert partition.log.log_end_offset == 3 and len(partition.log.segments) == 3
    assert [b.header.base_offset for s in partition.log.segments
            for b in s.batches_from(0)] == [0, 1, 2]
    asyncio.run(replicas.shutdown())


def test_an_index_write_after_the_batch_was_written_takes_the_dir_offline(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The batch is in the file when its index entries' write-out is refused: the log is
    not served on (the next acknowledged batch would have taken the same offset)."""
    _, replicas, partition = _one_partition(tmp_path, {"index.interval.bytes": "1"})
    refused = fail_opens(monkeypatch, lambda p: p.endswith(".index"), 1)
    for i in range(10_000):  # until the pending entries are written out (every 16 KiB)
        outcome = partition.append(_batch(i), 1 << 20)
        if refused:
            break
    assert outcome.error == ErrorCode.kafka_storage_error
    assert list(replicas.logs.failures.offline) == [tmp_path / "a"]
    asyncio.run(replicas.shutdown())


def test_a_refused_replica_keeps_its_checkpoints(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Refused at a restart: the checkpoint rounds keep its log start (DeleteRecords), so
    a later start with descriptors to spare hides the deleted records still."""
    config, replicas, partition = _one_partition(tmp_path, {})
    for i in range(3):
        assert partition.append(_batch(i), 1 << 20).error == ErrorCode.none
    assert partition.log.maybe_increment_log_start_offset(2)
    asyncio.run(replicas.shutdown())
    fail_opens(monkeypatch, lambda p: p.endswith(".index"), 100)
    _, replicas = open_replicas(config)
    assert replicas.get("t", 0) is None
    replicas.logs.write_checkpoints()
    asyncio.run(replicas.shutdown())
    monkeypatch.undo()
    _, replicas = open_replicas(config)
    assert replicas.get("t", 0).log.log_start_offset == 2
    asyncio.run(replicas.shutdown())


@pytest.mark.parametrize("failing", ["00000000000000000000.index", "1.index", ".txnindex",
                                     "partition.metadata"])
def test_a_log_that_cannot_be_opened_leaves_no_descriptor_open_and_opens_later(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failing: str) -> None:
    """A log with data (its index files are read when opened), opened again at a restart
    and refused half-way through: every file it had opened is closed, its dir stays online,
    and the next image opens it whole."""
    config, replicas, partition = _one_partition(
        tmp_path, {"index.interval.bytes": "1", "segment.bytes": "300"})
    for i in range(3):  # a segment each: the second one's index fails after the first opened
        assert partition.append(_batch(i), 1 << 20).error == ErrorCode.none
    asyncio.run(replicas.shutdown())

    refused = fail_opens(monkeypatch, lambda p: failing in p, 100)
    store, replicas = open_replicas(config)  # the restart: t-0 refused at every attempt
    assert refused and replicas.get("t", 0) is None
    assert not replicas.logs.failures.offline
    assert open_under(tmp_path / "a" / "t-0") == []
    monkeypatch.undo()  # descriptors to spare again
    replicas.apply_image(store.image)  # the next image: opened, with all it held
    assert replicas.get("t", 0).log.log_end_offset == 3
    asyncio.run(replicas.shutdown())


def open_under(directory: Path) -> list[str]:
    """Files under ``directory`` this process holds open."""
    held = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except FileNotFoundError:  # the listing's own descriptor, closed since
            continue
        if target.startswith(str(directory)):
            held.append(target)
    return held
