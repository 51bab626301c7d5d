"""A share-partition: what a share group (KIP-932, "queues") knows of one topic partition, on
that partition's leader.

Consumers of a share group do not own partitions: they share them record by record. Each
record between the share-partition start offset (SPSO) and its end offset (SPEO, the first
offset never handed out) is in one state:

    AVAILABLE ──acquire──▶ ACQUIRED ──ACCEPT──▶ ACKNOWLEDGED
        ▲                   │  │
        └──RELEASE, lock────┘  └──REJECT, GAP, or RELEASE/lock at the delivery limit──▶ ARCHIVED

A fetch *acquires* records for one member under a lock of ``group.share.record.lock.duration.ms``
and counts a delivery; the member acknowledges each record: ACCEPT (done), RELEASE (give it
back for redelivery), REJECT (never deliver again), GAP (an offset with no record: compacted,
or a transaction marker), RENEW (keep the lock longer, KIP-1222). A lock that runs out releases
the record. A record delivered ``group.share.delivery.count.limit`` times is archived instead of
released. The SPSO moves past every leading record that is done (ACKNOWLEDGED or ARCHIVED); at
most ``group.share.partition.max.record.locks`` records are in flight (SPEO - SPSO).

State changes that acknowledgements and lock expiries make are written to ``__share_group_state``
before they take effect (``Change``): a change is planned, marked pending so no other request
touches those offsets meanwhile, then committed once stored, or dropped if the write failed.
Acquisition is not stored: after a failover, records that were acquired are available again
with the delivery count last stored, as in Kafka.

Pure data and rules, no I/O and no timers: the share-partition manager drives it.
"""

from __future__ import annotations

import enum
import math
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from itertools import islice

from broker.coordinator.share_state_log import RecordState, StateBatch


class AckType(enum.IntEnum):
    """The acknowledge types of ShareFetch and ShareAcknowledge."""

    GAP = 0
    ACCEPT = 1
    RELEASE = 2
    REJECT = 3
    RENEW = 4


DONE = (RecordState.ACKNOWLEDGED, RecordState.ARCHIVED)


@dataclass(slots=True)
class InFlight:
    """One record between the SPSO and the SPEO."""

    state: RecordState = RecordState.AVAILABLE
    delivery_count: int = 0
    member_id: str = ""  # the member holding it while ACQUIRED
    lock_deadline: float = 0.0  # loop time at which an ACQUIRED record is released


@dataclass(frozen=True, slots=True)
class Acquired:
    """A run of offsets acquired by one fetch, as ShareFetch's AcquiredRecords says it."""

    first_offset: int
    last_offset: int
    delivery_count: int


@dataclass(frozen=True, slots=True)
class AckBatch:
    """An acknowledgement of offsets ``first_offset``..``last_offset``: one type for all of
    them, or one per offset."""

    first_offset: int
    last_offset: int
    types: tuple[int, ...]

    def type_at(self, offset: int) -> int:
        return self.types[0] if len(self.types) == 1 else self.types[offset - self.first_offset]


class InvalidRecordState(Exception):
    """An acknowledgement of records this member does not hold (Kafka's INVALID_RECORD_STATE),
    or an invalid one (INVALID_REQUEST when ``invalid_request``)."""

    def __init__(self, message: str, invalid_request: bool = False) -> None:
        super().__init__(message)
        self.invalid_request = invalid_request


@dataclass
class Change:
    """State changes planned for offsets, to be stored before they take effect."""

    updates: dict[int, InFlight] = field(default_factory=dict)
    lock_expiries: int = 0  # records whose lock ran out (metrics)

    def __bool__(self) -> bool:
        return bool(self.updates)


@dataclass
class SharePartition:
    start_offset: int = 0  # SPSO
    max_delivery: int = 5  # group.share.delivery.count.limit
    max_in_flight: int = 2000  # group.share.partition.max.record.locks
    lock_seconds: float = 30.0  # group.share.record.lock.duration.ms
    # The records from start_offset on, one per offset; len() is SPEO - SPSO.
    records: deque[InFlight] = field(default_factory=deque)
    pending: set[int] = field(default_factory=set)  # offsets with a change being stored
    # Counted here for the metrics: records delivered again, locks that ran out.
    redeliveries: int = 0
    lock_expiries: int = 0
    # Indexes, so that a fetch and the expiry round need not scan the whole window each time
    # (profiled, bench share: the scan for the next available record was 18% of the broker
    # at 16 consumers). No record before ``available_from`` is AVAILABLE and not pending;
    # no ACQUIRED record's lock runs out before ``next_deadline``. Both are lower bounds:
    # whatever may break them lowers them (``_may_be_available``, ``_locked_until``).
    available_from: int = field(default=0, repr=False, compare=False)
    next_deadline: float = field(default=math.inf, repr=False, compare=False)

    @property
    def end_offset(self) -> int:
        """SPEO: the first offset never acquired."""
        return self.start_offset + len(self.records)

    def _at(self, offset: int) -> InFlight:
        return self.records[offset - self.start_offset]

    # -- fetching ----------------------------------------------------------------------------

    def next_fetch_offset(self) -> int:
        """Where a fetch should read from: the first available record, else the SPEO. The
        scan starts at ``available_from`` (nothing before it is available), and leaves it
        at what it found: fetches together walk over each acquired record once, not once
        per fetch."""
        start, pending = self.start_offset, self.pending
        offset = max(self.available_from, start)
        available = RecordState.AVAILABLE
        for record in islice(self.records, offset - start, None):
            if record.state is available and offset not in pending:
                break
            offset += 1
        self.available_from = offset
        return offset

    def _may_be_available(self, offset: int) -> None:
        """``offset`` may have become available (released, or no longer pending)."""
        if offset < self.available_from:
            self.available_from = offset

    def _locked_until(self, deadline: float) -> None:
        """A record is acquired until ``deadline``."""
        if deadline < self.next_deadline:
            self.next_deadline = deadline

    def acquire(self, member_id: str, first: int, last: int, max_records: int,
                now: float) -> list[Acquired]:
        """Acquire for ``member_id`` what is available of the offsets ``first``..``last`` (what a
        log read returned), at most ``max_records`` (a batch may overshoot it, as in Kafka, only
        by the records of one run); offsets past the SPEO join the in-flight window, which
        never exceeds ``max_in_flight``."""
        first = max(first, self.start_offset)
        if first > self.end_offset:
            # The log has no records between (compacted away, or the read began later):
            # nothing there to deliver.
            if not self.records:
                self.start_offset = first
            while self.end_offset < first:
                self.records.append(InFlight(RecordState.ARCHIVED))
        # Runs are kept as plain ints and made Acquired once complete (one object per run,
        # not per record: profiled, the constructors were a third of acquire).
        runs: list[Acquired] = []
        run_first = run_last = run_count = -1
        taken = 0
        deadline = now + self.lock_seconds
        start, end, pending = self.start_offset, self.end_offset, self.pending
        available, acquired = RecordState.AVAILABLE, RecordState.ACQUIRED
        offset = first
        # The records already in the window.
        for record in islice(self.records, first - start, max(first, min(last + 1, end)) - start):
            if taken >= max_records:
                break
            if record.state is available and offset not in pending:
                record.state = acquired
                count = record.delivery_count = record.delivery_count + 1
                record.member_id = member_id
                record.lock_deadline = deadline
                taken += 1
                if count > 1:
                    self.redeliveries += 1
                if run_last == offset - 1 and run_count == count:
                    run_last = offset
                else:
                    if run_first >= 0:
                        runs.append(Acquired(run_first, run_last, run_count))
                    run_first = run_last = offset
                    run_count = count
            offset += 1
        # Offsets past the SPEO join the window, acquired for the first time.
        new = min(last + 1 - offset, max_records - taken, self.max_in_flight - len(self.records))
        if offset == self.end_offset and new > 0:
            self.records.extend(InFlight(acquired, 1, member_id, deadline) for _ in range(new))
            if run_last == offset - 1 and run_count == 1:
                run_last = offset + new - 1
            else:
                if run_first >= 0:
                    runs.append(Acquired(run_first, run_last, run_count))
                run_first, run_last, run_count = offset, offset + new - 1, 1
            taken += new
        if run_first >= 0:
            runs.append(Acquired(run_first, run_last, run_count))
        if taken:
            self._locked_until(deadline)
        return runs

    # -- acknowledging -----------------------------------------------------------------------

    def plan_acknowledge(self, member_id: str, batches: Sequence[AckBatch], now: float
                         ) -> Change:
        """The changes ``batches`` make, checked whole before anything changes: every offset
        (from the SPSO on; those before it are done already) must be acquired by
        ``member_id`` and not being stored. Raises InvalidRecordState otherwise."""
        change = Change()
        previous_last = -1
        for batch in sorted(batches, key=lambda b: b.first_offset):
            if batch.last_offset < batch.first_offset or batch.first_offset < 0:
                raise InvalidRecordState(
                    f"invalid acknowledgement range {batch.first_offset}-{batch.last_offset}",
                    invalid_request=True)
            if batch.first_offset <= previous_last:
                raise InvalidRecordState("overlapping acknowledgement ranges",
                                         invalid_request=True)
            previous_last = batch.last_offset
            span = batch.last_offset - batch.first_offset + 1
            if not batch.types or (len(batch.types) != 1 and len(batch.types) != span):
                raise InvalidRecordState("the acknowledge types do not match the range",
                                         invalid_request=True)
            if any(t not in AckType._value2member_map_ for t in batch.types):
                raise InvalidRecordState(f"unknown acknowledge type in {batch.types}",
                                         invalid_request=True)
            if batch.last_offset >= self.end_offset:
                raise InvalidRecordState(
                    f"offsets {batch.first_offset}-{batch.last_offset} are past the acquired "
                    f"records (the share-partition end offset is {self.end_offset})",
                    invalid_request=True)
            offset = max(batch.first_offset, self.start_offset)
            one = AckType(batch.types[0]) if len(batch.types) == 1 else None
            for record in islice(self.records, offset - self.start_offset,
                                 max(offset, batch.last_offset + 1) - self.start_offset):
                if offset in self.pending:
                    raise InvalidRecordState(f"offset {offset} has a change being stored")
                if record.state is not RecordState.ACQUIRED:
                    raise InvalidRecordState(f"offset {offset} is not acquired "
                                             f"(it is {record.state.name.lower()})")
                if record.member_id != member_id:
                    raise InvalidRecordState(f"offset {offset} is held by another member")
                change.updates[offset] = self._after(
                    record, one if one is not None else AckType(batch.type_at(offset)), now)
                offset += 1
        return change

    def _after(self, record: InFlight, ack: AckType, now: float) -> InFlight:
        if ack is AckType.ACCEPT:
            return InFlight(RecordState.ACKNOWLEDGED, record.delivery_count)
        if ack in (AckType.REJECT, AckType.GAP):
            return InFlight(RecordState.ARCHIVED, record.delivery_count)
        if ack is AckType.RENEW:
            return InFlight(RecordState.ACQUIRED, record.delivery_count, record.member_id,
                            now + self.lock_seconds)
        return self._released(record)

    def _released(self, record: InFlight) -> InFlight:
        state = RecordState.ARCHIVED if record.delivery_count >= self.max_delivery \
            else RecordState.AVAILABLE
        return InFlight(state, record.delivery_count)

    def plan_release(self, member_id: str) -> Change:
        """Every record ``member_id`` holds given back (its share session closed, or it left)."""
        change = Change()
        for offset, record in self._held():
            if record.member_id == member_id:
                change.updates[offset] = self._released(record)
        return change

    def plan_expiry(self, now: float) -> Change:
        """Records whose acquisition lock ran out, released (or archived at the limit).
        Nothing to scan before ``next_deadline`` (it runs every 100 ms, a lock lasts 30 s);
        a scan sets it to the soonest lock of any acquired record, those it releases and
        those being stored included (their change may fail and leave them acquired)."""
        change = Change()
        if now < self.next_deadline:
            return change
        soonest = math.inf
        acquired = RecordState.ACQUIRED
        offset = self.start_offset
        for record in self.records:
            if record.state is acquired:
                soonest = min(soonest, record.lock_deadline)
                if record.lock_deadline <= now and offset not in self.pending:
                    change.updates[offset] = self._released(record)
            offset += 1
        self.next_deadline = soonest
        change.lock_expiries = len(change.updates)
        return change

    def _held(self) -> Iterator[tuple[int, InFlight]]:
        for i, record in enumerate(self.records):
            offset = self.start_offset + i
            if record.state is RecordState.ACQUIRED and offset not in self.pending:
                yield offset, record

    def begin(self, change: Change) -> None:
        """The change is being stored: no other request may touch its offsets meanwhile."""
        self.pending |= change.updates.keys()

    def commit(self, change: Change) -> None:
        """The change is stored: apply it and move the SPSO past the records now done."""
        self.pending -= change.updates.keys()
        self.lock_expiries += change.lock_expiries
        for offset, after in change.updates.items():
            if offset >= self.start_offset:
                self.records[offset - self.start_offset] = after
                if after.state is RecordState.AVAILABLE:
                    self._may_be_available(offset)
                elif after.state is RecordState.ACQUIRED:
                    self._locked_until(after.lock_deadline)
        while self.records and self.records[0].state in DONE:
            self.records.popleft()
            self.start_offset += 1

    def abort(self, change: Change) -> None:
        """Storing the change failed: nothing changes."""
        self.pending -= change.updates.keys()
        if change.updates:  # no longer pending: a fetch may take them if they are available
            self._may_be_available(min(change.updates))

    def archive_range(self, first: int, last: int) -> None:
        """Offsets never to deliver though the log has them (transaction markers, records of
        aborted transactions): archived if not delivered yet. The log decides them the same
        way after a failover, so they are not stored."""
        for offset in range(max(first, self.start_offset), last + 1):
            if offset >= self.end_offset:
                if offset - self.start_offset >= self.max_in_flight:
                    break
                while self.end_offset < offset:  # records before it stay to be delivered
                    self.records.append(InFlight())
                self.records.append(InFlight(RecordState.ARCHIVED))
            else:
                record = self._at(offset)
                if record.state is RecordState.AVAILABLE and record.delivery_count == 0 \
                        and offset not in self.pending:
                    record.state = RecordState.ARCHIVED
        while self.records and self.records[0].state in DONE and \
                self.start_offset not in self.pending:
            self.records.popleft()
            self.start_offset += 1

    def archive_before(self, log_start_offset: int) -> None:
        """Records gone from the log (retention, DeleteRecords) cannot be delivered: the SPSO
        moves to the log's start (never past a record whose change is being stored)."""
        while self.records and self.start_offset < log_start_offset and \
                self.start_offset not in self.pending:
            self.records.popleft()
            self.start_offset += 1
        if not self.records:
            self.start_offset = max(self.start_offset, log_start_offset)

    # -- what is stored ----------------------------------------------------------------------

    def state_batches(self, change: Change | None = None) -> list[StateBatch]:
        """The in-flight window as stored (with ``change`` applied): runs of one state and
        delivery count, acquired records as available (a lock does not survive a failover)."""
        updates = change.updates if change is not None else {}
        start = self.start_after(change) if change is not None else self.start_offset
        out: list[StateBatch] = []
        run: list[int] | None = None  # first, last, state, count of the run being built
        available, acquired = RecordState.AVAILABLE, RecordState.ACQUIRED
        get = updates.get
        offset = start - 1
        # islice, not records[i]: a deque's index walks its blocks from an end.
        for record in islice(self.records, start - self.start_offset, None):
            offset += 1
            if updates:
                record = get(offset, record)
            state = record.state
            if state is acquired:
                state = available
            count = record.delivery_count
            if count == 0 and state is available:
                continue  # never delivered: nothing to remember
            if run is not None and run[1] == offset - 1 and run[2] == state and \
                    run[3] == count:
                run[1] = offset  # one object per run, not per record (profiled: 15%)
                continue
            if run is not None:
                out.append(StateBatch(run[0], run[1], RecordState(run[2]), run[3]))
            run = [offset, offset, state, count]
        if run is not None:
            out.append(StateBatch(run[0], run[1], RecordState(run[2]), run[3]))
        return out

    def done_after(self, change: Change) -> int:
        """Records in the window past the SPSO that are done once ``change`` is applied
        (Kafka's DeliveryCompleteCount, which the group's lag subtracts)."""
        start = self.start_after(change)
        updates = change.updates
        offset = start - 1
        done = 0
        for record in islice(self.records, start - self.start_offset, None):
            offset += 1
            if updates.get(offset, record).state in DONE:
                done += 1
        return done

    def start_after(self, change: Change) -> int:
        """The SPSO once ``change`` is applied (what the write of it stores)."""
        offset = self.start_offset
        updates = change.updates
        for record in self.records:
            if updates.get(offset, record).state not in DONE:
                break
            offset += 1
        return offset

    @classmethod
    def restored(cls, start_offset: int, batches: Iterable[StateBatch], **settings: float
                 ) -> SharePartition:
        """The share-partition as stored: records of the batches in their state, those between
        them available and never delivered."""
        share = cls(start_offset=start_offset, **settings)  # type: ignore[arg-type]
        for batch in sorted(batches, key=lambda b: b.first_offset):
            for offset in range(max(batch.first_offset, start_offset), batch.last_offset + 1):
                while share.end_offset < offset:
                    share.records.append(InFlight())
                if offset == share.end_offset:
                    share.records.append(InFlight(batch.state, batch.delivery_count))
        share.commit(Change())  # leading records already done move the SPSO
        share.next_deadline = -math.inf  # a record stored as acquired: the first round looks
        while share.records and share.records[-1].state is RecordState.AVAILABLE and \
                share.records[-1].delivery_count == 0:
            share.records.pop()
        return share

    # -- what the metrics show ---------------------------------------------------------------

    def in_flight(self) -> int:
        return sum(1 for r in self.records if r.state is RecordState.ACQUIRED)

    def backlog(self, high_watermark: int) -> int:
        """Records not done yet (to deliver, or delivered and not acknowledged): what a
        share group's consumers still have to get through."""
        done = sum(1 for r in self.records if r.state in DONE)
        return max(0, high_watermark - self.start_offset - done)
