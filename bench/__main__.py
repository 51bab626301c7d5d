"""``python -m bench {produce,consume,all}``: broker throughput against the issue's floor.

Every run starts a fresh broker on an empty temp dir (so earlier runs cannot warm or
fill anything), drives it from a separate client process, and stops it at the end.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import platform
import shlex
import sys
import time
import traceback
from collections.abc import Callable
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from bench import clients
from bench.broker import BenchBroker
from bench.profile import PySpy, summarise

TOPIC = "kafkube-bench"
# The floor on a 2-core machine, in MB/s (10^6 bytes).
FLOOR_MBPS = {"produce": 100.0, "consume": 300.0}
PHASES: dict[str, Callable[..., dict[str, Any]]] = {
    "produce": clients.produce, "consume": clients.consume,
}


def _run_client(fn: Callable[..., dict[str, Any]], args: tuple[Any, ...], timeout: float
                ) -> dict[str, Any]:
    """Run ``fn(*args)`` in a fresh process (its own GIL), killing it after ``timeout``.

    A bare Process, not a Pool: a Pool silently replaces a worker that dies, which would
    turn a crash into a wait for the whole timeout.
    """
    ctx = multiprocessing.get_context("spawn")
    receiver, sender = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_client_main, args=(sender, fn, args), daemon=True)
    proc.start()
    sender.close()
    try:
        if not receiver.poll(timeout):
            raise TimeoutError(f"{fn.__name__} client still running after {timeout:.0f}s")
        ok, value = receiver.recv()
    except EOFError:
        proc.join(5)
        raise RuntimeError(f"{fn.__name__} client died, exit code {proc.exitcode}") from None
    finally:
        proc.join(5)
        if proc.is_alive():
            proc.kill()
            proc.join(5)
    if not ok:
        raise RuntimeError(f"{fn.__name__} client failed:\n{value}")
    return value


def _client_main(conn: Connection, fn: Callable[..., dict[str, Any]], args: tuple[Any, ...]
                 ) -> None:
    try:
        conn.send((True, fn(*args)))
    except BaseException as e:
        conn.send((False, "".join(traceback.format_exception(e))))


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def machine() -> str:
    return (f"{os.cpu_count()} CPUs, {_cpu_model()}, Python {platform.python_version()} "
            f"({platform.python_implementation()}), {platform.system()} {platform.release()}")


def report(results: dict[str, dict[str, Any]]) -> str:
    head = (f"{'phase':<8} {'records':>9} {'MB/s':>8} {'MiB/s':>8} {'records/s':>10} "
            f"{'seconds':>8} {'broker CPU':>10} {'client CPU':>10}  floor")
    rows = [head, "-" * len(head)]
    for phase, r in results.items():
        secs = r["seconds"]
        mbps = r["bytes"] / secs / 1e6
        floor = FLOOR_MBPS[phase]
        verdict = f"{'ok' if mbps >= floor else 'BELOW'} (>= {floor:.0f} MB/s)"
        rows.append(
            f"{phase:<8} {r['records']:>9} {mbps:>8.1f} {r['bytes'] / secs / 2**20:>8.1f} "
            f"{r['records'] / secs:>10.0f} {secs:>8.2f} {100 * r['broker_cpu'] / secs:>9.0f}% "
            f"{100 * r['client_cpu'] / secs:>9.0f}%  {verdict}"
        )
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("name", choices=["produce", "consume", "all"])
    parser.add_argument("--records", type=int, default=1_000_000, help="records (1000000)")
    parser.add_argument("--record-size", type=int, default=1024, help="value bytes (1024)")
    parser.add_argument("--partitions", type=int, default=8, help="topic partitions (8)")
    parser.add_argument("--timeout", type=float, default=300.0,
                        help="seconds allowed per phase before it counts as failed (300)")
    parser.add_argument("--profile", type=Path, metavar="DIR",
                        help="sample the broker with py-spy; raw stacks go to DIR")
    args = parser.parse_args(argv)

    timed = {"produce": ["produce"], "consume": ["consume"], "all": ["produce", "consume"]}
    timed_phases = timed[args.name]
    if args.profile:
        args.profile.mkdir(parents=True, exist_ok=True)
    print(f"machine: {machine()}")
    print(f"workload: {args.records} records x {args.record_size} B = "
          f"{args.records * args.record_size / 1e6:.0f} MB, {args.partitions} partitions, "
          f"acks={clients.PRODUCER_CONFIG['acks']}, linger.ms="
          f"{clients.PRODUCER_CONFIG['linger.ms']}, batch.size="
          f"{clients.PRODUCER_CONFIG['batch.size']}", flush=True)
    results: dict[str, dict[str, Any]] = {}
    profiles: dict[str, Path] = {}
    with BenchBroker(args.partitions) as broker:
        for phase in ["produce", "consume"] if "consume" in timed_phases else ["produce"]:
            client_args = (broker.bootstrap, TOPIC, args.partitions, args.records,
                           args.record_size, args.timeout)
            measured = phase in timed_phases
            label = phase if measured else f"{phase} (preload, not reported)"
            print(f"running {label} ...", flush=True)
            cpu0 = broker.cpu_seconds()
            if measured and args.profile:
                profiles[phase] = args.profile / f"broker-{phase}.txt"
                with PySpy(broker.pid, profiles[phase]):
                    result = _run_client(PHASES[phase], client_args, args.timeout + 30)
            else:
                result = _run_client(PHASES[phase], client_args, args.timeout + 30)
            result["broker_cpu"] = broker.cpu_seconds() - cpu0
            if not broker.alive():
                raise RuntimeError("the broker died:\n" + broker.stderr_tail())
            if measured:
                results[phase] = result
    print()
    print(report(results))
    print(f"\n{time.strftime('%Y-%m-%d %H:%M %Z')}; CPU % is of one core "
          f"(200% = both cores of a 2-core machine)")
    python = os.path.relpath(sys.executable) if not sys.executable.startswith("..") else "python"
    print("reproduce: " + shlex.join([python, "-m", "bench", *sys.argv[1:]]))
    for phase, raw in profiles.items():
        print(f"\nbroker profile, {phase} (py-spy, busy samples only; raw: {raw}):")
        print(summarise(raw))
    return 0


if __name__ == "__main__":
    sys.exit(main())
