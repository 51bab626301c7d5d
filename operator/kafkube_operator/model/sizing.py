"""Broker resources derived from the nodes the brokers run on (``spec.autoSizing``).

A kafkube broker is one Python process whose event loop is one thread: it uses about one
core for its requests, whatever the node has (docs/performance.md, "Sizing brokers on
Kubernetes"). Kafka's unit of capacity is a broker per node; kafkube's is a broker per core.
So a pool that asks for it gets, per broker:

- a CPU request of one core, or what its smallest node has once ``reservedCpu`` (the
  kubelet, the kernel's network and writeback work, other pods) is set aside, if that is
  less (never under 100m). More than a core would be reserved and never used; no CPU limit,
  as a throttled event loop stalls every client of the broker at once.
- memory in proportion: the node's allocatable memory less ``reservedMemory``, shared per
  core, times the broker's cores, as the limit (1-16 GiB: the page cache of its segments is
  charged to it), and 512 MiB requested (the broker's RSS measured at 2,000 connections or
  10,000 partitions stayed under 460 MiB).

The figures come from each node's *size* (``status.allocatable``), never from how many
nodes there are or which are Ready: a node that fails or is cordoned must not change every
broker's requests, which would roll the cluster in the middle of the incident. Adding a
smaller node does change them (a roll, as any change of resources). Explicit ``resources``
(the cluster's or a pool's) always win. How many brokers a node has room for is reported in
the status: ``replicas`` stays the user's, as the partitions moved by a scale are theirs to
decide.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from kubernetes.utils import parse_quantity

from kafkube_operator.model.pools import NodePool

MI = 1024 * 1024
GI = 1024 * MI
CORE_MILLIS = 1000  # what one broker's event loop can use
MIN_CPU_MILLIS = 100
CPU_STEP_MILLIS = 50
MEMORY_REQUEST = 512 * MI
MIN_MEMORY_LIMIT = GI
MAX_MEMORY_LIMIT = 16 * GI
DEFAULT_RESERVED_CPU = "1"
DEFAULT_RESERVED_MEMORY = "2Gi"

Manifest = dict[str, Any]


@dataclass(frozen=True)
class NodeCapacity:
    """What a node offers pods (its ``status.allocatable``) and its labels."""

    name: str
    cpu_millis: int
    memory_bytes: int
    labels: Mapping[str, str]

    @classmethod
    def of(cls, node: Mapping[str, Any]) -> NodeCapacity | None:
        """None for a node that does not say what it can allocate (not yet registered)."""
        allocatable = (node.get("status") or {}).get("allocatable") or {}
        if "cpu" not in allocatable or "memory" not in allocatable:
            return None
        meta = node.get("metadata") or {}
        return cls(meta.get("name", ""), int(parse_quantity(allocatable["cpu"]) * 1000),
                   int(parse_quantity(allocatable["memory"])), meta.get("labels") or {})


@dataclass(frozen=True)
class AutoSizing:
    """``spec.autoSizing``: what each node keeps for itself before brokers are sized."""

    reserved_cpu_millis: int
    reserved_memory_bytes: int

    @classmethod
    def of(cls, spec: Mapping[str, Any]) -> AutoSizing | None:
        """None when the spec does not ask for it (the default: resources as given)."""
        auto = spec.get("autoSizing") or {}
        if not auto.get("enabled", False):
            return None
        cpu = parse_quantity(str(auto.get("reservedCpu", DEFAULT_RESERVED_CPU)))
        memory = parse_quantity(str(auto.get("reservedMemory", DEFAULT_RESERVED_MEMORY)))
        return cls(int(cpu * 1000), int(memory))


@dataclass(frozen=True)
class PoolSizing:
    """One pool's derived resources (None: none derived, the reason in ``message``), from
    which node, and how many such brokers fit on it."""

    pool: str
    resources: Manifest | None
    message: str
    node: str | None = None
    nodes: int = 0
    brokers_per_node: int = 0

    def as_status(self) -> dict[str, Any]:
        requests = (self.resources or {}).get("requests") or {}
        limits = (self.resources or {}).get("limits") or {}
        return {"pool": self.pool or "default", "cpu": requests.get("cpu"),
                "memory": requests.get("memory"), "memoryLimit": limits.get("memory"),
                "node": self.node, "nodes": self.nodes,
                "brokersPerNode": self.brokers_per_node, "message": self.message}


def explicit_resources(pool: NodePool) -> bool:
    """Whether the pool's brokers have resources of the user's (the pool's or the cluster's)."""
    return bool(pool.spec.get("resources"))


def eligible(nodes: list[NodeCapacity], pool: NodePool) -> list[NodeCapacity]:
    """The nodes the pool's nodeSelector allows (affinity and taints are the scheduler's:
    a node they rule out only makes the figures more cautious if it is the smallest)."""
    wanted = pool.spec.get("nodeSelector") or {}
    return [n for n in nodes if all(n.labels.get(k) == v for k, v in wanted.items())]


def size_pool(pool: NodePool, nodes: list[NodeCapacity], auto: AutoSizing) -> PoolSizing:
    """The pool's brokers' resources from the smallest node they may run on."""
    fits = eligible(nodes, pool)
    if not fits:
        selector = pool.spec.get("nodeSelector") or {}
        which = f"matches nodeSelector {dict(selector)}" if selector else "is registered"
        return PoolSizing(pool.name, None, f"no node {which}: pool {pool.label()} keeps the "
                          "default resources until one does")
    smallest = min(fits, key=lambda n: (n.cpu_millis, n.memory_bytes, n.name))
    usable = smallest.cpu_millis - auto.reserved_cpu_millis
    cpu = max(MIN_CPU_MILLIS, min(CORE_MILLIS, usable // CPU_STEP_MILLIS * CPU_STEP_MILLIS))
    per_core = max(0, smallest.memory_bytes - auto.reserved_memory_bytes) * CORE_MILLIS \
        // max(usable, CORE_MILLIS)
    limit = min(MAX_MEMORY_LIMIT, max(MIN_MEMORY_LIMIT, per_core * cpu // CORE_MILLIS // MI * MI))
    per_node = max(usable, 0) // cpu
    resources = {"requests": {"cpu": _millis(cpu), "memory": _mebibytes(MEMORY_REQUEST)},
                 "limits": {"memory": _mebibytes(limit)}}
    message = (f"{_millis(cpu)} CPU, {_mebibytes(MEMORY_REQUEST)} requested and "
               f"{_mebibytes(limit)} memory limit per broker of pool {pool.label()}, from its "
               f"smallest node {smallest.name} ({_millis(smallest.cpu_millis)} CPU, "
               f"{_mebibytes(smallest.memory_bytes)} allocatable, "
               f"{_millis(auto.reserved_cpu_millis)} CPU and "
               f"{_mebibytes(auto.reserved_memory_bytes)} kept for the node)")
    if usable < MIN_CPU_MILLIS:
        message += "; the node has less than 100m CPU to give once its reserve is kept, " \
            "so the brokers may not be scheduled: lower spec.autoSizing.reservedCpu"
    else:
        message += (f"; such a node has room for {per_node} broker(s), {per_node * len(fits)}"
                    f" on the {len(fits)} node(s) the pool may use; it has {pool.replicas}")
    return PoolSizing(pool.name, resources, message, smallest.name, len(fits), per_node)


def size_pools(pools: list[NodePool], spec: Mapping[str, Any],
               nodes: list[Mapping[str, Any]]) -> list[PoolSizing]:
    """Every pool's sizing when ``spec.autoSizing`` asks for it, but those with resources of
    their own; ``nodes`` as the API server lists them."""
    auto = AutoSizing.of(spec)
    if auto is None:
        return []
    capacities = [c for c in (NodeCapacity.of(n) for n in nodes) if c is not None]
    return [size_pool(pool, capacities, auto) for pool in pools if not explicit_resources(pool)]


def derived_resources(sizing: list[PoolSizing]) -> dict[str, Manifest]:
    """Pool name to the resources its StatefulSet gets (pools sized from a node only)."""
    return {s.pool: s.resources for s in sizing if s.resources is not None}


def _millis(millis: int) -> str:
    return str(millis // 1000) if millis % 1000 == 0 else f"{millis}m"


def _mebibytes(size: int | Decimal) -> str:
    size = int(size)
    return f"{size // GI}Gi" if size % GI == 0 else f"{size // MI}Mi"
