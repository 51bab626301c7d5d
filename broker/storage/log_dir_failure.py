"""Log dirs that failed: Kafka's LogDirFailureChannel (KIP-112), the one place an I/O error
of a replica's files is reported.

A disk fails under a broker with several log dirs (JBOD): an append, a roll, a flush, a
checkpoint or a read raises ``OSError`` (EIO from a dying disk, ENOTDIR or ENOENT from an
unmounted one, EROFS from a file system remounted read-only, EACCES, ENOSPC). Kafka's
answer, and this one: the whole dir goes offline at the first such error, never one file
at a time, because a disk that failed once is not trusted for the next write. Whoever met
the error reports it here and answers KAFKA_STORAGE_ERROR (``KafkaStorageError``); the
listeners (the replica manager) then stop serving every replica in the dir, and the broker
tells the controller through its registration, while the other dirs go on. A dir stays
offline until the broker restarts and finds it working again; when every dir is offline
there is nothing left to serve and the broker stops, as Kafka does.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger(__name__)


class KafkaStorageError(Exception):
    """The replica's log dir is offline: answer KAFKA_STORAGE_ERROR (Kafka's
    KafkaStorageException); the client refreshes its metadata and finds another leader."""


@dataclass(slots=True)
class LogDirFailures:
    """The log dirs of this broker found failing, and who must hear of it.

    ``report`` is called on the event loop from wherever the error surfaced, possibly in the
    middle of iterating over partitions; listeners therefore run on the loop's next turn
    (``defer``), never inside the caller."""

    offline: dict[Path, str] = field(default_factory=dict)
    listeners: list[Callable[[Path], None]] = field(default_factory=list)
    defer: Callable[[Callable[[], None]], None] = lambda fn: fn()

    def report(self, log_dir: Path, error: BaseException) -> None:
        """``log_dir`` failed with ``error``: offline from now on (only the first report
        counts)."""
        if log_dir in self.offline:
            return
        self.offline[log_dir] = f"{type(error).__name__}: {error}"
        log.error("log dir %s is offline: %s; its replicas are no longer served by this "
                  "broker (KAFKA_STORAGE_ERROR)", log_dir, error)
        for listener in self.listeners:
            self.defer(lambda listener=listener: listener(log_dir))

    def is_offline(self, log_dir: Path) -> bool:
        return log_dir in self.offline


def probe_log_dir(log_dir: Path) -> OSError | None:
    """Whether a log dir can be used at start-up: created if missing, a directory we can
    list and write in. The error that says why not, else None. (Kafka marks a dir that
    fails this offline and starts without it.)"""
    try:
        log_dir.mkdir(parents=True, exist_ok=True)
        if not log_dir.is_dir():
            raise NotADirectoryError(f"{log_dir} is not a directory")
        next(iter(log_dir.iterdir()), None)
        probe = log_dir / ".kafkube-probe"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as e:
        return e
    return None
