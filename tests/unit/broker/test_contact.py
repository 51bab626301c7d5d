"""Leases judged by the reader's contact with the store: an outage of the store is forgiven,
a broker that stopped renewing while renewals were possible is not."""

from __future__ import annotations

import threading

import pytest

from broker.cluster.contact import MERGE_MS, STALLED_MS, Contact

SESSION = 9000


class Clock:
    def __init__(self) -> None:
        self.ms = 1_000_000

    def __call__(self) -> int:
        return self.ms


@pytest.fixture
def clock() -> Clock:
    return Clock()


def test_a_lease_lapses_once_the_store_answered_after_its_expiry(clock: Clock) -> None:
    contact = Contact(clock)
    expiry = clock.ms + SESSION
    assert not contact.lapsed(expiry, SESSION)
    clock.ms = expiry + 500
    assert not contact.lapsed(expiry, SESSION), "no answer since it expired: cannot tell"
    contact.reached()  # e.g. a watch event: the store is there, the holder did not renew
    assert contact.lapsed(expiry, SESSION)


def test_a_lease_live_when_contact_was_lost_stays_live_until_a_duration_after_it_returns(
        clock: Clock) -> None:
    contact = Contact(clock)
    dead = clock.ms - 1           # its holder stopped renewing before the outage
    alive = clock.ms + 5000       # renewed 4 s before the outage
    contact.reached()
    clock.ms += 100
    contact.lost("connection refused")
    clock.ms += 30_000            # a 30 s outage
    assert not contact.lapsed(alive, SESSION)
    assert contact.lapsed(dead, SESSION)
    contact.reached()
    back = clock.ms
    clock.ms = back + SESSION - 1
    contact.reached()
    assert not contact.lapsed(alive, SESSION), "no time yet to renew after the outage"
    assert contact.lapsed(dead, SESSION)
    clock.ms = back + SESSION
    contact.reached()
    assert contact.lapsed(alive, SESSION), "a whole duration passed without a renewal"


def test_a_paused_store_answering_late_is_an_outage_with_a_grace(clock: Clock) -> None:
    contact = Contact(clock)
    expiry = clock.ms + 500
    inside, release = threading.Event(), threading.Event()

    def stalled_request() -> None:
        with contact.request(lambda e: True):
            inside.set()
            release.wait(10)

    worker = threading.Thread(target=stalled_request)
    worker.start()
    assert inside.wait(10)
    clock.ms += STALLED_MS + 1000  # past the lease's expiry, nothing heard meanwhile
    assert not contact.lapsed(expiry, SESSION)
    release.set()  # the server answers at last: the outage ends, and its grace begins
    worker.join(10)
    back = clock.ms
    outage = contact.outage
    assert outage is not None and outage.back_at_ms == back
    assert not contact.lapsed(expiry, SESSION)
    clock.ms = back + SESSION
    assert contact.lapsed(expiry, SESSION)


def test_answers_prove_contact_and_failures_without_one_lose_it(clock: Clock) -> None:
    contact = Contact(clock)
    with pytest.raises(TimeoutError), contact.request(lambda e: True):
        raise TimeoutError("read timed out")
    lost = contact.outage
    assert lost is not None and lost.back_at_ms is None
    clock.ms += 2000
    with pytest.raises(KeyError), contact.request(lambda e: False):
        raise KeyError("409 Conflict: the server answered")
    assert contact.outage is not None and contact.outage.back_at_ms == clock.ms
    assert contact.last_answer_ms == clock.ms


def test_losses_close_together_are_one_outage(clock: Clock) -> None:
    contact = Contact(clock)
    first = clock.ms
    contact.lost()
    clock.ms += 5000
    contact.reached()
    clock.ms += MERGE_MS - 1
    contact.lost()
    assert contact.outage is not None and contact.outage.lost_at_ms == first
    clock.ms += 1000
    contact.reached()
    clock.ms += MERGE_MS
    contact.reached()
    contact.lost()
    assert contact.outage is not None and contact.outage.lost_at_ms == clock.ms
