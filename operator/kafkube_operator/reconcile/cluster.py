"""Apply a KafkaCluster's model to Kubernetes and read back what its brokers report
(through the cluster's view, reconcile/views.py)."""

from __future__ import annotations

import logging
from collections.abc import Mapping

from broker.cluster.kubernetes import KubernetesBackend
from kafkube_operator.kube import ApplyError, Kube
from kafkube_operator.model.cluster import ClusterRef, desired_cluster, selector
from kafkube_operator.model.status import (
    BrokerState,
    ObservedCluster,
    SpecWarning,
    cluster_status,
)
from kafkube_operator.reconcile.topic import mirror_topics
from kafkube_operator.reconcile.views import ClusterViews, Events, utc_now

log = logging.getLogger(__name__)
REVISION_LABEL = "controller-revision-hash"


def observe(kube: Kube, view: KubernetesBackend, ref: ClusterRef) -> ObservedCluster:
    sts = kube.get("apps/v1", "StatefulSet", ref.statefulset, ref.namespace) or {}
    sts_status = sts.get("status") or {}
    revision = sts_status.get("updateRevision")
    pods = kube.list("v1", "Pod", ref.namespace, selector(ref))
    outdated = sum(1 for p in pods if revision and
                   (p["metadata"].get("labels") or {}).get(REVISION_LABEL) != revision)
    controller = view.controller()
    leaders = view.read_image().leaders()
    brokers = tuple(BrokerState(b.node_id, b.rack, leaders.get(b.node_id, 0))
                    for b in view.live_brokers().values())
    return ObservedCluster(pods=len(pods), outdated_pods=outdated,
                           controller=controller.holder if controller else None,
                           brokers=brokers)


def apply_cluster(kube: Kube, resource: Mapping, events: Events) -> list[SpecWarning]:
    """Create or update every object the KafkaCluster owns; what could not be applied comes
    back as warnings, with the API server's or the broker's reason."""
    desired = desired_cluster(resource)
    warnings = []
    if desired.refused_config:
        warnings.append(SpecWarning("InvalidConfig", "spec.config not applied: " + "; ".join(
            f"{key}: {why}" for key, why in sorted(desired.refused_config.items()))))
    for manifest in desired.objects:
        meta = manifest["metadata"]
        before = kube.get(manifest["apiVersion"], manifest["kind"], meta["name"],
                          meta.get("namespace"))
        try:
            after = kube.apply(manifest)
        except ApplyError as e:
            warnings.append(SpecWarning("ApplyFailed", str(e)))
            events.warning("ApplyFailed", str(e))
            continue
        what = f"{manifest['kind']} {meta['name']}"
        if before is None:
            events.info("Created", f"created {what}")
        elif before["metadata"]["resourceVersion"] != after["metadata"]["resourceVersion"]:
            events.info("Updated", f"updated {what}")
    return warnings


def reconcile_cluster(kube: Kube, views: ClusterViews, resource: Mapping,
                      events: Events) -> dict:
    """One pass: apply the model, observe, and return the status to write."""
    ref = ClusterRef.of(resource)
    spec = resource.get("spec") or {}
    warnings = apply_cluster(kube, resource, events)
    view = views.of(ref)
    observed = observe(kube, view, ref)
    mirror_topics(kube, ref, view.read_image(), events)
    previous = (resource.get("status") or {}).get("conditions") or []
    return cluster_status(
        desired=int(spec.get("replicas", 3)),
        generation=resource["metadata"].get("generation", 0), observed=observed,
        warnings=warnings, bootstrap_servers=ref.bootstrap_servers,
        selector=",".join(f"{k}={v}" for k, v in selector(ref).items()),
        previous=previous, now=utc_now())


def stop_brokers(kube: Kube, resource: Mapping, events: Events) -> int:
    """Delete the StatefulSet ahead of the garbage collector, so the brokers stop before
    their coordination objects go (a running broker would write them again); the number of
    broker pods still running."""
    ref = ClusterRef.of(resource)
    if kube.delete("apps/v1", "StatefulSet", ref.statefulset, ref.namespace):
        events.info("Deleted", f"deleted StatefulSet {ref.statefulset}")
    return len(kube.list("v1", "Pod", ref.namespace, selector(ref)))


def delete_cluster(kube: Kube, views: ClusterViews, resource: Mapping,
                   events: Events) -> None:
    """What owner references cannot remove, once the brokers stopped: the cluster-scoped
    node-reader binding, and the Leases and ConfigMaps the brokers created for themselves
    (the cluster image). The Services and the rest go with their owner; the claims as the
    StatefulSet's retention policy says."""
    ref = ClusterRef.of(resource)
    views.forget(ref)
    kube.delete("rbac.authorization.k8s.io/v1", "ClusterRoleBinding", ref.node_reader_binding)
    coordination = {"kafkube.io/cluster": ref.name}
    for api_version, kind in (("coordination.k8s.io/v1", "Lease"), ("v1", "ConfigMap")):
        for obj in kube.list(api_version, kind, ref.namespace, coordination):
            if not obj["metadata"].get("ownerReferences"):
                kube.delete(api_version, kind, obj["metadata"]["name"], ref.namespace)
    events.info("Deleted", f"removed the coordination objects of cluster {ref.name}")
