"""One connection's produce requests append in the order they arrived.

Kafka reads no further request from a connection until it has answered the last one, so a
producer's pipelined batches reach each partition in the order it sent them. This broker
serves a connection's requests side by side (the acks=all wait of one overlaps the next);
that is safe while a request appends before its first ``await``, which is the rule. A
transaction's first batch in a partition breaks it: its leader asks the transaction
coordinator first (KIP-890 verification). Meanwhile the next request, its partitions not
needing the question, would append ahead of the held one and get OUT_OF_ORDER_SEQUENCE
(franz-go's consume-transform-produce loop hit this after every abort). A request that must
wait before appending takes a turn here; every later request of the connection waits for
the turns before it to have appended.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager


class AppendOrder:
    """The turns of one connection's produce requests that wait before appending."""

    __slots__ = ("_last",)

    def __init__(self) -> None:
        self._last: asyncio.Future[None] | None = None

    @property
    def busy(self) -> bool:
        """An earlier request has not appended yet: a new one must take a turn."""
        return self._last is not None and not self._last.done()

    @asynccontextmanager
    async def turn(self) -> AsyncIterator[None]:
        """Enter once every earlier turn has appended; leave once this request has. Take
        the turn before the handler's first ``await``: arrival order is the order taken."""
        previous = self._last
        mine: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._last = mine
        try:
            if previous is not None and not previous.done():
                # wait(), not await: a cancelled waiter must not cancel the earlier turn.
                await asyncio.wait([previous])
            yield
        finally:
            mine.set_result(None)
            if self._last is mine:
                self._last = None
