"""``python -m bench failover``: how long a partition is unavailable when its leader is
SIGKILLed, on a 3-broker cluster with default settings.

A probe producer (confluent-kafka, ``acks=all``) sends a small numbered value every
``PROBE_INTERVAL_S`` to partition 0 of a topic with RF 3 and ``min.insync.replicas=2``,
throughout the run. Each round reads the partition's leader from the metadata, SIGKILLs it
(t0), and measures:

- **unavailability**: the time from t0 to the first successful delivery report of a value
  *produced after t0*;
- **new leader in metadata**: the time from t0 to the first metadata answer naming another
  leader.

The killed broker is then started again on its port and log dir, and the next round waits
until it is back in the ISR (three metadata answers in a row) and a value produced after
that has been acked. A random pause of up to one ``broker.heartbeat.interval.ms`` (2 s)
comes before each kill: the leader's lease expires 9 s after its *last heartbeat*, so
without it the kills could fall at the same point of the heartbeat cycle every round and
bias the figures. At the end the partition is read from offset 0 and every acked value is
checked to be there, at the offset its delivery report gave.
"""

from __future__ import annotations

import math
import random
import statistics
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from bench.cluster import BenchCluster
from kafkube.harness.waiting import wait_until

TOPIC = "kafkube-failover"
PROBE_INTERVAL_S = 0.015
# Large, so the probe retries through a failover instead of failing messages.
PROBE_CONFIG: dict[str, Any] = {
    "acks": "all",
    "message.timeout.ms": 300_000,
    "enable.idempotence": False,  # librdkafka's default; --idempotent turns it on
}
HEARTBEAT_S = 2.0  # broker.heartbeat.interval.ms's default: the kill-time jitter's range
RECOVERY_TIMEOUT_S = 120.0  # per round: the kill to the first post-kill ack
REJOIN_TIMEOUT_S = 120.0  # per round: the restart to the broker back in the ISR


@dataclass
class Sent:
    seq: int
    at: float  # time.monotonic() of produce()
    acked_at: float | None = None
    error: str | None = None
    offset: int = -1


@dataclass
class Round:
    number: int
    killed: int
    new_leader: int = -1
    leader_s: float | None = None  # t0 -> new leader in metadata
    unavailable_s: float | None = None  # t0 -> first ack of a value produced after t0
    rejoin_s: float | None = None  # restart -> back in every ISR
    notes: list[str] = field(default_factory=list)


class Probe:
    """The producer thread: one value every ``interval`` seconds, each remembered with its
    delivery report, so any window can be asked "what was acked after time t?"."""

    def __init__(self, bootstrap: str, topic: str, idempotent: bool, logger: Any,
                 interval: float = PROBE_INTERVAL_S) -> None:
        from confluent_kafka import Producer

        self.topic = topic
        self.interval = interval
        self.config = {**PROBE_CONFIG, "enable.idempotence": idempotent}
        self.producer = Producer({"bootstrap.servers": bootstrap, **self.config,
                                  "error_cb": self._on_error, "logger": logger})
        self.sent: list[Sent] = []
        self.client_errors: list[str] = []
        self.lock = threading.Lock()
        self.acked = threading.Condition(self.lock)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="probe", daemon=True)
        self.crashed: BaseException | None = None

    def _on_error(self, err: Any) -> None:
        with self.lock:
            self.client_errors.append(f"{time.monotonic():.3f} {err}")

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        try:
            start = time.monotonic()
            seq = 0
            while not self._stop.is_set():
                entry = Sent(seq, time.monotonic())
                with self.lock:
                    self.sent.append(entry)
                self.producer.produce(self.topic, str(seq).encode(), partition=0,
                                      on_delivery=lambda err, msg, e=entry: self._report(
                                          e, err, msg))
                seq += 1
                next_send = start + seq * self.interval
                while (left := next_send - time.monotonic()) > 0 and not self._stop.is_set():
                    self.producer.poll(left)  # serves delivery reports while it waits
        except BaseException as exc:  # surfaced by the main thread
            self.crashed = exc

    def _report(self, entry: Sent, err: Any, msg: Any) -> None:
        now = time.monotonic()
        with self.lock:
            if err is None:
                entry.acked_at, entry.offset = now, msg.offset()
            else:
                entry.error = str(err)
            self.acked.notify_all()

    def first_ack_after(self, t0: float) -> float | None:
        """Delivery time of the earliest-acked value produced at or after ``t0``."""
        first = None
        with self.lock:
            for s in reversed(self.sent):  # in send order, so stop at the first before t0
                if s.at < t0:
                    break
                if s.acked_at is not None and (first is None or s.acked_at < first):
                    first = s.acked_at
        return first

    def wait_ack_after(self, t0: float, timeout: float) -> float | None:
        deadline = time.monotonic() + timeout
        while True:
            acked = self.first_ack_after(t0)
            if acked is not None or self.crashed is not None:
                return acked
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            with self.lock:
                self.acked.wait(min(left, 0.05))

    def stop(self, flush_timeout: float = 60.0) -> int:
        """Stop sending; wait for outstanding reports. Returns how many are still missing."""
        self._stop.set()
        self._thread.join(10)
        return self.producer.flush(flush_timeout)


def read_partition(bootstrap: str, topic: str, logger: Any,
                   timeout: float = 120.0) -> list[tuple[int, bytes]]:
    """Every (offset, value) of partition 0, from the log start to the high watermark."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "kafkube-failover-check",
                         "enable.auto.commit": False, "enable.partition.eof": True,
                         "logger": logger})
    deadline = time.monotonic() + timeout
    try:
        _, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        out: list[tuple[int, bytes]] = []
        next_offset = 0
        while next_offset < high:
            if time.monotonic() > deadline:
                raise TimeoutError(f"read to offset {next_offset} of {high} in {timeout:.0f}s")
            for msg in consumer.consume(10_000, timeout=1.0):
                if msg.error() is not None:
                    continue  # _PARTITION_EOF; a real error shows as a short read
                out.append((msg.offset(), msg.value()))
                next_offset = msg.offset() + 1
        return out
    finally:
        consumer.close()


def check_acked(sent: list[Sent], log: list[tuple[int, bytes]]) -> tuple[bool, list[str]]:
    """Every acked value is in the log at the offset its delivery report gave."""
    by_offset = dict(log)
    values: dict[bytes, list[int]] = {}
    for offset, value in log:
        values.setdefault(value, []).append(offset)
    acked = [s for s in sent if s.acked_at is not None]
    missing = [s for s in acked if str(s.seq).encode() not in values]
    moved = [s for s in acked if by_offset.get(s.offset) != str(s.seq).encode()
             and str(s.seq).encode() in values]
    duplicated = sum(1 for offsets in values.values() if len(offsets) > 1)
    failed_present = sum(1 for s in sent if s.error and str(s.seq).encode() in values)
    ok = not missing and not moved
    lines = [
        f"acked-value check: {'OK' if ok else 'FAILED'}: {len(acked)} acked values, "
        f"{len(missing)} missing from the log, {len(moved)} not at their acked offset; "
        f"log holds {len(log)} records ({duplicated} values twice or more, "
        f"{failed_present} of the failed sends present anyway)",
    ]
    for s in missing[:10]:
        lines.append(f"  missing: value {s.seq}, acked at offset {s.offset}")
    for s in moved[:10]:
        lines.append(f"  value {s.seq} acked at offset {s.offset}, offset holds "
                     f"{by_offset.get(s.offset)!r}, value at {values[str(s.seq).encode()]}")
    return ok, lines


def _percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


def summary(name: str, values: list[float]) -> str:
    if not values:
        return f"{name}: no samples"
    return (f"{name}: p50 {statistics.median(values):.2f} s, p90 {_percentile(values, 90):.2f} s, "
            f"max {max(values):.2f} s, min {min(values):.2f} s (n={len(values)})")


def run(kills: int, idempotent: bool, keep: bool, seed: int | None = None,
        ) -> tuple[int, list[str]]:
    """The whole benchmark. Returns (exit code, report lines)."""
    seed = random.randrange(2**32) if seed is None else seed
    rng = random.Random(seed)
    rounds: list[Round] = []
    lines: list[str] = []
    failed = False
    with BenchCluster(3, keep=keep) as cluster:
        print(f"cluster: 3 brokers on {cluster.bootstrap}, default settings; broker output "
              f"in {cluster.log_path}", flush=True)
        cluster.create_topic(TOPIC, 1, 3, {"min.insync.replicas": "2"}, timeout=60.0)
        probe = Probe(cluster.bootstrap, TOPIC, idempotent, cluster.client_logger("probe"))
        print(f"probe: one value every {PROBE_INTERVAL_S * 1000:.0f} ms to {TOPIC}-0, "
              f"{probe.config}", flush=True)
        print(f"kill-time jitter: uniform 0-{HEARTBEAT_S:.0f} s, seed {seed}", flush=True)
        probe.start()
        try:
            if probe.wait_ack_after(time.monotonic(), 60.0) is None:
                raise RuntimeError("the probe got no ack within 60 s of starting")
            for number in range(1, kills + 1):
                if probe.crashed is not None:
                    raise RuntimeError(f"the probe thread died: {probe.crashed!r}")
                time.sleep(rng.uniform(0.0, HEARTBEAT_S))
                states = wait_until(lambda: cluster.partitions(TOPIC), 30.0, f"{TOPIC} metadata",
                                    interval=0.1)
                leader = states[0].leader
                r = Round(number, leader)
                rounds.append(r)
                print(f"kill {number}/{kills}: broker {leader} (ISR {list(states[0].isr)}) ...",
                      end="", flush=True)
                t0 = time.monotonic()
                cluster.kill(leader)
                ok = _measure(cluster, probe, r, t0)
                print(f" new leader {r.new_leader} in metadata after "
                      f"{_fmt(r.leader_s)}, first ack after {_fmt(r.unavailable_s)}"
                      + (f"; {'; '.join(r.notes)}" if r.notes else ""), flush=True)
                if not ok:
                    failed = True
                    break
                restarted = time.monotonic()
                cluster.restart(leader)
                try:
                    cluster.wait_for_partitions(
                        TOPIC, lambda s, n=leader: s.leader >= 0 and n in s.isr,
                        REJOIN_TIMEOUT_S, f"broker {leader} back in the ISR", consecutive=3)
                except TimeoutError as exc:
                    r.notes.append(str(exc))
                    print(f"  {exc}", flush=True)
                    failed = True
                    break
                r.rejoin_s = time.monotonic() - restarted
                cluster.note(f"broker {leader} back in the ISR after {r.rejoin_s:.2f} s")
                if probe.wait_ack_after(time.monotonic(), RECOVERY_TIMEOUT_S) is None:
                    r.notes.append("no ack after the rejoin")
                    failed = True
                    break
        finally:
            missing = probe.stop()
        lines += _report(rounds, probe, missing)
        if not failed:
            ok, check = check_acked(probe.sent, read_partition(
                cluster.bootstrap, TOPIC, cluster.client_logger("check")))
            lines += check
            failed = not ok
        if failed:
            lines.append(f"broker output: {cluster.log_path} (kept)")
            cluster.keep = True
    return (1 if failed else 0), lines


def _measure(cluster: BenchCluster, probe: Probe, r: Round, t0: float) -> bool:
    """Poll the metadata for a new leader and wait for the first post-kill ack."""
    deadline = t0 + RECOVERY_TIMEOUT_S
    while time.monotonic() < deadline:
        if r.leader_s is None:
            states = cluster.partitions(TOPIC)
            answered = time.monotonic()
            if states is not None and 0 <= states[0].leader != r.killed:
                r.leader_s, r.new_leader = answered - t0, states[0].leader
                cluster.note(f"new leader {r.new_leader} in metadata after {r.leader_s:.2f} s")
        if r.unavailable_s is None:
            acked = probe.first_ack_after(t0)
            if acked is not None:
                r.unavailable_s = acked - t0
                cluster.note(f"first post-kill ack after {r.unavailable_s:.2f} s")
        if r.leader_s is not None and r.unavailable_s is not None:
            return True
        if probe.crashed is not None:
            r.notes.append(f"probe thread died: {probe.crashed!r}")
            return False
        time.sleep(0.05)
    r.notes.append(f"FAILOVER DID NOT COMPLETE within {RECOVERY_TIMEOUT_S:.0f} s")
    return False


def _fmt(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds:.2f} s"


def _report(rounds: list[Round], probe: Probe, missing: int) -> list[str]:
    lines = ["", f"{'kill':>4} {'broker':>6} {'new leader':>10} {'leader in metadata':>18} "
             f"{'unavailable':>11} {'rejoined ISR':>12}"]
    for r in rounds:
        lines.append(f"{r.number:>4} {r.killed:>6} {r.new_leader:>10} {_fmt(r.leader_s):>18} "
                     f"{_fmt(r.unavailable_s):>11} {_fmt(r.rejoin_s):>12}"
                     + (f"  {'; '.join(r.notes)}" if r.notes else ""))
    lines.append("")
    lines.append(summary("unavailability (kill -> first ack of a value sent after it)",
                         [r.unavailable_s for r in rounds if r.unavailable_s is not None]))
    lines.append(summary("new leader in metadata (kill -> first answer naming it)",
                         [r.leader_s for r in rounds if r.leader_s is not None]))
    lines.append(summary("killed broker back in the ISR (restart -> 3 answers in a row)",
                         [r.rejoin_s for r in rounds if r.rejoin_s is not None]))
    with probe.lock:
        sent = len(probe.sent)
        acked = sum(1 for s in probe.sent if s.acked_at is not None)
        errors = [s for s in probe.sent if s.error is not None]
        client_errors = list(probe.client_errors)
    lines.append(f"probe: {sent} sent, {acked} acked, {len(errors)} failed deliveries, "
                 f"{missing} without a delivery report at the end")
    for s in errors[:5]:
        lines.append(f"  failed: value {s.seq}: {s.error}")
    lines.append(f"client error callbacks (connection failures and the like): "
                 f"{len(client_errors)}")
    return lines
