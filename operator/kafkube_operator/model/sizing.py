"""Broker resources derived from the nodes the brokers run on (``spec.autoSizing``).

A kafkube broker is one Python process whose event loop is one thread: it uses about one
core for its requests, whatever the node has (docs/performance.md, "Sizing brokers on
Kubernetes"). Kafka's unit of capacity is a broker per node; kafkube's is a broker per core.
So a pool that asks for it gets, per broker:

- a CPU request of one core, or what its smallest node has once ``reservedCpu`` (the
  kubelet, the kernel's network and writeback work, other pods) is set aside, if that is
  less (never under 100m). More than a core would be reserved and never used; no CPU limit,
  as a throttled event loop stalls every client of the broker at once.
- memory in proportion: the least memory per core of the pool's nodes (allocatable memory
  less ``reservedMemory``, over the cores left after ``reservedCpu``) times the broker's
  cores, in steps of 256 MiB, as the limit (1-16 GiB: the page cache of its segments is
  charged to it), and 512 MiB requested (the broker's RSS measured at 2,000 connections or
  10,000 partitions stayed under 460 MiB).

The nodes a pool may use are those its nodeSelector selects, its required node affinity
allows (preferred affinity rules out none) and whose taints its tolerations allow, but for
the taints Kubernetes puts on a node that is cordoned, not ready or unreachable: the figures
follow the nodes' *size*, never their state, so a node failing or cordoned in an incident
does not change them. When they are applied is the operator's (reconcile/sizing.py): at a
change of the spec only, never because a node came or went. Explicit ``resources`` (the
cluster's or a pool's) always win.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kubernetes.utils import parse_quantity

from kafkube_operator.model.pools import NodePool

MI = 1024 * 1024
GI = 1024 * MI
CORE_MILLIS = 1000  # what one broker's event loop can use
MIN_CPU_MILLIS = 100
CPU_STEP_MILLIS = 50
MEMORY_STEP = 256 * MI  # a node a few MiB smaller changes no limit
MEMORY_REQUEST = 512 * MI
MIN_MEMORY_LIMIT = GI
MAX_MEMORY_LIMIT = 16 * GI
DEFAULT_RESERVED_CPU = "1"
DEFAULT_RESERVED_MEMORY = "2Gi"
# On the StatefulSet (not its pods): the KafkaCluster generation its resources were derived
# at (reconcile/sizing.py re-derives them at the next one only).
SIZED_GENERATION = "kafkube.io/sized-generation"
# Taints of a node's state, not of its purpose: cordoned, not ready, unreachable, under
# pressure. A pool's figures must not change with them.
STATE_TAINTS = "node.kubernetes.io/"
BLOCKING_EFFECTS = ("NoSchedule", "NoExecute")

Manifest = dict[str, Any]


@dataclass(frozen=True)
class NodeCapacity:
    """What a node offers pods (its ``status.allocatable``), its labels and its taints."""

    name: str
    cpu_millis: int
    memory_bytes: int
    labels: Mapping[str, str]
    taints: tuple[Mapping[str, str], ...] = ()

    @classmethod
    def of(cls, node: Mapping[str, Any]) -> NodeCapacity | None:
        """None for a node that does not say what it can allocate (not yet registered)."""
        allocatable = (node.get("status") or {}).get("allocatable") or {}
        if "cpu" not in allocatable or "memory" not in allocatable:
            return None
        try:
            cpu = int(parse_quantity(allocatable["cpu"]) * 1000)
            memory = int(parse_quantity(allocatable["memory"]))
        except ValueError:  # not a quantity: not a node to size from
            return None
        meta = node.get("metadata") or {}
        taints = tuple((node.get("spec") or {}).get("taints") or ())
        return cls(meta.get("name", ""), cpu, memory, meta.get("labels") or {}, taints)


@dataclass(frozen=True)
class AutoSizing:
    """``spec.autoSizing``: what each node keeps for itself before brokers are sized."""

    reserved_cpu_millis: int
    reserved_memory_bytes: int

    @classmethod
    def of(cls, spec: Mapping[str, Any]) -> AutoSizing | None:
        """None when the spec does not ask for it (the default: resources as given);
        ValueError for a reserve that is no quantity."""
        auto = spec.get("autoSizing") or {}
        if not auto.get("enabled", False):
            return None
        cpu = parse_quantity(str(auto.get("reservedCpu", DEFAULT_RESERVED_CPU)))
        memory = parse_quantity(str(auto.get("reservedMemory", DEFAULT_RESERVED_MEMORY)))
        return cls(int(cpu * 1000), int(memory))


@dataclass(frozen=True)
class PoolSizing:
    """One pool's derived resources (None: none derived, the reason in ``message``), from
    which nodes, and how many such brokers each of them has room for at least."""

    pool: str
    resources: Manifest | None
    message: str
    node: str | None = None
    nodes: int = 0
    brokers_per_node: int = 0
    too_small: bool = False

    def as_status(self) -> dict[str, Any]:
        requests = (self.resources or {}).get("requests") or {}
        limits = (self.resources or {}).get("limits") or {}
        return {"pool": self.pool or "default", "cpu": requests.get("cpu"),
                "memory": requests.get("memory"), "memoryLimit": limits.get("memory"),
                "node": self.node, "nodes": self.nodes,
                "brokersPerNode": self.brokers_per_node, "message": self.message}


@dataclass(frozen=True)
class Sized:
    """What a pool's StatefulSet gets: ``resources``, derived at KafkaCluster
    ``generation`` (None: kept from before, to be derived again at the next pass)."""

    resources: Manifest
    generation: int | None


def explicit_resources(pool: NodePool) -> bool:
    """Whether the pool's brokers have resources of the user's (the pool's or the cluster's)."""
    return bool(pool.spec.get("resources"))


def tolerated(taint: Mapping[str, str], tolerations: list[Mapping[str, Any]]) -> bool:
    """Kubernetes' matching of one taint against a pod's tolerations."""
    for t in tolerations:
        if t.get("effect") and t["effect"] != taint.get("effect"):
            continue
        if t.get("operator") == "Exists":
            if not t.get("key") or t["key"] == taint.get("key"):
                return True
        elif t.get("key") == taint.get("key") and (t.get("value") or "") == \
                (taint.get("value") or ""):
            return True
    return False


INT64 = re.compile(r"[+-]?[0-9]+")


def _go_int(text: str) -> int | None:
    """The integer Kubernetes' ``strconv.ParseInt(text, 10, 64)`` reads, or None."""
    if not INT64.fullmatch(text):
        return None
    value = int(text)
    return value if -(1 << 63) <= value < (1 << 63) else None


def _requirement_met(requirement: Any, values_of: Mapping[str, str]) -> bool:
    """One requirement of a node selector term against the node's labels (or fields) in
    ``values_of``. What the API server would refuse matches nothing, so a malformed
    affinity is never read as allowing a node."""
    if not isinstance(requirement, Mapping):
        return False
    value = values_of.get(str(requirement.get("key")))
    operator = requirement.get("operator")
    raw = requirement.get("values")
    values = [str(v) for v in raw] if isinstance(raw, list) else []
    if operator == "In":
        return value is not None and value in values
    if operator == "NotIn":
        return value is None or value not in values
    if operator == "Exists":
        return value is not None
    if operator == "DoesNotExist":
        return value is None
    if operator in ("Gt", "Lt") and value is not None and len(values) == 1:
        have, bound = _go_int(value), _go_int(values[0])
        if have is None or bound is None:
            return False
        return have > bound if operator == "Gt" else have < bound
    return False


def _term_matches(term: Any, node: NodeCapacity) -> bool:
    """A node selector term: all its requirements hold; an empty or null term matches no
    node. ``matchFields`` may name ``metadata.name`` only, with In or NotIn."""
    if not isinstance(term, Mapping):
        return False
    expressions = term.get("matchExpressions") or []
    fields = term.get("matchFields") or []
    if not isinstance(expressions, list) or not isinstance(fields, list) or \
            not (expressions or fields):
        return False
    return all(_requirement_met(r, node.labels) for r in expressions) and all(
        isinstance(r, Mapping) and r.get("key") == "metadata.name"
        and r.get("operator") in ("In", "NotIn")
        and _requirement_met(r, {"metadata.name": node.name}) for r in fields)


def required_node_affinity(affinity: Any) -> Any:
    """The pool's ``requiredDuringSchedulingIgnoredDuringExecution`` node selector, or None;
    a ``nodeAffinity`` that is no object is returned as it is (it allows no node)."""
    node_affinity = affinity.get("nodeAffinity") if isinstance(affinity, Mapping) else None
    if not isinstance(node_affinity, Mapping):
        return node_affinity
    return node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution")


def affinity_allows(node: NodeCapacity, affinity: Any) -> bool:
    """Kubernetes' required node affinity: any of its terms. Preferred affinity only orders
    the nodes allowed, and pod (anti-)affinity is about other pods: they rule none out."""
    required = required_node_affinity(affinity)
    if required is None:
        return True
    terms = required.get("nodeSelectorTerms") if isinstance(required, Mapping) else None
    return isinstance(terms, list) and any(_term_matches(t, node) for t in terms)


def eligible(nodes: list[NodeCapacity], pool: NodePool) -> list[NodeCapacity]:
    """The nodes the pool's nodeSelector selects, its required node affinity allows and its
    tolerations allow (taints of a node's state aside): those the scheduler may place its
    brokers on."""
    wanted = pool.spec.get("nodeSelector") or {}
    tolerations = list(pool.spec.get("tolerations") or ())
    affinity = pool.spec.get("affinity")

    def allowed(node: NodeCapacity) -> bool:
        return all(tolerated(t, tolerations) for t in node.taints
                   if t.get("effect") in BLOCKING_EFFECTS
                   and not str(t.get("key", "")).startswith(STATE_TAINTS))
    return [n for n in nodes
            if all(n.labels.get(k) == v for k, v in wanted.items())
            and affinity_allows(n, affinity) and allowed(n)]


def size_pool(pool: NodePool, nodes: list[NodeCapacity], auto: AutoSizing) -> PoolSizing:
    """The pool's brokers' resources from the least CPU and the least memory per core
    among the nodes it may run on."""
    fits = eligible(nodes, pool)
    if not fits:
        selector = pool.spec.get("nodeSelector") or {}
        which = f"matches nodeSelector {dict(selector)}" if selector else "is registered"
        if required_node_affinity(pool.spec.get("affinity")) is not None:
            which = (f"{which}, " if selector else "") + \
                f"satisfies pool {pool.label()}'s required node affinity and allows its"
        else:
            which += f" and allows pool {pool.label()}'s"
        return PoolSizing(pool.name, None, f"no node {which} tolerations: it keeps the "
                          "resources it has until one does")

    def usable_cpu(n: NodeCapacity) -> int:
        return n.cpu_millis - auto.reserved_cpu_millis

    def usable_memory(n: NodeCapacity) -> int:
        return max(0, n.memory_bytes - auto.reserved_memory_bytes)

    smallest = min(fits, key=lambda n: (n.cpu_millis, n.memory_bytes, n.name))
    usable = usable_cpu(smallest)
    cpu = max(MIN_CPU_MILLIS, min(CORE_MILLIS, usable // CPU_STEP_MILLIS * CPU_STEP_MILLIS))
    per_core = min(usable_memory(n) * CORE_MILLIS // max(usable_cpu(n), CORE_MILLIS)
                   for n in fits)
    limit = min(MAX_MEMORY_LIMIT, max(MIN_MEMORY_LIMIT,
                                      per_core * cpu // CORE_MILLIS // MEMORY_STEP * MEMORY_STEP))
    per_node = min(min(max(usable_cpu(n), 0) // cpu, usable_memory(n) // MEMORY_REQUEST)
                   for n in fits)
    resources = {"requests": {"cpu": _millis(cpu), "memory": _mebibytes(MEMORY_REQUEST)},
                 "limits": {"memory": _mebibytes(limit)}}
    message = (f"{_millis(cpu)} CPU, {_mebibytes(MEMORY_REQUEST)} requested and "
               f"{_mebibytes(limit)} memory limit per broker of pool {pool.label()}, from the "
               f"{len(fits)} node(s) it may use (the smallest {smallest.name}: "
               f"{_millis(smallest.cpu_millis)} CPU, {_mebibytes(smallest.memory_bytes)} "
               f"allocatable; {_millis(auto.reserved_cpu_millis)} CPU and "
               f"{_mebibytes(auto.reserved_memory_bytes)} kept for each node)")
    too_small = per_node < 1
    if too_small:
        message += ("; no node has room for one such broker once its reserve is kept: the "
                    "brokers may not be scheduled (lower spec.autoSizing.reservedCpu or "
                    "reservedMemory, or use larger nodes)")
    else:
        message += (f"; each has room for at least {per_node} such broker(s); the pool has "
                    f"{pool.replicas}")
    return PoolSizing(pool.name, resources, message, smallest.name, len(fits), per_node,
                      too_small)


def size_pools(pools: list[NodePool], spec: Mapping[str, Any],
               nodes: list[Mapping[str, Any]]) -> list[PoolSizing]:
    """Every pool's sizing when ``spec.autoSizing`` asks for it, but those with resources of
    their own; ``nodes`` as the API server lists them."""
    auto = AutoSizing.of(spec)
    if auto is None:
        return []
    capacities = [c for c in (NodeCapacity.of(n) for n in nodes) if c is not None]
    return [size_pool(pool, capacities, auto) for pool in pools if not explicit_resources(pool)]


def _millis(millis: int) -> str:
    return str(millis // 1000) if millis % 1000 == 0 else f"{millis}m"


def _mebibytes(size: int) -> str:
    return f"{size // GI}Gi" if size % GI == 0 else f"{size // MI}Mi"
