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


def test_without_an_outage_a_lease_lapses_at_its_expiry(clock: Clock) -> None:
    contact = Contact(clock)
    expiry = clock.ms + SESSION
    assert not contact.lapsed(expiry, SESSION)
    clock.ms = expiry
    assert contact.lapsed(expiry, SESSION)


def test_a_lease_live_when_contact_was_lost_stays_live_until_a_duration_after_it_returns(
        clock: Clock) -> None:
    contact = Contact(clock)
    alive = clock.ms + 5000       # renewed 4 s before the outage
    dead = clock.ms - 1           # its holder stopped renewing before the outage
    contact.lost(clock.ms, "connection refused")
    clock.ms += 30_000            # a 30 s outage
    assert not contact.lapsed(alive, SESSION)
    assert contact.lapsed(dead, SESSION)
    contact.reached()
    back = clock.ms
    clock.ms = back + SESSION - 1
    assert not contact.lapsed(alive, SESSION), "no time yet to renew after the outage"
    assert not contact.lapsed(clock.ms + SESSION, SESSION)  # renewed since: judged as usual
    clock.ms = back + SESSION
    assert contact.lapsed(alive, SESSION), "a whole duration passed without a renewal"


def test_a_request_stalled_past_the_threshold_counts_as_lost_contact(clock: Clock) -> None:
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
    clock.ms += STALLED_MS - 1
    assert contact.outage is None
    clock.ms += 1000  # past the lease's expiry, and the request outstanding past the threshold
    assert contact.outage is not None and contact.outage.lost_at_ms == expiry - 500
    assert not contact.lapsed(expiry, SESSION)
    release.set()  # the server answers at last: the outage ends, and its grace begins
    worker.join(10)
    back = clock.ms
    assert contact.outage is not None and contact.outage.back_at_ms == back
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


def test_losses_close_together_are_one_outage(clock: Clock) -> None:
    contact = Contact(clock)
    first = clock.ms
    contact.lost(first)
    clock.ms += 5000
    contact.reached()
    clock.ms += MERGE_MS - 1
    contact.lost(clock.ms)
    assert contact.outage is not None and contact.outage.lost_at_ms == first
    clock.ms += 1000
    contact.reached()
    clock.ms += MERGE_MS
    contact.lost(clock.ms)
    assert contact.outage is not None and contact.outage.lost_at_ms == clock.ms


def test_an_outage_starts_when_the_oldest_unanswered_request_was_sent(clock: Clock) -> None:
    """A paused server: a renewal waits unanswered; then the server dies and a watch reports
    the loss before the renewal fails. The outage began when the renewal was sent."""
    contact = Contact(clock)
    sent = clock.ms
    expiry = sent + 500
    with pytest.raises(ConnectionError), contact.request(lambda e: True):
        clock.ms += 15_000
        contact.lost(clock.ms, "watch: connection reset")
        assert contact.outage is not None and contact.outage.lost_at_ms == sent
        raise ConnectionError("connection reset")
    assert contact.outage is not None and contact.outage.lost_at_ms == sent
    contact.lost(sent - 100, "a request older still fails at last")
    assert contact.outage is not None and contact.outage.lost_at_ms == sent - 100
    assert not contact.lapsed(expiry, SESSION)
