"""`make test`'s pytest run: every tier in one run, unit, integration, then e2e
(tests/conftest.py orders them). KAFKUBE_TIERS=parallel runs the e2e tier in a run of its
own beside the unit and integration tiers instead, each line of its output prefixed
``[e2e]``.

Why parallel is not the default: the e2e tier spends most of its half hour waiting on
Kubernetes, the integration tier most of its own waiting on brokers and clients, so side by
side they should take little more than the longer of the two. Measured on this 2-core machine
(2026-11-28, a cold run), they did not hold: with the kind cluster's brokers, clients and
control plane beside them, the three Spark pipeline tests ran past their 300 s timeouts and
a huge request held another client 1.17 s (the test allows 1 s); the integration tier took
62 minutes instead of ~38. The figures are in docs/platform.md.

The exit status is the first failing run's (0 when all pass). Arguments go to every run;
PYTEST_ADDOPTS reaches them as usual.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import IO

REPO = Path(__file__).resolve().parents[1]
PYTEST = [str(REPO / ".venv" / "bin" / "pytest"), "-p", "no:cacheprovider"]


def relay(stream: IO[str], prefix: str) -> None:
    """Copy a run's output to ours line by line, so two runs' lines never mix mid-line."""
    for line in stream:
        sys.stdout.write(prefix + line)
        sys.stdout.flush()


def main(argv: list[str]) -> int:
    if os.environ.get("KAFKUBE_TIERS") != "parallel":
        return subprocess.call([*PYTEST, "-q", *argv], cwd=REPO)
    runs = {
        "": [*PYTEST, "-q", *argv, "tests/unit", "tests/integration"],
        # A line per scenario (-v): a -q line of dots would show only once it is full.
        "[e2e] ": [*PYTEST, "-v", *argv, "tests/e2e"],
    }
    started = []
    for prefix, command in runs.items():
        process = subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, text=True, bufsize=1)
        relayer = threading.Thread(target=relay, args=(process.stdout, prefix), daemon=True)
        relayer.start()
        started.append((process, relayer))
    codes = []
    for process, relayer in started:
        codes.append(process.wait())
        relayer.join()
    return next((code for code in codes if code != 0), 0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
