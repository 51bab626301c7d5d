"""Incremental fetch sessions (KIP-227): the broker remembers what a fetcher asks for.

A client that opens a session (``session_epoch`` 0) sends its partitions once; afterwards
each request (epoch 1, 2, ...) lists only the partitions whose fetch position changed, plus
the ones it forgets, and each response lists only the partitions with something new:
records, another high watermark or log start offset, or an error. Apart from saving bytes,
this matters to the Java consumer: a partition that came back empty in a full response is
queued behind the partitions that returned data and cannot be fetched again until they are
drained, while a partition left out of an incremental response stays fetchable, so the
next fetch goes out while the consumer works through the last one.

Partitions that returned records move to the end of the session's order, so that with a
response size limit every partition gets its turn, as in Kafka's FetchSession.

Pure bookkeeping: no I/O, no asyncio; the Fetch handler does the reads.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

INITIAL_EPOCH = 0  # a request opening a new session
FINAL_EPOCH = -1  # a request without a session (or closing one): a full fetch
NO_SESSION = 0


@dataclass(slots=True)
class CachedPartition:
    """What the session knows of one partition: the fetcher's last request parameters and
    what the broker last told it."""

    topic: str
    partition: int
    fetch_offset: int
    partition_max_bytes: int
    current_leader_epoch: int
    high_watermark: int = -1  # as last sent
    log_start_offset: int = -1  # as last sent


@dataclass(slots=True)
class FetchSession:
    session_id: int
    epoch: int  # the epoch the next request must carry
    partitions: dict[tuple[str, int], CachedPartition] = field(default_factory=dict)
    last_used: float = 0.0

    def update(self, requested: list[CachedPartition],
               forgotten: list[tuple[str, list[int]]]) -> None:
        """Apply an incremental request: add or update its partitions, then drop the
        forgotten ones (in Kafka's order, for a partition named in both)."""
        for p in requested:
            known = self.partitions.get((p.topic, p.partition))
            if known is None:
                self.partitions[(p.topic, p.partition)] = p
            else:
                known.fetch_offset = p.fetch_offset
                known.partition_max_bytes = p.partition_max_bytes
                known.current_leader_epoch = p.current_leader_epoch
        for name, indexes in forgotten:
            for index in indexes:
                self.partitions.pop((name, index), None)

    def must_report(self, p: CachedPartition, error: int, high_watermark: int,
                    log_start_offset: int, record_bytes: int) -> bool:
        """Whether an incremental response includes ``p``; records what it will tell.

        A partition that returns records moves to the end of the session's order.
        """
        changed = (record_bytes > 0 or error != ErrorCode.none
                   or high_watermark != p.high_watermark
                   or log_start_offset != p.log_start_offset)
        # After an error, forget the high watermark sent, so the partition is reported again
        # once the error clears (as Kafka does).
        p.high_watermark = -1 if error != ErrorCode.none else high_watermark
        p.log_start_offset = log_start_offset
        if record_bytes > 0:
            key = (p.topic, p.partition)
            moved = self.partitions.pop(key, None)  # a concurrent request may have forgotten it
            if moved is not None:
                self.partitions[key] = moved
        return changed


# Kafka's min.incremental.fetch.session.eviction.ms: a full cache evicts only a session idle
# this long, so clients in active use do not push each other out in turn.
EVICTION_IDLE_S = 120.0


class FetchSessionCache:
    """Sessions of one broker, at most ``slots`` (``max.incremental.fetch.session.cache.slots``;
    0 turns sessions off). When full, a new session replaces the least recently used one if
    that one has been idle for ``EVICTION_IDLE_S`` (its owner then gets
    FETCH_SESSION_ID_NOT_FOUND and starts over); otherwise the newcomer gets no session and
    is answered as a full fetch."""

    def __init__(self, slots: int) -> None:
        self.slots = slots
        self._sessions: dict[int, FetchSession] = {}

    def __len__(self) -> int:
        return len(self._sessions)

    def open(self, partitions: list[CachedPartition]) -> FetchSession | None:
        if self.slots <= 0:
            return None
        now = time.monotonic()
        if len(self._sessions) >= self.slots:
            oldest = min(self._sessions.values(), key=lambda s: s.last_used)
            if now - oldest.last_used < EVICTION_IDLE_S:
                return None
            del self._sessions[oldest.session_id]
        session_id = NO_SESSION
        while session_id == NO_SESSION or session_id in self._sessions:
            session_id = random.randint(1, 2**31 - 1)
        session = FetchSession(session_id, INITIAL_EPOCH + 1, last_used=now)
        session.update(partitions, [])
        self._sessions[session_id] = session
        return session

    def resume(self, session_id: int, epoch: int) -> tuple[FetchSession | None, ErrorCode]:
        """The session an incremental request continues, or the error to answer with."""
        session = self._sessions.get(session_id)
        if session is None:
            return None, ErrorCode.fetch_session_id_not_found
        if epoch != session.epoch:
            return None, ErrorCode.invalid_fetch_session_epoch
        session.epoch = epoch + 1 if epoch < 2**31 - 1 else 1
        session.last_used = time.monotonic()
        return session, ErrorCode.none

    def close(self, session_id: int) -> None:
        self._sessions.pop(session_id, None)
