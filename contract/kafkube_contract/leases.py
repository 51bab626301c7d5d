"""When a Lease lapses, as its reader can tell: by when the reader *saw* each renewal, on its
own clock, never by the holder's ``renewTime``.

A holder writes ``renewTime`` with its clock; a reader whose clock differs by more than a
lease duration would otherwise take every holder for gone (or a gone one for live). So, as
client-go's leader election keeps ``observedTime``, a reader notes when it first saw each
renewal (a lease's name with its ``resourceVersion``, which every write moves) and the lease
lapses one lease duration after that. A lease first seen is as if just renewed: a reader
that starts waits one duration before it calls any holder gone.

The brokers (broker/cluster/kubernetes.py, on the wall clock that also times their own
renewals) and the operator (operator/kafkube_operator/cluster_view.py, on a monotonic
clock) both judge leases so; what each then does with a lapsed lease is its own rule.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from kafkube_contract.objects import lease_duration_ms


class RenewalClock:
    """When this reader first saw each lease's latest renewal, on ``clock`` (milliseconds)."""

    def __init__(self, clock: Callable[[], int]) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._seen: dict[str, tuple[str, int]] = {}

    def now_ms(self) -> int:
        return self._clock()

    def seen(self, name: str, record: str, at_ms: int | None = None) -> int:
        """When ``record`` (a renewal's resourceVersion) of lease ``name`` was first seen;
        ``at_ms`` for a renewal of our own: when its request was sent."""
        with self._lock:
            known = self._seen.get(name)
            if known is None or known[0] != record or (at_ms is not None and at_ms < known[1]):
                known = self._seen[name] = (record, self._clock() if at_ms is None else at_ms)
            return known[1]

    def expiry_ms(self, lease: Any) -> int:
        """A lease duration after ``lease``'s renewal was first seen, on this reader's clock."""
        return self.seen(lease.metadata.name, lease.metadata.resource_version) \
            + lease_duration_ms(lease)

    def renewed(self, lease: Any) -> bool:
        """Whether ``lease`` (a ``V1Lease``) has been renewed within its duration, as seen
        here. A lease never renewed (no ``renewTime``: released) is not."""
        return lease.spec.renew_time is not None and self.expiry_ms(lease) > self._clock()
