"""Keeps CPython's full garbage collections off the objects that live as long as a replica.

A broker hosting 10,000 partitions holds about a million objects for them (logs, segments,
indexes, producer state). A full collection walks every one: ~200 ms of the event loop at
that size. And full collections come often under load: a Fetch naming 10,000 partitions
keeps ~30,000 objects alive while it is answered, the young collections promote them, and
once what was promoted reaches a quarter of the old generation the next collection is a
full one, every few fetches (a broker whose 10,000 partitions were created, written once
each and then named in 255 such fetches: 111 full collections, 21.6 s of the loop).

So, as the broker freezes what start-up built (``gc.freeze`` in ``broker.app``), it freezes
again once the set of hosted partitions has changed and stayed unchanged for a poll: one
full collection first (so garbage is not frozen with the rest), then ``gc.freeze``. Frozen
objects are no longer walked by any collection. Before it collects, it unfreezes, so the
replicas dropped since the last freeze (topics deleted, reassigned away) are collected too.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import time
from collections.abc import Callable

log = logging.getLogger(__name__)

POLL_SECONDS = 1.0


class LongLivedObjects:
    """Freezes the heap after each settled change of ``changes()`` (a count of partitions
    opened and dropped, which only grows)."""

    def __init__(self, changes: Callable[[], int], poll_seconds: float = POLL_SECONDS) -> None:
        self._changes = changes
        self._poll = poll_seconds
        self._frozen_at = self._seen = 0
        self._task: asyncio.Task[None] | None = None
        self.refreezes = 0

    def start(self) -> None:
        """Called just after a freeze of everything start-up built."""
        self._frozen_at = self._seen = self._changes()
        self._task = asyncio.create_task(self._run(), name="long-lived-objects")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self._poll)
            self.step()

    def step(self) -> bool:
        """One poll: refreeze if partitions changed since the last freeze and not since the
        last poll (a CreateTopics of thousands opens them over many loop passes: wait for
        the end). True when it refroze."""
        now = self._changes()
        settled = now == self._seen
        self._seen = now
        if now == self._frozen_at or not settled:
            return False
        started = time.perf_counter()
        gc.unfreeze()
        gc.collect()
        gc.freeze()
        self._frozen_at = now
        self.refreezes += 1
        log.info("partitions changed: %d objects frozen out of the collector's walk in "
                 "%.0f ms", gc.get_freeze_count(), (time.perf_counter() - started) * 1000)
        return True
