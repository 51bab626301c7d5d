"""`kafkube dev`: a real multi-broker cluster as local processes on the embedded backend.

Each broker is its own `kafkube broker` process with its own log dir; all of them share one
SQLite coordination file, which stands in for the Kubernetes API a deployed cluster uses.
Ctrl-C (or SIGTERM) stops the brokers one at a time with SIGTERM, so each moves its
leaderships away before it exits, then stops the rest.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

READY_MARK = "listening on PLAINTEXT://"
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 30.0
PR_SET_PDEATHSIG = 1


@dataclass
class DevBroker:
    node_id: int
    port: int
    log_dir: Path
    proc: subprocess.Popen[str] | None = None
    ready: threading.Event = field(default_factory=threading.Event)


def _die_with_parent() -> None:
    """Linux: SIGTERM the broker if `kafkube dev` itself dies, so none is left behind."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):
        pass


def _pump(broker: DevBroker, prefix: str, quiet: bool) -> None:
    assert broker.proc is not None and broker.proc.stdout is not None
    for line in broker.proc.stdout:
        if READY_MARK in line:
            # The bound port: the one asked for, or the kernel's pick for port 0.
            address = line.split(READY_MARK, 1)[1].split(",", 1)[0].strip()
            broker.port = int(address.rsplit(":", 1)[1])
            broker.ready.set()
        if not quiet:
            sys.stderr.write(f"{prefix}{line}")
    broker.ready.set()


def start_cluster(data_dir: Path, brokers: int, base_port: int, metrics_base: int,
                  overrides: list[str], quiet: bool) -> list[DevBroker]:
    data_dir.mkdir(parents=True, exist_ok=True)
    cluster: list[DevBroker] = []
    for node_id in range(brokers):
        port = base_port + node_id if base_port else 0
        broker = DevBroker(node_id, port, data_dir / f"broker-{node_id}")
        metrics = metrics_base + node_id if metrics_base > 0 else metrics_base
        args = [
            sys.executable, "-m", "broker", "broker",
            "--override", f"node.id={node_id}",
            "--override", f"listeners=PLAINTEXT://127.0.0.1:{port}",
            "--override", f"log.dirs={broker.log_dir}",
            "--override", f"kafkube.coordination.path={data_dir / 'cluster.db'}",
            "--override", f"kafkube.metrics.port={metrics}",
            "--override", f"default.replication.factor={min(3, brokers)}",
            "--override", f"min.insync.replicas={min(2, brokers)}",
        ]
        for override in overrides:
            args += ["--override", override]
        broker.proc = subprocess.Popen(
            args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
            start_new_session=True,  # Ctrl-C reaches us only; we stop brokers in order
            preexec_fn=_die_with_parent,
        )
        threading.Thread(target=_pump, args=(broker, f"[broker {node_id}] ", quiet),
                         daemon=True).start()
        cluster.append(broker)
    deadline = time.monotonic() + START_TIMEOUT_S
    for broker in cluster:
        if not broker.ready.wait(max(0.0, deadline - time.monotonic())):
            stop_cluster(cluster)
            raise RuntimeError(f"broker {broker.node_id} did not start in {START_TIMEOUT_S}s")
        assert broker.proc is not None
        if broker.proc.poll() is not None:
            stop_cluster(cluster)
            raise RuntimeError(f"broker {broker.node_id} exited with {broker.proc.returncode}")
    return cluster


def bootstrap_servers(cluster: list[DevBroker]) -> str:
    return ",".join(f"127.0.0.1:{b.port}" for b in cluster)


def stop_cluster(cluster: list[DevBroker]) -> int:
    """SIGTERM each broker in turn (controlled shutdown); SIGKILL one that hangs."""
    worst = 0
    for broker in cluster:
        proc = broker.proc
        if proc is None or proc.poll() is not None:
            continue
        proc.send_signal(signal.SIGTERM)
        try:
            worst = max(worst, abs(proc.wait(STOP_TIMEOUT_S)))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            worst = 1
    return worst


def run(data_dir: Path, brokers: int, base_port: int, metrics_base: int,
        overrides: list[str], quiet: bool) -> int:
    try:
        cluster = start_cluster(data_dir, brokers, base_port, metrics_base, overrides, quiet)
    except RuntimeError as e:
        print(f"kafkube dev: {e}", file=sys.stderr)
        return 1
    # Blocked only now: children inherit the signal mask, and brokers must get SIGTERM.
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    print(f"kafkube dev: {brokers} brokers running, data in {data_dir}", flush=True)
    print(f"bootstrap.servers={bootstrap_servers(cluster)}", flush=True)
    print("Press Ctrl-C to stop.", flush=True)
    while True:
        received = signal.sigtimedwait({signal.SIGINT, signal.SIGTERM}, 0.5)
        if received is not None:
            break
        dead = [b.node_id for b in cluster if b.proc is not None and b.proc.poll() is not None]
        if dead:
            print(f"kafkube dev: broker(s) {dead} exited; stopping the cluster",
                  file=sys.stderr, flush=True)
            stop_cluster(cluster)
            return 1
    print("kafkube dev: stopping (controlled shutdown of each broker)", flush=True)
    code = stop_cluster(cluster)
    print("kafkube dev: stopped", flush=True)
    return code
