"""``python -m bench compare``: kafkube side by side with Apache Kafka, same machine, same
clients, same workloads (issue #5).

The two systems never run at the same time: Apache Kafka (KRaft, combined broker+controller
nodes, jars from Maven Central; see ``bench.kafka``) runs every workload first, on a fresh
1-node and then a fresh 3-node cluster, each stopped before the next starts; then kafkube does
the same (``bench.cluster.BenchCluster``, fresh data dirs). That is one round; ``--rounds``
(3) interleave them, Kafka, kafkube, Kafka, kafkube..., so a slow spell of the machine hits
both, and every figure is reported as its median with the range over the rounds, the ratio
as the median of the per-round ratios. Both get the broker settings of
``SHARED_BROKER_CONFIG``; each throughput figure comes with the brokers' CPU seconds per GB.

Workloads (1 KiB values, 16 partitions, topics created up front through the admin API):

1. produce, ``acks=1``, RF 1, 1 broker;
2. produce, ``acks=all``, RF 3, ``min.insync.replicas=2``, 3 brokers;
3. consume a large topic from its start (``--consume-size``, written untimed just before);
4. end-to-end latency at a fixed rate (``--rate``), OMB-style: the producer writes its send
   time into each record, the consumer (another process) subtracts it from its receive time;
   and Kafka's own ``EndToEndLatency`` (java), one record in flight at a time;
5. a consumer group of 3 processes catching up on the topic of 3.

Clients: confluent-kafka (librdkafka), each in its own process (``bench.clients``), for all
five; Kafka's own ``ProducerPerformance``/``ConsumerPerformance`` (kafka-tools, same jars) for
1-3. The ratio column is kafkube / Kafka: above 1 is better for throughput, below 1 is better
for latency and times.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from bench import summary
from bench.arguments import comma_list, parse_setting, parse_size
from bench.compare_report import publish, summary_figures
from bench.compare_workloads import (
    LATENCY_WARMUP_S,
    group,
    java_consume,
    java_end_to_end,
    java_produce,
    latency,
    rdkafka_consume,
    rdkafka_produce,
    throughput,
)
from bench.figures import Figure, table
from bench.run_info import commit, load_average, machine
from bench.systems import PARTITIONS, SYSTEMS, create_topic, running
from kafkube.harness import kafka_jars

CPU_PER_GB = "broker CPU s/GB"
WORKLOAD_NAMES = {
    1: "produce acks=1, RF 1, 1 broker",
    2: "produce acks=all, RF 3, minISR 2, 3 brokers",
    3: "consume from offset 0",
    4: "end-to-end latency",
    5: "consumer group of {members} catching up",
}


def run_system(system: str, args: argparse.Namespace, log: Callable[[str], None],
               round_: int = 0) -> list[Figure]:
    """Every selected workload against ``system``: a 1-node session, then a 3-node one."""
    figures: list[Figure] = []
    rdkafka = "rdkafka" in args.clients
    size = args.record_size

    def add(workload: int, client: str, metric: str, better: str, value: float,
            raw: dict[str, Any], name: str | None = None) -> None:
        label = name or WORKLOAD_NAMES[workload].format(members=args.members)
        figures.append(Figure(workload, label, client, metric, better, system,
                              round(value, 3), raw, round_))
        log(f"  {system:<8} {workload} {label} [{client}]: {value:,.2f} {metric}")
        if metric == "MB/s" and raw.get("bytes"):
            # What survives noise on 2 shared cores: broker CPU per byte moved.
            per_gb = raw["broker_cpu_s"] / (raw["bytes"] / 1e9)
            figures.append(Figure(workload, label, client, CPU_PER_GB, "lower", system,
                                  round(per_gb, 3), raw, round_))

    single = {1, 3, 4, 5} & set(args.workloads)
    triple = {2} & set(args.workloads)
    if args.latency_brokers == 3 and 4 in single:
        single.discard(4)
        triple.add(4)
    for brokers, todo in ((1, single), (3, triple)):
        if not todo:
            continue
        log(f"{system}: starting {brokers} broker{'s' * (brokers > 1)} ...")
        t0 = time.monotonic()
        with running(system, brokers, args, args.libs) as env:
            log(f"{system}: {brokers} up on {env.bootstrap} in {time.monotonic() - t0:.1f} s")
            rf, acks = (1, "1") if brokers == 1 else (3, "all")
            topic_config = {} if brokers == 1 else {"min.insync.replicas": "2"}
            large_written = False
            if args.warmup_records:
                # The same untimed warm-up for both systems: it JIT-compiles Kafka's produce
                # and fetch paths, which a cold JVM otherwise does during the first timed run.
                log(f"  {system:<8} warm-up: {args.warmup_records:,} records produced and "
                    "consumed, untimed ...")
                create_topic(env, "warmup", rf, topic_config)
                rdkafka_produce(env, "warmup", args.warmup_records, args, acks)
                rdkafka_consume(env, "warmup", args.warmup_records, args)
            for workload in sorted(todo):
                if workload in (1, 2):
                    for client, fn in (("rdkafka", rdkafka_produce), ("java", java_produce)):
                        if client not in args.clients:
                            continue
                        topic = f"w{workload}-{client}"
                        create_topic(env, topic, rf, topic_config)
                        raw = fn(env, topic, args.records, args, acks)
                        add(workload, client, "MB/s", "higher", throughput(raw), raw)
                elif workload in (3, 5) and not large_written:
                    records = args.consume_size // size
                    create_topic(env, "w3-large", rf, topic_config)
                    large_written = True
                    log(f"  {system:<8} writing {records:,} records "
                        f"({records * size / 2**30:.2f} GiB) to w3-large, untimed ...")
                    rdkafka_produce(env, "w3-large", records, args, acks)
                if workload == 3:
                    records = args.consume_size // size
                    for client, fn in (("rdkafka", rdkafka_consume), ("java", java_consume)):
                        if client not in args.clients:
                            continue
                        raw = fn(env, "w3-large", records, args)
                        add(3, client, "MB/s", "higher", throughput(raw), raw)
                elif workload == 5 and rdkafka:
                    raw = group(env, "w3-large", args.consume_size // size, args)
                    add(5, "rdkafka", "MB/s", "higher", throughput(raw), raw)
                    add(5, "rdkafka", "s, subscribe to last record", "lower",
                        raw["subscribe_to_last_s"], raw)
                elif workload == 4:
                    if args.latency_warmup_seconds:  # librdkafka processes, whatever --clients
                        # The throughput warm-up's big batches leave the small-request path
                        # cold: Kafka's first ~30 s of this workload ran at p99 1.3-2 s, its
                        # next at 26-42 ms (JIT). So both systems first run it untimed.
                        log(f"  {system:<8} latency warm-up: {args.latency_warmup_seconds:g} s "
                            f"at {max(args.rate):g} MB/s, untimed ...")
                        create_topic(env, "w4-warmup", rf, topic_config)
                        latency(env, "w4-warmup", args, acks, max(args.rate),
                                args.latency_warmup_seconds)
                    if "java" in args.clients:
                        topic = "w4-end-to-end"
                        create_topic(env, topic, rf, topic_config, partitions=1)
                        raw = java_end_to_end(env, topic, args.end_to_end_records, args, acks)
                        name = (f"e2e latency, one record in flight (EndToEndLatency), "
                                f"acks={acks}, {brokers} broker{'s' * (brokers > 1)}")
                        for q in ("p50", "p99", "p999"):
                            add(4, "java", f"{q} ms", "lower", raw[f"{q}_ms"], raw, name)
                    for i, mbps in enumerate(args.rate if rdkafka else ()):
                        topic = f"w4-latency-{i}"
                        create_topic(env, topic, rf, topic_config)
                        raw = latency(env, topic, args, acks, mbps)
                        name = (f"e2e latency at {mbps:g} MB/s, acks={acks}, "
                                f"{brokers} broker{'s' * (brokers > 1)}")
                        for q in ("p50", "p99", "p999"):
                            add(4, "rdkafka", f"{q} ms", "lower", raw[f"{q}_ms"], raw, name)
        log(f"{system}: {brokers} stopped")
    return figures


def _command(argv: list[str]) -> str:
    python = os.path.relpath(sys.executable, Path.cwd())
    python = sys.executable if python.startswith("..") else python
    return shlex.join([python, "-m", "bench", "compare", *argv])


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench compare", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=1_000_000,
                        help="records per produce run, workloads 1 and 2 (1000000)")
    parser.add_argument("--record-size", type=int, default=1024, help="value bytes (1024)")
    parser.add_argument("--consume-size", type=parse_size, default="2GiB",
                        help="size of the topic workloads 3 and 5 read (2GiB; the issue's "
                             "figure is 5GiB)")
    parser.add_argument("--warmup-records", type=int, default=500_000,
                        help="records produced and consumed untimed on every fresh cluster "
                             "before its first workload (500000; 0 for none)")
    parser.add_argument("--rate", type=comma_list(None, float), default=[5.0, 20.0],
                        help="workload 4's fixed produce rates, MB/s, one run each (5,20)")
    parser.add_argument("--latency-seconds", type=float, default=20.0,
                        help="workload 4's measured span per rate, after a 5 s warm-up (20)")
    parser.add_argument("--latency-warmup-seconds", type=float, default=30.0,
                        help="workload 4 first runs untimed this long at the highest --rate, "
                             "on both systems (30; JIT of the small-request path)")
    parser.add_argument("--end-to-end-records", type=int, default=10_000,
                        help="records Kafka's EndToEndLatency sends one at a time, workload 4 "
                             "with the java client (10000)")
    parser.add_argument("--latency-brokers", type=int, choices=(1, 3), default=1,
                        help="workload 4 on 1 broker (acks=1, RF 1) or on 3 (acks=all, RF 3, "
                             "minISR 2) (1)")
    parser.add_argument("--rounds", type=int, default=3,
                        help="interleaved rounds (Kafka, kafkube, Kafka, kafkube, ...), each "
                             "on fresh clusters; the table shows medians and ranges (3)")
    parser.add_argument("--members", type=int, default=3,
                        help="consumer processes in workload 5's group (3)")
    parser.add_argument("--workloads", type=comma_list(None, int), default=[1, 2, 3, 4, 5],
                        help="comma-separated subset of 1-5 (all)")
    parser.add_argument("--systems", type=comma_list(SYSTEMS), default=list(SYSTEMS),
                        help="kafka,kafkube (both; one alone prints no ratios)")
    parser.add_argument("--clients", type=comma_list(("rdkafka", "java")),
                        default=["rdkafka", "java"], help="rdkafka,java (both)")
    parser.add_argument("--kafka-heap", default="1G",
                        help="each Kafka node's -Xmx/-Xms (1G, kafka-server-start.sh's)")
    parser.add_argument("--kafka-config", type=parse_setting, action="append", metavar="KEY=VALUE",
                        help="a server.properties setting for Kafka alone, over "
                             "SHARED_BROKER_CONFIG and the template (repeatable; e.g. "
                             "num.io.threads=2 to try Kafka's threads on 2 cores)")
    parser.add_argument("--kafkube-config", type=parse_setting, action="append",
                        metavar="KEY=VALUE",
                        help="a broker setting for kafkube alone, over SHARED_BROKER_CONFIG "
                             "(repeatable; e.g. socket.send.buffer.bytes=-1 for an A/B)")
    parser.add_argument("--timeout", type=float, default=300.0,
                        help="seconds allowed per client run (300)")
    parser.add_argument("--record", action="store_true",
                        help="write every figure both systems measured (medians over the "
                             "rounds) into docs/performance.json")
    parser.add_argument("--no-docs", action="store_true",
                        help="do not write docs/performance.md and docs/kafka-compare.png")
    parser.add_argument("--json", type=Path, metavar="FILE", help="also write every figure here")
    parser.add_argument("--keep", action="store_true",
                        help="keep the clusters' data dirs and logs (kept anyway on failure)")
    parser.add_argument("--render", type=Path, metavar="FILE",
                        help="run nothing: print the table of a --json FILE and write the "
                             "docs and chart from it")
    args = parser.parse_args(argv)
    if args.render:
        publish(json.loads(args.render.read_text()), write=not args.no_docs)
        return 0
    if not set(args.workloads) <= {1, 2, 3, 4, 5}:
        parser.error("--workloads: 1 to 5")
    if args.rounds < 1:
        parser.error("--rounds: at least 1")
    if args.record_size < 16:
        parser.error("--record-size: at least 16 (workload 4 stamps 16 bytes into each value)")
    if args.consume_size < args.record_size:
        parser.error("--consume-size: smaller than one record")

    # SIGTERM (e.g. from a CI timeout) unwinds like Ctrl-C, through every finally block.
    def on_term(_sig: int, _frame: Any) -> None:
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, on_term)

    wall0 = time.monotonic()
    started = time.strftime("%Y-%m-%d %H:%M %Z")

    def log(text: str) -> None:
        print(f"[{time.monotonic() - wall0:7.1f}s] {text}", flush=True)

    args.libs = None
    if "kafka" in args.systems or "java" in args.clients:
        log(f"Apache Kafka {kafka_jars.version()}: jars (bench/setup_kafka.sh, cached) ...")
        args.libs = kafka_jars.ensure_jars()
    size = args.record_size
    lat_acks = "acks=1, RF 1, 1 broker" if args.latency_brokers == 1 else \
        "acks=all, RF 3, minISR 2, 3 brokers"
    header = [
        f"{started}, commit {commit()}, `{_command(argv)}`",
        "",
        f"- machine: {machine()}; load average at start {load_average()}",
        f"- workloads: {PARTITIONS} partitions, {size} B values; 1-2: {args.records:,} records "
        f"({args.records * size / 1e9:.2f} GB) per run; 3 and 5: a "
        f"{args.consume_size / 2**30:.2f} GiB topic ({args.consume_size // size:,} records); "
        f"4: {' and '.join(f'{r:g}' for r in args.rate)} MB/s, each for "
        f"{LATENCY_WARMUP_S:g} s warm-up + "
        f"{args.latency_seconds:g} s, {lat_acks}, linger.ms=1, batch.size=131072",
        f"- {args.rounds} interleaved round(s) ({', '.join(args.systems)}, then again), each "
        "system on fresh clusters every round; the table gives each figure's median with its "
        "range over the rounds, and the median (range) of the per-round ratios",
        f"- every fresh cluster first produces and consumes {args.warmup_records:,} records, "
        f"untimed (JVM warm-up), and before workload 4 runs it {args.latency_warmup_seconds:g} "
        "s at the highest rate, untimed",
        f"- Apache Kafka {kafka_jars.version()}: KRaft, combined broker+controller nodes (3 voters "
        f"for the 3-broker runs), -Xmx{args.kafka_heap}"
        + "".join(f", {k}={v}" for k, v in args.kafka_config or ())
        + "; kafkube: `python -m kafkube broker`"
        + "".join(f", {k}={v}" for k, v in args.kafkube_config or ()),
    ]
    print("\n".join(line for line in header if line), flush=True)
    figures: list[Figure] = []
    failed: BaseException | None = None
    try:
        for round_ in range(args.rounds):
            for system in args.systems:
                log(f"round {round_ + 1} of {args.rounds}: {system}")
                figures += run_system(system, args, log, round_)
    except KeyboardInterrupt:
        print("interrupted: every broker started has been stopped", file=sys.stderr)
        return 130
    except Exception as e:  # still print (not publish) what was measured before it
        failed = e
        traceback.print_exc()
    took = time.monotonic() - wall0
    header.append(f"- the whole comparison took {took / 60:.1f} min; load average at end "
                  f"{load_average()}")
    result = {"started": started, "command": _command(argv), "header": header,
              "figures": [asdict(f) for f in figures]}
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
        print(f"figures: {args.json}")
    if failed is not None:
        print("\n" + table(figures) if figures else "", file=sys.stderr)
        print(f"FAILED after {took:.0f} s: {failed}", file=sys.stderr)
        return 1
    publish(result, write=not args.no_docs and len(args.systems) == 2)
    if args.record:
        summary.record(summary_figures(result))
    return 0
