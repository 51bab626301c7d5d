"""Operator HA: of several operator replicas one is active, the holder of a
``coordination.k8s.io`` Lease; the others wait and take the Lease over once it is not renewed
for its duration (as Strimzi's cluster operator and client-go's leader election do).

Every time is the process's own monotonic clock, never another machine's: a standby counts
a lease duration from when it *saw* the Lease last change (client-go's observedTime), not
from the holder's ``renewTime``; the holder counts its lease from when it *sent* the renewal
that succeeded, however long the request took. It may act until ``renew_deadline`` after
that (shorter than the duration, so its lease has not passed to another), ``check``s that
before each write, and ends the process once it is past (as controller-runtime does), so no
pass in flight acts after the lease could have passed. A stopped operator releases the Lease
once its passes ended, so a standby takes over at once.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from kubernetes import client as k8s
from kubernetes.client.rest import ApiException

from kafkube_contract.objects import REQUEST_TIMEOUT_S, epoch_ms, micro_time


def lease_namespace(api: k8s.ApiClient, pod_namespace: str | None) -> str:
    """Where the operator Lease lives: beside the operator in a pod; outside one (a laptop,
    a test), where an operator Lease already is, so the two contend for one Lease instead of
    each holding its own in ``default``."""
    if pod_namespace:
        return pod_namespace
    found = k8s.CoordinationV1Api(api).list_lease_for_all_namespaces(
        label_selector=",".join(f"{k}={v}" for k, v in LABEL.items()),
        _request_timeout=REQUEST_TIMEOUT_S).items
    namespaces = sorted({lease.metadata.namespace for lease in found})
    if len(namespaces) > 1:
        log.warning("operator Leases in %s: using %s (pass --lease-namespace)", namespaces,
                    namespaces[0])
    return namespaces[0] if namespaces else "default"

log = logging.getLogger(__name__)


LABEL = {"app.kubernetes.io/name": "kafkube-operator"}


class LeadershipLost(Exception):
    """This operator may no longer act: its lease could have passed to another."""


@dataclass
class Leadership:
    api: k8s.ApiClient
    namespace: str
    identity: str
    name: str = "kafkube-operator"
    duration_s: int = 15
    clock: Callable[[], float] = time.monotonic
    # (resourceVersion, when first seen) of the Lease as last read: a standby's expiry.
    _seen: tuple[str, float] | None = field(default=None, init=False)
    _valid_until: float = field(default=0.0, init=False)  # the holder acts until then

    @property
    def renew_deadline_s(self) -> float:
        return self.duration_s * 2 / 3

    @property
    def retry_period_s(self) -> float:
        return self.duration_s / 5

    def check(self) -> float:
        """Before each write: raise if this operator may no longer act; else how many
        seconds it still may (a write's request timeout is held within them)."""
        left = self._valid_until - self.clock()
        if left <= 0:
            raise LeadershipLost(f"operator lease {self.namespace}/{self.name} not renewed "
                                 f"within {self.renew_deadline_s:.0f}s")
        return left

    def try_acquire(self) -> bool:
        """Take or renew the Lease; False while another identity holds it."""
        sent = self.clock()
        if self._try_acquire():
            self._valid_until = sent + self.renew_deadline_s
            return True
        return False

    def _expired(self, lease: k8s.V1Lease) -> bool:
        """Not changed for its duration, as this process saw it."""
        version, now = lease.metadata.resource_version, self.clock()
        if self._seen is None or self._seen[0] != version:
            self._seen = (version, now)
        return now - self._seen[1] >= (lease.spec.lease_duration_seconds or 0)

    def _try_acquire(self) -> bool:
        leases = k8s.CoordinationV1Api(self.api)
        now = int(time.time() * 1000)  # written for kubectl's eyes only: nobody judges it
        try:
            lease = leases.read_namespaced_lease(self.name, self.namespace,
                                                 _request_timeout=REQUEST_TIMEOUT_S)
        except ApiException as e:
            if e.status != 404:
                raise
            body = k8s.V1Lease(
                metadata=k8s.V1ObjectMeta(name=self.name, namespace=self.namespace,
                                          labels=LABEL),
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
        if not ours and spec.holder_identity and not self._expired(lease):
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

    def release(self) -> None:
        """Give the Lease up (an empty holder), so a standby takes over without waiting."""
        leases = k8s.CoordinationV1Api(self.api)
        try:
            lease = leases.read_namespaced_lease(self.name, self.namespace,
                                                 _request_timeout=REQUEST_TIMEOUT_S)
            if lease.spec.holder_identity != self.identity:
                return
            lease.spec.holder_identity = None
            leases.replace_namespaced_lease(self.name, self.namespace, lease,
                                            _request_timeout=REQUEST_TIMEOUT_S)
            log.info("operator lease %s/%s released", self.namespace, self.name)
        except Exception as e:  # it expires by itself then
            log.warning("operator lease %s/%s not released: %s", self.namespace, self.name, e)

    def keep(self, stop: threading.Event, lost: Callable[[], None]) -> threading.Thread:
        """Renew in the background until ``stop``; call ``lost`` once no renewal succeeded
        within the renew deadline, before the Lease can expire for the others."""

        def renew() -> None:
            while not stop.wait(self.retry_period_s):
                if not self._attempt() and self.clock() >= self._valid_until:
                    log.error("operator lease %s/%s lost: stopping", self.namespace, self.name)
                    lost()
                    return

        thread = threading.Thread(target=renew, name="operator-lease", daemon=True)
        thread.start()
        return thread
