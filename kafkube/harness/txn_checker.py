"""A checker for transactional histories, as Jepsen checked Bufstream (issue 28).

The queue checker (kafkube/harness/queue_checker.py) judges single records; this one judges
transactions, each of which writes records to several partitions and then commits or aborts.
A history is what the clients saw:

* transactions: every record a transactional producer tried to write (its partition, its
  value and, if a delivery report came, its offset) and the transaction's **outcome as the
  client saw it**: ``committed`` (``commit_transaction`` returned), ``aborted`` (the client
  never asked to commit, or ``abort_transaction`` returned after a failed commit) or
  ``unknown`` (a commit was asked for and no definite answer came: a timeout, a fatal
  error). Values are unique; ``value_of`` names the transaction and the record's index;
* polls: what read_committed consumers read while the transactions went on, as sessions that
  each read one partition forward from a known offset;
* the final read: every partition drained read_committed, once all writes were over and the
  brokers restarted, with the partition's end when the drain began and the offset it reached.

The anomalies:

* ``aborted_reads``: a record of an aborted transaction read by anyone (Jepsen's G1a);
* ``torn``: a transaction some of whose records were read while, after a complete final
  read, others are missing. Seeing part of a transaction while reading is allowed (the rest
  may not be readable *yet*); after the final read it is not. An ``unknown`` transaction may
  have committed or aborted, but either way it is whole or absent;
* ``lost``: a record of a committed transaction (or one read by anyone, so known written)
  missing from the final read where the drain read past its offset or reached the
  partition's end;
* ``unread``: the same record where the drain stopped before the partition's end and before
  its offset: neither lost nor fine, it fails the check as well, reported apart;
* ``duplicates``: a value at more than one (partition, offset) (the transactional producer
  is idempotent, so never allowed);
* ``nonmonotonic``: offsets within one session not strictly increasing (out of offset order,
  or one record read twice);
* ``skipped``: a session that read offsets ``a`` and then ``b`` (or started at ``a``) while
  the final read holds a record between them: a read_committed consumer that passed a
  committed record by (the log has holes, markers and aborted records, so offsets alone
  cannot tell);
* ``inconsistent``: one (partition, offset) holding two values across delivery reports and
  reads;
* ``misplaced``: a record in the final read at another offset than its delivery report gave;
* ``unexpected``: a value read that no transaction wrote.
"""

from __future__ import annotations

import json
import threading
import time
from collections import defaultdict, deque
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from itertools import pairwise
from pathlib import Path
from typing import Any

Record = tuple[int, str]  # (offset, value)


class Outcome(StrEnum):
    COMMITTED = "committed"
    ABORTED = "aborted"
    UNKNOWN = "unknown"


def value_of(txn: str, index: int, count: int) -> str:
    """A record's value: its transaction, its index in it and the transaction's size, so a
    value read alone says where it belongs (``/`` never occurs in a transaction's name)."""
    assert "/" not in txn, txn
    return f"{txn}/{index}/{count}"


@dataclass(frozen=True, slots=True)
class Write:
    """One record of a transaction; ``offset`` from its delivery report, if one came."""

    partition: int
    value: str
    offset: int | None = None


@dataclass(frozen=True, slots=True)
class Txn:
    name: str
    writes: tuple[Write, ...]
    outcome: Outcome
    process: str = ""
    notes: tuple[str, ...] = ()  # the client's errors, kept as evidence


@dataclass(frozen=True, slots=True)
class Poll:
    """What one consumer session read from one partition, in delivery order. ``start``,
    when known, is the offset the session began at (a record before the first one read,
    in the final read, was skipped)."""

    session: Hashable
    partition: int
    records: Sequence[Record]
    start: int | None = None


@dataclass(frozen=True, slots=True)
class Drained:
    """The final read of one partition: the records, the partition's end (high watermark)
    when the drain began, and the offset the drain reached (its next position)."""

    records: Sequence[Record]
    end: int
    reached: int

    @property
    def complete(self) -> bool:
        return self.reached >= self.end


@dataclass
class TxnReport:
    transactions: dict[str, int] = field(default_factory=dict)  # by outcome
    unknown_committed: int = 0  # unknown ones found whole
    unknown_absent: int = 0  # unknown ones found nowhere
    records_written: int = 0  # records of all transactions
    records_committed: int = 0  # records of committed transactions
    records_delivered: int = 0  # records with an offset from a delivery report
    aborted_delivered: int = 0  # of them, of aborted transactions: what G1a could catch
    final_records: int = 0
    polled: int = 0
    aborted_reads: list[tuple[Hashable, int, int, str]] = field(default_factory=list)
    torn: list[tuple[str, str, list[str], list[str]]] = field(default_factory=list)
    lost: list[tuple[str, str]] = field(default_factory=list)
    unread: list[tuple[str, str]] = field(default_factory=list)
    duplicates: list[tuple[str, list[tuple[int, int]]]] = field(default_factory=list)
    nonmonotonic: list[tuple[Hashable, int, int, int]] = field(default_factory=list)
    skipped: list[tuple[Hashable, int, int, int, int]] = field(default_factory=list)
    inconsistent: list[tuple[int, int, list[str]]] = field(default_factory=list)
    misplaced: list[tuple[str, tuple[int, int], list[tuple[int, int]]]] = field(
        default_factory=list)
    unexpected: list[tuple[str, list[tuple[int, int]]]] = field(default_factory=list)

    ANOMALIES = ("aborted_reads", "torn", "lost", "unread", "duplicates", "nonmonotonic",
                 "skipped", "inconsistent", "misplaced", "unexpected")

    def anomalies(self) -> dict[str, list[Any]]:
        """The non-empty anomaly lists: any of them fails the history."""
        return {name: getattr(self, name) for name in self.ANOMALIES if getattr(self, name)}

    def ok(self) -> bool:
        return not self.anomalies()

    def counts(self) -> dict[str, int]:
        return {name: len(getattr(self, name)) for name in self.ANOMALIES}

    def summary(self, examples: int = 5) -> str:
        lines = [
            f"transactions {self.transactions} (unknown: {self.unknown_committed} found "
            f"whole, {self.unknown_absent} absent); records written {self.records_written}, "
            f"committed {self.records_committed}, delivered {self.records_delivered} "
            f"({self.aborted_delivered} of aborted transactions), "
            f"final read {self.final_records}, "
            f"polled {self.polled}",
        ]
        for name in self.ANOMALIES:
            found = getattr(self, name)
            lines.append(f"{name}={len(found)}" + (f" e.g. {found[:examples]!r}" if found else ""))
        return "\n".join(lines)


def _missing(write: Write, drained: Drained | None) -> str:
    """Why a record absent from the final read is lost ("lost: ...") or only unread
    ("unread: ..."); the drain's coverage decides."""
    if drained is None:
        return "unread: partition not drained"
    if write.offset is not None and write.offset < drained.reached:
        return f"lost: the drain read past its offset {write.offset}"
    if drained.complete:
        return (f"lost: the partition ends at {drained.end}"
                + ("" if write.offset is None else f", its offset was {write.offset}"))
    return (f"unread: the drain reached {drained.reached} of {drained.end}"
            + ("" if write.offset is None else f", its offset is {write.offset}"))


def check_transactions(txns: Iterable[Txn], final: Mapping[int, Drained],
                       polls: Iterable[Poll] = ()) -> TxnReport:
    """Judge one history (see the module's docstring). Values must be unique."""
    txns = list(txns)
    owner: dict[str, Txn] = {}
    for txn in txns:
        for write in txn.writes:
            if write.value in owner:
                raise ValueError(f"value {write.value!r} written twice; values must be unique")
            owner[write.value] = txn
    polls = list(polls)
    report = TxnReport(records_written=len(owner))
    for outcome in Outcome:
        report.transactions[outcome.value] = sum(t.outcome is outcome for t in txns)
    report.records_committed = sum(len(t.writes) for t in txns if t.outcome is Outcome.COMMITTED)

    final_at: dict[str, set[tuple[int, int]]] = defaultdict(set)
    read_at: dict[str, set[tuple[int, int]]] = defaultdict(set)  # by polls
    held: dict[tuple[int, int], set[str]] = defaultdict(set)
    final_offsets: dict[int, list[int]] = {}
    for partition, drained in final.items():
        final_offsets[partition] = sorted(offset for offset, _ in drained.records)
        for offset, value in drained.records:
            final_at[value].add((partition, offset))
            held[(partition, offset)].add(value)
            report.final_records += 1
    sessions = [Poll("final", p, d.records, 0) for p, d in sorted(final.items())] + polls
    for poll in polls:
        for offset, value in poll.records:
            read_at[value].add((poll.partition, offset))
            held[(poll.partition, offset)].add(value)
            report.polled += 1
    for txn in txns:
        for write in txn.writes:
            if write.offset is not None and write.offset >= 0:
                report.records_delivered += 1
                report.aborted_delivered += txn.outcome is Outcome.ABORTED
                held[(write.partition, write.offset)].add(write.value)
                found = final_at.get(write.value)
                if found and (write.partition, write.offset) not in found:
                    report.misplaced.append(
                        (write.value, (write.partition, write.offset), sorted(found)))

    _check_sessions(report, sessions, final_offsets)
    report.inconsistent = [(p, o, sorted(values)) for (p, o), values in sorted(held.items())
                           if len(values) > 1]
    for value in sorted(final_at.keys() | read_at.keys()):
        positions = sorted(final_at.get(value, set()) | read_at.get(value, set()))
        if len(positions) > 1:
            report.duplicates.append((value, positions))
        if value not in owner:
            report.unexpected.append((value, positions))

    for session, partition, records in ((p.session, p.partition, p.records) for p in sessions):
        for offset, value in records:
            txn = owner.get(value)
            if txn is not None and txn.outcome is Outcome.ABORTED:
                report.aborted_reads.append((session, partition, offset, value))

    for txn in txns:
        if txn.outcome is Outcome.ABORTED:
            continue
        seen = [w.value for w in txn.writes if w.value in final_at or w.value in read_at]
        if txn.outcome is Outcome.UNKNOWN and not seen:
            report.unknown_absent += 1
            continue  # it may have aborted: absent is fine
        # Committed, or seen by someone (so committed): every record must be there.
        missing: list[str] = []
        unread = False
        for write in txn.writes:
            if write.value in final_at:
                continue
            why = _missing(write, final.get(write.partition))
            if why.startswith("unread"):
                report.unread.append((write.value, f"{txn.outcome.value}; {why}"))
                unread = True
                continue
            missing.append(write.value)
            if txn.outcome is Outcome.COMMITTED or write.value in read_at:
                report.lost.append((write.value, f"{txn.outcome.value}; {why}"))
        if seen and missing:
            report.torn.append((txn.name, txn.outcome.value, seen, missing))
        elif txn.outcome is Outcome.UNKNOWN and not missing and not unread:
            report.unknown_committed += 1
    return report


def _check_sessions(report: TxnReport, sessions: list[Poll],
                    final_offsets: Mapping[int, list[int]]) -> None:
    """Offset order within each session, and no record of the final read passed over."""
    from bisect import bisect_right

    for poll in sessions:
        offsets = [offset for offset, _ in poll.records]
        for before, after in pairwise(offsets):
            if after <= before:
                report.nonmonotonic.append((poll.session, poll.partition, before, after))
        if poll.session == "final":
            continue  # its own holes are the log's
        known = final_offsets.get(poll.partition, [])
        steps = pairwise(([poll.start - 1] if poll.start is not None else []) + offsets)
        for before, after in steps:
            if after <= before + 1:
                continue
            # The first offset of the final read in (before, after), if any.
            i = bisect_right(known, before)
            if i < len(known) and known[i] < after:
                report.skipped.append((poll.session, poll.partition, before, after, known[i]))


class TxnHistory:
    """A recorder for a live workload: transactional producer threads, their delivery
    callbacks, consumer threads. Recording takes no lock (an event appended to a deque,
    atomic under the GIL), for kafkube/harness/queue_checker.py's reason: confluent_kafka can call a
    callback with a Python exception pending, and a lock taken there may never be released.
    Queries fold the events in under a lock."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._events: deque[tuple[Any, ...]] = deque()
        self._writes: dict[str, list[Write]] = {}
        self._open: dict[str, str] = {}  # transaction -> process
        self._txns: dict[str, Txn] = {}
        self._offsets: dict[str, int] = {}
        self._polls: dict[tuple[Hashable, int], list[Record]] = defaultdict(list)
        self._starts: dict[tuple[Hashable, int], int] = {}
        self._final: dict[int, Drained] = {}
        self._by_process: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        self._commit_ms: dict[str, list[int]] = defaultdict(list)  # unix ms of each commit

    # -- recording (lock-free; safe in client callbacks) -------------------------------------

    def begin(self, txn: str, process: str) -> None:
        self._events.append(("begin", txn, process))

    def write(self, txn: str, partition: int, value: str) -> None:
        """Before the record is handed to the client: a record that may be written is known."""
        self._events.append(("write", txn, partition, value))

    def delivered(self, value: str, offset: int) -> None:
        self._events.append(("delivered", value, offset))

    def end(self, txn: str, outcome: Outcome, notes: Sequence[str] = ()) -> None:
        self._events.append(("end", txn, outcome, tuple(notes), time.time()))

    def session(self, session: Hashable, partition: int, start: int) -> None:
        self._events.append(("session", session, partition, start))

    def read(self, session: Hashable, partition: int, offset: int, value: str) -> None:
        self._events.append(("read", session, partition, offset, value))

    def set_final(self, partition: int, drained: Drained) -> None:
        with self._lock:
            self._final[partition] = drained

    def _fold(self) -> None:
        """Apply the pending events; the caller holds the lock."""
        while self._events:
            kind, *rest = self._events.popleft()
            if kind == "begin":
                txn, process = rest
                self._open[txn] = process
                self._writes[txn] = []
            elif kind == "write":
                txn, partition, value = rest
                self._writes[txn].append(Write(partition, value))
            elif kind == "delivered":
                value, offset = rest
                self._offsets[value] = offset
            elif kind == "end":
                txn, outcome, notes, at = rest
                process = self._open.pop(txn)
                self._txns[txn] = Txn(txn, (), outcome, process, notes)
                self._by_process[process][outcome.value] += 1
                if outcome is Outcome.COMMITTED:
                    self._commit_ms[process].append(int(at * 1000))
            elif kind == "session":
                session, partition, start = rest
                self._starts[(session, partition)] = start
            else:
                session, partition, offset, value = rest
                self._polls[(session, partition)].append((offset, value))

    # -- queries -----------------------------------------------------------------------------

    def ended(self, process: str | None = None) -> dict[str, int]:
        """Transactions ended, by outcome: of one process, or of all."""
        with self._lock:
            self._fold()
            if process is not None:
                return dict(self._by_process.get(process, {}))
            total: dict[str, int] = defaultdict(int)
            for counts in self._by_process.values():
                for outcome, n in counts.items():
                    total[outcome] += n
            return dict(total)

    def commit_times(self) -> dict[str, list[int]]:
        """Per process, when each of its commits returned (unix milliseconds)."""
        with self._lock:
            self._fold()
            return {process: list(times) for process, times in self._commit_ms.items()}

    def transactions(self) -> list[Txn]:
        """Every ended transaction with its writes and their delivered offsets. One still
        open (a thread that never ended it) counts as unknown: its commit may have been
        asked for."""
        with self._lock:
            self._fold()
            ended = dict(self._txns)
            ended.update({t: Txn(t, (), Outcome.UNKNOWN, p, ("never ended",))
                          for t, p in self._open.items()})
            return [Txn(t.name, tuple(Write(w.partition, w.value, self._offsets.get(w.value))
                                      for w in self._writes[t.name]),
                        t.outcome, t.process, t.notes)
                    for t in ended.values()]

    def polls(self) -> list[Poll]:
        with self._lock:
            self._fold()
            return [Poll(s, p, list(records), self._starts.get((s, p)))
                    for (s, p), records in self._polls.items()]

    def final(self) -> dict[int, Drained]:
        with self._lock:
            return dict(self._final)

    def check(self) -> TxnReport:
        return check_transactions(self.transactions(), self.final(), self.polls())

    def dump(self, path: Path) -> None:
        """The whole history as JSON, the evidence a failed check is judged again from."""
        path.write_text(json.dumps({
            "transactions": [{"name": t.name, "process": t.process, "outcome": t.outcome.value,
                              "notes": t.notes, "writes": [[w.partition, w.value, w.offset]
                                                           for w in t.writes]}
                             for t in self.transactions()],
            "polls": [{"session": str(p.session), "partition": p.partition, "start": p.start,
                       "records": p.records} for p in self.polls()],
            "final": {str(p): {"end": d.end, "reached": d.reached, "records": d.records}
                      for p, d in sorted(self.final().items())},
        }))
