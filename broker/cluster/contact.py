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
* a lease that expired before this reader lost contact is lapsed (its holder stopped
  renewing while renewals were possible);
* a lease still live when contact was lost stays live during the outage, and for one lease
  duration after contact returns, which is time enough for a live holder to renew it.

Contact is lost at the start of a request that failed without an answer from the server
(refused, reset, timed out) or that has been outstanding for ``STALLED_MS`` (a paused
server answers nothing, and a request waits out its whole timeout), and it is back at the
first answer of any kind. Losses close together count as one outage, so a flapping server
does not cut a grace short.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

log = logging.getLogger(__name__)

STALLED_MS = 1000
MERGE_MS = 60_000  # a loss this soon after the last outage ended extends that outage


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(frozen=True, slots=True)
class Outage:
    lost_at_ms: int
    back_at_ms: int | None = None  # None while it lasts


class Contact:
    def __init__(self, clock: Callable[[], int] = now_ms) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._outage: Outage | None = None
        self._in_flight: dict[int, int] = {}
        self._tokens = itertools.count()

    @property
    def outage(self) -> Outage | None:
        """The current or latest outage, counting a request stalled past ``STALLED_MS``."""
        now = self._clock()
        with self._lock:
            outage = self._outage
            stalled = min(self._in_flight.values(), default=None)
        if stalled is not None and now - stalled >= STALLED_MS and (
                outage is None or outage.back_at_ms is not None):
            return self._merged(outage, stalled)
        return outage

    def lapsed(self, expiry_ms: int, duration_ms: int, now: int | None = None) -> bool:
        """Whether a lease that ran to ``expiry_ms`` lapsed, as this reader can tell."""
        now = self._clock() if now is None else now
        if expiry_ms > now:
            return False
        outage = self.outage
        if outage is None or expiry_ms <= outage.lost_at_ms:
            return True
        return outage.back_at_ms is not None and now >= outage.back_at_ms + duration_ms

    @contextlib.contextmanager
    def request(self, unreachable: Callable[[BaseException], bool]) -> Iterator[None]:
        """Around one request to the store: ``unreachable`` tells an exception that means no
        answer (refused, reset, timed out) from one that is the server's own (a conflict)."""
        started = self._clock()
        token = next(self._tokens)
        with self._lock:
            self._in_flight[token] = started
        try:
            yield
        except BaseException as e:
            if unreachable(e):
                self.lost(started, e)
            else:
                self._answered(started)
            raise
        else:
            self._answered(started)
        finally:
            with self._lock:
                self._in_flight.pop(token, None)

    def _answered(self, started_ms: int) -> None:
        waited = self._clock() - started_ms
        if waited >= STALLED_MS:  # a paused server answers at last: it was out meanwhile
            self.lost(started_ms, f"no answer for {waited / 1000:.1f} s")
        self.reached()

    def lost(self, at_ms: int, cause: object = None) -> None:
        """No answer since ``at_ms``, or since the oldest request still waiting for one."""
        with self._lock:
            at_ms = min([at_ms, *self._in_flight.values()])
            outage = self._outage
            if outage is not None and outage.back_at_ms is None:
                if at_ms < outage.lost_at_ms:  # a request that stalled earlier tells it now
                    self._outage = Outage(at_ms)
                return
            self._outage = self._merged(outage, at_ms)
        log.warning("coordination store unreachable since %d ms ago (%s): leases live then "
                    "stay live until a lease duration after it answers again",
                    self._clock() - at_ms, cause)

    def reached(self) -> None:
        now = self._clock()
        with self._lock:
            outage = self._outage
            if outage is None or outage.back_at_ms is not None:
                return
            self._outage = Outage(outage.lost_at_ms, now)
        log.info("coordination store answers again, after %.1f s", (now - outage.lost_at_ms)
                 / 1000)

    @staticmethod
    def _merged(previous: Outage | None, lost_at_ms: int) -> Outage:
        if previous is not None and previous.back_at_ms is not None \
                and lost_at_ms - previous.back_at_ms < MERGE_MS:
            return Outage(previous.lost_at_ms)
        return Outage(lost_at_ms)
