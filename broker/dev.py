"""`kafkube dev`: a real multi-broker cluster as local processes on the embedded backend.

Each broker is its own `kafkube broker` process with its own log dir; all of them share one
SQLite coordination file, which stands in for the Kubernetes API a deployed cluster uses.
A broker that dies (``kill -9`` is the first thing people try) is reported and the others
keep serving, as a cluster must; SIGHUP to `kafkube dev` starts every exited broker again
on its port and log dir, as a StatefulSet would restart its pod. Ctrl-C (or SIGTERM) stops
the brokers one at a time with SIGTERM, so each moves its leaderships away before it exits.
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
PID_FILE = "dev.pid"  # in the data dir, for `kill -HUP $(cat .kafkube-dev/dev.pid)`


@dataclass
class DevBroker:
    node_id: int
    port: int
    log_dir: Path
    args: list[str] = field(default_factory=list)  # the command line, less the listener
    proc: subprocess.Popen[str] | None = None
    ready: threading.Event = field(default_factory=threading.Event)
    reported: bool = False  # its exit was reported


def prepare_child() -> None:
    """In the broker's process before exec: take signals again (a child inherits the mask,
    and `kafkube dev` blocks the ones it waits for), and, on Linux, get SIGTERM if
    `kafkube dev` itself dies, so no broker is left behind."""
    signal.pthread_sigmask(signal.SIG_SETMASK, set())
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
        broker.args = [
            sys.executable, "-m", "kafkube", "broker",
            "--override", f"node.id={node_id}",
            "--override", f"log.dirs={broker.log_dir}",
            "--override", f"kafkube.coordination.path={data_dir / 'cluster.db'}",
            "--override", f"kafkube.metrics.port={metrics}",
            "--override", f"default.replication.factor={min(3, brokers)}",
            "--override", f"min.insync.replicas={min(2, brokers)}",
        ]
        for override in overrides:
            broker.args += ["--override", override]
        spawn(broker, quiet)
        cluster.append(broker)
    deadline = time.monotonic() + START_TIMEOUT_S
    for broker in cluster:
        error = wait_ready(broker, deadline)
        if error:
            stop_cluster(cluster)
            raise RuntimeError(error)
    return cluster


def spawn(broker: DevBroker, quiet: bool) -> None:
    """Start ``broker``'s process on its port (the kernel's pick the first time, with 0)."""
    broker.ready.clear()
    broker.reported = False
    broker.proc = subprocess.Popen(
        [*broker.args, "--override", f"listeners=PLAINTEXT://127.0.0.1:{broker.port}"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        start_new_session=True,  # Ctrl-C reaches us only; we stop brokers in order
        preexec_fn=prepare_child,
    )
    threading.Thread(target=_pump, args=(broker, f"[broker {broker.node_id}] ", quiet),
                     daemon=True).start()


def wait_ready(broker: DevBroker, deadline: float) -> str | None:
    """None once ``broker`` listens; else why it does not."""
    if not broker.ready.wait(max(0.0, deadline - time.monotonic())):
        return f"broker {broker.node_id} did not start in {START_TIMEOUT_S}s"
    assert broker.proc is not None
    if broker.proc.poll() is not None:
        return f"broker {broker.node_id} exited with {broker.proc.returncode}"
    return None


def exit_reason(code: int) -> str:
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


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
    # Taken with sigtimedwait below; brokers started later unblock them (prepare_child).
    signals = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}
    signal.pthread_sigmask(signal.SIG_BLOCK, signals)
    pid_file = data_dir / PID_FILE
    pid_file.write_text(f"{os.getpid()}\n")
    print(f"kafkube dev: {brokers} brokers running, data in {data_dir}", flush=True)
    for broker in cluster:
        assert broker.proc is not None
        print(f"kafkube dev: broker {broker.node_id} pid {broker.proc.pid} "
              f"127.0.0.1:{broker.port}", flush=True)
    print(f"bootstrap.servers={bootstrap_servers(cluster)}", flush=True)
    print(f"Press Ctrl-C to stop; kill -HUP {os.getpid()} starts exited brokers again.",
          flush=True)
    try:
        while True:
            received = signal.sigtimedwait(signals, 0.5)
            if received is not None and received.si_signo == signal.SIGHUP:
                restart_exited(cluster, quiet)
            elif received is not None:
                break
            report_exits(cluster)
    finally:
        pid_file.unlink(missing_ok=True)
    print("kafkube dev: stopping (controlled shutdown of each broker)", flush=True)
    code = stop_cluster(cluster)
    print("kafkube dev: stopped", flush=True)
    return code


def report_exits(cluster: list[DevBroker]) -> None:
    """Say once that a broker exited; the others go on serving."""
    for broker in cluster:
        proc = broker.proc
        if proc is None or broker.reported or proc.poll() is None:
            continue
        broker.reported = True
        running = [b.node_id for b in cluster if b.proc is not None and b.proc.poll() is None]
        print(f"kafkube dev: broker {broker.node_id} exited ({exit_reason(proc.returncode)}); "
              f"brokers {running} keep serving. kill -HUP {os.getpid()} starts it again.",
              file=sys.stderr, flush=True)


def restart_exited(cluster: list[DevBroker], quiet: bool) -> None:
    """SIGHUP: start every exited broker again, on its port and log dir."""
    exited = [b for b in cluster if b.proc is None or b.proc.poll() is not None]
    if not exited:
        print("kafkube dev: SIGHUP, but every broker is running", flush=True)
        return
    for broker in exited:
        spawn(broker, quiet)
    deadline = time.monotonic() + START_TIMEOUT_S
    for broker in exited:
        error = wait_ready(broker, deadline)
        assert broker.proc is not None
        if error:
            print(f"kafkube dev: {error}", file=sys.stderr, flush=True)
        else:
            print(f"kafkube dev: broker {broker.node_id} started again, pid "
                  f"{broker.proc.pid} 127.0.0.1:{broker.port}", flush=True)
