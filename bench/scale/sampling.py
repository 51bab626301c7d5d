"""What the broker process uses while a load curve runs, read from /proc: its memory (RSS of
the process and its children), its established client connections, the CPU seconds of each
of its threads, and (on request) py-spy stacks of the kafkube broker. Samplers only: what a
figure means is decided by the curves."""

from __future__ import annotations

import argparse
import contextlib
import statistics
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from bench.scale.load_points import Point
from bench.systems import Running
from kafkube.harness.procstat import cpu_times, rss_bytes

MiB = 1 << 20
SAMPLE_S = 0.1  # RSS / connection sampling interval
MAX_SAMPLES = 100_000  # a sampler's bound, whatever the phase's length (2.8 h at 100 ms)
IDLE_S = 2.0  # how long an idle RSS is sampled (its median is the figure)


def process_tree(pid: int, limit: int = 1000) -> list[int]:
    """``pid`` and its descendants (from /proc/<pid>/task/*/children), at most ``limit``:
    a broker that forks helpers owns their memory too."""
    found, todo = [], [pid]
    while todo and len(found) < limit:
        current = todo.pop()
        found.append(current)
        with contextlib.suppress(OSError):
            for task in Path(f"/proc/{current}/task").iterdir():
                with contextlib.suppress(OSError):
                    todo += [int(c) for c in (task / "children").read_text().split()]
    return found


def tree_rss(pids: list[int]) -> int:
    """The summed RSS of ``pids`` and all their descendants, in bytes."""
    return sum(rss_bytes(p) for pid in pids for p in process_tree(pid))


def established(ports: set[int], tables: tuple[str, ...] = ("/proc/net/tcp",
                                                           "/proc/net/tcp6")) -> int:
    """Established TCP connections whose local port is one of ``ports``: the broker's side
    of its client connections (the client's side has the port as its remote one)."""
    count = 0
    for table in tables:
        with contextlib.suppress(OSError):
            count += count_established(Path(table).read_text(), ports)
    return count


def count_established(text: str, ports: set[int]) -> int:
    """``established`` on the text of one /proc/net/tcp table."""
    count = 0
    for line in text.splitlines()[1:]:
        fields = line.split()
        if len(fields) > 3 and fields[3] == "01":  # TCP_ESTABLISHED
            local = fields[1].rsplit(":", 1)[-1]
            with contextlib.suppress(ValueError):
                count += int(local, 16) in ports
    return count


def thread_cpu(pids: list[int]) -> dict[str, tuple[float, float]]:
    """User and system CPU seconds per thread name of ``pids`` (trailing digits and dashes
    stripped, so a pool of threads adds up): says whether a phase's broker CPU went to
    request handling, to a JIT compiler, to GC or to the kernel."""
    out: dict[str, tuple[float, float]] = {}
    for pid in pids:
        with contextlib.suppress(OSError):
            for task in Path(f"/proc/{pid}/task").iterdir():
                with contextlib.suppress(OSError):
                    name = (task / "comm").read_text().strip().rstrip("0123456789-#") or "?"
                    task_user, task_system = cpu_times(pid, int(task.name))
                    user, system = out.get(name, (0.0, 0.0))
                    out[name] = (user + task_user, system + task_system)
    return out


def busiest(before: dict[str, tuple[float, float]], after: dict[str, tuple[float, float]],
            top: int = 4) -> list[tuple[str, float, float]]:
    """The ``top`` thread names by CPU between two ``thread_cpu`` readings: (name, user s,
    system s)."""
    spent = []
    for name, (user, system) in after.items():
        user0, system0 = before.get(name, (0.0, 0.0))
        spent.append((name, round(user - user0, 2), round(system - system0, 2)))
    return sorted(spent, key=lambda t: -(t[1] + t[2]))[:top]


def ports_of(bootstrap: str) -> set[int]:
    return {int(hostport.rsplit(":", 1)[1]) for hostport in bootstrap.split(",") if hostport}


class Sampler:
    """Samples the brokers' summed RSS (and, given ``ports``, their established connections)
    every ``interval`` s in a thread while the ``with`` block runs: the peak of a phase needs
    samples during it, not before and after. Bounded by ``MAX_SAMPLES``."""

    def __init__(self, pids: list[int], ports: set[int] | None = None,
                 interval: float = SAMPLE_S) -> None:
        self.pids, self.ports, self.interval = pids, ports, interval
        self.rss: list[int] = []
        self.connections: list[int] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="scale-load-sampler",
                                         daemon=True)

    def sample(self) -> None:
        if len(self.rss) < MAX_SAMPLES:
            self.rss.append(tree_rss(self.pids))
            if self.ports:
                self.connections.append(established(self.ports))

    def _run(self) -> None:
        while not self._stop.wait(self.interval) and len(self.rss) < MAX_SAMPLES:
            self.sample()

    def __enter__(self) -> Sampler:
        self.sample()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10 + self.interval)
        self.sample()

    @property
    def peak_mib(self) -> float:
        return max(self.rss, default=0) / MiB

    @property
    def peak_connections(self) -> int:
        return max(self.connections, default=0)


def idle_rss_mib(pids: list[int], seconds: float = IDLE_S) -> float:
    """The brokers' RSS at rest: the median of ``seconds`` of samples, so one GC or one
    allocation burst does not make the figure."""
    samples = []
    for _ in range(max(1, int(seconds / SAMPLE_S))):
        samples.append(tree_rss(pids))
        time.sleep(SAMPLE_S)  # sampling at a rate, not waiting for anything
    return statistics.median(samples) / MiB


@contextlib.contextmanager
def profiled(env: Running, point: Point, phase: str, args: argparse.Namespace
             ) -> Iterator[None]:
    """py-spy on the kafkube broker during ``phase`` when ``--profile DIR`` asks for it."""
    if args.profile is None or env.system != "kafkube":
        yield
        return
    from bench.profile import PySpy

    args.profile.mkdir(parents=True, exist_ok=True)
    out = args.profile / f"{point.curve}-{point.x}-{phase}.txt"
    with PySpy(env.pids()[0], out):
        yield
    point.raw.setdefault("profiles", []).append(str(out))

