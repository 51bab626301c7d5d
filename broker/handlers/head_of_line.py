"""A fetch waiting for data is answered as soon as its connection sends another request.

Kafka answers a connection's requests in the order they came, so a Fetch that waits up to
``max_wait_ms`` for data (``fetch.max.wait.ms``, 500 ms by default) holds every request the
client sent after it on that connection: their answers may only follow the fetch's. Spark's
Kafka source runs into this once per partition it reads: after the poll that returns the
partition's last records, the Java consumer sends its usual prefetch, at the end of the log,
where it waits the full 500 ms; Spark then asks for the partition's earliest and latest
offsets (ListOffsets) on the same connection and waits behind it. That was 2 s of a million
-record read's ~6 task-seconds (the broker's latency histogram: 4 fetches, 2.0 s).

``max_wait_ms`` is a maximum, and an answer with no records is a valid answer at any time
(the client fetches again). So a waiting fetch is answered with what it has the moment its
connection has a request behind it: the client is evidently waiting for that request, and
the fetch's own data would come no sooner. A fetch that found data does not wait at all, and
a client that sends nothing behind its fetches (a tailing consumer, a follower) sees Kafka's
behaviour unchanged. A fetch behind a fetch does not count: a client keeping two in flight
would otherwise turn long polls into a busy loop (none of librdkafka, the Java client,
franz-go does; each keeps one fetch per broker). At worst a client that interleaves other
requests with a long fetch sends one more fetch per request, which it would send anyway
once data came.
"""

from __future__ import annotations

import asyncio
from typing import Any

FETCH, PRODUCE, SHARE_FETCH = 1, 0, 78


class HeadOfLine:
    """One connection's waiting fetches. The front end calls ``request_arrived`` for each
    request it reads; a fetch notes ``arrivals`` when it starts, and a change means a
    request came behind it (whether it was parked then or busy re-reading)."""

    __slots__ = ("_parked", "arrivals")

    def __init__(self) -> None:
        self._parked: list[asyncio.Future[Any]] = []
        self.arrivals = 0

    def park(self, fut: asyncio.Future[Any]) -> None:
        """``fut`` (the fetch's wait) is resolved by the next request that counts."""
        self._parked.append(fut)

    def unpark(self, fut: asyncio.Future[Any]) -> None:
        if fut in self._parked:
            self._parked.remove(fut)

    def request_arrived(self, api_key: int, body: Any) -> None:
        """A request read from the connection. A fetch (or share fetch) does not count (two in
        flight would turn long polls into a busy loop), nor a Produce with acks=0, which
        gets no answer and so waits on nothing."""
        if api_key in (FETCH, SHARE_FETCH) or (
                api_key == PRODUCE and getattr(body, "acks", -1) == 0):
            return
        self.arrivals += 1
        if not self._parked:
            return
        parked, self._parked = self._parked, []
        for fut in parked:
            if not fut.done():
                fut.set_result(None)
