"""`kafkube dev`: a real multi-broker cluster as local processes on the embedded backend.

Each broker is its own `kafkube broker` process with its own log dir; all of them share one
SQLite coordination file, which stands in for the Kubernetes API a deployed cluster uses
(``kafkube.harness.cluster.LocalCluster``, the tests' and benchmarks' cluster too).
A broker that dies (``kill -9`` is the first thing people try) is reported and the others
keep serving, as a cluster must; SIGHUP to `kafkube dev` starts every exited broker again
on its port and log dir, as a StatefulSet would restart its pod. Ctrl-C (or SIGTERM) stops
the brokers one at a time with SIGTERM, so each moves its leaderships away before it exits.

``start_cluster``, ``bootstrap_servers`` and ``stop_cluster`` are the same cluster for a
script that wants one for a while (scripts/demo.py).
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

from kafkube.harness.cluster import LocalCluster, dev_defaults
from kafkube.harness.process import STOP_TIMEOUT_S

START_TIMEOUT_S = 60.0
PID_FILE = "dev.pid"  # in the data dir, for `kill -HUP $(cat .kafkube-dev/dev.pid)`
KEEP_LINES = 200  # of each broker's output, for the message when it does not start


def parse_overrides(overrides: list[str]) -> dict[str, str]:
    """``KEY=VALUE`` strings -> a dict (later ones win); ValueError naming a bad one."""
    parsed: dict[str, str] = {}
    for override in overrides:
        key, sep, value = override.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--override {override!r}: expected KEY=VALUE")
        parsed[key.strip()] = value
    return parsed


def _relay(node: int, line: str) -> None:
    sys.stderr.write(f"[broker {node}] {line}")


def start_cluster(data_dir: Path, brokers: int, base_port: int, metrics_base: int,
                  overrides: list[str], quiet: bool) -> LocalCluster:
    """``brokers`` brokers listening on ``base_port + N`` (ports of the kernel's choosing
    with 0), metrics on ``metrics_base + N`` (-1: none), ``overrides`` (``KEY=VALUE``) for
    every one; their output relayed to stderr as ``[broker N] ...`` unless ``quiet``.
    Returns once all listen; RuntimeError (every broker stopped) if one does not."""
    config = {**dev_defaults(brokers), **parse_overrides(overrides)}
    cluster = LocalCluster(
        data_dir, brokers, config, base_port=base_port, metrics_base=metrics_base,
        on_line=None if quiet else _relay,
        own_session=True,  # Ctrl-C reaches us only; we stop brokers in order
        die_with_parent=True, keep_lines=KEEP_LINES)
    try:
        cluster.start(START_TIMEOUT_S)
    except RuntimeError:
        stop_cluster(cluster)
        raise
    return cluster


def bootstrap_servers(cluster: LocalCluster) -> str:
    return cluster.bootstrap


def stop_cluster(cluster: LocalCluster) -> int:
    """SIGTERM each broker in turn (controlled shutdown), SIGKILL one that hangs; the worst
    exit code."""
    codes = cluster.stop(STOP_TIMEOUT_S, in_order=True)
    return max((abs(code) for code in codes.values()), default=0)


def exit_reason(code: int) -> str:
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


def run(data_dir: Path, brokers: int, base_port: int, metrics_base: int,
        overrides: list[str], quiet: bool) -> int:
    try:
        cluster = start_cluster(data_dir, brokers, base_port, metrics_base, overrides, quiet)
    except (RuntimeError, ValueError) as e:
        print(f"kafkube dev: {e}", file=sys.stderr)
        return 1
    # Taken with sigtimedwait below; brokers started later unblock them (die_with_parent).
    signals = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}
    signal.pthread_sigmask(signal.SIG_BLOCK, signals)
    pid_file = data_dir / PID_FILE
    pid_file.write_text(f"{os.getpid()}\n")
    print(f"kafkube dev: {brokers} brokers running, data in {data_dir}", flush=True)
    for i, broker in enumerate(cluster.brokers):
        print(f"kafkube dev: broker {i} pid {broker.pid} {broker.bootstrap}", flush=True)
    print(f"bootstrap.servers={bootstrap_servers(cluster)}", flush=True)
    print(f"Press Ctrl-C to stop; kill -HUP {os.getpid()} starts exited brokers again.",
          flush=True)
    reported: set[int] = set()  # brokers whose exit was reported
    try:
        while True:
            received = signal.sigtimedwait(signals, 0.5)
            if received is not None and received.si_signo == signal.SIGHUP:
                restart_exited(cluster, reported)
            elif received is not None:
                break
            report_exits(cluster, reported)
    finally:
        pid_file.unlink(missing_ok=True)
    print("kafkube dev: stopping (controlled shutdown of each broker)", flush=True)
    code = stop_cluster(cluster)
    print("kafkube dev: stopped", flush=True)
    return code


def report_exits(cluster: LocalCluster, reported: set[int]) -> None:
    """Say once that a broker exited; the others go on serving."""
    for i, broker in enumerate(cluster.brokers):
        if i in reported or broker.proc is None or broker.alive():
            continue
        reported.add(i)
        running = [n for n in range(cluster.size) if cluster.alive(n)]
        print(f"kafkube dev: broker {i} exited ({exit_reason(broker.proc.returncode)}); "
              f"brokers {running} keep serving. kill -HUP {os.getpid()} starts it again.",
              file=sys.stderr, flush=True)


def restart_exited(cluster: LocalCluster, reported: set[int]) -> None:
    """SIGHUP: start every exited broker again, on its port and log dir."""
    exited = [i for i in range(cluster.size) if not cluster.alive(i)]
    if not exited:
        print("kafkube dev: SIGHUP, but every broker is running", flush=True)
        return
    for i in exited:
        reported.discard(i)
        cluster.brokers[i].spawn()
    deadline = time.monotonic() + START_TIMEOUT_S
    for i in exited:
        broker = cluster.brokers[i]
        error = broker.wait_ready(deadline)
        if error:
            print(f"kafkube dev: {error}", file=sys.stderr, flush=True)
        else:
            print(f"kafkube dev: broker {i} started again, pid {broker.pid} "
                  f"{broker.bootstrap}", flush=True)
