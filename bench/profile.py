"""Sample the broker with py-spy during a timed phase and summarise where the time goes.

py-spy samples from outside the process (``--nonblocking`` never pauses it), so the
profile costs the broker almost nothing and needs no code in the broker. The raw output
is collapsed stacks, one ``frame;frame;... count`` line per distinct stack, which is easy
to total here and to feed to flamegraph tools later.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

_ROOT = str(Path(__file__).resolve().parent.parent)


class PySpy:
    """``py-spy record`` attached to ``pid`` for as long as the ``with`` block lasts."""

    def __init__(self, pid: int, out: Path, rate: int = 200) -> None:
        exe = str(Path(sys.executable).with_name("py-spy"))  # the venv's, else any on PATH
        exe = exe if Path(exe).exists() else shutil.which("py-spy") or ""
        if not exe:
            raise RuntimeError("py-spy not found: .venv/bin/pip install py-spy")
        self.out = out
        self.args = [exe, "record", "--pid", str(pid), "--rate", str(rate), "--nonblocking",
                     "--function", "--format", "raw", "--output", str(out)]
        self.proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> PySpy:
        with self.out.with_suffix(".log").open("wb") as log:  # why py-spy failed, if it did
            self.proc = subprocess.Popen(self.args, stdout=log, stderr=log)
        return self

    def __exit__(self, *exc: object) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGINT)  # py-spy writes its output on SIGINT
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)


def summarise(raw: Path, top: int = 15) -> str:
    """Self and inclusive sample shares per function, highest self time first."""
    own: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    total = 0
    if not raw.exists():
        return f"(py-spy wrote no profile; see {raw.with_suffix('.log')})"
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        total += n
        frames = [_short(f) for f in stack.split(";")]
        own[frames[-1]] += n
        for frame in set(frames):
            inclusive[frame] += n
    if not total:
        return f"(no samples in {raw})"
    rows = [f"{'self %':>7} {'total %':>8}  function (file:line)   [{total} samples]"]
    for frame, n in own.most_common(top):
        rows.append(f"{100 * n / total:7.1f} {100 * inclusive[frame] / total:8.1f}  {frame}")
    return "\n".join(rows)


def _short(frame: str) -> str:
    """``fn (/repo/broker/x.py:12)`` -> ``fn (broker/x.py:12)``: shorter, still unique."""
    name, _, where = frame.partition(" (")
    where = where.rstrip(")")
    for marker in ("/site-packages/", f"{_ROOT}/", "/lib/python3"):
        if marker in where:
            where = where.split(marker, 1)[1]
            break
    return f"{name} ({where})" if where else name
