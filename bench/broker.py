"""A throwaway broker process for one benchmark run: the harness's ``BrokerProcess``
(kafkube/harness/process.py) on a loopback port and an empty temp log dir."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType

from kafkube.harness.checkout import REPO
from kafkube.harness.process import BrokerProcess
from kafkube.harness.procstat import cpu_seconds

LOG_NAME = "broker.log"


class BenchBroker:
    """A fresh ``python -m kafkube broker`` on a loopback port and an empty temp log dir.

    Used as a context manager so that the process is stopped (SIGTERM, then SIGKILL after
    ``stop_timeout``) and its log dir removed even when the benchmark fails half way. Its
    stderr (the INFO log) goes to ``broker.log`` in the log dir, not through this process,
    whose CPU the benchmarks measure.
    """

    def __init__(
        self, partitions: int, start_timeout: float = 30.0, stop_timeout: float = 20.0,
        overrides: dict[str, str] | None = None,
    ) -> None:
        """``overrides``: more settings (bench tls adds an SSL listener; its address is then
        in ``listeners``, by name)."""
        self.partitions = partitions
        self.start_timeout = start_timeout
        self.stop_timeout = stop_timeout
        self.log_dir = Path(tempfile.mkdtemp(prefix="kafkube-bench-"))
        self.process = BrokerProcess(
            self.log_dir, {"kafkube.metrics.port": "-1", "num.partitions": str(partitions),
                           **(overrides or {})},
            keep_lines=50, log_file=self.log_dir / LOG_NAME, cwd=REPO)

    @property
    def bootstrap(self) -> str:
        return self.process.bootstrap if self.process.port else ""

    @property
    def listeners(self) -> dict[str, str]:
        """``host:port`` of each listener, by name."""
        return {name: self.process.bootstrap_of(name) for name in self.process.ports}

    @property
    def pid(self) -> int:
        return self.process.pid

    def __enter__(self) -> BenchBroker:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def start(self) -> None:
        try:
            self.process.start(self.start_timeout)
        except RuntimeError as e:
            raise RuntimeError(f"{e}{self.stderr_tail()}") from None

    def stderr_tail(self, lines: int = 20) -> str:
        try:
            text = (self.log_dir / LOG_NAME).read_text(errors="replace")
        except OSError:
            return ""
        return "".join(text.splitlines(keepends=True)[-lines:])

    def alive(self) -> bool:
        return self.process.alive()

    def cpu_seconds(self) -> float:
        """User + system CPU the broker has used so far (from /proc), to tell who is busy."""
        return cpu_seconds(self.pid)

    def stop(self) -> None:
        with contextlib.suppress(subprocess.TimeoutExpired):  # then it was SIGKILLed
            self.process.stop(self.stop_timeout)
        deadline = time.monotonic() + 5
        while self.log_dir.exists() and time.monotonic() < deadline:
            shutil.rmtree(self.log_dir, ignore_errors=True)
