"""``python -m bench scale-load``: how throughput, broker CPU per byte and broker memory grow
with the number of partitions, of producer connections and of consumer connections,
kafkube beside Apache Kafka (issue 17's and issue 34's scale curves).

Both systems run the way ``python -m bench compare`` runs them (``bench.systems.running``:
Kafka KRaft from the cached jars, kafkube through ``bench.cluster.BenchCluster``, the same
``SHARED_BROKER_CONFIG``), one broker, never at the same time. Every point of a curve gets a
fresh broker, so memory measured at one point is not left over from the one before; each
fresh broker first produces and consumes ``--warmup-records`` untimed on a 16-partition
topic (Kafka's JIT), then:

1. **partitions** (1, 100, 1,000, 10,000): CreateTopics of that many partitions (RF 1),
   timed until three metadata answers in a row show every partition led, and until one
   record written to each partition is acknowledged (Kafka answers Metadata with leaders
   before its broker has created their logs; a producer waits for both); the broker's RSS
   idle before and after; then ``--records`` 1 KiB values produced round-robin over the
   partitions (librdkafka, acks=1, ``bench.clients`` settings), MB/s, broker CPU s/GB and
   peak RSS, sampled every 100 ms in a thread; then all the records consumed from offset 0.
   Each phase also notes which broker threads spent its CPU (user and system seconds per
   thread name, from /proc), to tell request handling from JIT, GC or the kernel.
2. **connections** (1, 10, 50, 200): that many librdkafka ``Producer`` instances, spread over
   ``--processes`` client processes (2 cores cannot host 200), writing to a 16-partition
   topic: first flat out (``--records`` between them; aggregate MB/s, broker CPU s/GB), then
   at a fixed total ``--rate`` for ``--rate-seconds`` (broker CPU s/GB at equal load, p99 of
   librdkafka's per-message ack latency, produce() to delivery report); broker RSS before
   and at its peak, and the broker's established TCP connections (from /proc/net/tcp).
3. **consumers** (1, 10, 200, 1,000, 2,000; issue 34): that many librdkafka ``Consumer``
   instances over ``--processes`` processes, the i-th assigned partition i % 16 of a fresh
   16-partition topic, librdkafka's fetch defaults (a Fetch held 500 ms when there is
   nothing): the broker's CPU (share of a core) over ``--idle-seconds``, ``--idle-settle``
   after the last one connected, with every consumer long-polling an empty partition;
   then while one producer writes ``--consumer-rate`` records/s for ``--rate-seconds``
   that every consumer of a partition reads (a fan-out of x/16): CPU, bytes delivered,
   and p99 from produce() to arrival (a consumer thread blocked in poll(), CreateTime
   against the clock; ms resolution); RSS and connections
   as above (``bench/scale/consumers.py``).

A figure a system cannot reach within its timeout is recorded as what happened ("timed out
after 300 s"), and the run goes on. RSS is VmRSS of the broker process and its children.
"""


from __future__ import annotations

import argparse
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from bench import summary
from bench.arguments import comma_list
from bench.compare_workloads import rdkafka_consume, rdkafka_produce
from bench.pinning import pin_broker, pin_clients
from bench.run_info import commit, load_average, machine
from bench.scale import load_report, report
from bench.scale.connections import measure_connections
from bench.scale.consumers import measure_consumers
from bench.scale.load_points import CURVES, METRICS, SYSTEMS, Point, failure_text, merge_rounds
from bench.scale.load_report import SECTION, publish
from bench.scale.partitions import measure_partitions
from bench.scale.sampling import IDLE_S
from bench.systems import PARTITIONS, Running, create_topic, running
from kafkube.harness import kafka_jars

DEFAULT_POINTS = {"partitions": [1, 100, 1000, 10000], "connections": [1, 10, 50, 200],
                  "consumers": [1, 10, 200, 1000, 2000]}
MEASURE = {"partitions": measure_partitions, "connections": measure_connections,
           "consumers": measure_consumers}


def warm_up(env: Running, args: argparse.Namespace) -> None:
    """The same untimed produce and consume on both systems (as bench.compare does), so no
    timed phase pays for Kafka's JIT."""
    if args.warmup_records:
        create_topic(env, "warmup", 1, {})
        rdkafka_produce(env, "warmup", args.warmup_records, args, "1")
        rdkafka_consume(env, "warmup", args.warmup_records, args)


def measure_point(curve: str, x: int, system: str, args: argparse.Namespace,
                  log: Callable[[str], None]) -> Point:
    """One point on a fresh broker; whatever fails is recorded in the point, not raised."""
    point = Point(curve, x, system)
    t0 = time.monotonic()
    try:
        with running(system, 1, args, args.libs) as env:
            if args.pin:
                pin_broker(env.pids())
            log(f"{system}: up on {env.bootstrap} in {time.monotonic() - t0:.1f} s "
                f"({curve} = {x:,})")
            warm_up(env, args)
            MEASURE[curve](env, point, args, log)
    except Exception as e:
        why = failure_text(e, args.timeout)
        traceback.print_exc()
        for metric in METRICS[curve]:
            if metric.key not in point.values:
                point.failed.setdefault(metric.key, why)
        point.raw["error"] = str(e)[-2000:]
    point.raw["wall_s"] = round(time.monotonic() - t0, 1)
    return point


def parse(argv: list[str]) -> argparse.Namespace:
    """The options; ``--points`` stands for the one chosen curve's own option."""
    ints = comma_list(None, int)
    parser = report.new_parser("scale-load", __doc__, CURVES,
                               "partitions,connections,consumers (all)",
                               "kafka,kafkube (both; one alone gives no ratios)")
    parser.add_argument("--points", type=ints,
                        help="the x values of the one curve in --curves (partitions: "
                             "1,100,1000,10000; connections: 1,10,50,200; consumers: "
                             "1,10,200,1000,2000)")
    parser.add_argument("--partition-points", type=ints, default=DEFAULT_POINTS["partitions"],
                        help="partitions per topic, one point each (1,100,1000,10000)")
    parser.add_argument("--connection-points", type=ints,
                        default=DEFAULT_POINTS["connections"],
                        help="producer connections, one point each (1,10,50,200)")
    parser.add_argument("--consumer-points", type=ints, default=DEFAULT_POINTS["consumers"],
                        help="consumer connections, one point each (1,10,200,1000,2000)")
    parser.add_argument("--records", type=int, default=300_000,
                        help="records per produce (and consume) run (300000)")
    parser.add_argument("--record-size", type=int, default=1024, help="value bytes (1024)")
    parser.add_argument("--warmup-records", type=int, default=100_000,
                        help="untimed produce+consume on every fresh broker (100000; 0: none)")
    parser.add_argument("--rate", type=float, default=10.0,
                        help="connections: the fixed total rate of the second phase, MB/s "
                             "(10; 0 skips it)")
    parser.add_argument("--rate-seconds", type=float, default=10.0,
                        help="connections: how long the fixed-rate phase sends (10)")
    parser.add_argument("--consumer-rate", type=float, default=160.0,
                        help="consumers: records/s written while they read, 10 a partition "
                             "(160)")
    parser.add_argument("--idle-settle", type=float, default=10.0,
                        help="consumers: seconds between the last consumer's connection "
                             "and the idle phase's window (10)")
    parser.add_argument("--idle-seconds", type=float, default=10.0,
                        help="consumers: how long the idle phase is measured (10)")
    parser.add_argument("--processes", type=int, default=4,
                        help="connections, consumers: client processes the clients are "
                             "spread over (4)")
    parser.add_argument("--timeout", type=float, default=300.0,
                        help="seconds allowed per client run (300)")
    parser.add_argument("--create-timeout", type=float, default=300.0,
                        help="seconds allowed for a topic to be created and led (300)")
    parser.add_argument("--rounds", type=int, default=1,
                        help="repeat the whole plan, interleaved; each figure is the median "
                             "over the rounds (1)")
    parser.add_argument("--kafka-heap", default="1G", help="Kafka's -Xmx/-Xms (1G)")
    report.add_output_options(parser, SECTION, "figure")
    parser.add_argument("--profile", type=Path, metavar="DIR",
                        help="py-spy the kafkube broker during each phase; raw stacks to DIR")
    parser.add_argument("--keep", action="store_true", help="keep the brokers' data dirs")
    parser.add_argument("--pin", action="store_true",
                        help="the broker (every thread) on CPU 1, this process and every "
                             "client on CPU 0, for both systems (bench/pinning.py)")
    parser.add_argument("--record", action="store_true",
                        help="write each figure's largest point with both systems into "
                             "docs/performance.json")
    args = parser.parse_args(argv)
    if args.points is not None:
        if len(args.curves) != 1:
            parser.error("--points needs exactly one curve in --curves")
        setattr(args, f"{args.curves[0][:-1]}_points", args.points)
    if min(args.processes, args.records, args.record_size, args.rounds) < 1:
        parser.error("--processes, --records, --record-size and --rounds: at least 1")
    return args


def plan(args: argparse.Namespace) -> list[tuple[str, int, str]]:
    """(curve, x, system) in run order: per point, the systems one after the other, so a
    slow spell of the machine lands on both sides of a ratio; ``--rounds`` repeats it all."""
    points = {"partitions": args.partition_points, "connections": args.connection_points,
              "consumers": args.consumer_points}
    return [(curve, x, system) for _ in range(args.rounds) for curve in args.curves
            for x in points[curve] for system in args.systems]


def notes(args: argparse.Namespace) -> list[str]:
    size = args.record_size
    return [
        f"one broker per system, a fresh one for every point, {args.warmup_records:,} records "
        f"produced and consumed untimed first; `bench.systems.SHARED_BROKER_CONFIG`; "
        f"Apache Kafka {kafka_jars.version()} KRaft (combined node, -Xmx{args.kafka_heap}), "
        "kafkube `python -m kafkube broker`",
        f"partitions: topic of x partitions (RF 1), {args.records:,} records of {size} B "
        f"({args.records * size / 1e9:.2f} GB) produced round-robin (librdkafka, acks=1, "
        "linger.ms=5, batch.size=1 MiB), then consumed from offset 0 (with one more record "
        "per partition, below); create: from CreateTopics until 3 metadata answers in a row "
        "show every partition led, and that plus the time a producer then takes to have one "
        "record acknowledged on every partition (Kafka shows partitions led before their "
        "logs exist)",
        f"connections: x librdkafka Producers over {args.processes} processes (fewer when x "
        f"is smaller), a {PARTITIONS}-partition topic; flat out: {args.records:,} records; "
        f"then {args.rate:g} MB/s for {args.rate_seconds:g} s (p99 of produce() to delivery "
        "report); TCP connections: established ones on the broker's port",
        f"consumers: x librdkafka Consumers over {args.processes} processes, the i-th "
        f"assigned partition i % {PARTITIONS} (librdkafka's fetch defaults: fetch.wait.max.ms "
        f"500); idle: {args.idle_seconds:g} s with nothing to read, from "
        f"{args.idle_settle:g} s after the last consumer connected; then "
        f"{args.consumer_rate:g} records/s for {args.rate_seconds:g} s, each read by every "
        "consumer of its partition (p99 of produce() to arrival); CPU as a share of one core",
        "RSS: VmRSS of the broker process (and children) sampled every 100 ms; idle figures "
        f"are the median of {IDLE_S:g} s; CPU s/GB: broker CPU seconds per 10^9 B of values",
        *(["pinned (--pin): every broker thread on CPU 1, the benchmark and its clients on "
           "CPU 0"] if args.pin else []),
    ]


def main(argv: list[str]) -> int:
    """Every (curve, point, system) of the plan, each on a fresh broker; a failed point is
    recorded and the run goes on, so one system's wall at 10,000 partitions still leaves
    the rest of the curves."""
    args = parse(argv)
    if report.render(args, publish):
        return 0
    log = report.start_run()
    wall0 = time.monotonic()

    args.libs = kafka_jars.ensure_jars() if "kafka" in args.systems else None
    if args.pin:
        pin_clients()
    settings = {"rate": args.rate, "records": args.records, "record_size": args.record_size,
                "pinned": args.pin, "consumer_rate": args.consumer_rate}
    result: dict[str, Any] = {
        "started": time.strftime("%Y-%m-%d %H:%M %Z"), "commit": commit(),
        "command": report.command_line("scale-load", argv), "machine": machine(),
        "settings": settings, "notes": notes(args), "points": []}
    log(f"machine: {result['machine']}; load average {load_average()}")
    try:
        for curve, x, system in plan(args):
            log(f"{curve} = {x:,}: {system} ...")
            result["points"].append(asdict(measure_point(curve, x, system, args, log)))
    except KeyboardInterrupt:
        print("interrupted: every broker started has been stopped", file=sys.stderr)
        return 130
    result["notes"].append(f"the run took {(time.monotonic() - wall0) / 60:.1f} min; load "
                           f"average at end {load_average()}")
    if args.rounds > 1:
        result["points"] = [asdict(p) for p in merge_rounds(
            [Point(**p) for p in result["points"]])]
        result["notes"].append(f"every figure is the median of {args.rounds} interleaved "
                               "rounds (each round's figures in the JSON)")
    report.save_json(args, result, "figures")
    publish(result, write=not args.no_docs and len(args.systems) == len(SYSTEMS))
    if args.record:
        summary.record(load_report.summary_figures(result))
    print_profiles(result)
    return 0


def print_profiles(result: dict[str, Any]) -> None:
    from bench.profile import summarise

    for p in result["points"]:
        every = [p["raw"], *(r["raw"] for r in p["raw"].get("rounds", []))]
        for raw in (path for r in every for path in r.get("profiles", [])):
            print(f"\nkafkube broker profile, {Path(raw).stem} (py-spy):")
            print(summarise(Path(raw)))
