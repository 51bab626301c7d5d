"""Node pools: groups of brokers in one KafkaCluster, each its own StatefulSet with its own
size, storage, resources, node selector, tolerations and affinity (Strimzi's KafkaNodePool,
as a list in the cluster's spec: docs/day2.md says why).

The cluster's own fields describe its first pool, the *default pool*: ``spec.replicas``
brokers in the StatefulSet ``<cluster>``, node ids 0 to replicas - 1, exactly the cluster a
spec without ``spec.pools`` always made, so adding pools to a running cluster moves nothing.
Each entry of ``spec.pools`` adds a pool ``<cluster>-<name>`` whose node ids start at its
``firstNodeId``: ids stay stable per pool whatever the other pools do, and the admission
rules of the CRD keep the pools' id ranges apart. The default pool may be scaled to 0 once
other pools hold the data (its brokers drained first, as any scale-down), which is how
brokers move from one pool to another.

A pod knows its node id from its StatefulSet: the pool's first id (``NODE_ID_OFFSET``, an
annotation of the pod template, and ``KAFKUBE_NODE_ID_OFFSET`` in its environment) plus its
ordinal.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

POOL_LABEL = "kafkube.io/pool"
NODE_ID_OFFSET = "kafkube.io/node-id-offset"
NODE_ID_OFFSET_ENV = "KAFKUBE_NODE_ID_OFFSET"
DEFAULT_POOL = ""
# A pool's own fields, taking the place of the cluster's; the rest (config, listeners,
# image, ...) is the cluster's for every pool.
POOL_FIELDS = ("storage", "resources", "nodeSelector", "tolerations", "affinity")


@dataclass(frozen=True)
class NodePool:
    """One pool: its name (``DEFAULT_POOL`` for the cluster's own brokers), size, first
    node id, and the cluster spec as this pool's StatefulSet is rendered from it."""

    name: str
    replicas: int
    first_id: int
    spec: Mapping[str, Any] = field(compare=False)

    @property
    def default(self) -> bool:
        return self.name == DEFAULT_POOL

    def statefulset(self, cluster: str) -> str:
        return cluster if self.default else f"{cluster}-{self.name}"

    def ids(self, replicas: int | None = None) -> range:
        """The node ids of its brokers at ``replicas`` (default: its spec's)."""
        return range(self.first_id, self.first_id + (self.replicas if replicas is None
                                                      else replicas))

    def label(self) -> str:
        """The value of its pods' ``POOL_LABEL`` (``default`` for the default pool)."""
        return self.name or "default"


def node_pools(spec: Mapping[str, Any]) -> list[NodePool]:
    """The default pool, then ``spec.pools`` in their order."""
    pools = [NodePool(DEFAULT_POOL, int(spec.get("replicas", 3)), 0, spec)]
    for entry in spec.get("pools") or ():
        own = {key: entry[key] for key in POOL_FIELDS if key in entry}
        replicas = int(entry.get("replicas", 0))
        pools.append(NodePool(entry["name"], replicas, int(entry["firstNodeId"]),
                              {**spec, **own, "replicas": replicas}))
    return pools


def pool_of(pools: list[NodePool], node_id: int) -> NodePool | None:
    """The pool whose id range (at any size up to the next pool's first id) holds
    ``node_id``: a broker of a pool being scaled down still belongs to it."""
    owner = None
    for pool in sorted(pools, key=lambda p: p.first_id):
        if node_id >= pool.first_id:
            owner = pool
    return owner


def wanted_ids(pools: list[NodePool]) -> frozenset[int]:
    return frozenset(i for pool in pools for i in pool.ids())


def pod_node_id(pod: Mapping[str, Any]) -> int | None:
    """A broker pod's node id: its pool's first id (the annotation; 0 for the default pool
    and for pods made before pools) plus its ordinal. None for a name without one."""
    meta = pod["metadata"]
    head, _, ordinal = meta["name"].rpartition("-")
    if not head or not ordinal.isdigit():
        return None
    offset = (meta.get("annotations") or {}).get(NODE_ID_OFFSET, "0")
    return int(offset) + int(ordinal) if offset.isdigit() else None
