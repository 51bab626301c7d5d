"""``python -m bench chaos``: the long fault run of issue 27, on a kind cluster of the e2e
platform (or the cluster KAFKUBE_E2E_KUBECONFIG names; faults on nodes then left out).

What runs: the operator installed with its chart (kafkube/harness/kind/operated.py), a KafkaCluster
of examples/ (3 brokers), a Topic of 6 partitions, RF 3, ``min.insync.replicas`` 2, and one
acks=all idempotent producer pod (tests/e2e/workload.py) for the whole run. Then faults,
one after the other (bench/chaos_faults.py): a broker pod force-deleted, a broker process
SIGKILLed on its node, a node frozen (``docker pause``) for 15-25 s, kube-apiserver
SIGSTOPped for 20-30 s, the active operator's pod force-deleted, two brokers' nodes cut from
each other, a broker's node cut from the API server (iptables in the node) for 15-30 s; and
between them, every ``--between-every`` faults, a config roll or a scale 3 -> 4 -> 3.

Faults never overlap: each is undone (node thawed, rules removed, API server continued)
before the run waits, bounded, for the cluster to be whole (every broker Ready, which its
readiness probe says only once it is back in every ISR it belongs to, no partition
under-replicated on any broker, and every partition acknowledged in the producer's last
5 s), and the next starts only then. The kinds come in a
random order from ``--seed`` (printed; every kind once before any twice), and so do their
targets and lengths; the timings are the cluster's own.

At the end the producer is stopped, the topic is drained from offset 0 and the queue
checker (kafkube/harness/queue_checker.py) judges the history: every acknowledged record read back
where its acknowledgement said, none twice, in send order. An acknowledged record the drain
did not reach (the drain ended before the partition's end) is **unread**, not lost: the
drain is tried again, and what stays unread is reported apart. A record is **lost** when
the drain read past its offset without finding it, or when the partition's end is below an
acknowledged offset. Unavailability per fault is the longest time a partition went without
an acknowledgement, of the gaps that began while the fault and its recovery lasted (the
producer sends without pause; ``quiet`` is the same figure before the first fault).
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import random
import statistics
import sys
import time
from bisect import bisect_left, bisect_right
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bench.chaos_faults import BETWEEN, FAULTS, ON_NODES, Faults
from kafkube.harness.kind.deployment import Brokers
from kafkube.harness.kind.history import Produced, read_drain, read_produce
from kafkube.harness.kind.operated import example_cluster
from kafkube.harness.kind.platform import Cluster, KubectlError
from kafkube.harness.kind.streams import acked
from kafkube.harness.queue_checker import History
from kafkube.harness.waiting import wait_until

NAME = "chaos"
TOPIC = "chaos"
PARTITIONS = 6
# The producer's log is read once at the end (kubectl logs): the kubelet rotates a
# container's log at 10 MiB by default (100 MiB on our kind nodes: scripts/kind/config.sh)
# and serves only the current file, so the rate is set for the run's bound to stay under
# 120,000 lines (~72 B each with the runtime's prefix) on any cluster.
LOG_LINES = 120_000
MAX_RATE = 200.0
QUIET_S = 20.0  # the producer alone, before the first fault: the floor of the gap figure
DOCS = Path(__file__).resolve().parents[1] / "docs" / "chaos.md"


@dataclass(frozen=True)
class Plan:
    """How long and how much: the run goes on until both ``minutes`` and ``faults`` are
    reached, and never past ``cap_minutes`` nor ``3 * faults`` faults."""

    minutes: float
    faults: int
    seed: int
    kinds: tuple[str, ...] = FAULTS
    between_every: int = 30  # a roll or a scale (in turn) after every Nth fault; 0: none
    cap_minutes: float = 0.0  # 0: 2 * minutes + 10

    @property
    def cap_s(self) -> float:
        return 60 * (self.cap_minutes or 2 * self.minutes + 10)

    def rate(self) -> float:
        """Records a second: the producer's log must hold the run's bound, set-up included."""
        return max(5.0, min(MAX_RATE, LOG_LINES / (self.cap_s + 600)))


@dataclass
class Fault:
    number: int
    kind: str
    target: str = ""
    started: float = 0.0  # unix time
    whole: float | None = None  # unix time the cluster was whole again
    unavailable_s: float | None = None
    error: str | None = None
    controller: int | None = None  # the broker holding the controller Lease before it

    @property
    def whole_s(self) -> float | None:
        return None if self.whole is None else self.whole - self.started


def schedule(plan: Plan, rng: random.Random) -> Iterator[str]:
    """Every kind once in a random order, then kinds at random; a roll or a scale, in
    turn, after every ``between_every`` of them."""
    first = list(plan.kinds)
    rng.shuffle(first)
    between = itertools.cycle(BETWEEN)
    for n in itertools.count(1):
        yield first[n - 1] if n <= len(first) else rng.choice(plan.kinds)
        if plan.between_every and n % plan.between_every == 0:
            yield next(between)


def longest_gap(ack_times: dict[int, list[int]], start: float, end: float) -> float:
    """Seconds: the longest time between two acknowledgements of one partition, of the gaps
    that began in [start - 1 s, end] (unix seconds): a stall a fault caused begins at the
    last acknowledgement before it, and one that began earlier belongs to the fault before."""
    longest = 0
    lo, hi = (start - 1) * 1000, end * 1000
    for times in ack_times.values():
        times = sorted(times)
        first, last = bisect_left(times, lo), min(bisect_right(times, hi), len(times) - 1)
        longest = max([longest, *(times[k + 1] - times[k] for k in range(first, last))])
    return longest / 1000


def attributed_gaps(ack_times: dict[int, list[int]],
                    windows: list[tuple[float, float]]) -> list[float]:
    """Per window (a fault, [start, whole] in unix seconds, in time order), the longest gap
    between two acknowledgements of one partition among the gaps that overlap it more than
    any other window, 1 s before its start counted in: a stall that began as one fault
    ended and the next started is the next one's, not both's."""
    longest = [0.0] * len(windows)
    starts = [lo - 1 for lo, _ in windows]
    for times in ack_times.values():
        times = sorted(times)
        for a, b in itertools.pairwise(times):
            a_s, b_s = a / 1000, b / 1000
            near = range(max(bisect_right(starts, a_s) - 2, 0), bisect_right(starts, b_s))
            overlaps = {i: min(b_s, windows[i][1]) - max(a_s, starts[i]) for i in near}
            best = max(overlaps, key=overlaps.__getitem__, default=None)
            if best is not None and overlaps[best] > 0:
                longest[best] = max(longest[best], b_s - a_s)
    return longest


@dataclass
class Coverage:
    """How far a drain got: per partition its end (high watermark when it began) and the
    offset after the last record it read; values out of send order."""

    ends: dict[int, int] = field(default_factory=dict)
    reached: dict[int, int] = field(default_factory=dict)
    out_of_order: int = 0

    @classmethod
    def of(cls, lines: Iterable[str]) -> Coverage:
        found = cls()
        last: dict[int, int] = {}
        for line in lines:
            kind, _, rest = line.strip().partition(" ")
            if kind == "R":
                p, offset, value = rest.split(" ", 2)
                partition, i = int(p), int(value[2:])
                found.reached[partition] = int(offset) + 1
                found.out_of_order += partition in last and i < last[partition]
                last[partition] = i
            elif kind == "D":
                for entry in rest.split()[1:]:
                    p, end = entry.split(":")
                    found.ends[int(p)] = int(end)
        return found

    def complete(self) -> bool:
        return bool(self.ends) and all(self.reached.get(p, 0) >= end
                                       for p, end in self.ends.items())

    def covers(self, partition: int, offset: int) -> bool:
        """Whether the drain read past ``offset``, or the partition ends at or before it
        (then an acknowledged record there is gone too)."""
        return (offset < self.reached.get(partition, 0)
                or offset >= self.ends.get(partition, 0))


def judged(history: History, produced: Produced, coverage: Coverage,
           lines: list[str]) -> dict[str, Any]:
    """The queue checker's verdict, its "lost" split into lost and unread."""
    report = history.check()
    missing = {value for value, _ in report.lost}
    where = {}
    for line in lines:
        if line.startswith("A ") and (value := f"v-{line.split()[1]}") in missing:
            where[value] = tuple(int(x) for x in line.split()[2:4])
    unread = sorted(v for v in missing if v in where and not coverage.covers(*where[v]))
    lost = sorted(missing - set(unread))
    acks_seen = sum(1 for line in lines if line.startswith("A "))
    return {"sent": produced.sent, "acked": produced.acked, "failed": produced.failed,
            "acks_in_log": acks_seen, "read_back": report.consumed, "lost": len(lost),
            "unread": len(unread), "duplicated": len(report.duplicates),
            "out_of_order": coverage.out_of_order, "misplaced": len(report.misplaced),
            "other_anomalies": {k: len(v) for k, v in report.anomalies(True).items()
                                if k not in ("lost", "duplicates", "misplaced")},
            "lost_examples": lost[:10], "unread_examples": unread[:10],
            "checker": report.summary()}


class Run:
    """One fault run against a KafkaCluster named NAME in ``namespace``."""

    def __init__(self, cluster: Cluster, namespace: str, plan: Plan,
                 log: Callable[[str], None] | None = None) -> None:
        self.cluster, self.plan = cluster, plan
        self.log = log or (lambda text: print(text, flush=True))  # a long run shows its way
        self.brokers = Brokers(cluster, namespace, NAME)
        self.rng = random.Random(plan.seed)
        self.faults: list[Fault] = []
        self.stopped: str | None = None  # a wedge (or a fault that could not be undone)
        self.bounded: str | None = None  # the plan not met within its bounds
        self.producer = ""
        self.producer_error: str | None = None  # the end of its output, if it failed

    def kubectl(self, *args: str, timeout: float = 120.0) -> str:
        return self.brokers.kubectl(*args, timeout=timeout)

    def start_cluster(self) -> None:
        self.cluster.apply(example_cluster(NAME), namespace=self.brokers.namespace)
        self.kubectl("wait", f"kafkacluster/{NAME}", "--for=condition=Ready",
                     "--timeout=600s", timeout=620)
        self.cluster.apply(json.dumps({
            "apiVersion": "kafkube.io/v1alpha1", "kind": "Topic", "metadata": {"name": TOPIC},
            "spec": {"cluster": NAME, "partitions": PARTITIONS, "replicationFactor": 3,
                     "config": {"min.insync.replicas": 2}}}), namespace=self.brokers.namespace)
        self.kubectl("wait", f"topic/{TOPIC}", "--for=condition=Ready", "--timeout=180s",
                     timeout=200)
        self.brokers.wait_whole()

    def start_producer(self) -> str:
        rate = self.plan.rate()
        seconds = self.plan.cap_s + 600
        pod = self.brokers.start("produce", self.brokers.bootstrap, TOPIC, "--acks", "all",
                                 "--rate", f"{rate:.1f}", "--seconds", str(int(seconds)),
                                 "--count", str(LOG_LINES))
        self.brokers.wait_running(pod, 120)
        wait_until(lambda: acked(self.brokers, pod) >= 10, 120, "the first acknowledgements",
                   1.0)
        self.log(f"producer {pod}: acks=all, idempotent, {rate:.0f} records/s to {TOPIC} "
                 f"({PARTITIONS} partitions, RF 3, min.insync.replicas 2)")
        return pod

    def controller(self) -> int | None:
        try:
            return self.brokers.controller()
        except (KubectlError, KeyError, ValueError):
            return None

    def writable(self, pod: str, seconds: int = 5) -> bool:
        """Every partition acknowledged in the producer's last ``seconds`` of log."""
        try:
            lines = self.kubectl("logs", pod, f"--since={seconds}s").splitlines()
        except KubectlError:
            return False
        return {int(line.split()[2]) for line in lines if line.startswith("A ")} >= set(
            range(PARTITIONS))

    def kinds(self) -> tuple[str, ...]:
        """The plan's kinds this cluster allows: an existing cluster's nodes are not ours."""
        if self.cluster.name:
            return self.plan.kinds
        return tuple(k for k in self.plan.kinds if k not in ON_NODES)

    def faults_loop(self, faults: Faults) -> None:
        plan = self.plan
        began = time.monotonic()
        proper = 0
        for number, kind in enumerate(schedule(Plan(**{**asdict(plan), "kinds": self.kinds()}),
                                               self.rng), 1):
            elapsed = time.monotonic() - began
            if proper >= plan.faults and elapsed >= plan.minutes * 60:
                break
            if elapsed >= plan.cap_s or proper >= 3 * plan.faults:
                self.bounded = f"bound reached after {elapsed / 60:.1f} min, {proper} faults"
                break
            if self.brokers.phase(self.producer) != "Running":  # its count or time is up
                self.bounded = f"the producer ended after {elapsed / 60:.1f} min"
                break
            time.sleep(self.rng.uniform(0, 2))  # not always at the same point of a lease
            fault = Fault(number, kind, controller=self.controller())
            fault.started = time.time()
            self.faults.append(fault)
            proper += kind in FAULTS
            try:
                fault.target = faults.inject(kind, number)
            except Exception as e:  # recorded; the cluster must still heal
                fault.error = f"{type(e).__name__}: {e}"[:500]
            try:
                faults.whole()
                fault.whole = time.time()
            except Exception as e:  # a wedge: recorded, and the run stops
                wedge = str(e)
                ended = self.brokers.phase(self.producer) != "Running"
                self.stopped = (f"fault {number} ({kind}): not whole again"
                                + (" (the producer had ended: nothing to acknowledge)"
                                   if ended else "") + f": {e}")[:500]
            self.log(f"{number:4d} {kind:20} {fault.target or '-'} (controller "
                     f"{fault.controller}); whole after "
                     + (f"{fault.whole_s:.1f} s" if fault.whole_s is not None else "NEVER")
                     + (f"; ERROR {fault.error}" if fault.error else ""))
            if self.stopped:
                self.log(f"not whole again: {wedge}")  # in full: the brokers' own reasons
                break

    def stop_producer(self, pod: str) -> list[str]:
        """SIGTERM to the producer (PID 1 of its pod): it stops sending, flushes, reports.
        One that ended by itself (its count or time up) has reported already. One that
        failed (a client's fatal error) is recorded, and what it acknowledged still judged."""
        if self.brokers.phase(pod) == "Running":
            self.kubectl("exec", pod, "--", "python3", "-c",
                         "import os, signal; os.kill(1, signal.SIGTERM)")
        succeeded, lines = self.brokers.ended(pod, 300)
        if not succeeded:
            self.producer_error = "\n".join(lines[-12:])
            self.log(f"the producer failed:\n{self.producer_error}")
        return lines

    def drain(self, history: History, attempts: int = 3) -> Coverage:
        """The topic read from offset 0 to its end; again while a drain stops short."""
        coverage = Coverage()
        for attempt in range(1, attempts + 1):
            pod = self.brokers.start("drain", self.brokers.bootstrap, TOPIC, "--seconds",
                                     "600")
            wait_until(lambda p=pod: self.brokers.phase(p) in ("Succeeded", "Failed"), 720,
                       "the drain to end", 2.0)
            lines = self.brokers.logs(pod)
            self.kubectl("delete", "pod", pod, "--wait=false")
            coverage = Coverage.of(lines)
            if coverage.ends:
                read_drain(lines, history)
            if coverage.complete():
                break
            self.log(f"drain {attempt} stopped short of the end: {coverage.reached} of "
                     f"{coverage.ends}")
        return coverage

    def go(self) -> dict[str, Any]:
        """The whole run; its figures (``summarise``)."""
        self.start_cluster()
        pod = self.producer = self.start_producer()
        quiet_from = time.time()
        time.sleep(QUIET_S)
        quiet_to = time.time()
        faults = Faults(self.brokers, self.rng, self.log, avoid=self.cluster.kubectl(
            "-n", self.brokers.namespace, "get", "pod", pod, "-o", "jsonpath={.spec.nodeName}"))
        faults.writable = lambda: self.writable(pod)
        began = time.time()
        try:
            self.faults_loop(faults)
        finally:
            faults.heal_all()
        ended = time.time()
        ready = self.ended_ready(faults)
        lines = self.stop_producer(pod)
        history = History()
        produced = read_produce(lines, history)
        coverage = self.drain(history)
        windows = [(f.started, f.whole if f.whole is not None else ended) for f in self.faults]
        for fault, gap in zip(self.faults, attributed_gaps(produced.ack_times, windows),
                              strict=True):
            fault.unavailable_s = gap
        records = judged(history, produced, coverage, lines)
        return {**summarise(self.plan, self.faults, records, run_s=ended - began,
                         quiet_s=longest_gap(produced.ack_times, quiet_from, quiet_to),
                         ready=ready, stopped=self.stopped, rate=self.plan.rate(),
                         bounded=self.bounded, producer_error=self.producer_error),
                "ack_times_ms": produced.ack_times}  # the gaps can be judged again later

    def ended_ready(self, faults: Faults) -> bool:
        """Whole, and the KafkaCluster's Ready condition true, within bounds."""
        try:
            faults.whole()
            self.kubectl("wait", f"kafkacluster/{NAME}", "--for=condition=Ready",
                         "--timeout=300s", timeout=320)
            return True
        except (AssertionError, KubectlError) as e:
            self.log(f"the cluster did not end Ready: {e}")
            return False


def summarise(plan: Plan, faults: list[Fault], records: dict[str, Any], run_s: float,
              quiet_s: float, ready: bool, stopped: str | None, rate: float,
              bounded: str | None = None, producer_error: str | None = None
              ) -> dict[str, Any]:
    kinds: dict[str, list[Fault]] = defaultdict(list)
    for fault in faults:
        kinds[fault.kind].append(fault)

    def figures(found: list[Fault]) -> dict[str, Any]:
        whole = [f.whole_s for f in found if f.whole_s is not None]
        gaps = [f.unavailable_s for f in found if f.unavailable_s is not None]
        return {"count": len(found), "errors": sum(f.error is not None for f in found),
                "whole_median_s": statistics.median(whole) if whole else None,
                "whole_max_s": max(whole, default=None),
                "unavailable_median_s": statistics.median(gaps) if gaps else None,
                "unavailable_max_s": max(gaps, default=None)}
    ok = (ready and stopped is None and producer_error is None
          and records["lost"] == 0 and records["unread"] == 0
          and records["duplicated"] == 0 and records["out_of_order"] == 0
          and records["misplaced"] == 0 and not records["other_anomalies"]
          and records["acks_in_log"] == records["acked"])
    return {"seed": plan.seed, "plan": asdict(plan), "rate": rate, "run_s": run_s,
            "quiet_gap_s": quiet_s, "faults_total": sum(f.kind in FAULTS for f in faults),
            "between_total": sum(f.kind in BETWEEN for f in faults),
            "kinds": {k: figures(kinds[k]) for k in (*FAULTS, *BETWEEN) if k in kinds},
            "records": records, "ready_at_end": ready, "stopped": stopped,
            "bounded": bounded, "producer_error": producer_error, "ok": ok,
            "faults": [{**asdict(f), "whole_s": f.whole_s} for f in faults]}


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} s"


def table(result: dict[str, Any]) -> list[list[str]]:
    """Per kind: count, time until whole (median, max), longest unavailability."""
    rows = [["kind", "count", "whole p50", "whole max", "unavailable p50", "unavailable max",
             "errors"]]
    for kind, f in result["kinds"].items():
        rows.append([kind, str(f["count"]), _s(f["whole_median_s"]), _s(f["whole_max_s"]),
                     _s(f["unavailable_median_s"]), _s(f["unavailable_max_s"]),
                     str(f["errors"])])
    return rows


def headline(result: dict[str, Any]) -> list[str]:
    r = result["records"]
    return [
        f"run: {result['run_s'] / 60:.1f} min of faults, {result['faults_total']} faults and "
        f"{result['between_total']} rolls/scales, seed {result['seed']}"
        + (f"; STOPPED: {result['stopped']}" if result["stopped"] else "")
        + (f"; {result['bounded']}" if result.get("bounded") else "")
        + ("; THE PRODUCER FAILED" if result.get("producer_error") else ""),
        f"records: {r['sent']:,} sent, {r['acked']:,} acknowledged, {r['failed']:,} never "
        f"acknowledged, {r['read_back']:,} read back; lost {r['lost']}, unread {r['unread']}, "
        f"duplicated {r['duplicated']}, out of order {r['out_of_order']}, misplaced "
        f"{r['misplaced']}" + (f", other {r['other_anomalies']}" if r["other_anomalies"]
                               else ""),
        f"producer: {result['rate']:.0f} records/s; quiet (no fault): longest gap "
        f"{result['quiet_gap_s']:.1f} s; acknowledgements in its log {r['acks_in_log']:,} "
        f"of {r['acked']:,}",
        f"cluster Ready at the end: {'yes' if result['ready_at_end'] else 'NO'}; verdict: "
        + ("OK" if result["ok"] else "FAILED"),
    ]


def publish(result: dict[str, Any], docs: bool) -> Path:
    """The summary printed, the JSON under the cache's bench/, the docs' block if asked."""
    from bench.scale.report import publish_run

    return publish_run("chaos", result, headline(result), table(result), "lrrrrrr",
                       DOCS if docs else None)


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench chaos", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=30.0,
                        help="minutes of faults at least (30)")
    parser.add_argument("--faults", type=int, default=100, help="faults at least (100)")
    parser.add_argument("--seed", type=int, default=None, help="random choices (random)")
    parser.add_argument("--kinds", default=",".join(FAULTS),
                        help=f"comma-separated subset of {','.join(FAULTS + BETWEEN)}")
    parser.add_argument("--between-every", type=int, default=30,
                        help="a roll or a scale 3->4->3, in turn, after every N faults "
                             "(30; 0: none)")
    parser.add_argument("--cap-minutes", type=float, default=0.0,
                        help="never longer than this (2 * minutes + 10)")
    parser.add_argument("--docs", action="store_true",
                        help=f"write the figures into {DOCS.relative_to(DOCS.parents[1])}")
    args = parser.parse_args(argv)
    unknown = set(args.kinds.split(",")) - set(FAULTS + BETWEEN)
    if unknown:
        parser.error(f"unknown kinds: {sorted(unknown)}")
    return args


def main(argv: list[str]) -> int:
    """A kind cluster of its own (torn down at the end), the chart, the run, the report."""
    from bench.run_info import commit, machine
    from bench.scale.report import command_line, start_run
    from kafkube.harness.kind.operated import installed_operator, namespace_of
    from kafkube.harness.kind.platform import existing_cluster, own_kind_cluster

    args = parse(argv)
    seed = random.randrange(2**32) if args.seed is None else args.seed
    plan = Plan(args.minutes, args.faults, seed, tuple(args.kinds.split(",")),
                args.between_every, args.cap_minutes)
    log = start_run()
    started = time.strftime("%Y-%m-%d %H:%M %Z")
    command = command_line("chaos", [*argv, *([] if args.seed is not None else
                                              ["--seed", str(seed)])])
    log(f"seed {seed}: {plan.minutes:g} min and {plan.faults} faults at least, at most "
        f"{plan.cap_s / 60:.0f} min; reproduce the choices with: {command}")
    existing = existing_cluster()
    name = f"chaos-{seed % 100000}"
    if existing is None:
        log(f"building the images and bringing up the 4-node kind cluster {name} ...")
    try:
        with (contextlib.nullcontext(existing) if existing else own_kind_cluster(name)
              ) as cluster, installed_operator(cluster), namespace_of(cluster) as namespace:
            result = Run(cluster, namespace, plan, log).go()
    except KeyboardInterrupt:
        print("interrupted: the faults were undone", file=sys.stderr)
        return 130
    result.update(started=started, commit=commit(), machine=machine(), command=command)
    publish(result, args.docs)
    return 0 if result["ok"] else 1
