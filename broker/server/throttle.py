"""Replication throttles: how reassignments are kept from starving producers and consumers.

Kafka throttles replication with two broker rates, ``leader.replication.throttled.rate``
(bytes/s a leader sends) and ``follower.replication.throttled.rate`` (bytes/s a follower
fetches), applied only to the replicas a topic lists in ``leader.replication.throttled.replicas``
and ``follower.replication.throttled.replicas`` (``partition:broker`` pairs, or ``*``), and
only while such a replica is out of the ISR: a replica in sync is never held back.
``ReassignPartitionsCommand --throttle`` sets all four and ``--verify`` removes them.

A token bucket holding at most one second of the rate gives the same average with bounded
bursts; a fetch that finds it empty gets (or sends) nothing for those partitions this round.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

UNLIMITED = 2**62


class Throttle:
    def __init__(self, bytes_per_second: float) -> None:
        self.rate = float(bytes_per_second)
        self._tokens = self.rate
        self._last = time.monotonic()

    @property
    def unlimited(self) -> bool:
        return self.rate >= UNLIMITED

    def set_rate(self, bytes_per_second: float) -> None:
        """A dynamic config changed the rate: at most a second of the new rate may be owed."""
        if float(bytes_per_second) == self.rate:
            return
        self.rate = float(bytes_per_second)
        self._tokens = min(self._tokens, self.rate)

    def allowance(self) -> int:
        """Bytes that may be sent now."""
        if self.unlimited:
            return 2**31 - 1
        now = time.monotonic()
        self._tokens = min(self.rate, self._tokens + (now - self._last) * self.rate)
        self._last = now
        return max(0, int(self._tokens))

    def record(self, sent: int) -> None:
        if not self.unlimited:
            self._tokens -= sent


def lists_replica(throttled: Sequence[str], partition: int, broker: int) -> bool:
    """Whether a topic's ``*.replication.throttled.replicas`` value names this replica."""
    return "*" in throttled or f"{partition}:{broker}" in throttled
