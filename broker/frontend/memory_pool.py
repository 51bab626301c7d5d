"""queued.max.request.bytes: the request bytes all connections may hold at once.

Kafka's SimpleMemoryPool, with one difference in when memory is taken. A connection
reserves a frame's whole declared size before it reads the frame's body, and returns it
once the request has been handled; a connection that cannot reserve stops reading (Kafka
mutes it) until others return theirs. Reserving the whole size up front means a frame,
once begun, can always be finished, so half-read frames never wait on each other. The
memory itself is written only as the bytes arrive (``FrameReader``: a buffer that grows,
or one of the whole size whose bytes are not set first), so reservations of clients that
declare large frames and send nothing cost little memory, mostly other clients' turn, and
``connections.max.idle.ms`` ends those.
"""

from __future__ import annotations

import asyncio
from collections import deque

UNBOUNDED = -1


class MemoryPool:
    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._reserved = 0
        self._waiters: deque[tuple[int, asyncio.Future[None]]] = deque()

    @property
    def reserved(self) -> int:
        return self._reserved

    def _add(self, size: int) -> None:
        # No gauge set here: the metrics read ``reserved`` when scraped (two sets a request
        # were 5% of a small request's time).
        self._reserved += size

    def try_reserve(self, size: int) -> bool:
        """Reserve ``size`` bytes if they are free now (and nobody waits before us)."""
        if self.limit == UNBOUNDED or (
                not self._waiters and self._reserved + size <= self.limit):
            self._add(size)
            return True
        return False

    def force(self, size: int) -> None:
        """Account for bytes already taken (a frame that arrived whole within one read):
        the pool may go over its limit by that much, and makes later readers wait."""
        self._add(size)

    async def reserve(self, size: int) -> None:
        """Wait, in turn, until ``size`` bytes are free, and reserve them."""
        if self.try_reserve(size):
            return
        fut = asyncio.get_running_loop().create_future()
        entry = (size, fut)
        self._waiters.append(entry)
        try:
            await fut
        except asyncio.CancelledError:
            if entry in self._waiters:
                self._waiters.remove(entry)
            elif fut.done() and not fut.cancelled():
                self.release(size)  # granted just as we were cancelled
            raise

    def release(self, size: int) -> None:
        self._add(-size)
        while self._waiters:
            size, fut = self._waiters[0]
            if fut.done():
                self._waiters.popleft()
                continue
            if self._reserved + size > self.limit:
                break
            self._waiters.popleft()
            self._add(size)
            fut.set_result(None)
