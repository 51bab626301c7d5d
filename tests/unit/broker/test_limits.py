"""broker/common/limits.py in a process of its own started with a low soft limit on open
files, as containerd 2 starts containers (1,024 soft): the broker raises it to the hard
limit, as the JVM does for Kafka."""

from __future__ import annotations

import resource
import subprocess
import sys

SCRIPT = """
import resource
from broker.common.limits import raise_open_files_limit
resource.setrlimit(resource.RLIMIT_NOFILE, (256, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
print(*raise_open_files_limit(), *resource.getrlimit(resource.RLIMIT_NOFILE))
"""


def test_the_soft_open_files_limit_is_raised_to_the_hard_one() -> None:
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True,
                         check=True, timeout=60).stdout.split()
    before, after, soft_now, hard_now = map(int, out)
    assert before == 256
    assert after == soft_now == hard_now == hard
