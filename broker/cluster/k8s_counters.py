"""The ``<cluster>-epochs`` ConfigMap: broker epochs, controller epochs and producer ids,
each taken by compare-and-set. A value is never handed out twice, even when the object is
deleted (recreated past every value it may have handed out) or put back from an older copy
(a value below one this broker handed out or read is skipped past): a broker epoch or a
producer id given twice would let a fenced broker or an old producer pass for a new one."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from kubernetes import client as k8s
from kubernetes.client.rest import ApiException

from broker.cluster.contact import now_ms
from broker.cluster.watch_cache import WatchCache

log = logging.getLogger(__name__)

CONFLICT, NOT_FOUND = 409, 404
COUNTERS = ("broker", "controller", "producer-id")
# How far past the last values seen counters recreated after a loss start: a broker may
# not have seen the last few taken by others.
EPOCH_MARGIN = 1000
PRODUCER_ID_MARGIN = 10_000_000


def margin(counter: str) -> int:
    return PRODUCER_ID_MARGIN if counter == "producer-id" else EPOCH_MARGIN


class Counters:
    def __init__(self, core: k8s.CoreV1Api, namespace: str, name: str,
                 meta: Callable[[], k8s.V1ObjectMeta], call: Callable[..., Any],
                 cache: WatchCache, lease_epochs: Callable[[], tuple[list[int], list[int]]],
                 create: Callable[[k8s.V1ConfigMap], bool]) -> None:
        self._core, self._namespace, self.name = core, namespace, name
        self._meta, self._call, self._cache = meta, call, cache
        self._lease_epochs, self._create = lease_epochs, create
        self._floors: dict[str, int] = {}  # the highest value of each this broker saw

    def _body(self, values: dict[str, str]) -> k8s.V1ConfigMap:
        return k8s.V1ConfigMap(metadata=self._meta(), data=values)

    def create(self) -> bool:
        """At zero, for a new cluster."""
        return self._create(self._body(dict.fromkeys(COUNTERS, "0")))

    def next(self, counter: str, count: int = 1) -> int:
        """Add ``count`` to a counter; returns the first value taken."""
        while True:
            try:
                current = self._call(self._core.read_namespaced_config_map, self.name,
                                     self._namespace)
            except ApiException as e:
                if e.status != NOT_FOUND:
                    raise
                self._restore()
                continue
            value = int(current.data[counter])
            floor = self._floors.get(counter, 0)
            if value < floor:  # put back from an old copy: skip past what was handed out
                log.warning("counter %s of %s/%s went back from %d to %d; going on from %d",
                            counter, self._namespace, self.name, floor, value,
                            floor + margin(counter))
                value = floor + margin(counter)
            first = value + 1
            current.data[counter] = str(first + count - 1)
            try:
                self._call(self._core.replace_namespaced_config_map, self.name,
                           self._namespace, current)
            except ApiException as e:
                if e.status != CONFLICT:
                    raise
                continue
            self._floors[counter] = first + count - 1
            return first

    def _restore(self) -> None:
        """Recreated past every value the last copy seen, the Leases and this broker tell,
        with margins for what it may not have seen; producer ids from the clock's
        milliseconds, which no cluster hands out that many of."""
        seen = self._cache.last_seen(self.name)
        values = {k: int(v) for k, v in ((seen.data or {}) if seen is not None else {}).items()}
        brokers, controllers = self._lease_epochs()

        def highest(counter: str, more: list[int]) -> int:
            return max([values.get(counter, 0), self._floors.get(counter, 0), *more])

        restored = {
            "broker": str(highest("broker", brokers) + EPOCH_MARGIN),
            "controller": str(highest("controller", controllers) + EPOCH_MARGIN),
            "producer-id": str(max(highest("producer-id", []) + PRODUCER_ID_MARGIN, now_ms())),
        }
        if self._create(self._body(restored)):
            log.warning("restored the counters %s/%s: %s", self._namespace, self.name, restored)
