"""The operator's view of a cluster's coordination objects (cluster_view.py) without an API
server: which brokers it takes for live (by the renewals it saw, on its own clock, never by
the brokers' ``renewTime``) and what it makes of the metadata ConfigMap it reads."""

from __future__ import annotations

import base64
import gzip
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s

from kafkube_contract.image import ImageUnreadable, ImageView
from kafkube_contract.objects import (
    A_EPOCH,
    A_HOST,
    A_PORT,
    A_TTL_MS,
    IMAGE_KEY,
    broker_lease_name,
    micro_time,
)
from kafkube_operator.cluster_view import ClusterView
from kafkube_operator.reconcile.topic import _wait_image
from kafkube_operator.reconcile.views import ClusterMemory, trusted_image

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



# -- the metadata ConfigMap, garbled --------------------------------------------------------

GOLDEN = Path(__file__).parents[1] / "contract" / "golden"


def golden_config_map() -> k8s.V1ConfigMap:
    api = k8s.ApiClient()
    try:
        return api.deserialize((GOLDEN / "metadata-configmap.json").read_text(), "V1ConfigMap",
                               "application/json")
    finally:
        api.close()


def gzip64(text: str) -> str:
    return base64.b64encode(gzip.compress(text.encode())).decode()


def garbled(change: Callable[[k8s.V1ConfigMap], None]) -> k8s.V1ConfigMap:
    config_map = golden_config_map()
    config_map.metadata.resource_version = "77"
    change(config_map)
    return config_map


def set_image(text: str) -> Callable[[k8s.V1ConfigMap], None]:
    return lambda cm: cm.binary_data.__setitem__(IMAGE_KEY, gzip64(text))


GARBLED = {
    "bad base64": lambda cm: cm.binary_data.__setitem__(IMAGE_KEY, "not base64!"),
    "not gzip": lambda cm: cm.binary_data.__setitem__(
        IMAGE_KEY, base64.b64encode(b"plain").decode()),
    "not JSON": set_image("{\"topics\": ["),
    "not UTF-8": lambda cm: cm.binary_data.__setitem__(
        IMAGE_KEY, base64.b64encode(gzip.compress(b"\xff\xfe")).decode()),
    "no image key": lambda cm: cm.binary_data.clear(),
    "no binaryData": lambda cm: setattr(cm, "binary_data", None),
    "version not a number": lambda cm: cm.metadata.annotations.__setitem__(
        "kafkube.io/image-version", "forty-two"),
    "a list": set_image("[1, 2]"),
    "empty": set_image(""),
    "an empty object": set_image("{}"),
    "no topics": set_image('{"format": 1, "features": {"metadata.version": 21}}'),
    "a partition without its epochs": set_image(
        '{"topics": [{"name": "t", "topic_id": "0a9b8c7d-6e5f-4a3b-8c2d-1e0f9a8b7c6d", '
        '"assignments": [{"replicas": [1], "isr": [1], "leader": 1}]}]}'),
}


@dataclass
class FakeCore:
    config_map: k8s.V1ConfigMap | None

    def read_namespaced_config_map(self, name: str, namespace: str, **_: Any) -> Any:
        return self.config_map


@pytest.mark.parametrize("damage", sorted(GARBLED))
def test_a_garbled_metadata_configmap_is_a_warning_and_acted_on_as_nothing(damage: str) -> None:
    view = view_of(FakeLeases(), FakeClock())
    view._core = FakeCore(garbled(GARBLED[damage]))  # type: ignore[assignment]
    with pytest.raises(ImageUnreadable):
        view.stored_image()
    trusted = trusted_image(view, {"clusterId": "q1Sh-9_ISia_zwGINzRvyQ",
                                   "metadataVersion": 42}, ClusterMemory())
    assert trusted.problem is not None and trusted.problem.reason == "MetadataUnreadable"
    assert trusted.problem.message.startswith(f"{view.where}: ")
    assert trusted.image == ImageView()
    assert trusted.status_fields() == {"clusterId": "q1Sh-9_ISia_zwGINzRvyQ",
                                       "metadataVersion": 42}


def test_the_golden_configmap_is_trusted_and_an_empty_topic_list_is_an_image() -> None:
    view = view_of(FakeLeases(), FakeClock())
    view._core = FakeCore(golden_config_map())  # type: ignore[assignment]
    trusted = trusted_image(view, None, ClusterMemory())
    assert trusted.problem is None and "orders" in trusted.image.topics
    view._core = FakeCore(garbled(set_image('{"format": 1, "topics": []}')))  # type: ignore[assignment]
    trusted = trusted_image(view, None, ClusterMemory())
    assert trusted.problem is None and trusted.image.topics == {}


class RacedView(ClusterView):
    """A view whose cached image another pass (thread) replaces the moment it is set."""

    other: tuple[str, ImageView] = ("other-revision", ImageView(version=1))

    @property
    def _decoded(self) -> tuple[str, ImageView] | None:  # type: ignore[override]
        return getattr(self, "_cached", None)

    @_decoded.setter
    def _decoded(self, value: tuple[str, ImageView] | None) -> None:
        self._cached = value if value is None else self.other


def test_the_identity_read_is_paired_with_its_own_image_whatever_other_passes_cache() -> None:
    view = RacedView(k8s.ApiClient(), NAMESPACE, CLUSTER, now_ms=FakeClock())
    view._core = FakeCore(golden_config_map())  # type: ignore[assignment]
    found = view.stored_image()
    assert found is not None
    identity, image = found
    assert identity.version == 42 and "orders" in image.topics


@dataclass
class ChangingCore:
    """The metadata ConfigMap as successive reads find it."""

    reads: list[k8s.V1ConfigMap | None]
    served: int = 0

    def read_namespaced_config_map(self, name: str, namespace: str, **_: Any) -> Any:
        found = self.reads[min(self.served, len(self.reads) - 1)]
        self.served += 1
        return found


@pytest.mark.parametrize("then", ["garbled", "deleted"])
def test_a_topic_pass_waiting_on_an_image_that_turns_unreadable_ends_with_the_last_read(
        then: str) -> None:
    """The topic pass waits for its change to show in the image (reconcile/topic.py); an
    image garbled or deleted meanwhile ends the wait with the image read before, where an
    exception made kopf retry the whole pass (CreateTopics and all)."""
    view = view_of(FakeLeases(), FakeClock())
    view._core = FakeCore(None)  # type: ignore[assignment]
    trusted = trusted_image(view, None, ClusterMemory())  # nothing stored yet: empty
    assert trusted.problem is None and trusted.image.topics == {}
    broken = garbled(GARBLED["not JSON"]) if then == "garbled" else None
    view._core = ChangingCore([golden_config_map(), broken])  # type: ignore[assignment]
    waited = _wait_image(view, lambda image: "payments" in image.topics, trusted.image)
    assert "orders" in waited.topics  # the golden image, read before the damage
    assert view._core.served == 2  # type: ignore[attr-defined]
