"""A throwaway replicated kafkube cluster for the cluster benchmarks (``failover``,
``replicated``): ``broker.dev``'s brokers on fixed loopback ports, their output in one file.

``broker.dev.start_cluster`` starts the brokers; with ``quiet=False`` it copies every output
line, prefixed ``[broker N] ``, to ``sys.stderr``. ``BenchCluster`` swaps ``sys.stderr`` for a
router that sends those lines to ``<data dir>/brokers.log`` (with our own ``[bench]`` event
lines in between, to line the broker logs up with kills) and everything else to the real
stderr. Ports are fixed (``base_port + node_id``) so a killed broker can be started again on
the same port and log dir, as a Kubernetes pod would be.

``with BenchCluster(...)`` always ends with every broker process dead: SIGTERM, then SIGKILL
for whatever is left, even when the benchmark fails half way.
"""

from __future__ import annotations

import logging
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from types import TracebackType
from typing import Any, TextIO

from broker.dev import READY_MARK, DevBroker, start_cluster, stop_cluster

# Below Linux's default ephemeral range (32768-60999), so no client connection of ours can
# take a broker's port between a kill and the restart.
PORT_RANGE = (20000, 32000)
METADATA_TIMEOUT = 3.0  # seconds per metadata request while polling


def free_port_base(count: int, tries: int = 50) -> int:
    """A port ``p`` such that ``p .. p+count-1`` are all free on 127.0.0.1."""
    rng = random.Random()
    for _ in range(tries):
        base = rng.randrange(PORT_RANGE[0], PORT_RANGE[1] - count)
        if all(_port_free(base + i) for i in range(count)):
            return base
    raise RuntimeError(f"no {count} consecutive free loopback ports in {PORT_RANGE}")


def _port_free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


class _Router:
    """Stands in for ``sys.stderr``: broker lines to the log file, the rest to stderr."""

    def __init__(self, real: TextIO, log: TextIO, start: float) -> None:
        self.real, self.log, self.start = real, log, start
        self.lock = threading.Lock()

    def line(self, text: str) -> None:
        stamp = f"{time.monotonic() - self.start:9.3f} "
        with self.lock:
            self.log.write(stamp + text if text.endswith("\n") else stamp + text + "\n")
            self.log.flush()

    def write(self, text: str) -> int:
        if text.startswith("[broker "):
            self.line(text)
        else:
            self.real.write(text)
        return len(text)

    def flush(self) -> None:
        self.real.flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)


class BenchCluster:
    """``brokers`` kafkube brokers with default settings plus ``overrides``."""

    def __init__(self, brokers: int = 3, overrides: list[str] | None = None,
                 keep: bool = False) -> None:
        self.size = brokers
        self.overrides = overrides or []
        self.keep = keep
        self.data_dir = Path(tempfile.mkdtemp(prefix="kafkube-bench-cluster-"))
        self.log_path = self.data_dir / "brokers.log"
        self.brokers: list[DevBroker] = []
        self.base_port = 0
        self._router: _Router | None = None
        self._real_stderr: TextIO | None = None
        self._log: TextIO | None = None
        self._admin: Any = None

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{self.base_port + i}" for i in range(self.size))

    def __enter__(self) -> BenchCluster:
        try:
            self.start()
        except BaseException:
            self.keep = True
            self.stop()
            print(f"broker output kept: {self.log_path}", file=sys.stderr)
            raise
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if exc is not None:  # keep the broker output of a failed run
            self.keep = True
        self.stop()
        if exc is not None:
            print(f"broker output kept: {self.log_path}", file=sys.stderr)

    def start(self) -> None:
        self._log = self.log_path.open("w")
        self._real_stderr = sys.stderr
        self._router = _Router(sys.stderr, self._log, time.monotonic())
        sys.stderr = self._router  # type: ignore[assignment]
        self.base_port = free_port_base(self.size)
        self.note(f"starting {self.size} brokers on 127.0.0.1:{self.base_port}.. "
                  f"overrides {self.overrides}")
        self.brokers = start_cluster(self.data_dir, self.size, self.base_port, -1,
                                     self.overrides, quiet=False)
        self.wait_for_brokers(self.size, 60.0)

    def note(self, text: str) -> None:
        """An event line in the broker log, e.g. a kill, to line the broker logs up with."""
        if self._router is not None:
            self._router.line(f"[bench] {text}")

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

    def pids(self) -> list[int]:
        return [b.proc.pid for b in self.brokers if b.proc is not None]

    def kill(self, node: int) -> None:
        proc = self.brokers[node].proc
        assert proc is not None and proc.poll() is None, f"broker {node} is not running"
        os.kill(proc.pid, signal.SIGKILL)
        self.note(f"SIGKILL broker {node} (pid {proc.pid})")
        proc.wait(10)

    def restart(self, node: int, timeout: float = 60.0) -> None:
        """Start broker ``node`` again with the same command line: same port, log dir and
        coordination file. Returns once it prints its listening line."""
        broker = self.brokers[node]
        old = broker.proc
        assert old is not None and old.poll() is not None, f"broker {node} is still running"
        broker.ready = threading.Event()
        broker.proc = subprocess.Popen(
            old.args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1,
            env={**os.environ, "PYTHONUNBUFFERED": "1"}, start_new_session=True,
        )
        self.note(f"restarted broker {node} (pid {broker.proc.pid})")
        threading.Thread(target=self._pump, args=(broker,), daemon=True).start()
        if not broker.ready.wait(timeout) or broker.proc.poll() is not None:
            raise RuntimeError(f"broker {node} did not come back within {timeout:.0f}s "
                               f"(exit code {broker.proc.poll()}); see {self.log_path}")

    def _pump(self, broker: DevBroker) -> None:
        assert broker.proc is not None and broker.proc.stdout is not None
        for line in broker.proc.stdout:
            if READY_MARK in line:
                broker.ready.set()
            if self._router is not None:
                self._router.line(f"[broker {broker.node_id}] {line}")
        broker.ready.set()

    def stop(self) -> None:
        """SIGTERM every broker (dev's controlled shutdown), SIGKILL any left; always."""
        try:
            if self._admin is not None:
                self._admin = None
            stop_cluster(self.brokers)
        finally:
            for broker in self.brokers:
                if broker.proc is not None and broker.proc.poll() is None:
                    broker.proc.kill()
                    broker.proc.wait(10)
            for thread in threading.enumerate():  # dev's and our pumps: let them drain
                if thread.name.endswith("(_pump)"):
                    thread.join(2)
            if self._real_stderr is not None:
                sys.stderr = self._real_stderr
                self._real_stderr = None
            if self._log is not None:
                self._router = None
                self._log.close()
                self._log = None
            if not self.keep:
                deadline = time.monotonic() + 5
                while self.data_dir.exists() and time.monotonic() < deadline:
                    shutil.rmtree(self.data_dir, ignore_errors=True)

    # -- metadata ---------------------------------------------------------------------------

    @property
    def admin(self) -> Any:
        if self._admin is None:
            from confluent_kafka.admin import AdminClient

            self._admin = AdminClient({
                "bootstrap.servers": self.bootstrap,
                "socket.connection.setup.timeout.ms": 3000,
                "reconnect.backoff.max.ms": 500,
                "logger": self.client_logger("admin"),
            })
        return self._admin

    def metadata(self, timeout: float = METADATA_TIMEOUT) -> Any:
        """One Metadata request for all topics (a named one could auto-create); None on error."""
        from confluent_kafka import KafkaException

        try:
            return self.admin.list_topics(timeout=timeout)
        except KafkaException:
            return None

    def partitions(self, topic: str) -> dict[int, tuple[int, tuple[int, ...]]] | None:
        """``{partition: (leader, isr)}`` from one metadata answer; None if unknown."""
        meta = self.metadata()
        found = meta.topics.get(topic) if meta is not None else None
        if found is None or found.error is not None or not found.partitions:
            return None
        return {p.id: (p.leader, tuple(p.isrs)) for p in found.partitions.values()}

    def wait_for_brokers(self, count: int, timeout: float) -> None:
        def listed() -> bool:
            meta = self.metadata()
            return meta is not None and len(meta.brokers) >= count
        wait_until(listed, timeout, f"{count} brokers in the metadata")

    def create_topic(self, topic: str, partitions: int, replication: int,
                     config: dict[str, str], timeout: float = 60.0) -> None:
        """Create ``topic`` and wait until every partition has a leader and a full ISR."""
        from confluent_kafka.admin import NewTopic

        futures = self.admin.create_topics(
            [NewTopic(topic, partitions, replication, config=config)], request_timeout=30)
        futures[topic].result(timeout)
        self.wait_for_isr(topic, lambda isr: len(isr) == replication, timeout,
                          f"{topic}: every partition led with an ISR of {replication}")

    def wait_for_isr(self, topic: str, predicate: Any, timeout: float, what: str,
                     consecutive: int = 3) -> dict[int, tuple[int, tuple[int, ...]]]:
        """Poll until every partition has a leader and ``predicate(isr)`` holds, in
        ``consecutive`` metadata answers in a row (each answer comes from a broker librdkafka
        picks, and one broker's view can trail another's by a poll interval)."""
        streak: list[dict[int, tuple[int, tuple[int, ...]]]] = []

        def check() -> dict[int, tuple[int, tuple[int, ...]]] | None:
            states = self.partitions(topic)
            if states is None:
                return None
            if all(leader >= 0 and predicate(isr) for leader, isr in states.values()):
                streak.append(states)
            else:
                streak.clear()
            return states if len(streak) >= consecutive else None
        return wait_until(check, timeout, what)


def wait_until(condition: Any, timeout: float, what: str, interval: float = 0.1) -> Any:
    """Call ``condition`` until it returns something truthy; TimeoutError at ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"not within {timeout:.0f}s: {what}")
        time.sleep(interval)
