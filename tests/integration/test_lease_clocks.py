"""Leases judged as client-go judges them (issue 27, item 8): expiry is a lease duration
after a renewal was *seen*, on the reader's clock, never the holder's ``renewTime`` compared
with the reader's clock. A holder whose clock is an hour behind, renewing, stays live; one
whose clock is an hour ahead, silent, lapses after one duration, not after an hour. The
holders' skewed clocks are what they write: their Leases, written through the real API
server."""

from __future__ import annotations

import datetime as dt
import time
import uuid
from typing import Any

from kubernetes import client as k8s

from broker.cluster.kubernetes import KubernetesBackend, KubernetesSettings
from kafkube.harness.waiting import wait_until
from kafkube_contract.objects import api_client, micro_time
from kafkube_contract.registration import BrokerRegistration
from tests.support.in_process import new_cluster

TTL_MS = 1500
HOUR_MS = 3_600_000


def _skew(leases: k8s.CoordinationV1Api, name: str, offset_ms: int) -> None:
    """Renew ``name`` as a holder whose clock is ``offset_ms`` off would."""
    lease = leases.read_namespaced_lease(name, "default")
    lease.spec.renew_time = micro_time(int(time.time() * 1000) + offset_ms)
    leases.replace_namespaced_lease(name, "default", lease)


def test_a_holders_skewed_clock_neither_fences_it_nor_keeps_it_alive(
        control_plane: Any) -> None:
    settings = KubernetesSettings("default", f"s{uuid.uuid4().hex[:10]}",
                                  str(control_plane.kubeconfig))
    leases = k8s.CoordinationV1Api(api_client(settings.kubeconfig))
    holder = new_cluster(KubernetesBackend(settings))
    reader = KubernetesBackend(settings)
    try:
        holder.register_broker(BrokerRegistration(0, "127.0.0.1", 9092), TTL_MS)
        reader_epoch = reader.register_broker(BrokerRegistration(1, "127.0.0.1", 9093), TTL_MS)
        name = f"{settings.cluster}-broker-0"

        # An hour behind, renewing every 300 ms: live all along (3 durations).
        deadline = time.monotonic() + 3 * TTL_MS / 1000
        while time.monotonic() < deadline:
            _skew(leases, name, -HOUR_MS)
            assert reader.renew_broker(1, reader_epoch, TTL_MS)  # the reader's own contact
            assert 0 in reader.live_brokers(), "a renewing holder was judged gone"
            time.sleep(0.3)

        # An hour ahead, then silent (killed): gone within about one duration.
        _skew(leases, name, HOUR_MS)
        silent_at = time.monotonic()

        def gone() -> bool:
            assert reader.renew_broker(1, reader_epoch, TTL_MS)
            return 0 not in reader.live_brokers()

        wait_until(gone, 10 * TTL_MS / 1000, "the silent holder judged gone", interval=0.1)
        assert time.monotonic() - silent_at < 3 * TTL_MS / 1000
        renewed = leases.read_namespaced_lease(name, "default").spec.renew_time
        assert renewed > dt.datetime.now(dt.UTC) + dt.timedelta(minutes=59)  # still "future"
    finally:
        holder.close()
        reader.close()
