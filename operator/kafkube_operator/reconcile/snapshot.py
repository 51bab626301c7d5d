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
from kafkube_operator.model.pools import (
    DEFAULT_POOL,
    NODE_ID_OFFSET,
    POOL_LABEL,
    NodePool,
    node_pools,
    pod_node_id,
)
from kafkube_operator.reconcile.views import ClusterMemory, TrustedImage, trusted_image


def pool_name(obj: Mapping) -> str:
    """The pool a StatefulSet or pod belongs to (``DEFAULT_POOL`` for the cluster's own)."""
    label = ((obj.get("metadata") or {}).get("labels") or {}).get(POOL_LABEL)
    return DEFAULT_POOL if label is None else label


@dataclass(frozen=True)
class ClusterSnapshot:
    ref: ClusterRef
    statefulset: Mapping | None  # the default pool's; None: not made yet, or deleted
    pods: tuple[Mapping, ...]
    deployed: str  # the server.properties the brokers were last given ("" if none)
    trusted: TrustedImage
    live: Mapping[int, BrokerRegistration]  # brokers holding a live lease, by id
    controller: int | None  # the broker holding the controller lease
    # Every pool's StatefulSet by pool name, the default pool's included (model/pools.py).
    statefulsets: Mapping[str, Mapping] | None = None

    def __post_init__(self) -> None:
        if self.statefulsets is None and self.statefulset is not None:  # one pool
            object.__setattr__(self, "statefulsets", {DEFAULT_POOL: self.statefulset})

    def pools(self, spec: Mapping) -> list[NodePool]:
        """The pools of ``spec``, then any pool whose StatefulSet still runs after it left
        spec.pools (at 0 brokers: drained, then removed). A pool's StatefulSet says its
        first node id: one removed and added back with another firstNodeId while its
        StatefulSet was still there keeps the ids its brokers' volumes were made with
        (``moved_ids`` says so)."""
        pools = []
        for pool in node_pools(spec):
            first = self._first_id(pool.name)
            pools.append(pool if first is None or first == pool.first_id else
                         NodePool(pool.name, pool.replicas, first, pool.spec))
        named = {p.name for p in pools}
        for name in sorted(self.statefulsets or {}):
            if name not in named:
                pools.append(NodePool(name, 0, self._first_id(name) or 0, spec))
        return pools

    def moved_ids(self, spec: Mapping) -> list[str]:
        """The pools whose spec's firstNodeId is not their StatefulSet's, as messages."""
        kept = {p.name: p.first_id for p in self.pools(spec)}
        return [f"pool {p.label()} keeps node ids from {kept[p.name]}, which its brokers' "
                f"volumes were made with, not spec.pools' firstNodeId {p.first_id} (it was "
                "removed and added back before its StatefulSet was gone)"
                for p in node_pools(spec) if kept.get(p.name, p.first_id) != p.first_id]

    def _first_id(self, pool: str) -> int | None:
        sts = (self.statefulsets or {}).get(pool)
        if sts is None:
            return None
        offset = (((sts["spec"].get("template") or {}).get("metadata") or {})
                  .get("annotations") or {}).get(NODE_ID_OFFSET, "0")
        return int(offset) if offset.isdigit() else 0

    def pool_sizes(self) -> dict[str, int] | None:
        """Each pool's StatefulSet size now (None when no StatefulSet exists). A pool whose
        StatefulSet is being recreated (a storage change) counts one past its highest broker
        pod, so a drain under way is never skipped by a StatefulSet made anew."""
        sizes: dict[str, int] = {}
        for name, sts in (self.statefulsets or {}).items():
            if not sts["metadata"].get("deletionTimestamp"):
                sizes[name] = int(sts["spec"]["replicas"])
        for pod in self.pods:
            name = pool_name(pod)
            ordinal = pod["metadata"]["name"].rsplit("-", 1)[-1]
            if name not in sizes and ordinal.isdigit():
                sts = (self.statefulsets or {}).get(name)
                floor = int(sts["spec"]["replicas"]) if sts is not None else 0
                sizes[name] = max(sizes.get(name, 0), floor, int(ordinal) + 1)
        return sizes or None

    @property
    def deployed_properties(self) -> dict[str, str]:
        return parse_properties(self.deployed)

    def statefulset_gone(self, spec: Mapping | None = None) -> bool:
        """No StatefulSet to work with: never made, deleted, or being deleted (a storage
        change recreates it, orphaning its pods); with ``spec``, that of any of its pools
        with brokers."""
        found = self.statefulsets or {}
        names = [DEFAULT_POOL] if spec is None else \
            [p.name for p in node_pools(spec) if p.replicas or p.default]
        return any(found.get(name) is None or bool(found[name]["metadata"].get(
            "deletionTimestamp")) for name in names)

    def broker_pods(self) -> frozenset[int]:
        """The node ids of the broker pods that exist, running, starting or terminating: a
        broker that may still run, whatever its Lease says."""
        return frozenset(i for p in self.pods if (i := pod_node_id(p)) is not None)

    def running_brokers(self) -> int | None:
        """How many brokers the cluster runs: its pools' StatefulSets' sizes together
        (``pool_sizes``)."""
        sizes = self.pool_sizes()
        return sum(sizes.values()) if sizes is not None else None


def read_snapshot(kube: Kube, view: ClusterView, ref: ClusterRef, resource: Mapping,
                  memory: ClusterMemory) -> ClusterSnapshot:
    """One read of everything a pass decides from."""
    trusted = trusted_image(view, resource.get("status"), memory)
    config_map = kube.get("v1", "ConfigMap", ref.config_map, ref.namespace) or {}
    controller = view.controller()
    statefulsets = {pool_name(sts): sts for sts in kube.list(
        "apps/v1", "StatefulSet", ref.namespace, selector(ref))
        if sts["metadata"]["name"].startswith(ref.statefulset)}
    return ClusterSnapshot(
        ref=ref,
        statefulset=statefulsets.get(DEFAULT_POOL),
        statefulsets=statefulsets,
        pods=tuple(kube.list("v1", "Pod", ref.namespace, selector(ref))),
        deployed=(config_map.get("data") or {}).get("server.properties", ""),
        trusted=trusted,
        live=view.live_brokers(),
        controller=controller.holder if controller else None)
