"""A throwaway replicated kafkube cluster for the cluster benchmarks (``failover``,
``replicated``, ``compare``, ``scale-*``): the harness's cluster (``kafkube.harness``) with
`kafkube dev`'s replication settings, on fixed loopback ports, its output in one file.

Every broker output line goes to ``<data dir>/brokers.log``, stamped with the seconds since
the start and prefixed ``[broker N] ``, with our own ``[bench]`` event lines in between (a
kill, a restart), to line the broker logs up with the faults; librdkafka's own log goes
there too (``client_logger``). Ports are fixed (``free_port_base``, below the ephemeral
range) so a killed broker can be started again on the same port and log dir, as a
Kubernetes pod would be.

``with BenchCluster(...)`` always ends with every broker process dead: SIGTERM, then SIGKILL
for whatever is left, even when the benchmark fails half way.
"""

from __future__ import annotations

import logging
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path
from types import TracebackType
from typing import TextIO

from kafkube.harness.cluster import dev_defaults
from kafkube.harness.metadata import Cluster
from kafkube.harness.ports import free_port_base

START_TIMEOUT_S = 60.0
KEEP_LINES = 200  # of each broker's output in memory; all of it is in the log file


class BrokerLog:
    """``brokers.log``: lines from the brokers' output threads and ours, one at a time, each
    stamped with the seconds since the cluster started."""

    def __init__(self, path: Path) -> None:
        self.file: TextIO = path.open("w")
        self.start = time.monotonic()
        self.lock = threading.Lock()

    def line(self, text: str) -> None:
        stamp = f"{time.monotonic() - self.start:9.3f} "
        with self.lock:
            if self.file.closed:
                return
            self.file.write(stamp + text if text.endswith("\n") else stamp + text + "\n")
            self.file.flush()

    def close(self) -> None:
        with self.lock:
            self.file.close()


class BenchCluster(Cluster):
    """``brokers`` kafkube brokers with default settings plus ``overrides`` (``KEY=VALUE``)."""

    def __init__(self, brokers: int = 3, overrides: list[str] | None = None,
                 keep: bool = False) -> None:
        self.keep = keep
        self.data_dir = Path(tempfile.mkdtemp(prefix="kafkube-bench-cluster-"))
        self.log_path = self.data_dir / "brokers.log"
        self.log = BrokerLog(self.log_path)
        config = dev_defaults(brokers)
        for override in overrides or []:
            key, _, value = override.partition("=")
            config[key] = value
        super().__init__(
            self.data_dir, brokers, config, base_port=free_port_base(brokers), metrics_base=-1,
            on_line=lambda i, line: self.log.line(f"[broker {i}] {line}"),
            own_session=True, die_with_parent=True, keep_lines=KEEP_LINES)

    def __enter__(self) -> BenchCluster:
        try:
            self.note(f"starting {self.size} brokers on 127.0.0.1:{self.base_port}.. "
                      f"overrides {self.overrides}")
            self.start(START_TIMEOUT_S)
        except BaseException:
            self.keep = True
            self.close()
            print(f"broker output kept: {self.log_path}", file=sys.stderr)
            raise
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if exc is not None:  # keep the broker output of a failed run
            self.keep = True
        self.close()
        if exc is not None:
            print(f"broker output kept: {self.log_path}", file=sys.stderr)

    def note(self, text: str) -> None:
        """An event line in the broker log, e.g. a kill, to line the broker logs up with."""
        self.log.line(f"[bench] {text}")

    def client_logger(self, name: str) -> logging.Logger:
        """A logger for librdkafka's own log (``"logger"`` in a client's config), so its
        connection-refused and disconnect lines go to the broker log, not the terminal."""
        logger = logging.getLogger(f"bench.librdkafka.{name}")
        logger.propagate = False
        logger.setLevel(logging.DEBUG)
        if not logger.handlers:
            cluster = self

            class ToLog(logging.Handler):
                def emit(self, record: logging.LogRecord) -> None:
                    cluster.note(f"{name}: {record.getMessage()}")
            logger.addHandler(ToLog())
        return logger

    def admin_config(self, bootstrap: str) -> dict[str, object]:
        return {**super().admin_config(bootstrap),
                "socket.connection.setup.timeout.ms": 3000, "reconnect.backoff.max.ms": 500,
                "logger": self.client_logger("admin")}

    def kill(self, i: int) -> None:
        broker = self.brokers[i]
        assert broker.alive(), f"broker {i} is not running"
        pid = broker.pid
        super().kill(i)
        self.note(f"SIGKILL broker {i} (pid {pid})")

    def restart(self, i: int, timeout: float = START_TIMEOUT_S) -> None:
        """Start broker ``i`` again with the same command line: same port, log dir and
        coordination file. Returns once it prints its listening line."""
        broker = self.brokers[i]
        assert not broker.alive(), f"broker {i} is still running"
        broker.spawn()
        self.note(f"restarted broker {i} (pid {broker.pid})")
        error = broker.wait_ready(time.monotonic() + timeout)
        if error is not None:
            raise RuntimeError(f"{error} within {timeout:.0f}s; see {self.log_path}")

    def close(self) -> None:
        """SIGTERM every broker in turn (controlled shutdown), SIGKILL any left; always.
        Then the log file is closed and, unless kept, the data dir removed."""
        try:
            self.stop(in_order=True)
        finally:
            for broker in self.brokers:
                broker.kill()
                broker.join_output()
            self.log.close()
            if not self.keep:
                deadline = time.monotonic() + 5
                while self.data_dir.exists() and time.monotonic() < deadline:
                    shutil.rmtree(self.data_dir, ignore_errors=True)
