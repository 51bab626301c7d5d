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

BEHIND = "a request arrived behind"  # the result of a parked fetch's future when woken so


class HeadOfLine:
    """One connection's waiting fetches; the front end calls ``request_arrived`` for each
    request other than a fetch that it reads, and wakes them."""

    __slots__ = ("_parked",)

    def __init__(self) -> None:
        self._parked: list[asyncio.Future[object]] = []

    def park(self, fut: asyncio.Future[object]) -> None:
        """``fut`` (the fetch's wait) is resolved with ``BEHIND`` by the next request."""
        self._parked.append(fut)

    def unpark(self, fut: asyncio.Future[object]) -> None:
        if fut in self._parked:
            self._parked.remove(fut)

    def request_arrived(self) -> None:
        if not self._parked:
            return
        parked, self._parked = self._parked, []
        for fut in parked:
            if not fut.done():
                fut.set_result(BEHIND)
