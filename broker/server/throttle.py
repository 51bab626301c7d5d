"""A byte-rate throttle: how the leader slows replication to replicas a reassignment adds.

Kafka's ``leader.replication.throttled.rate`` caps the bytes a leader sends to throttled
replicas, so moving a partition cannot starve producers and consumers of disk and network.
A token bucket holding at most one second of the rate gives the same average with bounded
bursts; a follower that finds it empty gets an empty answer and fetches again.
"""

from __future__ import annotations

import time


class Throttle:
    def __init__(self, bytes_per_second: float) -> None:
        self.rate = float(bytes_per_second)
        self._tokens = self.rate
        self._last = time.monotonic()

    @property
    def unlimited(self) -> bool:
        return self.rate >= 2**62

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
