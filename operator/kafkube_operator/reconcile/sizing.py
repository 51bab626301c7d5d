"""The thin side of ``spec.autoSizing`` (model/sizing.py): list the nodes, size each pool,
and keep what the brokers run when no size can be derived (nodes not readable, none
matching): falling back to the default resources would roll every broker for a reason that
is no change of the spec."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kubernetes.client.rest import ApiException

from kafkube_operator.kube import Kube
from kafkube_operator.model.cluster import CONTAINER, ClusterRef
from kafkube_operator.model.pools import node_pools
from kafkube_operator.model.sizing import AutoSizing, PoolSizing, size_pools
from kafkube_operator.model.status import SpecWarning


def pool_sizing(kube: Kube, resource: Mapping[str, Any]
                ) -> tuple[list[PoolSizing], list[SpecWarning]]:
    """Each auto-sized pool's resources, and the Warnings of the pools not sized."""
    spec = resource.get("spec") or {}
    try:
        if AutoSizing.of(spec) is None:
            return [], []
    except ValueError as e:
        return [], [SpecWarning("AutoSizingInvalid", f"spec.autoSizing not applied: {e}")]
    pools = node_pools(spec)
    try:
        nodes = kube.list("v1", "Node")
    except ApiException as e:
        reason = f"the nodes could not be listed ({e.status} {e.reason})"
        sizing = [PoolSizing(p.name, None, reason) for p in pools if not p.spec.get("resources")]
    else:
        sizing = size_pools(pools, spec, nodes)
    ref = ClusterRef.of(resource)
    kept, warnings = [], []
    for sized in sizing:
        if sized.resources is None:
            warnings.append(SpecWarning("AutoSizingSkipped", sized.message))
            pool = next(p for p in pools if p.name == sized.pool)
            live = _running_resources(kube, ref, pool.statefulset(ref.name))
            if live:
                sized = PoolSizing(sized.pool, live, sized.message + "; the brokers keep the "
                                   "resources they run with")
        kept.append(sized)
    return kept, warnings


def _running_resources(kube: Kube, ref: ClusterRef, name: str) -> dict[str, Any] | None:
    sts = kube.get("apps/v1", "StatefulSet", name, ref.namespace)
    containers = (((sts or {}).get("spec") or {}).get("template") or {}).get("spec", {}) \
        .get("containers") or []
    return next((c.get("resources") for c in containers if c.get("name") == CONTAINER), None)
