"""``python -m bench spark``: the Spark batch job's read throughput from kafkube and from
Apache Kafka on this machine, in one run, as a ratio.

Each system gets a fresh 1-broker cluster (the settings of ``bench compare``), a topic of
``--partitions`` partitions filled with ``--records`` sample orders (kafkube_spark.events:
JSON values of about 110 bytes), and then, in one Spark session (``local[2]``, started once
and warmed up on each cluster before anything is timed), two reads of the whole topic,
``--runs`` times each, the systems interleaved (Kafka, kafkube, Kafka, kafkube, ...):

- **read**: Spark's Kafka source alone (``count`` and the sum of value lengths);
- **job**: the batch job's plan (kafkube_spark.pipeline: parse JSON, totals per minute and
  category).

Figures are the median over the runs, with min-max, in records/s and MB/s of record values.
Both clusters stay up for the whole run (2 cores: the idle one costs next to nothing).
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.profile import PySpy, summarise
from bench.summary import PATH, Figure, record
from bench.systems import SYSTEMS, Meter, Running, create_topic, running
from kafkube.harness import kafka_jars

TOPIC = "orders"


@dataclass
class Run:
    system: str
    kind: str  # "read" or "job"
    seconds: float
    records: int
    value_bytes: int
    broker_cpu_s: float  # the broker's CPU seconds over the read

    @property
    def records_per_s(self) -> float:
        return self.records / self.seconds

    @property
    def mb_per_s(self) -> float:
        return self.value_bytes / self.seconds / 1e6


def fill(env: Running, records: int, partitions: int) -> None:
    from kafkube_spark.events import orders, produce

    create_topic(env, TOPIC, 1, {}, partitions=partitions)
    produce(env.bootstrap, TOPIC, orders(records), {"enable.idempotence": False,
                                                    "acks": "1", "linger.ms": 50})


def timed_read(spark: Any, bootstrap: str, kind: str) -> tuple[float, int, int]:
    from pyspark.sql import functions as F

    from kafkube_spark.pipeline import kafka_options, parse_orders, window_totals

    source = spark.read.format("kafka").options(**kafka_options(bootstrap, TOPIC)) \
        .option("startingOffsets", "earliest").option("endingOffsets", "latest").load()
    started = time.perf_counter()
    if kind == "read":
        row = source.agg(F.count(F.lit(1)).alias("n"),
                         F.sum(F.length("value")).alias("bytes")).collect()[0]
        n, size = row["n"], row["bytes"]
    else:
        totals = window_totals(parse_orders(source)).agg(
            F.sum("orders").alias("n")).collect()[0]
        n, size = totals["n"], -1
    return time.perf_counter() - started, n, size


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench spark", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=1_000_000, help="orders (1000000)")
    parser.add_argument("--partitions", type=int, default=4, help="topic partitions (4)")
    parser.add_argument("--runs", type=int, default=3, help="timed runs per system (3)")
    parser.add_argument("--kafka-heap", default="1G", help="Kafka's -Xmx/-Xms (1G)")
    parser.add_argument("--keep", action="store_true", help="keep the clusters' data dirs")
    parser.add_argument("--record", action="store_true",
                        help="write the figures into docs/performance.json")
    parser.add_argument("--profile", type=Path, default=None, metavar="DIR",
                        help="sample the kafkube broker with py-spy during its timed reads "
                             "of the source alone; raw profiles and a summary in DIR")
    args = parser.parse_args(argv)
    if args.records < 1 or args.runs < 1 or args.partitions < 1:
        parser.error("--records, --runs and --partitions must be at least 1")
    if args.profile:
        args.profile.mkdir(parents=True, exist_ok=True)

    from kafkube_spark.session import spark_session

    t0 = time.monotonic()

    def log(text: str) -> None:
        print(f"[{time.monotonic() - t0:7.1f}s] {text}", flush=True)

    libs = kafka_jars.ensure_jars()
    runs: list[Run] = []
    with contextlib.ExitStack() as stack:
        envs = {system: stack.enter_context(running(system, 1, args, libs))
                for system in SYSTEMS}
        for system, env in envs.items():
            log(f"{system}: filling {TOPIC} with {args.records} orders")
            fill(env, args.records, args.partitions)
        spark = spark_session("bench-spark-read", "local[2]")
        stack.callback(spark.stop)
        value_bytes = {}
        for system, env in envs.items():  # warm-up: the JIT, the connector's consumer pool
            _, n, size = timed_read(spark, env.bootstrap, "read")
            if n != args.records:
                raise SystemExit(f"{system}: Spark read {n} records of {args.records}")
            value_bytes[system] = size
            timed_read(spark, env.bootstrap, "job")
        for i in range(args.runs):
            for kind in ("read", "job"):
                for system, env in envs.items():
                    profiled = args.profile and system == "kafkube" and kind == "read"
                    meter = Meter(env)
                    with PySpy(env.pids()[0], args.profile / f"spark-read-{i + 1}.raw") \
                            if profiled else contextlib.nullcontext():
                        seconds, n, _ = timed_read(spark, env.bootstrap, kind)
                    cpu = meter.done({})["broker_cpu_s"]
                    if n != args.records:
                        raise SystemExit(f"{system} {kind}: {n} records of {args.records}")
                    runs.append(Run(system, kind, seconds, n, value_bytes[system], cpu))
                    log(f"run {i + 1} {kind:<4} {system:<7} {seconds:6.2f}s "
                        f"{n / seconds:>10,.0f} records/s, broker {cpu:.2f} CPU-s")
    command = " ".join(["python -m bench spark", *argv])
    print()
    print(report(runs, args, command))
    if args.record:
        record(figures(runs, command))
        print(f"\nrecorded in {PATH}")
    if args.profile:
        for raw in sorted(args.profile.glob("spark-read-*.raw")):
            print(f"\n{raw.name}:\n{summarise(raw)}")
    return 0


def median_of(runs: list[Run], system: str, kind: str, value) -> float:
    return statistics.median(value(r) for r in runs if r.system == system and r.kind == kind)


def figures(runs: list[Run], command: str) -> list[Figure]:
    """The summary's Spark figures: the source alone and the batch plan in records/s, and
    the broker's CPU per GB of values the source read."""
    def pair(kind: str, value) -> tuple[float, float]:
        return (median_of(runs, "kafkube", kind, value), median_of(runs, "kafka", kind, value))

    def rate(r: Run) -> float:
        return round(r.records_per_s)

    def cpu_per_gb(r: Run) -> float:
        return round(r.broker_cpu_s / (r.value_bytes / 1e9), 2)

    return [Figure("Spark's Kafka source alone", "records/s", *pair("read", rate), True,
                   command),
            Figure("Spark batch job's plan", "records/s", *pair("job", rate), True, command),
            Figure("Spark's Kafka source alone, broker CPU per GB", "CPU-s/GB",
                   *pair("read", cpu_per_gb), False, command)]


def report(runs: list[Run], args: argparse.Namespace, command: str) -> str:
    lines = [f"`{command}`: {args.records} orders, {args.partitions} partitions, 1 broker, "
             f"Spark local[2], median of {args.runs} (min-max)", "",
             "| read | system | records/s | MB/s | broker CPU-s/GB | kafkube / Kafka |",
             "|---|---|---|---|---|---|"]
    for kind in ("read", "job"):
        medians = {}
        for system in SYSTEMS:
            mine = [r for r in runs if r.system == system and r.kind == kind]
            rates = [r.records_per_s for r in mine]
            medians[system] = statistics.median(rates)
            mbs = statistics.median(r.mb_per_s for r in mine)
            ratio = f"{medians['kafkube'] / medians['kafka']:.2f}" \
                if system == "kafkube" else ""
            cpu = statistics.median(r.broker_cpu_s / (r.value_bytes / 1e9) for r in mine)
            lines.append(f"| {kind} | {system} | {medians[system]:,.0f} "
                         f"({min(rates):,.0f}-{max(rates):,.0f}) | {mbs:.1f} | {cpu:.2f} "
                         f"| {ratio} |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
