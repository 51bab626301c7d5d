"""What one pass over a KafkaCluster reads, read once: its StatefulSet, broker pods and broker
ConfigMap from the API server, and from the cluster's view (reconcile/views.py) the trusted
image, the live brokers and the controller.

Every step of the pass (scale, listener steps, roll, leader rebalance, status) decides from
this one snapshot, so the steps agree on what they saw and a tick costs one read of each
object, not one per step. A pass that changed something reads a new snapshot before it
observes, so the status is of what it left.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from kafkube_contract.properties import parse_properties
from kafkube_contract.registration import BrokerRegistration
from kafkube_operator.cluster_view import ClusterView
from kafkube_operator.kube import Kube
from kafkube_operator.model.cluster import ClusterRef, selector
from kafkube_operator.reconcile.views import ClusterMemory, TrustedImage, trusted_image


@dataclass(frozen=True)
class ClusterSnapshot:
    ref: ClusterRef
    statefulset: Mapping | None  # None: not made yet, or deleted
    pods: tuple[Mapping, ...]
    deployed: str  # the server.properties the brokers were last given ("" if none)
    trusted: TrustedImage
    live: Mapping[int, BrokerRegistration]  # brokers holding a live lease, by id
    controller: int | None  # the broker holding the controller lease

    @property
    def deployed_properties(self) -> dict[str, str]:
        return parse_properties(self.deployed)

    def statefulset_gone(self) -> bool:
        """No StatefulSet to work with: never made, deleted, or being deleted (a storage
        change recreates it, orphaning its pods)."""
        return self.statefulset is None or \
            bool(self.statefulset["metadata"].get("deletionTimestamp"))

    def broker_pods(self) -> frozenset[int]:
        """The ordinals (broker ids) of the broker pods that exist, running, starting or
        terminating: a broker that may still run, whatever its Lease says."""
        return frozenset(int(p["metadata"]["name"].rsplit("-", 1)[1]) for p in self.pods
                         if p["metadata"]["name"].rsplit("-", 1)[-1].isdigit())

    def running_brokers(self) -> int | None:
        """How many brokers the cluster runs: the StatefulSet's size, or, while it is being
        recreated, one past the highest broker pod's ordinal, so a drain under way is never
        skipped by a StatefulSet made anew at spec.replicas."""
        sts = self.statefulset
        if sts is not None and not sts["metadata"].get("deletionTimestamp"):
            return int(sts["spec"]["replicas"])
        ordinals = sorted(self.broker_pods())
        if sts is not None:  # terminating: its size still holds until it is gone
            ordinals.append(int(sts["spec"]["replicas"]) - 1)
        return max(ordinals) + 1 if ordinals else None


def read_snapshot(kube: Kube, view: ClusterView, ref: ClusterRef, resource: Mapping,
                  memory: ClusterMemory) -> ClusterSnapshot:
    """One read of everything a pass decides from."""
    trusted = trusted_image(view, resource.get("status"), memory)
    config_map = kube.get("v1", "ConfigMap", ref.config_map, ref.namespace) or {}
    controller = view.controller()
    return ClusterSnapshot(
        ref=ref,
        statefulset=kube.get("apps/v1", "StatefulSet", ref.statefulset, ref.namespace),
        pods=tuple(kube.list("v1", "Pod", ref.namespace, selector(ref))),
        deployed=(config_map.get("data") or {}).get("server.properties", ""),
        trusted=trusted,
        live=view.live_brokers(),
        controller=controller.holder if controller else None)
