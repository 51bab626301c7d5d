"""Operator HA judged on each replica's own clock (issue 27, item 8), against the real API
server: a standby takes the Lease over a lease duration after it *saw* the Lease last change,
whatever ``renewTime`` the holder's skewed clock wrote; the holder may act only until its
renew deadline after the renewal it *sent*; a released Lease is taken at once."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest
from kubernetes import client as k8s

from kafkube_contract.objects import api_client, micro_time
from kafkube_operator.leadership import Leadership, LeadershipLost, lease_namespace


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_takeover_and_fencing_follow_each_replicas_own_clock(control_plane: Any) -> None:
    api = api_client(str(control_plane.kubeconfig))
    name = f"op-{uuid.uuid4().hex[:8]}"
    a_clock, b_clock = FakeClock(), FakeClock()
    a = Leadership(api, "default", "a", name=name, duration_s=15, clock=a_clock)
    b = Leadership(api, "default", "b", name=name, duration_s=15, clock=b_clock)
    assert a.try_acquire()
    a.check()
    # A's wall clock runs an hour ahead: its renewTime says so.
    leases = k8s.CoordinationV1Api(api)
    lease = leases.read_namespaced_lease(name, "default")
    lease.spec.renew_time = micro_time(int(time.time() * 1000) + 3_600_000)
    leases.replace_namespaced_lease(name, "default", lease)

    assert not b.try_acquire()  # first seen now
    b_clock.now += 14.9
    assert not b.try_acquire()
    # A, silent since its renewal, stopped acting before B may start.
    a_clock.now += a.renew_deadline_s
    with pytest.raises(LeadershipLost):
        a.check()
    b_clock.now += 0.2
    assert b.try_acquire()  # 15 s of B's own time, not an hour of A's
    b.check()
    assert not a.try_acquire()

    # B releases (a stopped operator, its passes done): A takes over at once.
    b.release()
    assert a.try_acquire()
    a.check()
    leases.delete_namespaced_lease(name, "default")


def test_an_operator_outside_a_pod_contends_for_the_existing_lease(control_plane: Any) -> None:
    api = api_client(str(control_plane.kubeconfig))
    core = k8s.CoreV1Api(api)
    namespace = f"ops-{uuid.uuid4().hex[:8]}"
    core.create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=namespace)))
    try:
        assert lease_namespace(api, "in-pod") == "in-pod"
        chart = Leadership(api, namespace, "chart-pod")
        assert chart.try_acquire()
        # Other tests of this session hold operator Leases in their namespaces too; with
        # one operator installed, its namespace is the one found.
        found = k8s.CoordinationV1Api(api).list_lease_for_all_namespaces(
            label_selector="app.kubernetes.io/name=kafkube-operator").items
        assert namespace in {lease.metadata.namespace for lease in found}
        if len({lease.metadata.namespace for lease in found}) == 1:
            assert lease_namespace(api, None) == namespace
    finally:
        core.delete_namespace(namespace)
