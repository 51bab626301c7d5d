"""Operator HA: of several operator replicas one is active, the holder of a
``coordination.k8s.io`` Lease; the others wait and take the Lease over once it is not renewed
for its duration (as Strimzi's cluster operator and client-go's leader election do).

A holder that cannot renew within the duration stops reconciling before anyone else may
start: it gives up at ``renew_deadline``, shorter than the duration, so two operators never
act on one cluster at once.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from kubernetes import client as k8s
from kubernetes.client.rest import ApiException

from broker.cluster.kubernetes import REQUEST_TIMEOUT_S, epoch_ms, micro_time

log = logging.getLogger(__name__)


@dataclass
class Leadership:
    api: k8s.ApiClient
    namespace: str
    identity: str
    name: str = "kafkube-operator"
    duration_s: int = 15

    @property
    def renew_deadline_s(self) -> float:
        return self.duration_s * 2 / 3

    @property
    def retry_period_s(self) -> float:
        return self.duration_s / 5

    def try_acquire(self) -> bool:
        """Take or renew the Lease; False while another identity holds it."""
        leases = k8s.CoordinationV1Api(self.api)
        now = int(time.time() * 1000)
        try:
            lease = leases.read_namespaced_lease(self.name, self.namespace,
                                                 _request_timeout=REQUEST_TIMEOUT_S)
        except ApiException as e:
            if e.status != 404:
                raise
            body = k8s.V1Lease(
                metadata=k8s.V1ObjectMeta(name=self.name, namespace=self.namespace),
                spec=self._spec(now, now, 0))
            try:
                leases.create_namespaced_lease(self.namespace, body,
                                               _request_timeout=REQUEST_TIMEOUT_S)
            except ApiException as create_error:
                if create_error.status == 409:  # another replica created it first
                    return False
                raise
            return True
        spec = lease.spec
        ours = spec.holder_identity == self.identity
        expired = epoch_ms(spec.renew_time) + (spec.lease_duration_seconds or 0) * 1000 < now
        if not ours and not expired and spec.holder_identity:
            return False
        transitions = (spec.lease_transitions or 0) + (0 if ours else 1)
        acquired = epoch_ms(spec.acquire_time) if ours else now
        lease.spec = self._spec(now, acquired, transitions)
        try:
            leases.replace_namespaced_lease(self.name, self.namespace, lease,
                                            _request_timeout=REQUEST_TIMEOUT_S)
        except ApiException as e:
            if e.status == 409:  # someone else wrote it since we read it
                return False
            raise
        if not ours:
            log.info("operator lease %s/%s taken over by %s", self.namespace, self.name,
                     self.identity)
        return True

    def _spec(self, now: int, acquired: int, transitions: int) -> k8s.V1LeaseSpec:
        return k8s.V1LeaseSpec(holder_identity=self.identity,
                               lease_duration_seconds=self.duration_s,
                               acquire_time=micro_time(acquired), renew_time=micro_time(now),
                               lease_transitions=transitions)

    def _attempt(self) -> bool:
        try:
            return self.try_acquire()
        except Exception as e:  # the API server unreachable: not leading, as far as we know
            log.warning("operator lease %s/%s: %s", self.namespace, self.name, e)
            return False

    def wait_until_leader(self, stop: threading.Event) -> bool:
        """Block as a standby until the Lease is ours (True) or ``stop`` is set (False)."""
        logged = False
        while not stop.is_set():
            if self._attempt():
                return True
            if not logged:
                log.info("standby: operator lease %s/%s held by another replica",
                         self.namespace, self.name)
                logged = True
            stop.wait(self.retry_period_s)
        return False

    def keep(self, stop: threading.Event, lost: Callable[[], None]) -> threading.Thread:
        """Renew in the background; call ``lost`` once a renewal has failed for the renew
        deadline, before the Lease can expire for the others."""

        def renew() -> None:
            last = time.monotonic()
            while not stop.wait(self.retry_period_s):
                if self._attempt():
                    last = time.monotonic()
                elif time.monotonic() - last > self.renew_deadline_s:
                    log.error("operator lease %s/%s lost: stopping", self.namespace, self.name)
                    lost()
                    return

        thread = threading.Thread(target=renew, name="operator-lease", daemon=True)
        thread.start()
        return thread
