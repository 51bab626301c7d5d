"""The share-partition's rules (KIP-932): records acquired once at a time, acknowledged by their
holder only, redelivered after a release or an expired lock up to the delivery limit, the start
offset moving past what is done, the in-flight window bounded, and the stored state enough to
resume after a failover."""

from __future__ import annotations

import random
from copy import deepcopy

import pytest

from broker.share.share_partition import (
    AckBatch,
    AckType,
    Acquired,
    InFlight,
    InvalidRecordState,
    RecordState,
    SharePartition,
    StateBatch,
)

ACCEPT, RELEASE, REJECT, GAP, RENEW = (AckType.ACCEPT, AckType.RELEASE, AckType.REJECT,
                                       AckType.GAP, AckType.RENEW)


def ack(share: SharePartition, member: str, first: int, last: int, *types: int,
        now: float = 0.0) -> None:
    change = share.plan_acknowledge(member, [AckBatch(first, last, tuple(types))], now)
    share.begin(change)
    share.commit(change)


def states(share: SharePartition) -> list[tuple[str, int]]:
    return [(r.state.name[:3], r.delivery_count) for r in share.records]


def test_records_are_acquired_once_and_accepted_by_their_holder() -> None:
    share = SharePartition()
    assert share.acquire("a", 0, 9, 5, now=0) == [Acquired(0, 4, 1)]
    # b's fetch reads from the first available offset: it gets the next five, not a's.
    assert share.next_fetch_offset() == 5
    assert share.acquire("b", 0, 9, 100, now=0) == [Acquired(5, 9, 1)]
    assert share.acquire("c", 0, 9, 100, now=0) == []
    with pytest.raises(InvalidRecordState, match="held by another member"):
        share.plan_acknowledge("b", [AckBatch(0, 4, (ACCEPT,))], 0)
    ack(share, "a", 0, 4, ACCEPT)
    assert share.start_offset == 5  # past everything done
    ack(share, "b", 5, 9, ACCEPT)
    assert (share.start_offset, share.end_offset, list(share.records)) == (10, 10, [])


def test_released_and_expired_records_are_redelivered_up_to_the_limit() -> None:
    share = SharePartition(max_delivery=2, lock_seconds=30)
    share.acquire("a", 0, 3, 10, now=0)
    ack(share, "a", 0, 3, ACCEPT, RELEASE, REJECT, GAP)
    assert states(share) == [("AVA", 1), ("ARC", 1), ("ARC", 1)] and share.start_offset == 1
    assert share.acquire("b", 1, 1, 10, now=100) == [Acquired(1, 1, 2)]
    # The lock runs out: at the limit, the record is archived, not released.
    early = share.plan_expiry(now=129.9)
    assert not early
    expired = share.plan_expiry(now=130)
    share.begin(expired)
    share.commit(expired)
    assert share.start_offset == 4 and not share.records
    assert share.acquire("c", 0, 5, 10, now=200) == [Acquired(4, 5, 1)]


def test_a_release_below_the_limit_and_a_member_leaving() -> None:
    share = SharePartition()
    share.acquire("a", 0, 4, 10, now=0)
    released = share.plan_release("a")
    share.begin(released)
    share.commit(released)
    assert states(share) == [("AVA", 1)] * 5
    assert share.acquire("b", 0, 4, 2, now=1) == [Acquired(0, 1, 2)]
    ack(share, "b", 0, 0, RENEW, now=20)
    assert share.records[0].lock_deadline == 50 and share.records[1].lock_deadline == 31


def test_per_offset_types_and_what_an_acknowledgement_may_not_do() -> None:
    share = SharePartition()
    share.acquire("a", 0, 5, 10, now=0)
    end = (share.start_offset, states(share))
    bad = [
        ([AckBatch(0, 2, (ACCEPT, REJECT))], "do not match the range"),
        ([AckBatch(0, 1, (9,))], "unknown acknowledge type"),
        ([AckBatch(2, 1, (ACCEPT,))], "invalid acknowledgement range"),
        ([AckBatch(0, 2, (ACCEPT,)), AckBatch(2, 3, (ACCEPT,))], "overlapping"),
        ([AckBatch(4, 9, (ACCEPT,))], "past the acquired records"),
    ]
    for batches, why in bad:
        with pytest.raises(InvalidRecordState, match=why):
            share.plan_acknowledge("a", batches, 0)
    assert (share.start_offset, states(share)) == end
    # One bad offset refuses the whole request: nothing changed. Offsets before the SPSO
    # are done already and skipped.
    ack(share, "a", 0, 0, ACCEPT)
    ack(share, "a", 2, 2, ACCEPT)
    with pytest.raises(InvalidRecordState, match="offset 2 is not acquired"):
        share.plan_acknowledge("a", [AckBatch(0, 1, (ACCEPT,)), AckBatch(2, 2, (ACCEPT,))], 0)
    assert share.start_offset == 1 and states(share)[:2] == [("ACQ", 1), ("ACK", 1)]
    ack(share, "a", 1, 1, ACCEPT)
    assert share.start_offset == 3
    ack(share, "a", 3, 5, GAP, RELEASE, ACCEPT)
    assert share.start_offset == 4 and states(share) == [("AVA", 1), ("ACK", 1)]


def test_offsets_being_stored_are_not_touched_by_another_request() -> None:
    share = SharePartition()
    share.acquire("a", 0, 1, 10, now=0)
    change = share.plan_acknowledge("a", [AckBatch(0, 1, (RELEASE,))], 0)
    share.begin(change)
    assert share.acquire("b", 0, 1, 10, now=0) == []  # not available until stored
    with pytest.raises(InvalidRecordState, match="has a change being stored"):
        share.plan_acknowledge("a", [AckBatch(0, 0, (ACCEPT,))], 0)
    assert not share.plan_expiry(now=10**6)
    share.abort(change)  # the write failed: still a's
    assert states(share) == [("ACQ", 1), ("ACQ", 1)]
    ack(share, "a", 0, 1, ACCEPT)
    assert share.start_offset == 2


def test_the_in_flight_window_is_bounded() -> None:
    share = SharePartition(max_in_flight=4)
    assert share.acquire("a", 0, 99, 100, now=0) == [Acquired(0, 3, 1)]
    assert share.acquire("b", 4, 99, 100, now=0) == []
    ack(share, "a", 0, 1, ACCEPT)
    assert share.acquire("b", 4, 99, 100, now=0) == [Acquired(4, 5, 1)]


def test_the_stored_state_restores_the_partition() -> None:
    share = SharePartition(max_delivery=3)
    share.acquire("a", 10, 19, 100, now=0)
    change = share.plan_acknowledge("a", [AckBatch(10, 14, (ACCEPT, RELEASE, REJECT,
                                                            RELEASE, ACCEPT))], 0)
    stored_start, stored = share.start_after(change), share.state_batches(change)
    assert stored_start == 11
    assert stored == [StateBatch(11, 11, RecordState.AVAILABLE, 1),
                      StateBatch(12, 12, RecordState.ARCHIVED, 1),
                      StateBatch(13, 13, RecordState.AVAILABLE, 1),
                      StateBatch(14, 14, RecordState.ACKNOWLEDGED, 1),
                      StateBatch(15, 19, RecordState.AVAILABLE, 1)]
    restored = SharePartition.restored(stored_start, stored, max_delivery=3)
    share.begin(change)
    share.commit(change)
    # Acquired records (15-19) come back available, with their deliveries counted.
    assert restored.start_offset == share.start_offset == 11
    assert states(restored) == [("AVA", 1), ("ARC", 1), ("AVA", 1), ("ACK", 1)] + \
        [("AVA", 1)] * 5
    assert restored.acquire("b", 11, 19, 100, now=0) == [Acquired(11, 11, 2),
                                                         Acquired(13, 13, 2),
                                                         Acquired(15, 19, 2)]


def _first_available(share: SharePartition) -> int:
    """next_fetch_offset as a scan of the whole window (what the index must agree with)."""
    for i, record in enumerate(share.records):
        if record.state is RecordState.AVAILABLE and share.start_offset + i not in share.pending:
            return share.start_offset + i
    return share.end_offset


def _acquired_by_scan(share: SharePartition, member: str, first: int, last: int,
                      max_records: int, now: float) -> tuple[list[Acquired], list[tuple]]:
    """acquire written record by record, on a copy: the runs and the window it leaves."""
    copy = deepcopy(share)
    first = max(first, copy.start_offset)
    if first > copy.end_offset:
        if not copy.records:
            copy.start_offset = first
        while copy.end_offset < first:
            copy.records.append(InFlight(RecordState.ARCHIVED))
    runs: list[Acquired] = []
    offset, taken = first, 0
    while offset <= last and taken < max_records:
        if offset >= copy.end_offset:
            if len(copy.records) >= copy.max_in_flight:
                break
            copy.records.append(InFlight())
        record = copy.records[offset - copy.start_offset]
        if record.state is RecordState.AVAILABLE and offset not in copy.pending:
            record.state, record.member_id = RecordState.ACQUIRED, member
            record.delivery_count += 1
            record.lock_deadline = now + copy.lock_seconds
            taken += 1
            if runs and runs[-1].last_offset == offset - 1 and \
                    runs[-1].delivery_count == record.delivery_count:
                runs[-1] = Acquired(runs[-1].first_offset, offset, record.delivery_count)
            else:
                runs.append(Acquired(offset, offset, record.delivery_count))
        offset += 1
    return runs, [(copy.start_offset, r.state, r.delivery_count, r.member_id, r.lock_deadline)
                  for r in copy.records]


@pytest.mark.parametrize("seed", range(6))
def test_the_indexes_agree_with_a_scan_of_the_window(seed: int) -> None:
    """Random fetches, acknowledgements (accept, release, reject, renew), releases, lock
    expiries, failed stores and transaction markers: after each, the next available offset
    (kept as a lower bound) is the first available record, acquire gives what a record by
    record walk gives, and an expiry round releases exactly the expired records although
    it skips its scan until the soonest lock."""
    rng = random.Random(seed)
    share = SharePartition(max_in_flight=rng.choice((20, 200)), lock_seconds=5, max_delivery=3)
    now, members = 0.0, ["a", "b", "c"]
    open_changes: list = []
    for _ in range(1500):
        now += rng.choice((0, 0.5, 2))
        op = rng.random()
        if op < 0.35:
            member, count = rng.choice(members), rng.randint(1, 25)
            first = share.next_fetch_offset()
            assert first == _first_available(share)
            last = first + rng.randint(0, 40)
            runs, window = _acquired_by_scan(share, member, first, last, count, now)
            assert share.acquire(member, first, last, count, now) == runs
            assert [(share.start_offset, r.state, r.delivery_count, r.member_id,
                     r.lock_deadline) for r in share.records] == window
        elif op < 0.65:
            member = rng.choice(members)
            held = [share.start_offset + i for i, r in enumerate(share.records)
                    if r.state is RecordState.ACQUIRED and r.member_id == member
                    and share.start_offset + i not in share.pending]
            if held:
                first = rng.choice(held)
                last = first
                while last + 1 in held and last - first < 10:
                    last += 1
                ack_type = rng.choice((ACCEPT, ACCEPT, RELEASE, REJECT, RENEW))
                change = share.plan_acknowledge(member, [AckBatch(first, last, (ack_type,))],
                                                now)
                share.begin(change)
                open_changes.append(change)
        elif op < 0.75:
            expired = {share.start_offset + i for i, r in enumerate(share.records)
                       if r.state is RecordState.ACQUIRED and r.lock_deadline <= now
                       and share.start_offset + i not in share.pending}
            change = share.plan_expiry(now)
            assert set(change.updates) == expired
            share.begin(change)
            open_changes.append(change)
        elif op < 0.8:
            change = share.plan_release(rng.choice(members))
            share.begin(change)
            open_changes.append(change)
        elif op < 0.9:
            first = share.start_offset + rng.randrange(len(share.records) + 5)
            share.archive_range(first, first + rng.randint(0, 3))
        if open_changes and rng.random() < 0.6:  # stores land in order; some fail
            change = open_changes.pop(0)
            if rng.random() < 0.15:
                share.abort(change)
            else:
                share.commit(change)
        assert share.next_fetch_offset() == _first_available(share)
        assert all(r.lock_deadline >= share.next_deadline for r in share.records
                   if r.state is RecordState.ACQUIRED)


def test_a_run_continues_past_the_end_offset() -> None:
    """Records in the window never delivered, then new ones past the SPEO: one run."""
    share = SharePartition(start_offset=10)
    share.records.extend([InFlight(), InFlight()])
    assert share.acquire("a", 10, 14, 100, now=0) == [Acquired(10, 14, 1)]
    assert share.next_fetch_offset() == 15 and share.next_deadline == 30
