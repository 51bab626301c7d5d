"""A Jepsen-queue-style checker for Kafka histories (notes/perf_reliability.md, B1).

A history is what the clients saw:

* sends: every value a producer tried to write, whether the broker acknowledged it and, if so,
  at which (partition, offset); failed or indeterminate sends are kept as attempted-not-acked;
* reads: sequences of (offset, value) per partition, each from one consumer session (a session
  reads forward from one position, so its offsets must rise one by one);
* the final read: every partition drained from the beginning to the high watermark once all
  writes are over. It is the authoritative log.

The anomalies, named after jepsen.tests.kafka where there is a name:

* ``lost``: a value known to be written (acknowledged, or seen by any read) that is missing
  from the final log (Jepsen's lost-write; "unseen" coincides with it after a full drain);
* ``duplicates``: a value at more than one (partition, offset); allowed without idempotence;
* ``inconsistent``: one (partition, offset) holding two different values across the sends'
  acknowledgements and all reads (inconsistent-offsets);
* ``misplaced``: a value that is in the final log, but not at the offset its ack reported;
* ``nonmonotonic``: offsets within one read session not strictly increasing (nonmonotonic-poll);
* ``skipped``: offsets within one read session jumping by more than one (poll-skip); a log
  without transactions or compaction has no holes, so every gap is an anomaly;
* ``unexpected``: a value read that no producer ever sent;
* ``nonmonotonic_send``: one producer's acknowledged sends to a partition whose offsets do not
  rise with its send order (nonmonotonic-send); only the idempotent producer promises this.
"""

from __future__ import annotations

import threading
from collections import defaultdict, deque
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

Value = Hashable  # bytes from confluent_kafka, str in synthetic histories
Record = tuple[int, Value]  # (offset, value)

FINAL = "final"


@dataclass(frozen=True, slots=True)
class Send:
    """One attempted write. ``acked`` sends carry the partition and offset of the ack."""

    value: Value
    partition: int | None = None
    offset: int | None = None
    acked: bool = True
    process: Hashable | None = None  # the producer, for nonmonotonic-send
    seq: int | None = None  # its send order


@dataclass(frozen=True, slots=True)
class Read:
    """What one consumer session read from one partition, in delivery order."""

    partition: int
    records: Sequence[Record]
    session: Hashable = "poll"


@dataclass
class QueueReport:
    attempted: int = 0
    acked: int = 0
    consumed: int = 0  # records in the final log
    unacked_seen: int = 0  # attempted, not acknowledged, yet in the final log (indeterminate)
    reads: int = 0  # records read by non-final sessions
    lost: list[tuple[Value, str]] = field(default_factory=list)
    duplicates: list[tuple[Value, list[tuple[int, int]]]] = field(default_factory=list)
    inconsistent: list[tuple[int, int, list[Value]]] = field(default_factory=list)
    misplaced: list[tuple[Value, tuple[int, int], list[tuple[int, int]]]] = field(
        default_factory=list)
    nonmonotonic: list[tuple[Hashable, int, int, int]] = field(default_factory=list)
    skipped: list[tuple[Hashable, int, int, int]] = field(default_factory=list)
    unexpected: list[tuple[Value, list[tuple[int, int]]]] = field(default_factory=list)
    nonmonotonic_send: list[tuple[Hashable, int, tuple[int, int], tuple[int, int]]] = field(
        default_factory=list)

    ALWAYS = ("lost", "inconsistent", "misplaced", "nonmonotonic", "skipped", "unexpected")
    IDEMPOTENT = ("duplicates", "nonmonotonic_send")

    def anomalies(self, idempotent: bool) -> dict[str, list[Any]]:
        """The non-empty anomaly lists that make the history invalid."""
        names = self.ALWAYS + (self.IDEMPOTENT if idempotent else ())
        return {name: getattr(self, name) for name in names if getattr(self, name)}

    def ok(self, idempotent: bool) -> bool:
        return not self.anomalies(idempotent)

    def summary(self, examples: int = 5) -> str:
        lines = [
            f"attempted={self.attempted} acked={self.acked} consumed={self.consumed} "
            f"unacked_seen={self.unacked_seen} polled={self.reads}",
        ]
        for name in self.ALWAYS + self.IDEMPOTENT:
            found = getattr(self, name)
            lines.append(f"{name}={len(found)}" + (f" e.g. {found[:examples]!r}" if found else ""))
        return "\n".join(lines)


def check_queue(
    sends: Iterable[Send],
    final: Mapping[int, Sequence[Record]],
    reads: Iterable[Read] = (),
    contiguous: bool = True,
) -> QueueReport:
    """Check one history. Values must be unique per send (the workload's job)."""
    by_value: dict[Value, Send] = {}
    for send in sends:
        if send.value in by_value:
            raise ValueError(f"value {send.value!r} sent twice; values must be unique")
        by_value[send.value] = send
    acked = {v: s for v, s in by_value.items() if s.acked}
    sessions = [Read(p, records, FINAL) for p, records in sorted(final.items())] + list(reads)
    report = QueueReport(attempted=len(by_value), acked=len(acked))

    # Order within each session: strictly increasing, and (without holes) by exactly one.
    for read in sessions:
        previous: int | None = None
        for offset, _ in read.records:
            if previous is not None:
                if offset <= previous:
                    report.nonmonotonic.append((read.session, read.partition, previous, offset))
                elif contiguous and offset != previous + 1:
                    report.skipped.append((read.session, read.partition, previous, offset))
            previous = offset

    # Which values each (partition, offset) held, per the acks and every read.
    at: dict[tuple[int, int], set[Value]] = defaultdict(set)
    for send in acked.values():
        if send.partition is not None and send.offset is not None and send.offset >= 0:
            at[(send.partition, send.offset)].add(send.value)
    final_positions: dict[Value, set[tuple[int, int]]] = defaultdict(set)
    read_positions: dict[Value, set[tuple[int, int]]] = defaultdict(set)  # other sessions
    for read in sessions:
        positions = final_positions if read.session == FINAL else read_positions
        for offset, value in read.records:
            at[(read.partition, offset)].add(value)
            positions[value].add((read.partition, offset))
            if read.session != FINAL:
                report.reads += 1
            else:
                report.consumed += 1
    report.inconsistent = [
        (p, o, sorted(values, key=repr)) for (p, o), values in sorted(at.items()) if len(values) > 1
    ]

    all_positions: dict[Value, set[tuple[int, int]]] = defaultdict(set)
    for value, positions in [*final_positions.items(), *read_positions.items()]:
        all_positions[value] |= positions
    for value, positions in all_positions.items():
        if len(positions) > 1:
            report.duplicates.append((value, sorted(positions)))
        if value not in by_value:
            report.unexpected.append((value, sorted(positions)))

    # Known-written values must survive into the final log, at the offset they were acked at.
    for value, send in acked.items():
        seen = final_positions.get(value)
        if not seen:
            report.lost.append((value, f"acked at {send.partition}/{send.offset}"))
        elif send.offset is not None and send.offset >= 0 and (
                (send.partition, send.offset) not in seen):
            report.misplaced.append((value, (send.partition, send.offset), sorted(seen)))
    for value, positions in read_positions.items():
        if value not in acked and value in by_value and value not in final_positions:
            report.lost.append((value, f"read at {sorted(positions)} but not acked"))
    report.unacked_seen = sum(
        1 for v, s in by_value.items() if not s.acked and v in final_positions)

    # One producer's acknowledged sends to one partition land in its send order.
    per_producer: dict[tuple[Hashable, int], list[tuple[int, int]]] = defaultdict(list)
    for send in acked.values():
        if (send.process is not None and send.seq is not None and send.partition is not None
                and send.offset is not None and send.offset >= 0):
            per_producer[(send.process, send.partition)].append((send.seq, send.offset))
    for (process, partition), pairs in sorted(per_producer.items(), key=repr):
        pairs.sort()
        for before, after in pairwise(pairs):
            if after[1] <= before[1]:
                report.nonmonotonic_send.append((process, partition, before, after))

    report.duplicates.sort(key=repr)
    report.unexpected.sort(key=repr)
    report.lost.sort(key=repr)
    report.misplaced.sort(key=repr)
    return report


@dataclass
class _SendState:
    partition: int | None
    process: Hashable | None
    seq: int | None
    attempted: bool = True
    offset: int | None = None
    acked: bool = False
    failed: bool = False


class History:
    """A recorder for a live workload: producer threads, their delivery callbacks, consumers.

    ``attempt``, ``ack``, ``fail`` and ``read`` take no lock: they append an event to a deque
    (atomic under the GIL). They run inside client callbacks, and confluent_kafka can call a
    callback with a Python exception already pending (seen after a fatal idempotent-producer
    error): a ``with lock:`` there acquires the lock and then fails, leaving it held forever.
    The queries fold the pending events in under a lock, on the querying thread.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._events: deque[tuple[Any, ...]] = deque()
        self._sends: dict[Value, _SendState] = {}
        self._acked: dict[int | None, int] = defaultdict(int)
        self._reads: dict[tuple[Hashable, int], list[Record]] = defaultdict(list)
        self._final: dict[int, list[Record]] = {}
        self._twice: list[Value] = []
        self.errors: list[str] = []  # client-side errors worth printing (not anomalies)

    # -- recording (lock-free; safe in client callbacks) -------------------------------------

    def attempt(self, value: Value, partition: int | None = None,
                process: Hashable | None = None, seq: int | None = None) -> None:
        self._events.append(("attempt", value, partition, process, seq))

    def ack(self, value: Value, partition: int, offset: int) -> None:
        self._events.append(("ack", value, partition, offset))

    def fail(self, value: Value, error: object = None) -> None:
        self._events.append(("fail", value))

    def read(self, session: Hashable, partition: int, offset: int, value: Value) -> None:
        self._events.append(("read", session, partition, offset, value))

    def note(self, message: str) -> None:
        self.errors.append(message)

    def set_final(self, partition: int, records: Sequence[Record]) -> None:
        with self._lock:
            self._final[partition] = list(records)

    def _fold(self) -> None:
        """Apply the pending events; the caller holds the lock."""
        events = self._events
        while events:
            kind, value, *rest = events.popleft()
            if kind == "attempt":
                partition, process, seq = rest
                state = self._sends.get(value)
                if state is None:
                    self._sends[value] = _SendState(partition, process, seq)
                elif state.attempted:
                    self._twice.append(value)
                else:  # acknowledged before its attempt was recorded
                    state.process, state.seq, state.attempted = process, seq, True
            elif kind == "ack":
                partition, offset = rest
                state = self._sends.setdefault(
                    value, _SendState(partition, None, None, attempted=False))
                if state.acked:
                    self.errors.append(f"second ack for {value!r}: {partition}/{offset}")
                    continue
                state.partition, state.offset, state.acked = partition, offset, True
                self._acked[partition] += 1
                self._acked[None] += 1
            elif kind == "fail":
                state = self._sends.get(value)
                if state is not None:
                    state.failed = True
            else:
                session, partition, offset, read_value = value, *rest
                self._reads[(session, partition)].append((offset, read_value))

    # -- queries -----------------------------------------------------------------------------

    def acked_count(self, partition: int | None = None) -> int:
        with self._lock:
            self._fold()
            return self._acked[partition]

    def acked_end(self, partition: int) -> int:
        """One past the highest acknowledged offset in ``partition`` (0 if none)."""
        with self._lock:
            self._fold()
            return 1 + max((s.offset for s in self._sends.values()
                            if s.acked and s.partition == partition and s.offset is not None),
                           default=-1)

    def counts(self) -> dict[str, int]:
        with self._lock:
            self._fold()
            return {
                "attempted": len(self._sends),
                "acked": self._acked[None],
                "failed": sum(1 for s in self._sends.values() if s.failed and not s.acked),
                "polled": sum(map(len, self._reads.values())),
            }

    def check(self, contiguous: bool = True) -> QueueReport:
        with self._lock:
            self._fold()
            if self._twice:
                raise ValueError(f"values attempted twice: {self._twice[:5]!r}")
            sends = [
                Send(value, s.partition, s.offset, s.acked, s.process, s.seq)
                for value, s in self._sends.items()
            ]
            reads = [Read(p, list(records), session)
                     for (session, p), records in self._reads.items()]
            final = {p: list(records) for p, records in self._final.items()}
        return check_queue(sends, final, reads, contiguous=contiguous)
