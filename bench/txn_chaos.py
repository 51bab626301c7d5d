"""``python -m bench txn-chaos``: transactions under faults, judged as Jepsen judged
Bufstream's (issue 28).

Three brokers on loopback (kafkube/harness/metadata.py's ``Cluster``, the tests' harness
too), a topic of 6 partitions with RF 3 and ``min.insync.replicas`` 2, the transaction log
replicated alike. Transactional producers and read_committed consumers run all along
(bench/txn_workload.py); each transaction writes a few records to at least two partitions
and commits or aborts at random. Meanwhile faults, one after the other, each kind once
before any twice:

* ``kill-coordinator``: the broker coordinating a producer's ``transactional.id`` (the
  leader of its ``__transaction_state`` partition) SIGKILLed, restarted after 1-12 s;
* ``pause-coordinator``: that broker SIGSTOPped for 1-12 s (past its 3 s session timeout
  or not, past the clients' 10 s socket timeout or not), then SIGCONTed;
* ``kill-leader``, ``pause-leader``: the same to the leader of one of the topic's
  partitions.

After each, the run waits (bounded) until every partition is led with a full ISR and every
producer has committed a transaction since, then 0-2 s, then the next fault. After the last,
the workload stops, the whole cluster is stopped and started again, every partition is
drained read_committed from offset 0, and ``kafkube.harness.txn_checker`` judges the history:
aborted reads, torn transactions, lost and unread records, duplicates, order, skips.

``--seed`` repeats the choices (kinds, targets, lengths, the transactions' sizes,
partitions and outcomes), not the timings. The figures go to a JSON file under the cache's
bench/ and, with ``--docs``, into docs/transactions.md. Broker and client logs stay in the
run's directory when it fails (or with ``--keep``).
"""

from __future__ import annotations

import argparse
import logging
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bench.chaos import Plan as ChaosPlan
from bench.chaos import attributed_gaps, schedule
from bench.txn_workload import (
    CLUSTER_CONFIG,
    TOPIC,
    TOPIC_CONFIG,
    TXN_PARTITIONS,
    TXN_TOPIC,
    Load,
    Workload,
    drain_into,
)
from broker.cluster.internal_topics import partition_for
from kafkube.harness.metadata import Cluster
from kafkube.harness.txn_checker import TxnHistory
from kafkube.harness.waiting import wait_until

KINDS = ("kill-coordinator", "pause-coordinator", "kill-leader", "pause-leader")
DOCS = Path(__file__).resolve().parents[1] / "docs" / "transactions.md"
START_S = 120.0  # the workload's first commits, every producer
RECOVERY_S = 120.0  # per fault: from undone to whole and committing again
RESTART_S = 120.0  # the full restart at the end: every partition led with a full ISR


@dataclass(frozen=True)
class Plan:
    """The run goes on until both ``minutes`` and ``faults`` are reached, and never past
    ``cap_minutes`` nor ``3 * faults`` faults."""

    minutes: float
    faults: int
    seed: int
    kinds: tuple[str, ...] = KINDS
    # Seconds a broker stays killed or paused: under and over the 3 s session timeout, and
    # over the clients' 10 s socket timeout.
    hold: tuple[float, float] = (1.0, 12.0)
    between: tuple[float, float] = (0.0, 2.0)  # seconds after one fault's recovery
    cap_minutes: float = 0.0  # 0: 2 * minutes + 10
    quiet_s: float = 10.0  # the workload alone before the first fault

    @property
    def cap_s(self) -> float:
        return 60 * (self.cap_minutes or 2 * self.minutes + 10)


@dataclass
class Fault:
    number: int
    kind: str
    broker: int = -1
    target: str = ""  # the transactional id or the partition whose broker it hit
    at_s: float = 0.0  # since the first fault
    hold_s: float = 0.0
    recovered_s: float | None = None  # undone -> whole and every producer committing
    stalled_s: float | None = None  # the longest time a producer went without a commit
    error: str | None = None
    started: float = 0.0  # unix time
    whole: float | None = None  # unix time, when whole again


@dataclass
class Run:
    """One run on a started ``cluster``; ``go`` returns its figures."""

    cluster: Cluster
    plan: Plan
    load: Load
    log: Callable[[str], None] = print
    faults: list[Fault] = field(default_factory=list)
    stopped: str | None = None  # a fault the cluster did not recover from, a client failure
    bounded: str | None = None  # the plan not met within its bounds
    quiet: tuple[float, float] = (0.0, 0.0)  # unix times: committing, before the first fault

    def __post_init__(self) -> None:
        self.rng = random.Random(f"{self.plan.seed}-faults")
        self.history = TxnHistory()
        self.clients_log = self.cluster.root / "clients.log"
        logger = logging.getLogger(f"bench.txn_chaos.{id(self)}")
        logger.propagate = False
        logger.setLevel(logging.DEBUG)
        logger.addHandler(logging.FileHandler(self.clients_log))
        self.logger = logger
        self.workload = Workload(self.cluster.bootstrap, TOPIC, self.load, self.history, logger)

    # -- faults ------------------------------------------------------------------------------

    def target(self, fault: Fault) -> None:
        """The broker a fault hits: a producer's coordinator, or a partition's leader."""
        if fault.kind.endswith("coordinator"):
            txn_id = self.load.txn_id(self.rng.randrange(self.load.producers))
            fault.target = txn_id
            fault.broker = self.cluster.leader_of(TXN_TOPIC, partition_for(txn_id,
                                                                           TXN_PARTITIONS))
        else:
            partition = self.rng.randrange(self.load.partitions)
            fault.target = f"{TOPIC}-{partition}"
            fault.broker = self.cluster.leader_of(TOPIC, partition)

    def inject(self, fault: Fault) -> None:
        """Kill or pause the target for the fault's length, then undo it."""
        fault.hold_s = round(self.rng.uniform(*self.plan.hold), 2)
        self.target(fault)
        if fault.kind.startswith("kill"):
            self.cluster.kill(fault.broker)
            time.sleep(fault.hold_s)  # the fault's length, not a wait for anything
            self.cluster.restart(fault.broker)
        else:
            self.cluster.pause(fault.broker)
            time.sleep(fault.hold_s)
            self.cluster.resume(fault.broker)

    def heal(self) -> None:
        """Every broker running and unpaused, whatever a fault left behind."""
        for i in range(self.cluster.size):
            if i in self.cluster.paused:
                self.cluster.resume(i)
            if not self.cluster.alive(i):
                self.cluster.restart(i)

    def committed(self) -> list[int]:
        return [self.history.ended(f"p{i}").get("committed", 0)
                for i in range(self.load.producers)]

    def whole(self, timeout: float) -> None:
        """Every partition led with a full ISR, and every producer committing again; within
        ``timeout`` (AssertionError otherwise)."""
        deadline = time.monotonic() + timeout
        before = self.committed()
        self.cluster.wait_for_isr(TOPIC, 3, timeout, consecutive=2)

        def committing() -> bool:
            if self.workload.failures:
                raise self.workload.failures[0]
            return all(now > then for now, then in zip(self.committed(), before, strict=True))
        wait_until(committing, max(1.0, deadline - time.monotonic()),
                   "every producer committing a transaction", interval=0.1)

    def faults_loop(self) -> None:
        plan = self.plan
        kinds = schedule(ChaosPlan(plan.minutes, plan.faults, plan.seed, plan.kinds,
                                   between_every=0), self.rng)
        began = time.monotonic()
        for number, kind in enumerate(kinds, 1):
            elapsed = time.monotonic() - began
            if len(self.faults) >= plan.faults and elapsed >= plan.minutes * 60:
                break
            if elapsed >= plan.cap_s or len(self.faults) >= 3 * plan.faults:
                self.bounded = (f"bound reached after {elapsed / 60:.1f} min, "
                                f"{len(self.faults)} faults")
                break
            fault = Fault(number, kind, at_s=round(elapsed, 1), started=time.time())
            self.faults.append(fault)
            try:
                self.inject(fault)
            except Exception as exc:  # recorded; the cluster must still heal
                fault.error = f"{type(exc).__name__}: {exc}"[:500]
            finally:
                self.heal()
            undone = time.monotonic()
            try:
                self.whole(RECOVERY_S)
                fault.recovered_s = round(time.monotonic() - undone, 2)
                fault.whole = time.time()
            except Exception as exc:  # a wedge, or a client that gave up: the run stops
                self.stopped = f"fault {number} ({kind}): not whole again: {exc}"[:500]
            self.log(f"{number:4d} {kind:18} broker {fault.broker} ({fault.target}) for "
                     f"{fault.hold_s:.1f} s; whole and committing after "
                     + (f"{fault.recovered_s:.1f} s" if fault.recovered_s is not None
                        else "NEVER") + (f"; ERROR {fault.error}" if fault.error else "")
                     + f"; transactions so far {self.history.ended()}")
            if self.stopped:
                break
            time.sleep(self.rng.uniform(*plan.between))  # not always at one lease phase

    # -- the run -----------------------------------------------------------------------------

    def go(self) -> dict[str, Any]:
        cluster = self.cluster
        cluster.create_topic(TOPIC, self.load.partitions, 3, TOPIC_CONFIG)
        self.workload.start()
        began = time.monotonic()
        try:
            self.whole(START_S)
            self.log(f"workload running: {self.history.ended()}")
            quiet_from = time.time()
            time.sleep(self.plan.quiet_s)  # the commits' own cadence: the stalls' floor
            self.quiet = (quiet_from, time.time())
            self.faults_loop()
        except Exception as exc:
            self.stopped = self.stopped or f"before the faults: {exc}"[:500]
        finally:
            self.heal()
        faults_s = time.monotonic() - began
        ended = time.time()
        try:
            self.workload.stop()
        except Exception as exc:
            self.stopped = self.stopped or f"the workload: {exc!r}"[:500]
        self.log(f"workload stopped: {self.history.ended()}; restarting every broker")
        codes = cluster.stop()
        cluster.start()
        cluster.wait_for_isr(TOPIC, 3, RESTART_S, consecutive=2)
        attempts = drain_into(self.history, cluster.bootstrap, TOPIC, self.load.partitions,
                              logger=self.logger)
        report = self.history.check()
        self.log(f"drained in {attempts} attempt(s)\n{report.summary()}")
        if not report.ok():
            self.history.dump(cluster.root / "history.json")
            self.log(f"the history, for judging again: {cluster.root / 'history.json'}")
        if self.workload.notes:
            self.log(f"client notes ({len(self.workload.notes)}), the last:\n  "
                     + "\n  ".join(self.workload.notes[-10:]))
        commits = self.history.commit_times()
        # The quiet span first: a stall that began in it and lasted into the first fault
        # is that fault's.
        windows = [self.quiet] + [(f.started, f.whole if f.whole is not None else ended)
                                  for f in self.faults]
        quiet_s, *gaps = attributed_gaps(commits, windows)
        for fault, gap in zip(self.faults, gaps, strict=True):
            fault.stalled_s = round(gap, 2)
        return self.result(report, faults_s, codes, attempts, quiet_s)

    def result(self, report: Any, faults_s: float, codes: dict[int, int],
               attempts: int, quiet_s: float) -> dict[str, Any]:
        def median(values: list[float]) -> float | None:
            return statistics.median(values) if values else None
        kinds: dict[str, Any] = {}
        for kind in self.plan.kinds:
            found = [f for f in self.faults if f.kind == kind]
            recovered = [f.recovered_s for f in found if f.recovered_s is not None]
            stalled = [f.stalled_s for f in found if f.stalled_s is not None]
            kinds[kind] = {
                "count": len(found), "errors": sum(f.error is not None for f in found),
                "hold_median_s": median([f.hold_s for f in found]),
                "recovered_median_s": median(recovered),
                "recovered_max_s": max(recovered, default=None),
                "stalled_median_s": median(stalled), "stalled_max_s": max(stalled, default=None),
            }
        anomalies = report.counts()
        return {
            "seed": self.plan.seed, "plan": asdict(self.plan), "load": asdict(self.load),
            "faults_s": faults_s, "faults_total": len(self.faults), "kinds": kinds,
            "quiet_stall_s": quiet_s,
            "transactions": {**report.transactions, "unknown_committed":
                             report.unknown_committed, "unknown_absent": report.unknown_absent},
            "records": {"written": report.records_written,
                        "committed": report.records_committed,
                        "delivered": report.records_delivered,
                        "aborted_delivered": report.aborted_delivered,
                        "final": report.final_records, "polled": report.polled},
            "anomalies": anomalies,
            "examples": {name: [repr(x) for x in getattr(report, name)[:10]]
                         for name in anomalies if anomalies[name]},
            "producer_instances": list(self.workload.instances),
            "consumer_resets": self.workload.resets, "drain_attempts": attempts,
            "unclean_exits": {str(i): c for i, c in codes.items() if c != 0},
            "stopped": self.stopped, "bounded": self.bounded,
            "ok": report.ok() and self.stopped is None,
            "faults": [asdict(f) for f in self.faults],
            "client_notes": self.workload.notes[:200],
        }


def headline(result: dict[str, Any]) -> list[str]:
    t, r, a = result["transactions"], result["records"], result["anomalies"]
    kinds = ", ".join(f"{k} {v['count']}" for k, v in result["kinds"].items())
    return [
        f"run: {result['faults_s'] / 60:.1f} min of faults, {result['faults_total']} faults "
        f"({kinds}), seed {result['seed']}"
        + (f"; STOPPED: {result['stopped']}" if result["stopped"] else "")
        + (f"; {result['bounded']}" if result.get("bounded") else ""),
        f"transactions: {t['committed']:,} committed, {t['aborted']:,} aborted, "
        f"{t['unknown']:,} unknown ({t['unknown_committed']} found whole, "
        f"{t['unknown_absent']} absent); records: {r['written']:,} written "
        f"({r['delivered']:,} with a delivery report, {r['aborted_delivered']:,} of them of "
        f"aborted transactions), {r['committed']:,} committed, "
        f"{r['final']:,} in the final read, {r['polled']:,} read by the consumers during "
        "the run",
        f"aborted reads {a['aborted_reads']}, torn {a['torn']}, lost {a['lost']}, unread "
        f"{a['unread']}, duplicates {a['duplicates']}; out of order {a['nonmonotonic']}, "
        f"skipped {a['skipped']}, inconsistent {a['inconsistent']}, misplaced "
        f"{a['misplaced']}, unexpected {a['unexpected']}",
        f"commits without a fault: longest stall {result['quiet_stall_s']:.1f} s; "
        f"producer instances {result['producer_instances']} (a fatal error or an unknown "
        f"outcome makes a new one); consumer resets {result['consumer_resets']}; verdict: "
        + ("OK" if result["ok"] else "FAILED"),
    ]


def table(result: dict[str, Any]) -> list[list[str]]:
    def s(value: float | None) -> str:
        return "-" if value is None else f"{value:.1f} s"
    rows = [["kind", "count", "held p50", "commits stalled p50", "commits stalled max",
             "whole again p50", "whole again max", "errors"]]
    for kind, f in result["kinds"].items():
        rows.append([kind, str(f["count"]), s(f["hold_median_s"]), s(f["stalled_median_s"]),
                     s(f["stalled_max_s"]), s(f["recovered_median_s"]),
                     s(f["recovered_max_s"]), str(f["errors"])])
    return rows


def publish(result: dict[str, Any], docs: bool) -> Path:
    """The summary printed, the JSON under the cache's bench/, the docs' block if asked."""
    from bench.scale.report import publish_run

    return publish_run("txn-chaos", result, headline(result), table(result), "lrrrrrrr",
                       DOCS if docs else None)


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench txn-chaos", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=10.0,
                        help="minutes of faults at least (10)")
    parser.add_argument("--faults", type=int, default=50, help="faults at least (50)")
    parser.add_argument("--seed", type=int, default=None, help="random choices (random)")
    parser.add_argument("--kinds", default=",".join(KINDS),
                        help=f"comma-separated subset of {','.join(KINDS)}")
    parser.add_argument("--cap-minutes", type=float, default=0.0,
                        help="never longer than this (2 * minutes + 10)")
    parser.add_argument("--rate", type=float, default=Load.rate,
                        help=f"transactions a second per producer, at most ({Load.rate:g})")
    parser.add_argument("--keep", action="store_true",
                        help="keep the brokers' data and logs (always kept when it fails)")
    parser.add_argument("--docs", action="store_true",
                        help=f"write the figures into {DOCS.relative_to(DOCS.parents[1])}")
    args = parser.parse_args(argv)
    unknown = set(args.kinds.split(",")) - set(KINDS)
    if unknown:
        parser.error(f"unknown kinds: {sorted(unknown)}")
    return args


def main(argv: list[str]) -> int:
    """A cluster of its own in a temporary directory, the run, the report."""
    from bench.run_info import commit, machine
    from bench.scale.report import command_line, start_run

    args = parse(argv)
    seed = random.randrange(2**32) if args.seed is None else args.seed
    plan = Plan(args.minutes, args.faults, seed, tuple(args.kinds.split(",")),
                cap_minutes=args.cap_minutes)
    log = start_run()
    started = time.strftime("%Y-%m-%d %H:%M %Z")
    command = command_line("txn-chaos", [*argv, *([] if args.seed is not None else
                                                  ["--seed", str(seed)])])
    log(f"seed {seed}: {plan.minutes:g} min and {plan.faults} faults at least, at most "
        f"{plan.cap_s / 60:.0f} min; reproduce the choices with: {command}")
    root = Path(tempfile.mkdtemp(prefix="kafkube-txn-chaos-"))
    cluster = Cluster(root, 3, CLUSTER_CONFIG)
    result: dict[str, Any] = {"ok": False}
    try:
        cluster.start()
        result = Run(cluster, plan, Load(seed, rate=args.rate), log).go()
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    finally:
        codes = cluster.stop()
        cluster.save_logs()
        if result.get("ok") and not args.keep:
            shutil.rmtree(root, ignore_errors=True)
        else:
            print(f"broker and client logs kept: {root}", file=sys.stderr)
    result.update(started=started, commit=commit(), machine=machine(), command=command,
                  unclean_exits_at_end={str(i): c for i, c in codes.items() if c != 0})
    publish(result, args.docs)
    return 0 if result["ok"] else 1
