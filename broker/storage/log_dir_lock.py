"""One broker process per log dir: the ``.lock`` file Kafka's LogManager holds in each.

Two processes writing one log dir corrupt it: each appends at the end it believes the
segment has, and the batches of one land in the other's offsets. On Kubernetes that is one
command away: ``kubectl delete pod --grace-period=0 --force`` removes the pod object at
once, the StatefulSet starts its successor on the same volume, and the old container is
still being stopped (Kubernetes' own docs warn that force deletion of a StatefulSet's pod
may run two at once). Kafka refuses to start on a locked dir ("A Kafka instance in another
process or thread is using this directory"); a kafkube broker waits for the lock, saying
why, because on Kubernetes the holder is normally a predecessor about to end, and then
refuses as Kafka does. The lock is ``flock``: the kernel drops it when the holder's
process ends, however it ends, and it holds across containers sharing the volume.
"""

from __future__ import annotations

import fcntl
import logging
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import IO

log = logging.getLogger(__name__)

LOCK_FILE = ".lock"
WAIT_S = 120.0  # a predecessor being stopped ends within its grace period (60 s here)
POLL_S = 0.2


class LogDirLocked(Exception):
    """Another process holds a log dir's lock: it serves that dir, this one may not."""


class LogDirLocks:
    """The locks of this process's log dirs, held until ``release`` or the process ends."""

    def __init__(self) -> None:
        self._held: dict[Path, IO[bytes]] = {}

    @property
    def held(self) -> list[Path]:
        return list(self._held)

    def acquire(self, log_dirs: Iterable[Path], wait_s: float = WAIT_S,
                clock: Callable[[], float] = time.monotonic,
                sleep: Callable[[float], None] = time.sleep) -> None:
        """Lock every log dir that can be opened (one that cannot is the log manager's
        to take offline), waiting up to ``wait_s`` for one another process holds."""
        deadline = clock() + wait_s
        for log_dir in log_dirs:
            try:
                log_dir.mkdir(parents=True, exist_ok=True)
                handle = open(log_dir / LOCK_FILE, "ab")  # noqa: SIM115 - held for the process's life
            except OSError:
                continue
            told = False
            while True:
                try:
                    fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if clock() >= deadline:
                        handle.close()
                        self.release()
                        raise LogDirLocked(
                            f"Failed to acquire lock on file {LOCK_FILE} in {log_dir}. A "
                            "broker in another process is using this directory (waited "
                            f"{wait_s:.0f} s)") from None
                    if not told:
                        log.warning("log dir %s is locked by another process (a previous "
                                    "broker of this pod still stopping?); waiting up to "
                                    "%.0f s for it", log_dir, wait_s)
                        told = True
                    sleep(POLL_S)
            if told:
                log.info("log dir %s: lock acquired", log_dir)
            self._held[log_dir] = handle

    def release(self) -> None:
        for handle in self._held.values():
            handle.close()  # closing the descriptor drops the flock
        self._held.clear()
