"""What a benchmark run says about itself, so its figures can be judged later: the machine
it ran on and how loaded it was, the commit it measured, and where the results go."""

from __future__ import annotations

import contextlib
import os
import platform
import subprocess
from pathlib import Path

from bench import kafka

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs" / "performance.md"


def machine() -> str:
    """CPUs, memory, OS, Python and Java of this machine, in one line."""
    cpu = platform.processor() or "unknown CPU"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    mem = ""
    with contextlib.suppress(OSError, ValueError, IndexError):
        kib = int(Path("/proc/meminfo").read_text().split()[1])
        mem = f", {kib / 2**20:.0f} GiB RAM"
    return (f"{os.cpu_count()} CPUs ({cpu}){mem}, {platform.system()} {platform.release()}, "
            f"Python {platform.python_version()}, {kafka.java_version()}")


def commit() -> str:
    """The commit measured, and whether the working tree differed from it."""
    try:
        rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                             capture_output=True, text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               cwd=ROOT, capture_output=True, text=True,
                               timeout=10).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    return f"{rev}{' + uncommitted changes' if dirty else ''}" if rev else "unknown"


def load_average() -> str:
    """The 1, 5 and 15 minute load averages, e.g. "0.52 0.61 0.70"."""
    return " ".join(f"{x:.2f}" for x in os.getloadavg())
