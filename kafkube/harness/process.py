"""One `kafkube broker` process on loopback, as `kafkube dev`, the tests and the benchmarks
run it.

The broker prints one line once it accepts connections (broker/app.py): its bound listeners,
and its metrics and health ports if it serves them. We wait for that line, read the ports the
kernel picked from it, and start the broker again on the same ports and log dirs after a
stop or a kill, as a Kubernetes pod comes back: clients that knew it find it again.

Every output line is kept (the last ``keep_lines`` of them, or all), for a failing test's
report, and handed to ``on_line`` if given: `kafkube dev` relays them to the terminal, a
benchmark writes them to its log file.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from kafkube.harness.process_group import parent_death_hook

READY = re.compile(r"listening on (\S+://[\d.]+:\d+(?:, \S+://[\d.]+:\d+)*)"
                   r"(?:, metrics on http://\*:(\d+))?")
LISTENER = re.compile(r"(\S+)://([\d.]+):(\d+)")
HEALTH = re.compile(r"health on http://\*:(\d+)/ready")
START_TIMEOUT_S = 30.0
# Longer than the broker's own stop deadline (20 s), so a stuck shutdown logs what it was
# stuck on before we kill it.
STOP_TIMEOUT_S = 30.0
DEFAULT_LISTENERS = "PLAINTEXT://127.0.0.1:0"


@dataclass(frozen=True, slots=True)
class ReadyLine:
    """What the broker's listening line says: where it can be reached."""

    ports: dict[str, int]  # by listener name, in the order the broker lists them
    metrics_port: int  # 0: none
    health_port: int  # 0: none

    @classmethod
    def parse(cls, line: str) -> ReadyLine | None:
        match = READY.search(line)
        if match is None:
            return None
        bound = LISTENER.findall(match.group(1))
        health = HEALTH.search(line)
        return cls({name: int(port) for name, _, port in bound}, int(match.group(2) or 0),
                   int(health.group(1)) if health else 0)


def broker_command(config: Mapping[str, str]) -> list[str]:
    """`python -m kafkube broker` with ``config`` as overrides, in the interpreter we run."""
    args = [sys.executable, "-m", "kafkube", "broker"]
    for key, value in config.items():
        args += ["--override", f"{key}={value}"]
    return args


class BrokerProcess:
    """One `kafkube broker` process; restartable on the same ports and log dirs.

    ``overrides`` are broker config keys. ``log.dirs`` is ``log_dir``; ``listeners`` defaults
    to one PLAINTEXT listener on a port of the kernel's choosing, ``kafkube.metrics.port`` to
    a port of the kernel's choosing.

    ``own_session``: the broker leads a session of its own, so a Ctrl-C in the terminal
    reaches only us (`kafkube dev` stops brokers in order). ``die_with_parent``: it gets
    SIGTERM when we die (only when started from the main thread; see
    ``process_group.parent_death_hook``). ``log_file``: the broker's stderr (its log) goes
    there instead of through us, for a benchmark that must not spend its CPU reading it.
    """

    def __init__(self, log_dir: Path, overrides: Mapping[str, str] | None = None, *,
                 name: str = "broker", on_line: Callable[[str], None] | None = None,
                 own_session: bool = False, die_with_parent: bool = False,
                 keep_lines: int | None = None, log_file: Path | None = None,
                 cwd: Path | None = None) -> None:
        self.log_dir = log_dir
        self.overrides = dict(overrides or {})
        self.name = name
        self.on_line = on_line
        self.own_session = own_session
        self.die_with_parent = die_with_parent
        self.keep_lines = keep_lines
        self.log_file = log_file
        self.cwd = cwd
        self.proc: subprocess.Popen[str] | None = None
        self.port = 0  # of the first listener
        self.ports: dict[str, int] = {}  # by listener name
        self.metrics_port = 0
        self.health_port = 0
        self.output: list[str] = []
        self._ready = threading.Event()
        self._pump_thread: threading.Thread | None = None

    # -- where it is -------------------------------------------------------------------------

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def bootstrap_of(self, listener: str) -> str:
        return f"127.0.0.1:{self.ports[listener]}"

    @property
    def pid(self) -> int:
        assert self.proc is not None, f"{self.name} was never started"
        return self.proc.pid

    def config(self) -> dict[str, str]:
        """The broker's overrides for its next start: the listeners on the ports it had."""
        listeners = self.overrides.get("listeners", DEFAULT_LISTENERS)
        listeners = LISTENER.sub(
            lambda m: f"{m[1]}://{m[2]}:{self.ports.get(m[1], int(m[3]))}", listeners)
        return {
            "log.dirs": str(self.log_dir),
            "kafkube.metrics.port": "0",
            **self.overrides,
            "listeners": listeners,
        }

    @property
    def command(self) -> list[str]:
        return broker_command(self.config())

    # -- life --------------------------------------------------------------------------------

    def spawn(self) -> None:
        """Start the process without waiting for it to listen (``wait_ready`` does)."""
        log: IO[str] | None = self.log_file.open("a") if self.log_file is not None else None
        try:
            self.proc = subprocess.Popen(
                self.command, stdout=subprocess.PIPE,
                stderr=log if log is not None else subprocess.STDOUT,
                text=True, bufsize=1, env={**os.environ, "PYTHONUNBUFFERED": "1"},
                cwd=self.cwd, start_new_session=self.own_session,
                preexec_fn=parent_death_hook(self.die_with_parent),
            )
        finally:
            if log is not None:
                log.close()
        # A fresh event per process: the previous one's pump, reaching its end later, must
        # not wake a wait for this one.
        self._ready = threading.Event()
        self._pump_thread = threading.Thread(
            target=self._pump, args=(self.proc, self._ready), daemon=True,
            name=f"{self.name} output")
        self._pump_thread.start()

    def _pump(self, proc: subprocess.Popen[str], ready: threading.Event) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            self.output.append(line)
            if self.keep_lines is not None and len(self.output) > 2 * self.keep_lines:
                del self.output[:-self.keep_lines]
            if self.on_line is not None:
                self.on_line(line)
            if not ready.is_set() and (seen := ReadyLine.parse(line)) is not None:
                self.ports = seen.ports
                self.port = next(iter(seen.ports.values()))
                self.metrics_port = seen.metrics_port
                self.health_port = seen.health_port
                ready.set()
        ready.set()  # exited before it listened: wake the wait now

    def wait_ready(self, deadline: float) -> str | None:
        """None once the broker listens; else why it does not (by the monotonic
        ``deadline``)."""
        if not self._ready.wait(max(0.0, deadline - time.monotonic())):
            return f"{self.name} did not start in time"
        assert self.proc is not None
        if self.proc.poll() is not None:
            return f"{self.name} exited with {self.proc.returncode}"
        return None

    def start(self, timeout: float = START_TIMEOUT_S) -> BrokerProcess:
        """Start it and wait until it listens; RuntimeError with its last output if it does
        not within ``timeout`` (the process is killed then)."""
        self.spawn()
        error = self.wait_ready(time.monotonic() + timeout)
        if error is not None:
            assert self.proc is not None
            self.proc.kill()
            self.proc.wait(10)
            raise RuntimeError(f"{error}:\n{self.tail(40)}")
        return self

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL: no flush, no clean-shutdown marker."""
        if self.alive():
            assert self.proc is not None
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def pause(self) -> None:
        """SIGSTOP: its sockets stay open, it just stops answering."""
        assert self.alive() and self.proc is not None, f"{self.name} is not running"
        self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        if self.alive():
            assert self.proc is not None
            self.proc.send_signal(signal.SIGCONT)

    def terminate(self) -> None:
        """SIGTERM (controlled shutdown), without waiting."""
        if self.alive():
            assert self.proc is not None
            self.proc.send_signal(signal.SIGTERM)

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> int:
        """SIGTERM and wait for the exit code. One still running at ``timeout`` is
        SIGKILLed, and ``subprocess.TimeoutExpired`` raised: a broker that does not stop
        is a failure, not a detail."""
        if self.proc is None:
            return 0
        self.terminate()
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
            raise
        return self.proc.returncode

    def restart(self, timeout: float = START_TIMEOUT_S) -> BrokerProcess:
        """Stop it cleanly if running, then start it on the same ports and log dirs."""
        self.stop()
        return self.start(timeout)

    def join_output(self, timeout: float = 2.0) -> None:
        """Wait for the output of an exited process to be read to its end."""
        if self._pump_thread is not None:
            self._pump_thread.join(timeout)

    def tail(self, lines: int = 40) -> str:
        """Its last ``lines`` output lines, across restarts."""
        return "".join(self.output[-lines:])
