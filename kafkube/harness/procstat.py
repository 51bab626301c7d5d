"""A process's CPU and memory, and the machine's, from /proc: who was busy during a run.

Zeros where /proc is not there (not Linux) or the process is gone."""

from __future__ import annotations

import os
from pathlib import Path


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid``; 0.0 where /proc is unavailable."""
    return sum(cpu_times(pid))


def cpu_times(pid: int, tid: int | None = None) -> tuple[float, float]:
    """(user, system) CPU seconds of process ``pid``, or of its thread ``tid`` alone;
    zeros where /proc is unavailable. A thread's own figures are in /proc/<pid>/task/<tid>:
    /proc/<tid>/stat gives the whole process's, for any of its threads."""
    path = f"/proc/{pid}/stat" if tid is None else f"/proc/{pid}/task/{tid}/stat"
    try:
        fields = Path(path).read_text().rsplit(")", 1)[1].split()
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
