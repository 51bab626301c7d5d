"""Contact with a remote coordination store, and leases judged so that its outage is forgiven.

A lease proves its holder alive only while the holder can write to the store. When the API
server is down (restarted, paused, unreachable), no broker can renew, so after
``broker.session.timeout.ms`` every lease looks lapsed, although every broker is alive and
serving. Fencing them all then, or having each re-register and hand its leaderships away,
would turn an outage of the coordination store into an outage of Kafka, which ZooKeeper- and
KRaft-based Kafka avoid: brokers keep serving on their last metadata, and a new KRaft
controller gives every broker a full session before fencing it.

So a reader judges a lease by its own contact with the store:

* a lease unexpired now is live;
* a lease that expired after the last answer this reader had from the store is live: the
  store may have been unreachable since, for its holder too, so nothing says the holder
  failed (a decision taken on it could also be written only after the store returns);
* after an outage, a lease live when contact was lost stays live for one lease duration
  from the first answer, time for its holder to renew it;
* any other expired lease lapsed: the store answered after it expired, so its holder could
  have renewed and did not.

Every answer counts, a watch event included; a request that got none (refused, reset,
timed out, 5xx) starts an outage at the last answer before it, and so does one answered only
after ``STALLED_MS`` (a paused server); the next answer ends it. Losses close together count
as one outage, so a flapping server does not cut a grace short.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

log = logging.getLogger(__name__)

# Answered only after this long, a request was waiting on a paused or overloaded server: an
# outage, and its holders get a grace to renew once it answers again.
STALLED_MS = 5000
MERGE_MS = 60_000  # a loss this soon after the last outage ended extends that outage


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(frozen=True, slots=True)
class Outage:
    lost_at_ms: int  # the last answer before it
    back_at_ms: int | None = None  # None while it lasts


class Contact:
    def __init__(self, clock: Callable[[], int] = now_ms) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._last_answer_ms = clock()
        self._outage: Outage | None = None

    @property
    def outage(self) -> Outage | None:
        """The current or latest outage."""
        with self._lock:
            return self._outage

    @property
    def last_answer_ms(self) -> int:
        with self._lock:
            return self._last_answer_ms

    def lapsed(self, expiry_ms: int, duration_ms: int, now: int | None = None) -> bool:
        """Whether a lease that ran to ``expiry_ms`` lapsed, as far as this reader can tell."""
        now = self._clock() if now is None else now
        if expiry_ms > now:
            return False
        with self._lock:
            last_answer, outage = self._last_answer_ms, self._outage
        if expiry_ms > last_answer:
            return False  # not heard from the store since: it may be down for the holder too
        # Live when contact was lost: it had a lease duration to renew since it came back.
        in_grace = (outage is not None and outage.back_at_ms is not None
                    and expiry_ms > outage.lost_at_ms
                    and now < outage.back_at_ms + duration_ms)
        return not in_grace

    @contextlib.contextmanager
    def request(self, unreachable: Callable[[BaseException], bool]) -> Iterator[None]:
        """Around one request to the store: ``unreachable`` tells an exception that means no
        answer (refused, reset, timed out) from one that is the server's own (a conflict)."""
        started = self._clock()
        try:
            yield
        except BaseException as e:
            if unreachable(e):
                self.lost(e)
            else:
                self._answered(started)
            raise
        else:
            self._answered(started)

    def _answered(self, started_ms: int) -> None:
        waited = self._clock() - started_ms
        if waited >= STALLED_MS:  # a paused server answers at last: it was out meanwhile
            self.lost(f"no answer for {waited / 1000:.1f} s")
        self.reached()

    def lost(self, cause: object = None) -> None:
        """No answer: an outage since the last one, unless one is already under way."""
        with self._lock:
            outage = self._outage
            if outage is not None and outage.back_at_ms is None:
                return
            if outage is not None and self._last_answer_ms - outage.back_at_ms < MERGE_MS:
                self._outage = Outage(outage.lost_at_ms)  # flapping: one outage
            else:
                self._outage = Outage(self._last_answer_ms)
            since = self._clock() - self._outage.lost_at_ms
        log.warning("coordination store unreachable (%s), no answer for %.1f s: leases live "
                    "then stay live until a lease duration after it answers again", cause,
                    since / 1000)

    def reached(self) -> None:
        """An answer (a request's, or a watch event)."""
        now = self._clock()
        with self._lock:
            self._last_answer_ms = max(self._last_answer_ms, now)
            outage = self._outage
            if outage is None or outage.back_at_ms is not None:
                return
            self._outage = Outage(outage.lost_at_ms, now)
        log.info("coordination store answers again, after %.1f s",
                 (now - outage.lost_at_ms) / 1000)
