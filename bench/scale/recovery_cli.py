"""``python -m bench scale-recovery``: four scale curves of issues 17 and 34, beside Apache
Kafka.

1. **recovery**: one broker holding 1, 10 and 30 GB (``--sizes``) of log, 16 partitions of
   1 KiB records produced flat out with librdkafka (``bench.clients.produce``), SIGKILLed the
   moment the last record is acked (its tail never flushed: a crash), started again on the
   same log dirs. Timed from the restart's ``Popen`` until (a) the port answers Metadata with
   every partition led and (b) ListOffsets(latest) of every partition equals what was
   produced and a Fetch at the last offset returns it. What each system scanned comes from
   its own log (Kafka's ``Recovering unflushed segment`` lines) or, for kafkube, which does
   not name its segments, from its recovery checkpoint read before the restart.
2. **metadata**: a 3-broker cluster, one CreateTopics of 100, 1,000 and 5,000 partitions
   (``--metadata-partitions``), RF 3; timed from the call until EVERY broker, asked directly
   over its own connection, answers Metadata with every partition led and a full ISR.
3. **topics**: the same for 1, 100, 1,000 and 10,000 topics of one partition each
   (``--metadata-topics``), sent as CreateTopics of ``TOPICS_PER_REQUEST`` topics at once
   (Kafka's controller refuses an operation of more than 10,000 metadata records), every
   broker asked for all topics.
4. **image** (kafkube only: KRaft keeps its metadata in its own replicated log, nothing like
   one object in an API server): 3 brokers on the Kubernetes backend against a real
   kube-apiserver and etcd (``kafkube.harness.control_plane``); topics are created until the
   cluster holds 100, 1,000, 5,000 and 10,000 partitions (``--image-partitions``), and each
   step reports the image ConfigMap's size (against the API server's 1 MiB limit), the time
   until the CreateTopics is in it, and the API server's PUT latency for ConfigMaps.

Every point gets a fresh cluster (the image curve grows one), which is stopped and its data
dir deleted before the next starts, so the 30 GB point never sits beside another. The two
systems never run at the same time. Every wait is bounded; a point that does not finish in
its bound is recorded as such and the run goes on.
"""

from __future__ import annotations

import argparse
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict

from bench import summary
from bench.arguments import comma_list
from bench.run_info import commit, load_average, machine
from bench.scale import report
from bench.scale.clusters import TOPICS_PER_REQUEST
from bench.scale.image import image_curve
from bench.scale.metadata import metadata_point, topics_point
from bench.scale.probes import POLL_S
from bench.scale.recovery import RECORD_SIZE, recovery_point
from bench.scale.recovery_points import Point, describe, run_point, why
from bench.scale.recovery_report import CURVES, SECTION, publish, summary_figures
from bench.systems import PARTITIONS
from kafkube.harness import kafka_jars


def run(args: argparse.Namespace, log: Callable[[str], None]) -> list[Point]:
    points: list[Point] = []
    libs = kafka_jars.ensure_jars() if "kafka" in args.systems else None
    if "recovery" in args.curves:
        for size in args.sizes:
            for system in args.systems:
                log(f"recovery, {size:g} GB: {system}")
                points.append(run_point(recovery_point, "recovery", system, size, libs,
                                        args.timeout, log, args.recovery_partitions))
                log(f"  -> {describe(points[-1])}")
    for curve, xs, measure, unit in (
            ("metadata", args.metadata_partitions, metadata_point, "partitions"),
            ("topics", args.metadata_topics, topics_point, "topics")):
        if curve not in args.curves:
            continue
        for x in xs:
            for system in args.systems:
                log(f"metadata, {x:,} {unit}: {system}")
                points.append(run_point(measure, curve, system, x, libs, args.timeout, log))
                log(f"  -> {describe(points[-1])}")
    if "image" in args.curves and "kafkube" in args.systems:
        try:
            for point in image_curve(args.image_partitions, args.timeout, log):
                points.append(point)
                log(f"  -> {describe(point)}")
        except Exception as e:
            traceback.print_exc()
            points.append(Point("image", "kafkube", 0, None, error=why(e)))
    return points


def command(argv: list[str]) -> str:
    """The command line that reproduces this run (under the machine's benchmark lock)."""
    return report.command_line("scale-recovery", argv, ("flock", "/tmp/kafkube-bench.lock"))


def parse(argv: list[str]) -> argparse.Namespace:
    ints = comma_list(None, int)
    parser = report.new_parser("scale-recovery", __doc__, CURVES, "recovery,metadata,image (all)",
                               "kafka,kafkube (both; the image curve is kafkube's alone)")
    parser.add_argument("--sizes", type=comma_list(None, float), default=[1.0, 10.0, 30.0],
                        help="GB of log for the recovery curve (1,10,30)")
    parser.add_argument("--recovery-partitions", type=int, default=PARTITIONS,
                        help=f"partitions the recovery curve's log is spread over ({PARTITIONS})")
    parser.add_argument("--metadata-partitions", type=ints, default=[100, 1000, 5000],
                        help="partitions per CreateTopics, metadata curve (100,1000,5000; "
                             "Kafka refuses more than 10,000 in one request)")
    parser.add_argument("--metadata-topics", type=ints, default=[1, 100, 1000, 10000],
                        help="topics of one partition created at once, topics curve "
                             "(1,100,1000,10000)")
    parser.add_argument("--image-partitions", type=ints, default=[100, 1000, 5000, 10000],
                        help="cluster totals of the image curve (100,1000,5000,10000)")
    parser.add_argument("--timeout", type=float, default=900.0,
                        help="seconds a point may take to recover / propagate (900)")
    report.add_output_options(parser, SECTION, "point")
    parser.add_argument("--record", action="store_true",
                        help="write each curve's largest point with both systems into "
                             "docs/performance.json")
    return parser.parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse(argv)
    if report.render(args, publish):
        return 0
    log = report.start_run()
    wall0 = time.monotonic()
    started = time.strftime("%Y-%m-%d %H:%M %Z")
    header = [
        f"- recovery: 1 broker, {args.recovery_partitions:,} partitions, {RECORD_SIZE} B "
        "records produced with librdkafka (acks=1), SIGKILL at the last ack, restart on the "
        "same log dir; "
        "(a) Metadata answers every partition led, (b) ListOffsets(latest) = produced and a "
        "Fetch at the last offset returns it; seconds from the restart; the page cache is "
        "warm, as after a process crash",
        "- metadata: 3 brokers, one CreateTopics, RF 3; seconds from the call until each "
        "broker, asked over its own connection from a thread of its own every "
        f"{POLL_S:g} s, answers every partition led with a full ISR",
        "- topics: the same for x topics of one partition (RF 3), sent as CreateTopics of "
        f"{TOPICS_PER_REQUEST:,} topics (Kafka's controller refuses operations of over "
        "10,000 records); every broker asked for all topics",
        "- image: 3 kafkube brokers, Kubernetes backend, kube-apiserver + etcd on loopback "
        "(kafkube/harness/control_plane.py); the cluster grows by one CreateTopics (RF 3) per "
        "point; seconds until the ConfigMap holds the topic; PUT ms: kube-apiserver's "
        "mean ConfigMap PUT latency over the step; encode/decode: the whole image, timed in "
        "the benchmark process. A step starts once every broker answers Metadata for the "
        "one before, when the brokers may still be creating its log files, so its times "
        "include that work",
        f"- Apache Kafka {kafka_jars.version()}: KRaft, combined broker+controller nodes; both get "
        "bench compare's shared broker settings (1 GiB segments, no fsync)",
        "- growth is judged on marginal cost (seconds added per GB or per 1,000 partitions "
        "between the smallest and largest point), which a fixed start-up cost (a JVM, a KRaft "
        "election) does not move, unlike a ratio of totals",
    ]
    print(f"machine: {machine()}", flush=True)
    try:
        points = run(args, log)
    except KeyboardInterrupt:
        print("interrupted: every broker started has been stopped", file=sys.stderr)
        return 130
    header.append(f"- took {(time.monotonic() - wall0) / 60:.1f} min; load average at end "
                  + load_average())
    result = {"started": started, "commit": commit(), "machine": machine(),
              "command": command(argv),
              "header": header, "points": [asdict(p) for p in points]}
    report.save_json(args, result, "points")
    publish(result, write=not args.no_docs)
    if args.record:
        summary.record(summary_figures(result))
    return 0 if all(p.error is None for p in points) else 1

