"""``python -m bench share``: share-group (KIP-932, "queues") consume throughput, kafkube
beside Apache Kafka in one run: ``--consumers`` (1, 4 and 16) share consumers of one group
read and acknowledge every record of a topic of ``--partitions`` (2).

Each system gets a fresh 1-broker cluster (``bench.systems.running``, Kafka first, the
shared broker settings and each one's share-group defaults: record locks of 30 s, at most
2,000 records in flight per partition). On it: share groups turned on (kafkube: off on a new
cluster, ``kafka-features.sh upgrade --feature share.version=1``; Kafka 4.4 finalizes
share.version on a new cluster, checked with ``describe`` and upgraded the same way if
not); a topic of ``--partitions``, RF 1; ``--records`` (100,000) values of
``--record-size`` (1 KiB) produced round-robin, untimed, by ``bench.clients.produce``; one
untimed warm-up group of 1 consumer reading ``--warmup`` records (the first share fetch of a
cluster creates ``__share_group_state`` and its coordinator, seconds that belong to no
consumer count; Kafka's JIT warms too). Then ``--rounds`` times, for each consumer count, a
new share group (``share.auto.offset.reset=earliest`` through ``kafka-configs.sh
--entity-type groups``) reads the whole topic from offset 0.

**The consumers: Kafka 4.4's ShareConsumerPerformance** (``kafka-share-consumer-perf-test.sh``,
``--threads N``): N KafkaShareConsumers, the Java client Kafka ships, each polled by a thread
of its own in one JVM, acknowledging implicitly (a poll accepts the records of the poll
before, the acknowledgements riding on the next ShareFetch; a final ``commitSync()`` accepts
the last batches). That is the client the protocol was designed around, batching what the
broker sees (up to 500 records a ShareFetch, one ShareAcknowledge or none per batch), so
the figure is the broker's per-record work rather than the client's. The alternatives
measure the client: VerifiableShareConsumer (``--acknowledgement-mode sync``) is one JVM
per consumer, 16 JVMs starting and JIT-compiling on 2 cores, and waits a ShareAcknowledge
round trip after every poll; confluent-kafka's ShareConsumer hands each record to Python,
which costs about as much CPU per record as a Python broker spends on it, and 16 processes
of it would crowd the broker off the 2 cores.

**The clock**: from the tool's start time (its consumers built, before they subscribe: the
share group's forming and first assignment are in the figure, as a job starting on a queue
sees them) to the last record acknowledged, which is when the tool's final stats line
arrives here: it prints it after ``commitSync()`` on every consumer returned. MB/s counts
values, 10^6 bytes. Because the group's forming is in the span and takes seconds on Kafka,
``first record s`` (start to the first record any consumer got, from the tool's
``--show-detailed-stats`` lines every 100 ms) and ``records/s after the first`` (the records
over the rest of the span) are given beside it; the tool's own span (to the last record
delivered, before that commit) is ``delivered_s`` in the raw table. Broker CPU is that of
the broker process over the tool's whole run (``bench.systems.Meter``); ``client_cpu_s`` is
the tool JVM's, its start-up included.

**The check** before a figure is kept: the tool counted exactly ``--records`` records (a
record delivered twice would have made it stop short of one never delivered), and
``kafka-share-groups.sh --describe --offsets`` (``ShareGroupCommand``) shows LAG 0 on every
partition (no record left to deliver or acknowledge); the START-OFFSET it shows is kept in
the raw table beside each partition's end offset.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import re
import resource
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench import clients, kafka
from bench.arguments import comma_list, parse_setting, positive_int
from bench.figures import Figure, raw_table, summarise, table
from bench.profile import PySpy
from bench.profile import summarise as profile_summary
from bench.run_info import commit, load_average, machine
from bench.summary import PATH, record
from bench.summary import Figure as Entry
from bench.systems import SYSTEMS, Meter, Running, create_topic, measure_each, running
from kafkube.harness import kafka_jars
from kafkube.harness.process_group import kill_group
from kafkube.harness.waiting import WaitTimedOut, wait_until

TOPIC = "share-bench"
PERF = "ShareConsumerPerformance"
GROUPS_COMMAND = "consumer.group.ShareGroupCommand"
DATE_FORMAT = "yyyy-MM-dd HH:mm:ss.SSS Z"  # the tool's, parsed back by STAMP
STAMP = "%Y-%m-%d %H:%M:%S.%f %z"
TOOL_S = 120.0  # a one-shot admin tool (configs, features, describe) in a JVM of its own
METRICS = (("records/s", "higher"), ("MB/s", "higher"), ("broker CPU s/GB", "lower"),
           ("first record s", "lower"), ("records/s after the first", "higher"))
_TIME = r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} [+-]\d{4})"
# The tool's final line: start, end, MiB, MiB/s, records/s, records, fetch ms.
_TOTAL = re.compile(rf"^{_TIME}, {_TIME}, [\d.]+, [\d.]+, [\d.]+, (\d+), (\d+)$")
# A --show-detailed-stats line: interval start and end, MiB, MiB/s, records/s, records so
# far and interval ms of one consumer.
_DETAIL = re.compile(rf"^{_TIME}, {_TIME}, [\d.]+, [\d.]+, [\d.]+, (\d+), \d+ "
                     r"for share consumer (\d+)$")
REPORT_MS = 100  # the tool's --reporting-interval: the resolution of first_record
_CONSUMER = re.compile(r"^Share consumer (\d+) .*consumption metrics- .*, (\d+), \d+$")
_FEATURE = re.compile(r"Feature: share\.version\s.*FinalizedVersionLevel: (\d+)")


@dataclass(frozen=True)
class Line:
    """One line of a tool's stdout and when it arrived here (``time.time()``)."""

    at: float
    text: str


@dataclass(frozen=True)
class PerfResult:
    """What ShareConsumerPerformance said: its start (epoch seconds), when its final line
    arrived (after every consumer's commitSync), its own span to the last record delivered,
    the records it counted in all and per consumer."""

    start: float
    acknowledged: float
    delivered_s: float
    records: int
    per_consumer: tuple[int, ...]
    first_record: float | None = None  # when the first consumer got its first record

    @property
    def seconds(self) -> float:
        return self.acknowledged - self.start


@dataclass(frozen=True)
class Offsets:
    """One partition's row of ``kafka-share-groups.sh --describe --offsets``."""

    partition: int
    start: int | None  # "-" before the group has state there
    lag: int | None


def _epoch(stamp: str) -> float:
    return datetime.datetime.strptime(stamp, STAMP).timestamp()


def first_record(lines: list[Line], interval_ms: int = REPORT_MS) -> float | None:
    """When the first record reached any consumer, from ``--show-detailed-stats`` lines.

    A consumer thread prints a line at the first batch of a poll that comes once
    ``interval_ms`` have passed since its last line (its start, for the first), with its
    records so far, the batch's first counted. A first line saying 1 record is therefore
    the first batch's time exactly; more than 1, the first batch came within the interval
    after the line's start: that start plus the interval bounds it."""
    firsts: dict[int, float] = {}
    for line in lines:
        match = _DETAIL.match(line.text.strip())
        if match and int(match[4]) not in firsts:
            firsts[int(match[4])] = (_epoch(match[2]) if int(match[3]) == 1
                                     else _epoch(match[1]) + interval_ms / 1e3)
    return min(firsts.values(), default=None)


def parse_perf(lines: list[Line]) -> PerfResult:
    """The tool's final stats line (and its ``--show-consumer-stats`` and
    ``--show-detailed-stats`` lines before it)."""
    per: dict[int, int] = {}
    for line in lines:
        if match := _CONSUMER.match(line.text.strip()):
            per[int(match[1])] = int(match[2])
        elif match := _TOTAL.match(line.text.strip()):
            return PerfResult(_epoch(match[1]), line.at, int(match[4]) / 1e3, int(match[3]),
                              tuple(n for _, n in sorted(per.items())), first_record(lines))
    raise ValueError("no final stats line in the tool's output:\n"
                     + "\n".join(x.text for x in lines[-20:]))


def _number(text: str) -> int | None:
    """A column's integer; None for "-" (no state there yet)."""
    return int(text) if text.lstrip("-").isdigit() else None


def parse_offsets(text: str, topic: str) -> dict[int, Offsets]:
    """Partition -> start offset and lag, from ``ShareGroupCommand --describe --offsets``
    (columns found by their header, so ``--verbose``'s LEADER-EPOCH does not matter)."""
    head: list[str] = []
    found: dict[int, Offsets] = {}
    for raw in text.splitlines():
        cells = raw.split()
        if "START-OFFSET" in cells:
            head = cells
        elif head and len(cells) == len(head) and cells[head.index("TOPIC")] == topic:
            row = dict(zip(head, cells, strict=True))
            partition = _number(row["PARTITION"])
            if partition is not None:
                found[partition] = Offsets(partition, _number(row["START-OFFSET"]),
                                           _number(row["LAG"]))
    return found


def end_offsets(records: int, partitions: int) -> dict[int, int]:
    """Each partition's end offset after ``records`` records sent round-robin."""
    return {p: (records - p + partitions - 1) // partitions for p in range(partitions)}


def share_version(text: str) -> int:
    """share.version's finalized level in ``kafka-features.sh describe``; 0 if absent."""
    match = _FEATURE.search(text)
    return int(match[1]) if match else 0


def all_acknowledged(offsets: dict[int, Offsets], partitions: int) -> bool:
    """Every partition described, with nothing left to deliver or acknowledge."""
    return set(offsets) == set(range(partitions)) and all(o.lag == 0 for o in offsets.values())


# -- the tools ---------------------------------------------------------------------------

class Tools:
    """Kafka's command-line tools against one cluster."""

    def __init__(self, libs: Path, bootstrap: str) -> None:
        self.libs, self.bootstrap = libs, bootstrap

    def run(self, main: str, *args: str) -> str:
        return kafka.run_tool(self.libs, main, ["--bootstrap-server", self.bootstrap, *args],
                              TOOL_S)

    def share_groups_on(self) -> str:
        """share.version finalized at 1 or more; what ``describe`` said before."""
        before = self.run("FeatureCommand", "describe")
        if share_version(before) < 1:
            self.run("FeatureCommand", "upgrade", "--feature", "share.version=1")
            after = self.run("FeatureCommand", "describe")
            if share_version(after) < 1:
                raise RuntimeError(f"share.version still 0 after the upgrade:\n{after}")
        return before

    def earliest(self, group: str) -> None:
        self.run("ConfigCommand", "--alter", "--entity-type", "groups", "--entity-name", group,
                 "--add-config", "share.auto.offset.reset=earliest")

    def offsets(self, group: str) -> dict[int, Offsets]:
        return parse_offsets(self.run(GROUPS_COMMAND, "--describe", "--group", group,
                                      "--offsets"), TOPIC)


@contextlib.contextmanager
def spawned(command: list[str]) -> Iterator[tuple[subprocess.Popen[bytes], list[Line]]]:
    """``command`` in a session of its own, each stdout line stamped on arrival by a reader
    thread; the process group killed on the way out, whatever happens inside."""
    lines: list[Line] = []
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, start_new_session=True)
    assert proc.stdout is not None
    stream = proc.stdout

    def read() -> None:
        for raw in iter(stream.readline, b""):
            lines.append(Line(time.time(), raw.decode(errors="replace").rstrip("\n")))
    reader = threading.Thread(target=read, name="share-perf-stdout", daemon=True)
    reader.start()
    try:
        yield proc, lines
    finally:
        kill_group(proc, 5)
        reader.join(10)
        stream.close()


def run_perf(libs: Path, bootstrap: str, group: str, consumers: int, records: int,
             timeout: float) -> tuple[PerfResult, float]:
    """ShareConsumerPerformance to the end: what it said, and its JVM's CPU seconds."""
    args = ["--bootstrap-server", bootstrap, "--topic", TOPIC, "--group", group,
            "--num-records", str(records), "--threads", str(consumers),
            # its consumer threads must all end within --timeout, or it interrupts them
            "--timeout", str(int(timeout * 1e3)), "--show-consumer-stats",
            "--show-detailed-stats", "--reporting-interval", str(REPORT_MS),
            "--date-format", DATE_FORMAT]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    with spawned(kafka.tool_command(libs, PERF, args)) as (proc, lines):
        try:
            code = wait_until(lambda: None if proc.poll() is None else (proc.returncode,),
                              timeout + 30, f"{PERF} --threads {consumers} to end",
                              interval=0.02)[0]
        except WaitTimedOut:
            raise RuntimeError(f"{PERF} still running after {timeout + 30:.0f}s:\n"
                               + "\n".join(x.text for x in lines[-20:])) from None
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if code != 0:
        raise RuntimeError(f"{PERF} exited with {code}:\n"
                           + "\n".join(x.text for x in lines[-30:]))
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return parse_perf(lines), cpu


# -- one system --------------------------------------------------------------------------

@dataclass
class Context:
    """One system's cluster, its tools and the run's settings."""

    env: Running
    tools: Tools
    args: argparse.Namespace
    log: Callable[[str], None]
    profiles: list[Path] = field(default_factory=list)


def consume_round(ctx: Context, consumers: int, rnd: int) -> dict[str, Any]:
    """One share group of ``consumers`` reading every record; its raw numbers, checked."""
    args, env = ctx.args, ctx.env
    group = f"share-{consumers}-{rnd}-{time.monotonic_ns()}"
    ctx.tools.earliest(group)
    raw_profile = (args.profile / f"kafkube-broker-{consumers}-consumers-{rnd + 1}.txt"
                   if args.profile and env.system == "kafkube" else None)
    meter = Meter(env)
    with PySpy(env.pids()[0], raw_profile) if raw_profile else contextlib.nullcontext():
        perf, client_cpu = run_perf(args.libs, env.bootstrap, group, consumers,
                                    args.records, args.timeout)
    raw = meter.done({"records": perf.records, "bytes": perf.records * args.record_size,
                      "seconds": round(perf.seconds, 3),
                      "delivered_s": round(perf.delivered_s, 3),
                      "first_record_s": round((perf.first_record or perf.acknowledged)
                                              - perf.start, 3),
                      "client_cpu_s": round(client_cpu, 2),
                      "per_consumer": list(perf.per_consumer)})
    if raw_profile:
        ctx.profiles.append(raw_profile)
    if perf.records != args.records:
        raise RuntimeError(f"{env.system}, {consumers} consumers: the tool counted "
                           f"{perf.records} records of {args.records}")
    # LAG 0 everywhere: every record acknowledged. Kafka's figure can trail the commit
    # briefly (its share coordinator's summary), hence the wait; bounded by the tool runs.
    found: list[dict[int, Offsets]] = [{}]

    def done() -> bool:
        found[0] = ctx.tools.offsets(group)
        return all_acknowledged(found[0], args.partitions)
    try:
        wait_until(done, 60, f"{group}: LAG 0 on every partition", interval=1.0)
    except WaitTimedOut:
        raise RuntimeError(f"{env.system}, {consumers} consumers: not every record "
                           f"acknowledged: {found[0]}") from None
    ends = end_offsets(args.records, args.partitions)
    raw["start_offsets"] = [found[0][p].start for p in range(args.partitions)]
    raw["end_offsets"] = [ends[p] for p in range(args.partitions)]
    return raw


def figures_of(system: str, consumers: int, rnd: int, raw: dict[str, Any],
               index: int) -> list[Figure]:
    """records/s, MB/s (values) and broker CPU s/GB of one checked round."""
    values = {"records/s": raw["records"] / raw["seconds"],
              "MB/s": raw["bytes"] / raw["seconds"] / 1e6,
              "broker CPU s/GB": raw["broker_cpu_s"] / (raw["bytes"] / 1e9),
              "first record s": raw["first_record_s"],
              "records/s after the first": raw["records"] / max(
                  1e-3, raw["seconds"] - raw["first_record_s"])}
    name = f"share group of {consumers}, {raw['partitions']} partitions"
    return [Figure(index + 1, name, "java", metric, better, system, round(values[metric], 2),
                   raw, rnd) for metric, better in METRICS]


def run_system(system: str, args: argparse.Namespace, log: Callable[[str], None],
               profiles: list[Path]) -> list[Figure]:
    """A fresh cluster of ``system``: set up, warm up, then every round of every count."""
    figures: list[Figure] = []
    with running(system, 1, args, args.libs) as env:
        log(f"{system}: up on {env.bootstrap}")
        ctx = Context(env, Tools(args.libs, env.bootstrap), args, log, profiles)
        before = ctx.tools.share_groups_on()
        log(f"{system}: share.version finalized at {share_version(before)} on a new cluster"
            + ("" if share_version(before) else ", upgraded to 1"))
        create_topic(env, TOPIC, 1, {}, partitions=args.partitions)
        made = clients.run_in_process(clients.produce, (
            env.bootstrap, TOPIC, args.partitions, args.records, args.record_size,
            args.timeout, {}), args.timeout + 30)
        log(f"{system}: {made['records']:,} records produced in {made['seconds']:.1f} s "
            "(untimed)")
        warm = f"share-warmup-{time.monotonic_ns()}"
        ctx.tools.earliest(warm)
        perf, _ = run_perf(args.libs, env.bootstrap, warm, 1, min(args.warmup, args.records),
                           args.timeout)
        log(f"{system}: warm-up group read {perf.records:,} records in {perf.seconds:.1f} s")
        for rnd in range(args.rounds):
            for index, consumers in enumerate(args.consumers):
                raw = consume_round(ctx, consumers, rnd)
                raw["partitions"] = args.partitions
                figures += figures_of(system, consumers, rnd, raw, index)
                log(f"  {system:<8} {consumers:>2} consumers, round {rnd + 1}: "
                    f"{raw['records'] / raw['seconds']:,.0f} records/s, "
                    f"{raw['bytes'] / raw['seconds'] / 1e6:.1f} MB/s, {raw['seconds']:.2f} s "
                    f"(first record after {raw['first_record_s']:.2f} s, all delivered after "
                    f"{raw['delivered_s']:.2f} s), broker CPU "
                    f"{raw['broker_cpu_s']:.1f} s, per consumer {raw['per_consumer']}, "
                    f"start offsets {raw['start_offsets']} of {raw['end_offsets']}")
    log(f"{system}: stopped")
    return figures


def summary_entries(figures: list[Figure], command: str) -> list[Entry]:
    """docs/performance.json's entries: per consumer count, records/s (from the start and
    after the first record) and broker CPU per GB, medians over the rounds."""
    kinds = {"records/s": ("", "records/s"),
             "records/s after the first": (", after the first record", "records/s"),
             "broker CPU s/GB": (", broker CPU per GB", "CPU-s/GB")}
    return [Entry(f"{s.name}, Java share consumer{kinds[s.metric][0]}", kinds[s.metric][1],
                  round(statistics.median(s.kafkube), 2), round(statistics.median(s.kafka), 2),
                  s.better == "higher", command)
            for s in summarise(figures) if s.metric in kinds and s.kafka and s.kafkube]


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench share", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    for flag, kind, default, text in (
            ("--records", positive_int, 100_000, "records produced, then read by each group"),
            ("--record-size", positive_int, 1024, "value bytes"),
            ("--partitions", positive_int, 2, "the topic's partitions"),
            ("--rounds", positive_int, 3, "rounds of every consumer count"),
            ("--warmup", positive_int, 10_000, "records the untimed warm-up group reads"),
            ("--timeout", float, 300.0, "seconds allowed for one group to read everything"),
            ("--kafka-heap", str, "1G", "Kafka's -Xmx/-Xms")):
        parser.add_argument(flag, type=kind, default=default, help=f"{text} ({default})")
    parser.add_argument("--consumers", type=comma_list(None, positive_int),
                        default=[1, 4, 16], help="share consumers per group (1,4,16)")
    parser.add_argument("--systems", type=comma_list(SYSTEMS), default=list(SYSTEMS),
                        help="kafka,kafkube (both; one alone prints no ratios)")
    for system in SYSTEMS:
        parser.add_argument(f"--{system}-config", type=parse_setting, action="append",
                            default=[], metavar="KEY=VALUE",
                            help=f"a broker setting for {system} alone (repeatable)")
    parser.add_argument("--profile", type=Path, metavar="DIR",
                        help="sample the kafkube broker with py-spy in each timed group; "
                             "raw stacks go to DIR")
    parser.add_argument("--keep", action="store_true", help="keep the clusters' data dirs")
    parser.add_argument("--record", action="store_true",
                        help="write the figures into docs/performance.json")
    return parser.parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    if args.profile:
        args.profile.mkdir(parents=True, exist_ok=True)
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # unwind as on Ctrl-C
    wall0 = time.monotonic()

    def log(text: str) -> None:
        print(f"[{time.monotonic() - wall0:7.1f}s] {text}", flush=True)

    command = " ".join(["python -m bench share", *argv])
    header = [f"{time.strftime('%Y-%m-%d %H:%M %Z')}, commit {commit()}, `{command}`",
              f"- machine: {machine()}; load average at start {load_average()}",
              f"- Apache Kafka {kafka_jars.version()} (KRaft, 1 node, -Xmx{args.kafka_heap}) "
              f"and kafkube, 1 broker each; consumers: Kafka {kafka_jars.version()}'s "
              f"{PERF} (KafkaShareConsumer threads in one JVM, -Xmx{kafka.TOOL_HEAP}, "
              "implicit acknowledgement)",
              f"- {args.records:,} records x {args.record_size} B, {args.partitions} "
              f"partitions, RF 1; groups of {', '.join(map(str, args.consumers))} consumers; "
              f"{args.rounds} rounds"]
    print("\n".join(header), flush=True)
    args.libs = kafka_jars.ensure_jars()  # the consumers are Kafka's tool on either system
    profiles: list[Path] = []
    outcome = measure_each(args.systems, lambda system: run_system(system, args, log, profiles))
    if outcome is None:
        return 130
    figures, failed = outcome
    print("\n" + "\n".join([*header[1:], f"- took {(time.monotonic() - wall0) / 60:.1f} min; "
                              f"load average at end {load_average()}"]))
    if figures:
        print("\n" + table(figures, markdown=True) + "\n\n" + raw_table(figures))
    for raw in profiles:
        print(f"\nkafkube broker profile, {raw.stem} (py-spy, busy samples; raw: {raw}):")
        print(profile_summary(raw, top=25))
    if args.record and failed is None:
        record(summary_entries(figures, command))
        print(f"\nrecorded in {PATH}")
    print(f"\nratio: kafkube / Kafka; records/s and MB/s from the tool's start to its last "
          f"acknowledgement\ncommand: {command}")
    if failed is not None:
        print(f"FAILED: {failed}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
