"""``python -m bench {produce,consume,all,group,failover,replicated,compare,spark,
transactions,tls,rebalance,share}``: benchmarks.

produce/consume/all/group measure one broker's throughput against the issue's floor. Every
run starts a fresh broker on an empty temp dir (so earlier runs cannot warm or fill
anything), drives it from a separate client process, and stops it at the end.

failover (time a partition is unavailable after its leader is SIGKILLed) and replicated
(acks=all RF 3 produce throughput against acks=1 RF 1) run on a fresh 3-broker cluster.

compare runs the issue-5 workloads against Apache Kafka and kafkube, one after the other
(``python -m bench compare -h``); spark, the Spark job's read throughput from both
(``python -m bench spark -h``); transactions, transactional produce throughput in both
(``python -m bench transactions -h``); tls, produce and consume over TLS beside plaintext,
in both (``python -m bench tls -h``); rebalance, consumer group rebalances and the pauses
they cause, per group protocol, in both (``python -m bench rebalance -h``); share,
share-group (KIP-932) consume throughput with 1, 4 and 16 share consumers, in both
(``python -m bench share -h``); image-format, the cluster image's size and cost in each
format (``python -m bench image-format -h``); chaos, faults of
every kind on kind under an acks=all producer (``python -m bench chaos -h``); txn-chaos,
transactions checked under coordinator and leader faults on a local cluster
(``python -m bench txn-chaos -h``).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import shlex
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import clients, failover, replicated, requests
from bench.broker import BenchBroker
from bench.profile import PySpy, summarise
from kafkube.harness.procstat import machine_busy_seconds

TOPIC = "kafkube-bench"
# The floor on a 2-core machine, in MB/s (10^6 bytes).
FLOOR_MBPS = {"produce": 100.0, "consume": 300.0}
PHASES: dict[str, Callable[..., dict[str, Any]]] = {
    "produce": clients.produce, "consume": clients.consume,
}


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def _load() -> str:
    """The 1/5/15-minute load average: benchmarks on a busy machine are not comparable."""
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def machine() -> str:
    return (f"{os.cpu_count()} CPUs, {_cpu_model()}, Python {platform.python_version()} "
            f"({platform.python_implementation()}), {platform.system()} {platform.release()}")


def report(results: list[tuple[str, int, dict[str, Any]]]) -> str:
    head = (f"{'phase':<8} {'run':>3} {'records':>9} {'MB/s':>7} {'MiB/s':>7} {'records/s':>9} "
            f"{'seconds':>7}  {'broker':>6} {'client':>6} {'(py)':>5} {'machine':>7} "
            f"{'s/GB':>5}  floor")
    rows = [f"{'':57}|------ CPU, % of one core -----| broker", head, "-" * len(head)]
    for phase, run, r in results:
        secs = r["seconds"]
        mbps = r["bytes"] / secs / 1e6
        floor = FLOOR_MBPS[phase]
        cpu = [100 * r[k] / secs for k in ("broker_cpu", "client_cpu", "client_main_cpu")]
        rows.append(
            f"{phase:<8} {run:>3} {r['records']:>9} {mbps:>7.1f} {r['bytes'] / secs / 2**20:>7.1f} "
            f"{r['records'] / secs:>9.0f} {secs:>7.2f}  {cpu[0]:>5.0f}% {cpu[1]:>5.0f}% "
            f"{cpu[2]:>4.0f}% {100 * r['machine_busy']:>6.0f}% "
            f"{r['broker_cpu'] / (r['bytes'] / 1e9):>5.2f}  "
            f"{'ok' if mbps >= floor else 'BELOW'} (>= {floor:.0f} MB/s)"
        )
    for phase in FLOOR_MBPS:
        rates = sorted(r["bytes"] / r["seconds"] / 1e6 for p, _, r in results if p == phase)
        if len(rates) > 1:
            rows.append(f"{phase}: best {rates[-1]:.1f} MB/s, median "
                        f"{statistics.median(rates):.1f} MB/s over {len(rates)} runs")
    return "\n".join(rows)


def _run_phase(broker: BenchBroker, phase: str, client_args: tuple[Any, ...],
               profile: Path | None, timeout: float) -> dict[str, Any]:
    """One timed client run, with the broker's CPU use over the same span."""
    cpu0, busy0, wall0 = broker.cpu_seconds(), machine_busy_seconds(), time.monotonic()
    with PySpy(broker.pid, profile) if profile else contextlib.nullcontext():
        result = clients.run_in_process(PHASES[phase], client_args, timeout)
    result["broker_cpu"] = broker.cpu_seconds() - cpu0
    # Over the whole client process life (start-up included), so as a share of its wall time.
    result["machine_busy"] = (machine_busy_seconds() - busy0) / (time.monotonic() - wall0)
    if not broker.alive():
        raise RuntimeError("the broker died:\n" + broker.stderr_tail())
    return result


def run_group(broker: BenchBroker, members: int, records: int, timeout: float,
              extra: dict[str, str]) -> str:
    """A consumer group of ``members`` processes catching up on ``records`` records."""
    from concurrent.futures import ThreadPoolExecutor

    group = f"bench-{time.monotonic_ns()}"
    cpu0 = broker.cpu_seconds()
    with ThreadPoolExecutor(members) as pool:
        futures = [
            pool.submit(clients.run_in_process, clients.group_member,
                        (broker.bootstrap, TOPIC, group, timeout, extra), timeout + 30)
            for _ in range(members)
        ]
        results = [f.result() for f in futures]
    broker_cpu = broker.cpu_seconds() - cpu0
    total = sum(r["records"] for r in results)
    nbytes = sum(r["bytes"] for r in results)
    starts = [r["first"] for r in results if r["first"] is not None]
    span = max(r["last"] or 0 for r in results) - min(starts)
    whole = max(r["last"] or 0 for r in results) - min(r["joined"] for r in results)
    if total < records:
        raise RuntimeError(f"group read {total} of {records} records")
    lines = [
        f"group of {members}: {total} records read ({total - records} read twice after "
        f"rebalances), per member {[r['records'] for r in results]}",
        f"  from first to last record: {span:.2f} s, {total / span:,.0f} records/s, "
        f"{nbytes / span / 1e6:.1f} MB/s",
        f"  from subscribe to last record (joins and the broker's "
        f"group.initial.rebalance.delay.ms included): {whole:.2f} s, "
        f"{total / whole:,.0f} records/s",
        f"  broker CPU {broker_cpu:.2f} s",
    ]
    return "\n".join(lines)


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _props(parser: argparse.ArgumentParser, pairs: list[str]) -> dict[str, str]:
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            parser.error(f"expected KEY=VALUE, got {pair!r}")
        out[key] = value
    return out


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["compare"]:  # side by side with Apache Kafka; its own options
        from bench import compare

        return compare.main(argv[1:])
    if argv[:1] == ["spark"]:  # the Spark job's read throughput, beside Apache Kafka
        from bench import spark

        return spark.main(argv[1:])
    if argv[:1] == ["transactions"]:  # transactional produce, beside Apache Kafka
        from bench import transactions

        return transactions.main(argv[1:])
    if argv[:1] == ["rebalance"]:  # group rebalances and pauses, beside Apache Kafka
        from bench import rebalance

        return rebalance.main(argv[1:])
    if argv[:1] == ["share"]:  # share groups (queues) consume throughput, beside Kafka
        from bench import share

        return share.main(argv[1:])
    if argv[:1] == ["image-format"]:  # the cluster image's formats, their size and cost
        from bench import image_format

        return image_format.main(argv[1:])
    if argv[:1] == ["tls"]:  # what TLS costs, beside Apache Kafka with TLS
        from bench import tls

        return tls.main(argv[1:])
    if argv[:1] == ["scale-load"]:  # throughput and memory vs partitions and connections
        from bench.scale import load

        return load.main(argv[1:])
    if argv[:1] == ["open-logs"]:  # what opening a new partition costs the loop
        from bench import open_logs

        return open_logs.main(argv[1:])
    if argv[:1] == ["scale-recovery"]:  # recovery, metadata propagation, image vs scale
        from bench.scale import recovery_cli

        return recovery_cli.main(argv[1:])
    if argv[:1] == ["chaos"]:  # the long fault run on kind (issue 27); its own options
        from bench import chaos

        return chaos.main(argv[1:])
    if argv[:1] == ["txn-chaos"]:  # transactions under broker faults (issue 28)
        from bench import txn_chaos

        return txn_chaos.main(argv[1:])
    if argv[:1] == ["fuzz"]:  # structure-aware fuzzing of every API; its own options
        from bench import fuzz

        return fuzz.main(argv[1:])
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("name", choices=["produce", "consume", "all", "group", "failover",
                                         "replicated", "requests", "compare", "fuzz",
                                         "spark", "transactions", "tls"])
    parser.add_argument("--members", type=_positive, default=3,
                        help="consumer processes in the group, for 'group' (3)")
    parser.add_argument("--records", type=_positive, default=None,
                        help="records (3000000; 1000000 for 'replicated')")
    parser.add_argument("--record-size", type=_positive, default=1024, help="value bytes (1024)")
    parser.add_argument("--partitions", type=_positive, default=8, help="topic partitions (8)")
    parser.add_argument("--timeout", type=float, default=300.0,
                        help="seconds allowed per phase before it counts as failed (300)")
    parser.add_argument("--repeat", type=_positive, default=1,
                        help="run everything N times, each on a fresh broker (1)")
    parser.add_argument("--producer-prop", action="append", default=[], metavar="KEY=VALUE",
                        help="librdkafka producer setting, overriding ours (repeatable)")
    parser.add_argument("--consumer-prop", action="append", default=[], metavar="KEY=VALUE",
                        help="librdkafka consumer setting, overriding ours (repeatable)")
    parser.add_argument("--profile", type=Path, metavar="DIR",
                        help="sample the broker with py-spy; raw stacks go to DIR")
    parser.add_argument("--window", type=_positive, default=8,
                        help="'requests': requests in flight on the connection (8)")
    parser.add_argument("--kills", type=_positive, default=20,
                        help="leader kills, for 'failover' (20)")
    parser.add_argument("--seed", type=int, default=None,
                        help="'failover': seed of the random pause before each kill (random)")
    parser.add_argument("--idempotent", action="store_true",
                        help="'failover': the probe producer uses enable.idempotence=true")
    parser.add_argument("--kubernetes", action="store_true",
                        help="'failover': brokers as pods of deploy/kafkube.yaml on a kind "
                             "cluster of its own (or KAFKUBE_E2E_KUBECONFIG's), the leader's "
                             "process SIGKILLed from its node")
    parser.add_argument("--delete-pods", action="store_true",
                        help="'failover --kubernetes': delete the leader's pod with "
                             "--grace-period=0 --force instead")
    parser.add_argument("--keep", action="store_true",
                        help="'failover'/'replicated': keep the cluster's data dir and broker "
                             "output (always kept when the run fails)")
    args = parser.parse_args(argv)
    if args.name in ("failover", "replicated"):
        return _cluster_main(parser, args)
    if args.name == "requests":
        return _requests_main(args)
    args.records = args.records or 3_000_000
    extra = {"produce": _props(parser, args.producer_prop),
             "consume": _props(parser, args.consumer_prop)}

    timed = {"produce": ["produce"], "consume": ["consume"], "all": ["produce", "consume"],
             "group": []}
    timed_phases = timed[args.name]
    if args.profile:
        args.profile.mkdir(parents=True, exist_ok=True)
    print(f"machine: {machine()}")
    print(f"load average at start: {_load()}" + (
        "  (other work is running: expect lower, noisier figures)"
        if os.getloadavg()[0] > 0.5 else ""))
    print(f"workload: {args.records} records x {args.record_size} B = "
          f"{args.records * args.record_size / 1e6:.0f} MB, {args.partitions} partitions, "
          f"acks={clients.PRODUCER_CONFIG['acks']}, linger.ms="
          f"{clients.PRODUCER_CONFIG['linger.ms']}, batch.size="
          f"{clients.PRODUCER_CONFIG['batch.size']}", flush=True)
    for phase, props in extra.items():
        if props:
            print(f"{phase} client overrides: {props}")
    results: list[tuple[str, int, dict[str, Any]]] = []
    profiles: list[Path] = []
    for run in range(1, args.repeat + 1):
        # A fresh broker per run: a log (and page cache) grown by earlier runs made later
        # runs up to 2x slower here, from the kernel's write path, not from the broker.
        with BenchBroker(args.partitions) as broker:
            for phase in ("produce", "consume"):
                measured = phase in timed_phases
                if not measured and phase == "consume":
                    continue  # the group phase reads what produce wrote
                # consume alone still needs data: produce it first, untimed.
                print(f"run {run}: {phase}{'' if measured else ' (preload, untimed)'} ...",
                      flush=True)
                client_args = (broker.bootstrap, TOPIC, args.partitions, args.records,
                               args.record_size, args.timeout, extra[phase])
                raw = args.profile / f"broker-{phase}-{run}.txt" if args.profile else None
                result = _run_phase(broker, phase, client_args, raw if measured else None,
                                    args.timeout + 30)
                if measured:
                    results.append((phase, run, result))
                    profiles += [raw] if raw else []
            if args.name == "group":
                print(f"run {run}: group of {args.members} ...", flush=True)
                print(run_group(broker, args.members, args.records, args.timeout,
                                extra["consume"]))
    if results:
        print()
        print(report(results))
    print(f"\n{time.strftime('%Y-%m-%d %H:%M %Z')}; load average at end: {_load()}")
    print("client: all its threads (librdkafka's too); (py): its Python thread alone\n"
          f"machine: all {os.cpu_count()} cores, busy with anything (kernel, other jobs)\n"
          "s/GB: broker CPU seconds per 10^9 bytes, the figure least disturbed by other work")
    print("reproduce: " + _command())
    for raw in profiles:
        print(f"\nbroker profile, {raw.stem} (py-spy, busy samples only; raw stacks: {raw}):")
        print(summarise(raw))
    return 0


def _command() -> str:
    python = os.path.relpath(sys.executable)
    python = sys.executable if python.startswith("..") else python
    return shlex.join([python, "-m", "bench", *sys.argv[1:]])


def _requests_main(args: argparse.Namespace) -> int:
    """The per-request CPU cost of small produce and fetch requests (``bench.requests``)."""
    count = args.records or 20_000
    print(f"machine: {machine()}")
    print(f"load average at start: {_load()}")
    print(f"workload: {count:,} Produce v9 (acks=1); then {count:,} pairs of a Produce and a "
          f"Fetch v12 of what it wrote (tail); each request holds one {args.record_size} B "
          f"record batch for each of {args.partitions} partitions; {args.window} in flight; "
          "a fresh broker per run", flush=True)
    if args.profile:
        args.profile.mkdir(parents=True, exist_ok=True)
    lines = requests.run(count, args.partitions, args.record_size, args.window, args.repeat,
                         args.timeout, args.profile)
    print("\n".join(lines))
    print("broker µs/req: the broker's CPU time (user+system) per request; "
          "µs/part: per partition in it")
    print(f"{time.strftime('%Y-%m-%d %H:%M %Z')}; load average at end: {_load()}")
    print("reproduce: " + _command())
    return 0


def _cluster_main(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    """The two cluster benchmarks: failover and replicated."""
    print(f"machine: {machine()}")
    print(f"load average at start: {_load()}" + (
        "  (other work is running: expect lower, noisier figures)"
        if os.getloadavg()[0] > 0.5 else ""), flush=True)
    code = 0
    if args.name == "failover" and args.kubernetes:
        from bench import failover_kubernetes

        how = ("deletions (grace 0, forced) of the pod" if args.delete_pods
               else "SIGKILLs, from its node, of the process")
        print(f"workload: {args.kills} {how} leading a 1-partition topic, RF 3, "
              "min.insync.replicas=2, 3 brokers of deploy/kafkube.yaml on kind", flush=True)
        code, lines = failover_kubernetes.run(args.kills, args.seed, args.delete_pods,
                                              _props(parser, args.producer_prop))
    elif args.name == "failover":
        print(f"workload: {args.kills} SIGKILLs of the leader of a 1-partition topic, RF 3, "
              "min.insync.replicas=2, 3 brokers with default settings "
              "(broker.session.timeout.ms=9000, broker.heartbeat.interval.ms=2000)",
              flush=True)
        code, lines = failover.run(args.kills, args.idempotent, args.keep, args.seed)
    else:
        records = args.records or 1_000_000
        extra = _props(parser, args.producer_prop)
        print(f"workload: {records} records x {args.record_size} B = "
              f"{records * args.record_size / 1e6:.0f} MB per run, {args.partitions} "
              f"partitions, 3 brokers with default settings; producer linger.ms="
              f"{clients.PRODUCER_CONFIG['linger.ms']}, batch.size="
              f"{clients.PRODUCER_CONFIG['batch.size']}"
              + (f", overrides {extra}" if extra else ""), flush=True)
        lines = replicated.run(records, args.record_size, args.partitions, args.repeat,
                               args.timeout, extra, args.keep)
    print("\n".join(lines))
    print(f"\n{time.strftime('%Y-%m-%d %H:%M %Z')}; load average at end: {_load()}")
    if args.name == "replicated":
        print("brokers: the 3 broker processes together (each: broker 0/1/2); client: the "
              "producer process, all threads\ns/GB: all brokers' CPU seconds per 10^9 bytes "
              "produced")
    print("reproduce: " + _command())
    return code


if __name__ == "__main__":
    sys.exit(main())
