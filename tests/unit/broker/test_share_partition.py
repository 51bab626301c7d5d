"""The share-partition's rules (KIP-932): records acquired once at a time, acknowledged by their
holder only, redelivered after a release or an expired lock up to the delivery limit, the start
offset moving past what is done, the in-flight window bounded, and the stored state enough to
resume after a failover."""

from __future__ import annotations

import pytest

from broker.share.share_partition import (
    AckBatch,
    AckType,
    Acquired,
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
