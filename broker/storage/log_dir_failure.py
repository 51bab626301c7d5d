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

Out of file descriptors (EMFILE/ENFILE) is a mistake of sizing, not a failed disk, and
Kafka takes the dir offline for it too: a broker given one partition too many for its
``ulimit -n`` stops serving every replica it has (with one dir, it shuts down). Where such an
error comes before anything was changed, it is refused instead (``refuse``, answered with
``OpenFilesExhausted``: KAFKA_STORAGE_ERROR for that request or replica, the dir online):
opening a replica's log, a segment roll before the batch is written (``NothingWritten``),
a checkpoint's temporary file. After a partial change (a batch written, then its index or
the leader-epoch checkpoint not), continuing would serve a log that is not what it says,
so those still take the dir offline as any I/O error does.
"""

from __future__ import annotations

import errno
import logging
import resource
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger(__name__)


class KafkaStorageError(Exception):
    """The replica's log dir is offline: answer KAFKA_STORAGE_ERROR (Kafka's
    KafkaStorageException); the client refreshes its metadata and finds another leader."""


class OpenFilesExhausted(KafkaStorageError):
    """The process is out of file descriptors: this replica or request is refused, its dir
    stays online, and a later attempt may succeed."""


class NothingWritten(OSError):
    """Out of file descriptors before anything was changed (a roll's new segment, before
    the batch that needed it was written): safe to refuse and to try again."""


OUT_OF_FILES = (errno.EMFILE, errno.ENFILE)
REPORT_EVERY_S = 10.0


def out_of_files(error: BaseException) -> bool:
    """Whether ``error`` is the process (EMFILE) or the system (ENFILE) out of descriptors."""
    return isinstance(error, OSError) and error.errno in OUT_OF_FILES


def open_files_limit() -> str:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return f"RLIMIT_NOFILE soft {soft}, hard {hard}"


@dataclass(slots=True)
class LogDirFailures:
    """The log dirs of this broker found failing, and who must hear of it.

    ``report`` is called on the event loop from wherever the error surfaced, possibly in the
    middle of iterating over partitions; listeners therefore run on the loop's next turn
    (``defer``), never inside the caller."""

    offline: dict[Path, str] = field(default_factory=dict)
    listeners: list[Callable[[Path], None]] = field(default_factory=list)
    defer: Callable[[Callable[[], None]], None] = lambda fn: fn()
    # Operations refused for want of file descriptors (kafkube_open_files_exhausted_total),
    # and the last time that was logged (at most once per REPORT_EVERY_S).
    refused_for_files: int = 0
    _reported_at: float = float("-inf")
    _reported_count: int = 0

    def refuse(self, log_dir: Path, error: BaseException, what: str) -> OpenFilesExhausted:
        """``what`` met EMFILE/ENFILE in ``log_dir`` before changing anything: counted and
        logged (at most every REPORT_EVERY_S), the dir left online."""
        self.refused_for_files += 1
        now = time.monotonic()
        if now - self._reported_at >= REPORT_EVERY_S:
            since = self.refused_for_files - self._reported_count
            self._reported_at, self._reported_count = now, self.refused_for_files
            log.error("out of file descriptors (%s): %d operation(s) on replicas refused "
                      "with KAFKA_STORAGE_ERROR since the last report (%s: %s); the log dirs "
                      "stay online. Each hosted segment keeps a file open: raise the limit "
                      "(ulimit -n, the container runtime's nofile) or host fewer partitions "
                      "here", open_files_limit(), since, what, error)
        return OpenFilesExhausted(f"{what}: too many open files ({open_files_limit()}); "
                                  f"log dir {log_dir} stays online")

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
