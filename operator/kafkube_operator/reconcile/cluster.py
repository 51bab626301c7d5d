"""One pass over a KafkaCluster: read once (reconcile/snapshot.py), apply the spec when it
changed or a change is under way (reconcile/cluster_apply.py), then observe, roll, rebalance
and report (reconcile/cluster_observe.py). The kopf handlers (handlers.py) run the pass with
``spec_changed`` on create, update and resume, and without it on the timer; topic mirroring
has a timer of its own (reconcile/topic.py)."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping

from kafkube_operator.cluster_view import ClusterView
from kafkube_operator.kafka import AdminClients
from kafkube_operator.kube import Kube
from kafkube_operator.model.cluster import ClusterRef, config_hash, selector
from kafkube_operator.model.listeners import ListenerLayout, SecuritySpec, layout_of_properties
from kafkube_operator.model.upgrade import deployed_image
from kafkube_operator.reconcile.cluster_apply import apply_cluster, apply_pass, deployed_min_isr
from kafkube_operator.reconcile.cluster_observe import observe_pass, problem_status
from kafkube_operator.reconcile.security import apply_cluster_pki
from kafkube_operator.reconcile.snapshot import ClusterSnapshot, read_snapshot
from kafkube_operator.reconcile.upgrade import spec_image
from kafkube_operator.reconcile.views import ClusterMemory, ClusterViews, Events

log = logging.getLogger(__name__)
# How often a cluster whose spec did not change is applied again all the same: what someone
# changed by hand in its objects is put back, and certificates are renewed, within this.
FULL_APPLY_INTERVAL_S = 60.0


def reconcile_cluster(kube: Kube, views: ClusterViews, admins: AdminClients,
                      resource: Mapping, events: Events, spec_changed: bool = True) -> dict:
    """One pass; the status to write."""
    ref = ClusterRef.of(resource)
    view = views.of(ref)
    memory = views.memory(ref)
    snapshot = read_snapshot(kube, view, ref, resource, memory)
    if snapshot.trusted.problem is not None:
        return problem_pass(kube, view, resource, snapshot, memory, events)
    outcome = memory.applied
    if outcome is None or spec_changed or needs_apply(resource, snapshot, memory):
        outcome = memory.applied = apply_pass(kube, view, admins, resource, snapshot, memory,
                                              events)
        if outcome.changed:  # observe what the pass left, not what it found
            snapshot = read_snapshot(kube, view, ref, resource, memory)
            if snapshot.trusted.problem is not None:
                return problem_pass(kube, view, resource, snapshot, memory, events)
    return observe_pass(kube, view, admins, resource, snapshot, outcome, memory, events)


def needs_apply(resource: Mapping, snapshot: ClusterSnapshot, memory: ClusterMemory) -> bool:
    """Whether a tick must apply although the spec did not change: a generation not applied
    by this process (a failover, a missed update), a change under way (scale, listener
    steps), the StatefulSet or the brokers' configuration changed by someone else, a size
    that is not the spec's, or the periodic apply due."""
    outcome = memory.applied
    if outcome is None or outcome.generation != resource["metadata"].get("generation", 0):
        return True
    if outcome.under_way() or memory.scaling_phase is not None:
        return True
    spec = resource.get("spec") or {}
    wanted = {pool.name: pool.replicas for pool in snapshot.pools(spec)}
    if snapshot.statefulset_gone(spec) or snapshot.pool_sizes() != wanted:
        return True
    if outcome.config_hash is not None and config_hash(snapshot.deployed) != outcome.config_hash:
        return True
    return time.monotonic() - outcome.at >= FULL_APPLY_INTERVAL_S


def problem_pass(kube: Kube, view: ClusterView, resource: Mapping,
                 snapshot: ClusterSnapshot, memory: ClusterMemory, events: Events) -> dict:
    """No scale, roll or Topic pass on an image that is missing, foreign or older: each could
    take data away. The objects are still applied: the brokers that put the image back must
    be able to start."""
    assert snapshot.trusted.problem is not None
    pki, _ = apply_cluster_pki(kube, resource, events)
    held = layout_of_properties(snapshot.deployed_properties) or \
        ListenerLayout.of_status(resource.get("status"))
    # The level cannot be read from this image, so no image is probed: the brokers keep
    # the one they run (a spec.image applied here would be rolled out later unprobed, taken
    # for the deployed one); the one the last apply chose where there is no StatefulSet.
    last = memory.applied.upgrade if memory.applied is not None else None
    image = deployed_image(snapshot.statefulset, snapshot.pods) or (
        last.image if last is not None and last.spec_image == spec_image(resource) else None)
    applied = apply_cluster(kube, resource, events, snapshot.pool_sizes(),
                            pki.pod_annotations, deployed_min_isr(snapshot.deployed_properties),
                            held, image)
    status = problem_status(resource, snapshot, snapshot.trusted.problem)
    status["sizing"] = [s.as_status() for s in applied.sizing] or None
    spec = resource.get("spec") or {}
    status["listenerLayout"] = (held or ListenerLayout.of(SecuritySpec.of(spec))).as_status()
    return status


def stop_brokers(kube: Kube, resource: Mapping, events: Events) -> int:
    """Delete the StatefulSets (every pool's) ahead of the garbage collector, so the brokers
    stop before their coordination objects go (a running broker would write them again);
    the number of broker pods still running."""
    ref = ClusterRef.of(resource)
    for sts in kube.list("apps/v1", "StatefulSet", ref.namespace, selector(ref)):
        name = sts["metadata"]["name"]
        if kube.delete("apps/v1", "StatefulSet", name, ref.namespace):
            events.info("Deleted", f"deleted StatefulSet {name}")
    return len(kube.list("v1", "Pod", ref.namespace, selector(ref)))


def delete_cluster(kube: Kube, views: ClusterViews, resource: Mapping,
                   events: Events) -> None:
    """What owner references cannot remove, once the brokers stopped: the cluster-scoped
    node-reader binding, and the Leases and ConfigMaps the brokers created for themselves.
    The Services and the rest go with their owner; the claims as the StatefulSet's retention
    policy says. Where the claims are kept (``storage.deleteClaim: false``, the default), so
    are the cluster image and its counters: a KafkaCluster created again with the same name
    finds its brokers' data, topics and offsets as they were (the brokers also keep a copy of
    the image in their volumes, from which they would rebuild it)."""
    ref = ClusterRef.of(resource)
    views.forget(ref)
    kube.delete("rbac.authorization.k8s.io/v1", "ClusterRoleBinding", ref.node_reader_binding)
    claims_deleted = bool(((resource.get("spec") or {}).get("storage") or {}).get("deleteClaim"))
    coordination = {"kafkube.io/cluster": ref.name}
    for api_version, kind in (("coordination.k8s.io/v1", "Lease"), ("v1", "ConfigMap")):
        for obj in kube.list(api_version, kind, ref.namespace, coordination):
            if obj["metadata"].get("ownerReferences"):
                continue
            if kind == "ConfigMap" and not claims_deleted:
                continue
            kube.delete(api_version, kind, obj["metadata"]["name"], ref.namespace)
    events.info("Deleted", f"removed the coordination objects of cluster {ref.name}" + (
        "" if claims_deleted else "; its metadata is kept with its volumes"))
