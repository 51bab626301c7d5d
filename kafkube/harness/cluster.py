"""A local multi-broker kafkube cluster: N broker processes on loopback sharing one SQLite
coordination file, which stands in for the Kubernetes API a deployed cluster uses.

Broker ``i`` has ``node.id`` ``i`` and its own log dir ``<root>/broker-i``; all of them
``kafkube.coordination.path`` ``<root>/cluster.db``. Faults are signals: ``kill`` (SIGKILL),
``pause``/``resume`` (SIGSTOP/SIGCONT), ``restart`` (a clean stop if running, then a start
on the same ports and log dirs, as a StatefulSet restarts its pod).

This is the processes alone, what `kafkube dev` runs; ``metadata.Cluster`` adds what a
Kafka client sees of them, for tests and benchmarks.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from types import TracebackType

from kafkube.harness.process import STOP_TIMEOUT_S, BrokerProcess

START_TIMEOUT_S = 60.0
COORDINATION_FILE = "cluster.db"


def dev_defaults(size: int) -> dict[str, str]:
    """The replication settings of `kafkube dev` and the cluster benchmarks: replicated as
    far as the cluster allows, acks=all writable with one broker down."""
    return {"default.replication.factor": str(min(3, size)),
            "min.insync.replicas": str(min(2, size))}


class LocalCluster:
    """``size`` brokers with ``overrides`` (broker config keys, dotted) for every one.

    ``base_port``: if given, broker ``i`` has one PLAINTEXT listener on ``base_port + i``
    (0: on a port of the kernel's choosing), whatever ``overrides`` say; if None, the
    listeners of ``overrides`` (one PLAINTEXT listener by default). Ports picked by the
    kernel are kept across restarts. ``metrics_base``: broker ``i`` serves
    metrics on ``metrics_base + i`` if positive; 0 picks free ports, -1 serves none.
    ``on_line(i, line)`` gets every output line of broker ``i``. The remaining keywords go to
    every ``BrokerProcess``.
    """

    def __init__(self, root: Path, size: int = 3, overrides: Mapping[str, str] | None = None,
                 *, base_port: int | None = None, metrics_base: int = 0,
                 on_line: Callable[[int, str], None] | None = None,
                 own_session: bool = False, die_with_parent: bool = False,
                 keep_lines: int | None = None) -> None:
        self.root = root
        self.coordination_path = root / COORDINATION_FILE
        self.overrides = {k: str(v) for k, v in (overrides or {}).items()}
        self.base_port = base_port
        root.mkdir(parents=True, exist_ok=True)
        self.brokers = [
            BrokerProcess(
                root / f"broker-{i}", self._config(i, metrics_base), name=f"broker {i}",
                on_line=None if on_line is None else (lambda line, i=i: on_line(i, line)),
                own_session=own_session, die_with_parent=die_with_parent,
                keep_lines=keep_lines)
            for i in range(size)
        ]
        self.paused: set[int] = set()

    def _config(self, i: int, metrics_base: int) -> dict[str, str]:
        metrics = metrics_base + i if metrics_base > 0 else metrics_base
        config = {
            "node.id": str(i),
            "kafkube.coordination.path": str(self.coordination_path),
            "kafkube.metrics.port": str(metrics),
            **self.overrides,
        }
        if self.base_port is not None:
            port = self.base_port + i if self.base_port else 0
            config["listeners"] = f"PLAINTEXT://127.0.0.1:{port}"
        return config

    @property
    def size(self) -> int:
        return len(self.brokers)

    @property
    def bootstrap(self) -> str:
        """Every started broker's address (ports are fixed once started, so this stays
        valid across restarts)."""
        return ",".join(b.bootstrap for b in self.brokers if b.port)

    def pids(self) -> list[int]:
        return [b.proc.pid for b in self.brokers if b.proc is not None]

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self, timeout: float = START_TIMEOUT_S) -> LocalCluster:
        """Start every broker at once (none waits for another) and wait until each listens.
        One that does not is killed and named in a RuntimeError with its last output; the
        others are left running for the caller's ``stop``."""
        for broker in self.brokers:
            broker.spawn()
        deadline = time.monotonic() + timeout
        for broker in self.brokers:
            error = broker.wait_ready(deadline)
            if error is not None:
                broker.kill()
                raise RuntimeError(f"{error}:\n{broker.tail(40)}")
        return self

    def alive(self, i: int) -> bool:
        return self.brokers[i].alive()

    def running(self) -> list[int]:
        """The brokers that are up and not paused: the ones that answer."""
        return [i for i in range(self.size) if self.alive(i) and i not in self.paused]

    def kill(self, i: int) -> None:
        """SIGKILL broker ``i`` (also when paused)."""
        self.brokers[i].kill()
        self.paused.discard(i)

    def pause(self, i: int) -> None:
        """SIGSTOP broker ``i``: its sockets stay open, it just stops answering."""
        self.brokers[i].pause()
        self.paused.add(i)

    def resume(self, i: int) -> None:
        self.brokers[i].resume()
        self.paused.discard(i)

    def restart(self, i: int, timeout: float = START_TIMEOUT_S) -> None:
        """Start broker ``i`` again on its ports and log dirs; a running one is stopped
        cleanly (SIGTERM) first, a paused one resumed first."""
        if i in self.paused:
            self.resume(i)
        self.brokers[i].restart(timeout)

    def stop(self, timeout: float = STOP_TIMEOUT_S, in_order: bool = False) -> dict[int, int]:
        """Resume paused brokers and SIGTERM the running ones: all together, or with
        ``in_order`` one after the other, each gone before the next is asked (so each moves
        its leaderships to brokers that stay, as `kafkube dev` stops). One still running
        ``timeout`` seconds after its SIGTERM is SIGKILLed, with a line saying so in its
        output. Returns the exit code of each broker that was running."""
        for i in list(self.paused):
            self.resume(i)
        running = [i for i in range(self.size) if self.alive(i)]
        if not in_order:
            for i in running:
                self.brokers[i].terminate()
        deadline = time.monotonic() + timeout
        codes: dict[int, int] = {}
        for i in running:
            broker = self.brokers[i]
            assert broker.proc is not None
            if in_order:
                broker.terminate()
                deadline = time.monotonic() + timeout
            try:
                codes[i] = broker.proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                broker.proc.kill()
                codes[i] = broker.proc.wait(10)
                broker.output.append(
                    f"[kafkube.harness] no exit {timeout}s after SIGTERM; SIGKILLed\n")
        return codes

    def save_logs(self) -> list[Path]:
        """Write each broker's output (across restarts) next to its log dirs."""
        paths = []
        for i, broker in enumerate(self.brokers):
            path = self.root / f"broker-{i}.out"
            path.write_text("".join(broker.output))
            paths.append(path)
        return paths

    def __enter__(self) -> LocalCluster:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
