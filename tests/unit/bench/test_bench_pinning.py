"""``bench --pin``: every thread of a running process moved, and the mask inherited."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from bench import pinning

pytestmark = pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="needs 2 CPUs")


def test_every_thread_of_a_broker_is_moved_and_new_ones_follow() -> None:
    # A process with a thread already running, and one it starts after the pinning.
    script = ("import os, sys, threading, time\n"
              "threading.Thread(target=time.sleep, args=(60,), daemon=True).start()\n"
              "print('ready', flush=True); sys.stdin.readline()\n"
              "masks = []\n"
              "t = threading.Thread(target=lambda: masks.append(os.sched_getaffinity(0)))\n"
              "t.start(); t.join(); print(sorted(masks[0]), flush=True)\n")
    proc = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        threads = os.listdir(f"/proc/{proc.pid}/task")
        assert len(threads) == 2
        pinning.pin_broker([proc.pid])
        assert {frozenset(os.sched_getaffinity(int(t))) for t in threads} == {
            pinning.BROKER_CPUS}
        proc.stdin.write("\n")
        proc.stdin.flush()
        assert proc.stdout.readline().strip() == str(sorted(pinning.BROKER_CPUS))
    finally:
        proc.kill()
        proc.wait(10)


def test_a_broker_gone_before_its_pinning_is_passed_over() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait(10)  # reaped: its /proc entry is gone
    assert not os.path.exists(f"/proc/{proc.pid}")
    pinning.pin_broker([proc.pid])  # no error
