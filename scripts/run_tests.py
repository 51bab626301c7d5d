"""`make test`'s pytest runs: the unit and integration tiers in one, the e2e tier beside them
in another, at once, each line of the e2e run's output prefixed ``[e2e]``.

Why two runs at once: the e2e tier spends most of its half hour waiting on Kubernetes (pods
scheduled, brokers rolled, Leases expiring, a drain), and the integration tier most of its own
waiting on brokers and clients; one after the other they took ~65 minutes of a CI run on this
2-core machine, which the 45-minute budget cannot hold. Side by side, the e2e run starts by
waiting for its kind node image, built in the background since the set-up began
(scripts/setup.sh), while the unit tier runs.

The exit status is the first failing run's (0 when both pass). Arguments go to both runs;
PYTEST_ADDOPTS reaches both as usual. KAFKUBE_TIERS=serial runs the tiers one after the other
in one run instead (tests/conftest.py orders them), as `make unit integration e2e` would.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import IO

REPO = Path(__file__).resolve().parents[1]
PYTEST = [str(REPO / ".venv" / "bin" / "pytest"), "-q", "-p", "no:cacheprovider"]


def relay(stream: IO[str], prefix: str) -> None:
    """Copy a run's output to ours line by line, so two runs' lines never mix mid-line."""
    for line in stream:
        sys.stdout.write(prefix + line)
        sys.stdout.flush()


def main(argv: list[str]) -> int:
    if os.environ.get("KAFKUBE_TIERS") == "serial":
        return subprocess.call([*PYTEST, *argv], cwd=REPO)
    runs = {
        "": [*PYTEST, *argv, "tests/unit", "tests/integration"],
        "[e2e] ": [*PYTEST, *argv, "tests/e2e"],
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
