"""The main job: a local kafkube cluster with the sample pipeline running through it.

Starts a 3-broker cluster on 127.0.0.1:9092-9094 (``kafkube dev``: broker processes on the
embedded SQLite coordination backend), produces sample order events (kafkube_spark.events,
acks=all, replication factor 3, min.insync.replicas 2), runs the Spark streaming job over
them in local mode with Spark's own Kafka source (totals per minute and category into
Parquet and the topic ``order-totals``), prints the totals as a table, writes them as a
chart, and checks them against the same totals computed in plain Python. Then it keeps the
cluster running for you to point kcat or any Kafka client at, until Ctrl-C. ``--once`` stops
after the pipeline (used by the tests).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic

from kafkube.dev import bootstrap_servers, start_cluster, stop_cluster
from kafkube.harness.checkout import cache_dir
from kafkube_spark.events import Total, expected_totals, orders, produce

TOPIC, RESULTS = "orders", "order-totals"
PARTITIONS = 4
WATERMARK_MS = 10 * 60_000  # the stream job's default --watermark


def create_topics(bootstrap: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([
        NewTopic(TOPIC, PARTITIONS, 3),
        NewTopic(RESULTS, 2, 3, config={"cleanup.policy": "compact"}),
    ], operation_timeout=30)
    for future in futures.values():
        future.result(60)


def spark_job(job: str, *args: str) -> str:
    """``python -m kafkube_spark.<job>`` in local mode; its output, or exit with it."""
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable,
           "PYSPARK_DRIVER_PYTHON": sys.executable}
    result = subprocess.run([sys.executable, "-m", f"kafkube_spark.{job}", *args],
                            capture_output=True, text=True, env=env, timeout=600)
    if result.returncode != 0:
        raise SystemExit(f"the Spark {job} job failed ({result.returncode}):\n"
                         f"{result.stdout[-3000:]}{result.stderr[-3000:]}")
    return result.stdout


def pipeline(bootstrap: str, events: int, work: Path) -> int:
    started = time.monotonic()
    delivered = produce(bootstrap, TOPIC, orders(events))
    print(f"produced {len(delivered)} order events to '{TOPIC}' in "
          f"{time.monotonic() - started:.2f}s", flush=True)

    output, checkpoint = work / "totals", work / "checkpoint"
    started = time.monotonic()
    spark_job("stream", "--bootstrap-servers", bootstrap, "--topic", TOPIC,
              "--output", str(output), "--checkpoint", str(checkpoint),
              "--result-topic", RESULTS, "--master", "local[2]")
    print(f"Spark streaming job (local[2], Spark's Kafka source): every event read and the "
          f"closed windows written in {time.monotonic() - started:.1f}s", flush=True)

    rows, chart = work / "totals.json", work / "order-totals.png"
    print(spark_job("report", "--output", str(output), "--chart", str(chart),
                    "--json", str(rows)), end="")
    got = sorted(Total(**r) for r in json.loads(rows.read_text()))
    latest = max(d.order.ts for d in delivered)
    want = expected_totals((d.order for d in delivered), closed_before=latest - WATERMARK_MS)
    if got != want:
        print(f"MISMATCH: Spark wrote {len(got)} totals, the events give {len(want)}")
        return 1
    print(f"Spark's {len(got)} window totals equal the ones computed from the events")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, default=9092,
                        help="port of broker 0, +N for broker N; 0 picks free ports")
    parser.add_argument("--brokers", type=int, default=3)
    parser.add_argument("--events", type=int, default=30_000)
    parser.add_argument("--data-dir", type=Path,
                        default=cache_dir() / "demo-data")
    parser.add_argument("--once", action="store_true", help="exit after the pipeline")
    args = parser.parse_args()
    shutil.rmtree(args.data_dir, ignore_errors=True)  # each demo run starts from empty logs
    try:
        cluster = start_cluster(args.data_dir / "cluster", args.brokers, args.port, 0, [],
                                quiet=args.once)
    except RuntimeError as e:
        raise SystemExit(f"the cluster did not start: {e}") from None
    bootstrap = bootstrap_servers(cluster)
    print(f"{args.brokers} brokers running: {bootstrap}", flush=True)
    try:
        create_topics(bootstrap)
        code = pipeline(bootstrap, args.events, args.data_dir / "spark")
        if code == 0 and not args.once:
            print(f"\ncluster running, bootstrap.servers={bootstrap}\n"
                  f"  kcat -b {bootstrap} -t {RESULTS} -C -o beginning -e\n"
                  "Ctrl-C to stop.")
            stop = {signal.SIGINT, signal.SIGTERM}
            signal.pthread_sigmask(signal.SIG_BLOCK, stop)  # so sigwait, not a handler, gets them
            signal.sigwait(stop)
    finally:
        stopped = stop_cluster(cluster)
    print("cluster stopped cleanly" if stopped == 0 else f"a broker exited with {stopped}")
    return code or stopped


if __name__ == "__main__":
    sys.exit(main())
