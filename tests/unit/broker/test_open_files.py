"""Out of file descriptors (EMFILE) is refused where it happens, never a failed log dir.

``os.open`` is made to fail with EMFILE for chosen files, as the kernel does once the
process holds RLIMIT_NOFILE descriptors (the integration test lowers the real limit)."""

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


def test_a_roll_out_of_descriptors_is_refused_and_the_next_append_rolls(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = BrokerConfig.from_dict({"log.dirs": str(tmp_path / "a"), "node.id": "0"})
    _, replicas = open_replicas(config)
    asyncio.run(replicas.create_topic("t", 1, {"segment.bytes": "300"}, 1, [(0,)]))
    partition = replicas.get("t", 0)
    assert partition.append(_batch(0), 1 << 20).error == ErrorCode.none
    refused = fail_opens(monkeypatch, lambda p: p.endswith(".log"), 1)
    outcome = partition.append(_batch(1), 1 << 20)  # needs a new segment: its open fails
    assert refused and outcome.error == ErrorCode.kafka_storage_error
    assert "too many open files" in (outcome.message or "")
    assert not replicas.logs.failures.offline and replicas.get("t", 0) is partition
    assert replicas.logs.failures.refused_for_files == 1
    for i in range(2, 4):  # descriptors again: the roll happens, nothing skipped
        assert partition.append(_batch(i), 1 << 20).error == ErrorCode.none
    assert partition.log.log_end_offset == 3 and len(partition.log.segments) == 3
    asyncio.run(replicas.shutdown())


@pytest.mark.parametrize("failing", [".index", ".txnindex", "partition.metadata"])
def test_a_log_that_cannot_be_opened_leaves_no_descriptor_open_and_opens_later(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failing: str) -> None:
    """A log with data (its index files are read when opened), opened again at a restart
    and refused half-way through: every file it had opened is closed, its dir stays online,
    and the next image opens it whole."""
    config = BrokerConfig.from_dict({"log.dirs": str(tmp_path / "a"), "node.id": "0"})
    _, replicas = open_replicas(config)
    asyncio.run(replicas.create_topic("t", 1, {"index.interval.bytes": "1"}, 1, [(0,)]))
    for i in range(3):
        assert replicas.get("t", 0).append(_batch(i), 1 << 20).error == ErrorCode.none
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
