"""``--pin``: the broker on a core of its own and every client on the other.

On this 2-core machine the client processes of the connection curve want more than a core,
and Linux shares the CPUs between the broker's session and the benchmark's: py-spy and the
event loop's run-queue time (``/proc/<pid>/task/<tid>/schedstat``) showed kafkube's loop
thread runnable but waiting for a CPU for 1.16 s of a 1.63 s stall. Kafka spreads the same
CPU over many threads, so no one request waits for one thread. A broker pod given whole
cores (the kubelet's static CPU manager policy, Guaranteed QoS) meets neither; pinning
measures that case, for both systems alike: the same core for either broker, all its
threads, and the other core for the benchmark and every client process it starts (they
inherit its affinity).
"""

from __future__ import annotations

import contextlib
import os

BROKER_CPUS = frozenset({1})
CLIENT_CPUS = frozenset({0})


def pin_clients() -> None:
    """This process, and so every process it starts from now on, on ``CLIENT_CPUS``."""
    if (os.cpu_count() or 1) < 2:
        raise SystemExit("--pin needs 2 CPUs or more")
    os.sched_setaffinity(0, CLIENT_CPUS)


def pin_broker(pids: list[int]) -> None:
    """Every thread of the broker processes onto ``BROKER_CPUS``. Threads made later inherit
    the mask of the thread making them; a second pass catches any made during the first."""
    for _ in range(2):
        for pid in pids:
            try:
                threads = os.listdir(f"/proc/{pid}/task")
            except FileNotFoundError:
                continue
            for tid in threads:
                with contextlib.suppress(ProcessLookupError):  # the thread ended meanwhile
                    os.sched_setaffinity(int(tid), BROKER_CPUS)
