"""Start and stop a throwaway broker process for one benchmark run."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from types import TracebackType

READY = re.compile(r"listening on PLAINTEXT://([\d.]+):(\d+)")
LISTENER = re.compile(r"(\w+)://([\d.]+:\d+)")


class BenchBroker:
    """A fresh ``python -m kafkube broker`` on a loopback port and an empty temp log dir.

    Used as a context manager so that the process is stopped (SIGTERM, then SIGKILL after
    ``stop_timeout``) and its log dir removed even when the benchmark fails half way.
    """

    def __init__(
        self, partitions: int, start_timeout: float = 30.0, stop_timeout: float = 20.0,
        overrides: dict[str, str] | None = None,
    ) -> None:
        """``overrides``: more settings (bench tls adds an SSL listener; its address is then
        in ``listeners``, by name)."""
        self.partitions = partitions
        self.overrides = overrides or {}
        self.listeners: dict[str, str] = {}
        self.start_timeout = start_timeout
        self.stop_timeout = stop_timeout
        self.log_dir = Path(tempfile.mkdtemp(prefix="kafkube-bench-"))
        self.proc: subprocess.Popen[str] | None = None
        self.bootstrap = ""
        self._ready = threading.Event()
        self._tail: list[str] = []

    @property
    def command(self) -> list[str]:
        overrides = {
            "listeners": "PLAINTEXT://127.0.0.1:0",
            "log.dirs": str(self.log_dir),
            "kafkube.metrics.port": "-1",
            "num.partitions": str(self.partitions),
            **self.overrides,
        }
        args = [sys.executable, "-m", "kafkube", "broker"]
        for key, value in overrides.items():
            args += ["--override", f"{key}={value}"]
        return args

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

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
        # stderr (INFO logs) goes to a file: an unread pipe would fill and block the broker.
        log = (self.log_dir / "broker.log").open("w")
        self.proc = subprocess.Popen(
            self.command, stdout=subprocess.PIPE, stderr=log, text=True, bufsize=1,
            env={**os.environ, "PYTHONUNBUFFERED": "1"}, cwd=Path(__file__).parent.parent,
        )
        log.close()
        threading.Thread(target=self._pump, daemon=True).start()
        if not self._ready.wait(self.start_timeout) or not self.bootstrap:
            code = self.proc.poll()
            why = (f"exited with code {code}" if code is not None
                   else f"did not report ready within {self.start_timeout:.0f}s")
            raise RuntimeError(f"broker {why}:\n" + "".join(self._tail[-20:])
                               + self.stderr_tail())

    def _pump(self) -> None:
        """Read stdout to the end so the pipe never blocks; note the ready line."""
        assert self.proc is not None and self.proc.stdout is not None
        for line in self.proc.stdout:
            self._tail = [*self._tail[-50:], line]
            match = READY.search(line)
            if match and not self.bootstrap:
                self.listeners = dict(LISTENER.findall(line))
                self.bootstrap = f"{match.group(1)}:{match.group(2)}"
                self._ready.set()
        self._ready.set()  # exited before becoming ready: wake start() now

    def stderr_tail(self, lines: int = 20) -> str:
        try:
            text = (self.log_dir / "broker.log").read_text(errors="replace")
        except OSError:
            return ""
        return "".join(text.splitlines(keepends=True)[-lines:])

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def cpu_seconds(self) -> float:
        """User + system CPU the broker has used so far (from /proc), to tell who is busy."""
        return cpu_seconds(self.pid)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(self.stop_timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        deadline = time.monotonic() + 5
        while self.log_dir.exists() and time.monotonic() < deadline:
            shutil.rmtree(self.log_dir, ignore_errors=True)


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid``; 0.0 where /proc is unavailable."""
    return sum(cpu_times(pid))


def cpu_times(pid: int) -> tuple[float, float]:
    """(user, system) CPU seconds of process ``pid``; zeros where /proc is unavailable."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0, 0.0
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


def rss_bytes(pid: int) -> int:
    """VmRSS of ``pid`` in bytes; 0 once it is gone (or a zombie, which has no VmRSS)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0
    for line in status.splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def machine_busy_seconds() -> float:
    """CPU seconds all cores spent busy (not idle or iowait) since boot, from /proc/stat.

    Compared with the broker's and the client's own CPU it shows whether the machine was
    saturated, or shared with something else, during a phase.
    """
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
    except OSError:
        return 0.0
    busy = sum(fields[:8]) - fields[3] - fields[4]  # user..steal, less idle and iowait
    return busy / os.sysconf("SC_CLK_TCK")
