"""The operator's side of ``spec.autoSizing`` (model/sizing.py): list the nodes, size each
pool, and decide what its StatefulSet gets.

A change of resources rolls every broker of the pool, so it happens at a change of the spec
only: resources derived at the KafkaCluster's current generation (``SIZED_GENERATION`` on
the StatefulSet) are kept whatever the nodes do since; a node added, replaced or deleted by
an autoscaler shows in ``status.sizing`` as what the next change of the spec would apply.
Where nothing can be derived (nodes not readable, none the pool may use, a reserve that is
no quantity), the brokers keep the resources they run with, and a Warning says why; only a
new pool then gets the default."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from kubernetes.client.rest import ApiException
from urllib3.exceptions import HTTPError

from kafkube_operator.kube import Kube
from kafkube_operator.model.cluster import CONTAINER, ClusterRef
from kafkube_operator.model.pools import NodePool, node_pools
from kafkube_operator.model.sizing import (
    SIZED_GENERATION,
    AutoSizing,
    PoolSizing,
    Sized,
    explicit_resources,
    size_pools,
)
from kafkube_operator.model.status import SpecWarning

NOT_LISTED = (ApiException, HTTPError, OSError)


def pool_sizing(kube: Kube, resource: Mapping[str, Any]
                ) -> tuple[list[PoolSizing], dict[str, Sized], list[SpecWarning]]:
    """Each auto-sized pool's sizing (for the status), what its StatefulSet gets, and the
    Warnings of the pools not sized."""
    spec = resource.get("spec") or {}
    generation = int(resource["metadata"].get("generation", 0))
    pools = [p for p in node_pools(spec) if not explicit_resources(p)]
    try:
        if AutoSizing.of(spec) is None:
            return [], {}, []
    except ValueError as e:
        reason = f"spec.autoSizing not applied: {e}"
        return [], _keep_running(kube, resource, pools), [SpecWarning("AutoSizingInvalid",
                                                                      reason)]
    try:
        nodes = kube.list("v1", "Node")
    except NOT_LISTED as e:
        sizing = [PoolSizing(p.name, None, f"the nodes could not be listed ({e})")
                  for p in pools]
    else:
        sizing = size_pools(pools, spec, nodes)
    ref = ClusterRef.of(resource)
    by_name = {p.name: p for p in pools}
    reported, applied, warnings = [], {}, []
    for sized in sizing:
        pool = by_name[sized.pool]
        live, at = _running(kube, ref, pool)
        if live is not None and at == generation:  # derived at this spec: kept as is
            applied[pool.name] = Sized(live, generation)
            if sized.resources is not None and sized.resources != live:
                sized = replace(sized, message=f"{sized.message}. Applied: {_brief(live)}, "
                                "derived at this spec before the nodes (or the operator's "
                                "sizing) changed; the next change of the spec applies the "
                                "figures above")
        elif sized.resources is not None:
            applied[pool.name] = Sized(sized.resources, generation)
        elif live is not None:
            applied[pool.name] = Sized(live, None)
        if sized.resources is None and pool.replicas > 0:
            warnings.append(SpecWarning("AutoSizingSkipped", sized.message))
        if sized.too_small:
            warnings.append(SpecWarning("AutoSizingTooSmall", sized.message))
        reported.append(sized)
    return reported, applied, warnings


def _keep_running(kube: Kube, resource: Mapping[str, Any],
                  pools: list[NodePool]) -> dict[str, Sized]:
    ref = ClusterRef.of(resource)
    kept = {}
    for pool in pools:
        live, _ = _running(kube, ref, pool)
        if live is not None:
            kept[pool.name] = Sized(live, None)
    return kept


def _running(kube: Kube, ref: ClusterRef, pool: NodePool
             ) -> tuple[dict[str, Any] | None, int | None]:
    """The pool's StatefulSet's broker resources, and the generation they were derived at."""
    sts = kube.get("apps/v1", "StatefulSet", pool.statefulset(ref.name), ref.namespace)
    if sts is None:
        return None, None
    containers = ((sts.get("spec") or {}).get("template") or {}).get("spec", {}) \
        .get("containers") or []
    resources = next((c.get("resources") for c in containers if c.get("name") == CONTAINER),
                     None)
    at = ((sts.get("metadata") or {}).get("annotations") or {}).get(SIZED_GENERATION, "")
    return resources or None, int(at) if at.isdigit() else None


def _brief(resources: Mapping[str, Any]) -> str:
    requests = resources.get("requests") or {}
    limits = resources.get("limits") or {}
    return (f"{requests.get('cpu', '-')} CPU, {requests.get('memory', '-')} requested, "
            f"{limits.get('memory', 'no')} memory limit")
