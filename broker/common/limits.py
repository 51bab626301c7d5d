"""The process's own limits and allocator settings, set once at start.

Every hosted partition keeps its active segment's file open, and every connection a socket:
10,000 partitions and 2,000 connections need 12,000 descriptors where a container starts
with a soft limit of 1,024 (containerd 2's default; its hard limit is 524,288). The JVM
raises its soft limit to the hard one at start (``-XX:+MaxFDLimit``, on by default), so a
Kafka broker in the same pod has them; a kafkube broker does the same here.

Large request frames (a Java producer's 16 partitions of 128 KiB batches make 1-2 MiB) are
buffers allocated and freed hundreds of times a second. glibc serves those from fresh
mmap()s until its adaptive thresholds catch up, and hands freed memory back to the kernel
past 128 KiB of slack, so every frame faulted its pages in anew (950 page faults a 2 MB
frame; tests/unit/broker/test_limits.py). Fixing the thresholds at start took broker CPU
per GB under Java's ProducerPerformance from 1.16-1.20 s to 0.93-1.00 s
(docs/performance.md). The values are the ceiling glibc's own adaptation reaches on 64-bit
(mmap threshold 32 MiB, trim threshold twice that), set from the start; the JVM keeps its
heap for the same reason. A GLIBC_TUNABLES malloc setting of the operator's wins.
"""

from __future__ import annotations

import ctypes
import logging
import os
import resource

log = logging.getLogger(__name__)


def raise_open_files_limit() -> tuple[int, int]:
    """Soft RLIMIT_NOFILE up to the hard limit; (before, after)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft == hard:
        return soft, soft
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (ValueError, OSError) as e:  # not allowed here: keep what there is, say so
        log.warning("could not raise the open files limit from %d to %d: %s", soft, hard, e)
        return soft, soft
    log.info("open files limit raised from %d to %d (the hard limit)", soft, hard)
    return soft, hard


# mallopt(3) parameters (malloc.h) and the values set: glibc's adaptive ceiling on 64-bit.
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD_BYTES = 32 << 20
TRIM_THRESHOLD_BYTES = 64 << 20


def keep_large_buffers() -> bool:
    """Serve buffers below 32 MiB from the heap and keep 64 MiB of freed heap, so that
    request frames reuse memory instead of faulting in fresh pages; False where the C
    library has no mallopt (not glibc) or the operator set malloc tunables themselves."""
    if "glibc.malloc." in os.environ.get("GLIBC_TUNABLES", ""):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    return bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)
                and mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES))
