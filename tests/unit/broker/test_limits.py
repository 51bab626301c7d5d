"""broker/common/limits.py in a process of its own started with a low soft limit on open
files, as containerd 2 starts containers (1,024 soft): the broker raises it to the hard
limit, as the JVM does for Kafka."""

from __future__ import annotations

import os
import resource
import subprocess
import sys

SCRIPT = """
import os
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


FRAMES_SCRIPT = """
import resource, struct, sys
from broker.common.limits import keep_large_buffers
from broker.protocol.codec import FrameReader
if sys.argv[1] == "tuned":
    assert keep_large_buffers()

def read_frame(size):
    # As the socket server reads a large frame: a first read, then in place.
    frames = FrameReader(64 << 20)
    body = memoryview(bytes(size))
    assert frames.feed(struct.pack(">i", size) + body[: 65536]) == []
    filled = 65536
    while (view := frames.unfilled(65536)) is not None:
        take = min(len(view), 256 << 10)
        view[:take] = body[filled : filled + take]
        del view
        filled += take
        frames.filled(take)
    return frames.feed(body[filled:])

sizes = [2_000_000 - 30_000 * (i % 7) for i in range(60)]
for size in sizes[:10]:
    read_frame(size)
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for size in sizes[10:]:
    read_frame(size)
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def _page_faults_reading_frames(mode: str) -> int:
    env = {k: v for k, v in os.environ.items() if k != "GLIBC_TUNABLES"}
    out = subprocess.run([sys.executable, "-c", FRAMES_SCRIPT, mode], capture_output=True,
                         text=True, check=True, timeout=120, env=env).stdout
    return int(out)


def test_large_request_frames_reuse_memory_instead_of_faulting_in_pages() -> None:
    """50 frames of ~2 MB read as the socket server reads them: with the allocator's
    thresholds fixed at start, their buffers come from memory already mapped. Without,
    glibc maps fresh pages for them (each 4 KiB page a fault: hundreds a frame)."""
    untuned, tuned = _page_faults_reading_frames("plain"), _page_faults_reading_frames("tuned")
    assert untuned > 50 * 100, untuned  # the cost the setting removes is there without it
    assert tuned < 50 * 10, (tuned, untuned)
