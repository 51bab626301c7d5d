"""broker/storage/log_dir_lock.py: one holder per log dir; a second waits, then is refused
with Kafka's words, and gets the dir once the first lets go."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.storage.log_dir_lock import LOCK_FILE, LogDirLocked, LogDirLocks


def test_a_held_log_dir_is_refused_after_the_wait_and_taken_once_released(
        tmp_path: Path) -> None:
    dirs = [tmp_path / "a", tmp_path / "b"]
    first = LogDirLocks()
    first.acquire(dirs)
    assert first.held == dirs and all((d / LOCK_FILE).exists() for d in dirs)

    now = [0.0]
    second = LogDirLocks()
    with pytest.raises(LogDirLocked, match=f"Failed to acquire lock on file {LOCK_FILE} in "
                                           f"{dirs[0]}"):
        second.acquire(dirs, wait_s=5, clock=lambda: now[0],
                       sleep=lambda s: now.__setitem__(0, now[0] + s))
    assert second.held == []

    # The holder ends while the second waits: it takes every dir.
    def holder_ends(seconds: float) -> None:
        first.release()
    second.acquire(dirs, wait_s=5, sleep=holder_ends)
    assert second.held == dirs
    second.release()


def test_a_log_dir_that_cannot_be_opened_is_left_to_the_log_manager(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a dir")
    locks = LogDirLocks()
    locks.acquire([blocker / "logs", tmp_path / "ok"])
    assert locks.held == [tmp_path / "ok"]
    locks.release()
