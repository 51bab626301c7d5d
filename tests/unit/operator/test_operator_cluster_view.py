"""The operator's view of a cluster's coordination objects (cluster_view.py) without an API
server: which brokers it takes for live (by the renewals it saw, on its own clock, never by
the brokers' ``renewTime``) and what it makes of the metadata ConfigMap it reads."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kubernetes import client as k8s

from kafkube_contract.objects import (
    A_EPOCH,
    A_HOST,
    A_PORT,
    A_TTL_MS,
    broker_lease_name,
    micro_time,
)
from kafkube_operator.cluster_view import ClusterView

CLUSTER, NAMESPACE = "events", "kafka"
DURATION_MS = 9000
YEAR_MS = 365 * 24 * 3600 * 1000
NOW_WALL_MS = 1_772_000_000_000  # the brokers' clock


def lease(node_id: int, version: str, renewed_ms: int | None) -> k8s.V1Lease:
    return k8s.V1Lease(
        metadata=k8s.V1ObjectMeta(
            name=broker_lease_name(CLUSTER, node_id), namespace=NAMESPACE,
            resource_version=version,
            annotations={A_HOST: f"b{node_id}", A_PORT: "9092", A_EPOCH: "3",
                         A_TTL_MS: str(DURATION_MS)}),
        spec=k8s.V1LeaseSpec(
            holder_identity=str(node_id), lease_duration_seconds=DURATION_MS // 1000,
            renew_time=micro_time(renewed_ms) if renewed_ms is not None else None))


@dataclass
class FakeLeases:
    """The Lease API: whatever the test put there."""

    items: list[k8s.V1Lease] = field(default_factory=list)
    controller: k8s.V1Lease | None = None

    def list_namespaced_lease(self, namespace: str, **_: Any) -> k8s.V1LeaseList:
        return k8s.V1LeaseList(items=list(self.items))

    def read_namespaced_lease(self, name: str, namespace: str, **_: Any) -> k8s.V1Lease:
        assert self.controller is not None
        return self.controller


@dataclass
class FakeClock:
    ms: int = 5_000  # a monotonic clock: nothing to do with the brokers' wall clock

    def __call__(self) -> int:
        return self.ms


def view_of(leases: FakeLeases, clock: FakeClock) -> ClusterView:
    view = ClusterView(k8s.ApiClient(), NAMESPACE, CLUSTER, now_ms=clock)
    view._leases = leases  # type: ignore[assignment]
    return view


def test_liveness_follows_the_renewals_seen_not_the_brokers_timestamps() -> None:
    clock = FakeClock()
    # Broker 1's clock is a year ahead, broker 2's a year behind: neither says anything.
    leases = FakeLeases([lease(1, "10", NOW_WALL_MS + YEAR_MS),
                         lease(2, "20", NOW_WALL_MS - YEAR_MS)])
    view = view_of(leases, clock)
    assert set(view.live_brokers()) == {1, 2}  # first seen: as if just renewed
    clock.ms += DURATION_MS - 1
    leases.items = [lease(1, "11", NOW_WALL_MS + YEAR_MS), leases.items[1]]  # 1 renews
    assert set(view.live_brokers()) == {1, 2}
    clock.ms += 2  # a whole duration since broker 2's renewal was seen, and none since
    assert set(view.live_brokers()) == {1}
    clock.ms += DURATION_MS - 3  # 1 ms short of a duration since broker 1's renewal was seen
    assert set(view.live_brokers()) == {1}
    clock.ms += 1
    assert view.live_brokers() == {}
    leases.items = [lease(2, "21", NOW_WALL_MS - YEAR_MS)]  # broker 2 renews again
    assert set(view.live_brokers()) == {2}


def test_a_lease_never_renewed_is_not_live() -> None:
    view = view_of(FakeLeases([lease(1, "10", None)]), FakeClock())
    assert view.live_brokers() == {}


def test_the_controller_is_judged_by_its_renewals_seen() -> None:
    clock = FakeClock()
    controller = lease(1, "40", NOW_WALL_MS - YEAR_MS)
    controller.metadata.name = f"{CLUSTER}-controller"
    controller.metadata.annotations["kafkube.io/controller-epoch"] = "6"
    view = view_of(FakeLeases(controller=controller), clock)
    found = view.controller()
    assert found is not None and (found.holder, found.epoch) == (1, 6)
    clock.ms += DURATION_MS
    assert view.controller() is None

