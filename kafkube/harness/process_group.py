"""Ending what we started, and only that: child processes in sessions of their own, killed
as a group, and children that die with us.

A benchmark's JVM or a test's Kafka tool starts threads and sometimes processes of its own;
signalling the leader alone leaves them. Each is therefore started as a session leader
(``start_new_session=True``) and ended with ``kill_group``. Signals go only to a process not
yet reaped, so never to a pid the kernel has handed out again.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
from typing import Any

PR_SET_PDEATHSIG = 1
KILL_WAIT_S = 10.0


def kill_group(proc: subprocess.Popen[Any], term_wait: float = 10.0) -> None:
    """SIGTERM ``proc``'s process group, wait up to ``term_wait`` seconds, then SIGKILL the
    group and wait for ``proc``. ``proc`` must lead its own session."""
    for sig, wait in ((signal.SIGTERM, term_wait), (signal.SIGKILL, KILL_WAIT_S)):
        if proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(wait)


def _load_prctl() -> Any:
    """libc's prctl, looked up in the parent: a child between fork and exec must not import
    (another thread may have held the import lock at the fork)."""
    try:
        import ctypes

        return ctypes.CDLL("libc.so.6", use_errno=True).prctl
    except (OSError, AttributeError):
        return None


_PRCTL = _load_prctl()


def die_with_parent() -> None:
    """A ``preexec_fn``: in the child before exec, take signals again (a child inherits the
    mask, and `kafkube dev` blocks the ones it waits for), and on Linux get SIGTERM when the
    parent dies, so no broker outlives a killed `kafkube dev`."""
    signal.pthread_sigmask(signal.SIG_SETMASK, set())
    if _PRCTL is not None:
        _PRCTL(PR_SET_PDEATHSIG, signal.SIGTERM)


def parent_death_hook(wanted: bool) -> Any:
    """``die_with_parent`` if ``wanted`` and we are the main thread, else None.

    The kernel sends PR_SET_PDEATHSIG's signal when the *thread* that forked the child ends,
    not the process: a broker started from a short-lived thread would be stopped as soon as
    that thread returned."""
    if wanted and threading.current_thread() is threading.main_thread():
        return die_with_parent
    return None
