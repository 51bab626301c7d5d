"""The process's own limits, raised where the operating system lets a process raise them.

Every hosted partition keeps its active segment's file open, and every connection a socket:
10,000 partitions and 2,000 connections need 12,000 descriptors where a container starts
with a soft limit of 1,024 (containerd 2's default; its hard limit is 524,288). The JVM
raises its soft limit to the hard one at start (``-XX:+MaxFDLimit``, on by default), so a
Kafka broker in the same pod has them; a kafkube broker does the same here.
"""

from __future__ import annotations

import logging
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
