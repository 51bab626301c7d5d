"""``python -m bench rebalance``: how long a consumer group takes to rebalance, and how long
partitions nobody moved stop meanwhile, on Apache Kafka and kafkube in one run (a fresh
1-broker cluster each, ``bench.systems.running``, Kafka first), for librdkafka's classic
eager (``range``), classic cooperative (``cooperative-sticky``) and KIP-848 consumer
protocol (``group.protocol=consumer``, the brokers' default assignor uniform); ``--rounds``
times each, every round a new group. docs/performance.md explains the figures.

1. **join**: ``--members`` (50) consumers of an empty topic of ``--partitions`` (500) form a
   group (untimed); one more subscribes. Timed from its ``subscribe()`` until what the
   rebalance callbacks last said each member owns is a balanced partition of the topic
   (disjoint, all covered, floor or ceiling of partitions/members each: the end state of
   range, cooperative-sticky and uniform alike); also the partition-seconds unowned meanwhile.
   The consumers share one process, a polling thread each: they only heartbeat and long-poll
   an empty topic, poll() releases the GIL and a callback takes microseconds, so sharing
   delays no rebalance, and all callbacks get one clock; each is a librdkafka instance of
   its own (threads, connections). 51 processes would cost ~2 GB and minutes of start-up.
2. **leave**: ``--leave-members`` (3) consumers, a process each (one is SIGKILLed), read a
   topic of ``--leave-partitions`` (6) that a producer process fills at ``--rate`` (2,000)
   records/s, values their send times. ``--baseline`` s after the group is balanced one
   leaves, by ``close()`` or SIGKILL. Per partition it did not own, the longest time without
   a new record read (each offset's first reading, all members merged) from the leave until
   ``--after`` s after the survivors own all; the figure is the maximum over them. The same
   for its partitions (the hand-over) and for the baseline (the noise floor).

Session timeouts: classic ``session.timeout.ms`` (the client's) and the consumer protocol's
``group.consumer.session.timeout.ms`` with its floor ``group.consumer.min.session.timeout.ms``
(both brokers') are all ``--session-ms`` (10,000; the defaults are 45,000); heartbeat
intervals (classic 3 s, consumer protocol 5 s) and rebalance timeouts stay the defaults. The
protocol spoken: the joining member logs with ``debug=protocol`` and its requests are counted
by API; on kafkube also those served (``kafka_network_requests_total``).
"""

from __future__ import annotations

import argparse
import itertools
import logging
import multiprocessing
import os
import re
import signal
import statistics
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from typing import Any

from bench.arguments import comma_list, parse_setting, positive_int
from bench.figures import Figure, raw_table, summarise, table
from bench.run_info import commit, load_average, machine
from bench.summary import PATH, record
from bench.summary import Figure as Entry
from bench.systems import (
    SYSTEMS,
    Meter,
    Running,
    create_topic,
    measure_each,
    running,
    silent_logger,
)
from bench.transactions import metrics_ports
from kafkube.harness import kafka_jars
from kafkube.harness.metrics import requests_served, scrape
from kafkube.harness.waiting import wait_until

PROTOCOLS: dict[str, dict[str, str]] = {
    "eager": {"group.protocol": "classic", "partition.assignment.strategy": "range"},
    "cooperative": {"group.protocol": "classic",
                    "partition.assignment.strategy": "cooperative-sticky"},
    "consumer": {"group.protocol": "consumer"},
}
NAMES = {"eager": "classic eager (range)", "cooperative": "classic cooperative-sticky",
         "consumer": "consumer protocol (uniform)"}
GROUP_APIS = ("ConsumerGroupHeartbeat", "JoinGroup", "SyncGroup", "Heartbeat", "LeaveGroup")
QUIET_S = 2.0  # no assignment change for this long: a group has settled
_SENT = re.compile(r"Sent (\w+)Request")


@dataclass(frozen=True)
class Change:
    """A rebalance callback: ``member`` got (``added``) or lost ``partitions`` at ``at``."""

    at: float
    member: str
    partitions: tuple[int, ...]
    added: bool


def apply(owned: dict[str, set[int]], change: Change) -> None:
    """What a member owns after ``change``."""
    mine = owned.setdefault(change.member, set())
    (mine.update if change.added else mine.difference_update)(change.partitions)


def balanced(owned: Mapping[str, set[int]], partitions: int) -> bool:
    """The members' assignments split ``range(partitions)`` evenly: disjoint, all covered,
    each member holding floor or ceiling of partitions / members."""
    sizes = [len(s) for s in owned.values()] or [-1]
    low, high = partitions // len(sizes), -(-partitions // len(sizes))
    return (sum(sizes) == partitions and min(sizes) >= low and max(sizes) <= high
            and set().union(*owned.values()) == set(range(partitions)))


def replay(changes: list[Change], members: list[str], partitions: int, start: float
           ) -> tuple[float | None, float]:
    """From ``start``: the seconds until the assignments last became balanced (None if they
    are not at the end), and the partition-seconds without an owner until then."""
    owned: dict[str, set[int]] = {m: set() for m in members}
    owners = [0] * partitions
    since: dict[int, float] = {p: start for p in range(partitions)}  # unowned from
    unowned, settled, was = 0.0, None, False
    for change in sorted(changes, key=lambda c: c.at):
        mine = owned.setdefault(change.member, set())
        for p in change.partitions:
            if change.added and p not in mine:
                mine.add(p)
                owners[p] += 1
                if owners[p] == 1:
                    unowned += max(0.0, change.at - max(since.pop(p), start))
            elif not change.added and p in mine:
                mine.discard(p)
                owners[p] -= 1
                if owners[p] == 0:
                    since[p] = change.at
        now = balanced({m: owned[m] for m in members}, partitions)
        if now and not was:
            settled = change.at
        was = now
    return (max(0.0, settled - start) if was and settled is not None else None), unowned


def longest_gap(times: list[float], start: float, end: float) -> float:
    """The longest stretch of ``[start, end]`` with no time of ``times`` (sorted) in it,
    counted from the last time before ``start`` if there is one."""
    before = [t for t in times if t <= start]
    points = [before[-1] if before else start, *(t for t in times if start < t <= end), end]
    return max(b - a for a, b in itertools.pairwise(points))


class SentCounter(logging.Handler):
    """Counts the requests a librdkafka client with ``debug=protocol`` logs as sent."""

    def __init__(self) -> None:
        super().__init__()
        self.sent: Counter[str] = Counter()

    def emit(self, rec: logging.LogRecord) -> None:
        self.sent.update(_SENT.findall(rec.getMessage()))


def consumer_config(bootstrap: str, group: str, protocol: str, session_ms: int
                    ) -> dict[str, Any]:
    # librdkafka refuses a session.timeout.ms with the consumer protocol (the broker's rules)
    classic = {} if protocol == "consumer" else {"session.timeout.ms": session_ms}
    return {"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": True,
            "auto.offset.reset": "latest", "logger": silent_logger(), **PROTOCOLS[protocol],
            **classic}


# -- 1. join: one member more in a group of --members over --partitions partitions ------

class ThreadGroup:
    """A group of consumers in this process, each polled by a thread of its own; every
    rebalance callback is appended to ``changes``."""

    def __init__(self, config: dict[str, Any], topic: str, partitions: int,
                 deadline: float) -> None:
        self.config, self.topic, self.deadline = config, topic, deadline
        self.partitions = partitions
        self.changes: list[Change] = []
        self.owned: dict[str, set[int]] = {}
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.threads: list[threading.Thread] = []
        self.errors: list[str] = []

    def _note(self, member: str, partitions: list[Any], added: bool) -> None:
        change = Change(time.monotonic(), member, tuple(p.partition for p in partitions), added)
        with self.lock:
            self.changes.append(change)
            apply(self.owned, change)

    def add(self, name: str, extra: dict[str, Any] | None = None) -> float:
        """A new member, subscribed in its thread; returns the time of its subscribe()."""
        from confluent_kafka import Consumer

        consumer = Consumer({**self.config, **(extra or {})})
        subscribed = threading.Event()
        at: list[float] = []
        with self.lock:
            self.owned[name] = set()

        def poll() -> None:
            try:
                at.append(time.monotonic())
                consumer.subscribe(
                    [self.topic], on_assign=lambda _c, ps: self._note(name, ps, True),
                    on_revoke=lambda _c, ps: self._note(name, ps, False),
                    on_lost=lambda _c, ps: self._note(name, ps, False))
                subscribed.set()
                while not self.stop.is_set() and time.monotonic() < self.deadline:
                    msg = consumer.poll(0.1)
                    if msg is not None and msg.error() is not None and msg.error().fatal():
                        raise RuntimeError(f"{name}: {msg.error()}")
            except Exception as e:
                self.errors.append(f"{name}: {e!r}")
            finally:
                subscribed.set()
                consumer.close()
        self.threads.append(threading.Thread(target=poll, name=f"member-{name}", daemon=True))
        self.threads[-1].start()
        subscribed.wait(30)
        if not at:
            raise RuntimeError(f"{name}: never subscribed")
        return at[0]

    def settled(self) -> bool:
        """Balanced over ``partitions``, and no callback for ``QUIET_S``."""
        if self.errors:
            raise RuntimeError("; ".join(self.errors))
        with self.lock:
            last = self.changes[-1].at if self.changes else time.monotonic()
            snapshot = {m: set(s) for m, s in self.owned.items()}
        return time.monotonic() - last >= QUIET_S and balanced(snapshot, self.partitions)

    def close(self, timeout: float) -> None:
        self.stop.set()
        until = time.monotonic() + timeout
        for thread in self.threads:
            thread.join(max(0.1, until - time.monotonic()))


def served_counts(port: int | None) -> Counter[str]:
    """kafkube: requests served so far per group API; empty for Kafka."""
    samples = scrape(port) if port is not None else {}
    return Counter({api: int(sum(requests_served(samples, api).values()))
                    for api in GROUP_APIS})


def join_round(env: Running, protocol: str, rnd: int, args: argparse.Namespace,
               port: int | None) -> dict[str, Any]:
    """One timed join (workloads 1-3); the raw numbers of the round."""
    group = f"join-{protocol}-{rnd}-{time.monotonic_ns()}"
    config = consumer_config(env.bootstrap, group, protocol, args.session_ms)
    members = ThreadGroup(config, "join", args.partitions, time.monotonic() + args.timeout)
    try:
        for i in range(args.members):
            members.add(f"m{i:03d}")
        wait_until(members.settled, args.timeout,
                   f"{args.members} {protocol} members balanced over {args.partitions}", 0.1)
        log = logging.getLogger(f"bench.rebalance.{group}")
        log.propagate, log.level = False, logging.DEBUG
        log.addHandler(counter := SentCounter())
        served0, meter = served_counts(port), Meter(env)
        start = members.add("new", {"debug": "protocol", "logger": log})
        wait_until(members.settled, args.timeout,
                   f"{args.members + 1} {protocol} members balanced", 0.1)
        with members.lock:
            changes, names = list(members.changes), list(members.owned)
        seconds, unowned = replay(changes, names, args.partitions, start)
        if seconds is None:
            raise RuntimeError(f"{protocol}: settled, but not balanced in the replay")
        raw = meter.done({"records": 0, "bytes": 0, "seconds": round(seconds, 3),
                          "unowned_partition_s": round(unowned, 1)})
        raw["sent_by_joiner"] = {k: v for k, v in sorted(counter.sent.items())
                                 if k in GROUP_APIS}
        if port is not None:
            raw["served"] = dict(served_counts(port) - served0)
        return raw
    finally:
        members.close(60)


# -- 2. leave: the longest pause of the partitions the leaver did not own ------------------

def steady_producer(bootstrap: str, topic: str, partitions: int, rate: int,
                    stop: Any, seconds: float) -> None:
    """Sends ``rate`` records/s round-robin over the partitions, each value its send time
    (CLOCK_MONOTONIC, shared by the processes), until ``stop`` is set or ``seconds`` pass."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "acks": 1, "linger.ms": 5,
                         "logger": silent_logger()})
    start, sent = time.monotonic(), 0
    while not stop.is_set() and time.monotonic() - start < seconds:
        due = int((time.monotonic() - start) * rate)
        while sent < due:
            producer.produce(topic, str(time.monotonic()).encode(), partition=sent % partitions)
            sent += 1
        producer.poll(0.002)  # delivery reports, and the pace's tick
    producer.flush(10)


def leave_member(config: dict[str, Any], topic: str, name: str, conn: Connection, stop: Any,
                 seconds: float) -> None:
    """A group member in its own process: sends its rebalance callbacks at once over
    ``conn``, and at the end, per partition, (offset, receive time, send time) of each
    record read."""
    from confluent_kafka import Consumer

    consumer = Consumer({**config, "logger": silent_logger()})

    def note(added: bool) -> Callable[[Any, list[Any]], None]:
        return lambda _c, ps: conn.send(Change(time.monotonic(), name,
                                               tuple(p.partition for p in ps), added))
    consumer.subscribe([topic], on_assign=note(True), on_revoke=note(False),
                       on_lost=note(False))
    read: dict[int, list[tuple[int, float, float]]] = {}
    until = time.monotonic() + seconds
    while not stop.is_set() and time.monotonic() < until:
        batch = consumer.consume(1000, timeout=0.05)
        now = time.monotonic()
        for msg in batch:
            if msg.error() is None:
                read.setdefault(msg.partition(), []).append(
                    (msg.offset(), now, float(msg.value())))
    consumer.close()
    conn.send(("read", name, read))


@dataclass
class LeaveGroup:
    """The parent's view of a leave round's member processes."""

    procs: dict[str, Any]
    conns: dict[str, Connection]
    stops: dict[str, Any]
    owned: dict[str, set[int]] = field(default_factory=dict)
    changes: list[Change] = field(default_factory=list)
    last_change: float = 0.0
    read: dict[str, dict[int, list[tuple[int, float, float]]]] = field(default_factory=dict)

    def pump(self) -> None:
        """Takes in whatever the members have sent."""
        for conn in wait(list(self.conns.values()), timeout=0.02):
            try:
                message = conn.recv()
            except (EOFError, OSError):
                self.conns = {k: c for k, c in self.conns.items() if c is not conn}
                continue
            if isinstance(message, Change):
                apply(self.owned, message)
                self.last_change = message.at
                self.changes.append(message)
            else:
                self.read[message[1]] = message[2]

    def pump_for(self, seconds: float) -> None:
        """Takes messages in for ``seconds`` (each pump waits at most 20 ms)."""
        until = time.monotonic() + seconds
        while time.monotonic() < until:
            self.pump()

    def settled(self, members: list[str], partitions: int) -> bool:
        self.pump()
        owned = {m: self.owned.get(m, set()) for m in members}
        return time.monotonic() - self.last_change >= QUIET_S and balanced(owned, partitions)


def leave_round(env: Running, protocol: str, how: str, rnd: int, args: argparse.Namespace
                ) -> dict[str, Any]:
    """One member leaves (``how``: close or kill) a group reading the steady producer."""
    ctx = multiprocessing.get_context("spawn")
    config = consumer_config(env.bootstrap, f"leave-{protocol}-{how}-{rnd}-{time.monotonic_ns()}",
                             protocol, args.session_ms)
    names = [f"c{i}" for i in range(args.leave_members)]
    state = LeaveGroup({}, {}, {})
    try:
        for name in names:
            receiver, sender = ctx.Pipe(duplex=False)
            state.stops[name] = ctx.Event()
            state.procs[name] = ctx.Process(
                target=leave_member, daemon=True,
                args=(config, "leave", name, sender, state.stops[name], args.timeout * 3))
            state.procs[name].start()
            sender.close()
            state.conns[name] = receiver
        wait_until(lambda: state.settled(names, args.leave_partitions), args.timeout,
                   f"{len(names)} {protocol} members balanced over {args.leave_partitions}")
        state.pump_for(args.baseline)
        victim, survivors = names[0], names[1:]
        moved = set(state.owned[victim])
        meter, left = Meter(env), time.monotonic()
        if how == "kill":
            os.kill(state.procs[victim].pid, signal.SIGKILL)
        else:
            state.stops[victim].set()
        wait_until(lambda: state.settled(survivors, args.leave_partitions),
                   args.session_ms / 1000 + args.timeout,
                   f"the survivors owning all {args.leave_partitions} partitions")
        taken = state.last_change - left  # the last callback, not the quiet after it
        state.pump_for(args.after)
        end = time.monotonic()
        for name in survivors:
            state.stops[name].set()
        wait_until(lambda: state.pump() or set(survivors) <= state.read.keys(), 60,
                   "the survivors' records")
        return leave_figures(state, moved, args.leave_partitions, (left, end),
                             args.baseline, taken, meter)
    finally:
        for proc in state.procs.values():
            proc.join(15)
            if proc.is_alive():
                proc.kill()


def leave_figures(state: LeaveGroup, moved: set[int], partitions: int,
                  span: tuple[float, float], baseline: float, taken: float, meter: Meter
                  ) -> dict[str, Any]:
    """Each partition's first reading of each offset (all members merged), then the gaps;
    the leaver's partitions' from the leave on (a killed leaver's reads are lost, and a
    survivor's from before the leaver owned one are no anchor), and when a survivor got
    each of them and read its first record."""
    left, end = span
    first: dict[int, dict[int, tuple[float, float]]] = {p: {} for p in range(partitions)}
    for by_partition in state.read.values():
        for p, rows in by_partition.items():
            for offset, got, sent in rows:
                if offset not in first[p] or got < first[p][offset][0]:
                    first[p][offset] = (got, sent)
    times = {p: sorted(t for t, _ in rows.values()) for p, rows in first.items()}
    untouched = sorted(set(range(partitions)) - moved)
    late = [got - sent for p in untouched for got, sent in first[p].values()
            if left <= got <= end]
    raw: dict[str, Any] = {
        "records": sum(len(rows) for rows in first.values()), "bytes": 0,
        "seconds": round(end - left, 3),
        "untouched_pause_ms": round(1e3 * max(longest_gap(times[p], left, end)
                                              for p in untouched), 1),
        "moved_pause_ms": round(1e3 * max((longest_gap([t for t in times[p] if t > left],
                                                       left, end) for p in moved),
                                          default=0.0), 1),
        "baseline_gap_ms": round(1e3 * max(longest_gap(times[p], left - baseline, left)
                                           for p in untouched), 1),
        "untouched_max_latency_ms": round(1e3 * max(late, default=0.0), 1),
        "survivors_own_all_s": round(taken, 2), "moved": sorted(moved)}
    for p in sorted(moved):  # a hand-over: the new owner's callback, then its first record
        got = min((c.at for c in state.changes if c.added and p in c.partitions
                   and c.at > left), default=end)
        read_at = min((t for t in times[p] if t >= got), default=end)
        raw[f"p{p}_assigned_s"] = round(got - left, 2)
        raw[f"p{p}_first_read_ms"] = round(1e3 * (read_at - got), 1)
    return meter.done(raw)


def run_system(system: str, args: argparse.Namespace, log: Callable[[str], None]
               ) -> list[Figure]:
    figures: list[Figure] = []
    with running(system, 1, args, args.libs) as env:
        log(f"{system}: up on {env.bootstrap}")
        port = metrics_ports(env).get(0) if system == "kafkube" else None
        if "join" in args.phases:
            create_topic(env, "join", 1, {}, partitions=args.partitions)
            for protocol, rnd in itertools.product(args.protocols, range(args.rounds)):
                raw = join_round(env, protocol, rnd, args, port)
                w = 1 + list(PROTOCOLS).index(protocol)
                name = (f"member {args.members + 1} joins, {args.partitions} partitions, "
                        f"{NAMES[protocol]}")
                figures.extend(Figure(w, name, "rdkafka", m, "lower", system, raw[k], raw, rnd)
                               for m, k in (("rebalance s", "seconds"),
                                            ("unowned partition-s", "unowned_partition_s")))
                log(f"  {system:<8} join {protocol:<11} round {rnd + 1}: {raw['seconds']:.2f} s,"
                    f" {raw['unowned_partition_s']:.1f} partition-s unowned; joiner sent "
                    f"{raw['sent_by_joiner']}" + (f"; served {raw['served']}" if port else ""))
        if "leave" in args.phases:
            figures += run_leaves(env, args, log)
    log(f"{system}: stopped")
    return figures


def run_leaves(env: Running, args: argparse.Namespace, log: Callable[[str], None]
               ) -> list[Figure]:
    """Workloads 4-9, with the steady producer running throughout."""
    figures: list[Figure] = []
    create_topic(env, "leave", 1, {}, partitions=args.leave_partitions)
    ctx = multiprocessing.get_context("spawn")
    stop = ctx.Event()
    producer = ctx.Process(target=steady_producer, daemon=True, args=(
        env.bootstrap, "leave", args.leave_partitions, args.rate, stop, 3600.0))
    producer.start()
    try:
        for protocol, (i, how), rnd in itertools.product(
                args.protocols, enumerate(("close", "kill")), range(args.rounds)):
            raw = leave_round(env, protocol, how, rnd, args)
            w = 4 + 3 * i + list(PROTOCOLS).index(protocol)
            name = (f"1 of {args.leave_members} members "
                    f"{'closes' if how == 'close' else 'SIGKILLed'}, {NAMES[protocol]}")
            figures.extend(Figure(w, name, "rdkafka", m, "lower", env.system, raw[k], raw, rnd)
                           for m, k in (("untouched pause ms", "untouched_pause_ms"),
                                        ("moved pause ms", "moved_pause_ms")))
            log(f"  {env.system:<8} {how:<5} {protocol:<11} round {rnd + 1}: untouched "
                f"{raw['untouched_pause_ms']} ms, moved {raw['moved_pause_ms']} ms, baseline "
                f"{raw['baseline_gap_ms']} ms, survivors own all after "
                f"{raw['survivors_own_all_s']} s")
            if not producer.is_alive():
                raise RuntimeError("the steady producer died")
    finally:
        stop.set()
        producer.join(20)
        if producer.is_alive():
            producer.kill()
    return figures


def summary_entries(figures: list[Figure], command: str) -> list[Entry]:
    """docs/performance.json's entries: each join's rebalance time, and each leave's longest
    pause of an untouched partition; medians over the rounds."""
    return [Entry(f"{s.name}: {'rebalance' if s.workload <= 3 else 'untouched pause'}",
                  s.metric.split()[-1], round(statistics.median(s.kafkube), 3),
                  round(statistics.median(s.kafka), 3), False, command)
            for s in summarise(figures)
            if s.metric in ("rebalance s", "untouched pause ms") and s.kafka and s.kafkube]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench rebalance", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    for flag, kind, default, text in (
            ("--rounds", positive_int, 3, "rounds of each measurement"),
            ("--members", positive_int, 50, "join: members before the one that joins"),
            ("--partitions", positive_int, 500, "join: partitions"),
            ("--leave-members", positive_int, 3, "leave: members, at least 2"),
            ("--leave-partitions", positive_int, 6, "leave: partitions"),
            ("--rate", positive_int, 2000, "leave: records/s"),
            ("--baseline", float, 3.0, "leave: seconds of steady reading before the leave"),
            ("--after", float, 3.0, "leave: seconds measured after the survivors own all"),
            ("--session-ms", positive_int, 10_000, "the classic session.timeout.ms, and both "
             "brokers' group.consumer.session.timeout.ms and its min"),
            ("--timeout", float, 180.0, "seconds allowed for a group to settle"),
            ("--kafka-heap", str, "1G", "Kafka's -Xmx/-Xms")):
        parser.add_argument(flag, type=kind, default=default, help=f"{text} ({default})")
    parser.add_argument("--phases", type=comma_list(("join", "leave")),
                        default=["join", "leave"], help="join,leave (both)")
    parser.add_argument("--protocols", type=comma_list(tuple(PROTOCOLS)),
                        default=list(PROTOCOLS), help="eager,cooperative,consumer (all)")
    parser.add_argument("--systems", type=comma_list(SYSTEMS), default=list(SYSTEMS),
                        help="kafka,kafkube (both; one alone prints no ratios)")
    for system in SYSTEMS:
        parser.add_argument(f"--{system}-config", type=parse_setting, action="append",
                            default=[], metavar="KEY=VALUE",
                            help=f"a broker setting for {system} alone (repeatable)")
    parser.add_argument("--keep", action="store_true", help="keep the clusters' data dirs")
    parser.add_argument("--record", action="store_true",
                        help="write the figures into docs/performance.json")
    args = parser.parse_args(argv)
    if args.leave_members < 2:
        parser.error("--leave-members: at least 2")
    session = {"group.consumer.session.timeout.ms": str(args.session_ms),
               "group.consumer.min.session.timeout.ms": str(args.session_ms)}
    args.kafka_config = [*session.items(), *args.kafka_config]
    # kafkube's metrics on a free port: the group requests it served, by API.
    args.kafkube_config = [*session.items(), ("kafkube.metrics.port", "0"),
                           *args.kafkube_config]

    signal.signal(signal.SIGTERM, signal.default_int_handler)  # unwind as on Ctrl-C
    wall0 = time.monotonic()

    def log(text: str) -> None:
        print(f"[{time.monotonic() - wall0:7.1f}s] {text}", flush=True)

    import confluent_kafka

    command = " ".join(["python -m bench rebalance", *argv])
    header = [f"{time.strftime('%Y-%m-%d %H:%M %Z')}, commit {commit()}, `{command}`",
              f"- machine: {machine()}; load average at start {load_average()}",
              f"- Apache Kafka {kafka_jars.version()} (KRaft, 1 node, -Xmx{args.kafka_heap}) "
              f"and kafkube, 1 broker each; confluent-kafka {confluent_kafka.version()}, "
              f"librdkafka {confluent_kafka.libversion()[0]}; session {args.session_ms} ms "
              f"(classic: the client's; consumer protocol: both brokers')",
              f"- join: {args.members} + 1 members, {args.partitions} partitions; leave: "
              f"{args.leave_members} members, {args.leave_partitions} partitions, "
              f"{args.rate} records/s; {args.rounds} rounds each"]
    print("\n".join(header), flush=True)
    args.libs = kafka_jars.ensure_jars() if "kafka" in args.systems else None
    outcome = measure_each(args.systems, lambda system: run_system(system, args, log))
    if outcome is None:
        return 130
    figures, failed = outcome
    print("\n" + "\n".join([*header[1:], f"- took {(time.monotonic() - wall0) / 60:.1f} min; "
                              f"load average at end {load_average()}"]))
    if figures:
        print("\n" + table(figures, markdown=True) + "\n\n" + raw_table(figures))
    if args.record and failed is None:
        record(summary_entries(figures, command))
        print(f"\nrecorded in {PATH}")
    print(f"\nratio: kafkube / Kafka, lower is better\ncommand: {command}")
    if failed is not None:
        print(f"FAILED: {failed}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
