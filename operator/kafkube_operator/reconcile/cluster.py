"""Apply a KafkaCluster's model to Kubernetes and read back what its brokers report.

The brokers' own view of the cluster (live broker Leases, the controller Lease, the cluster
image in its ConfigMap) is read through the broker's Kubernetes coordination backend, the
same code and the same liveness rules the brokers use: the operator never has a second
opinion on which broker is alive or who leads a partition.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from broker.cluster.kubernetes import KubernetesBackend, KubernetesSettings
from kafkube_operator.kube import ApplyError, Kube
from kafkube_operator.model.cluster import ClusterRef, desired_cluster, selector
from kafkube_operator.model.status import (
    BrokerState,
    ObservedCluster,
    SpecWarning,
    cluster_status,
)

log = logging.getLogger(__name__)
REVISION_LABEL = "controller-revision-hash"


class Events(Protocol):
    """Where the operator reports each action (kopf posts them as Kubernetes Events)."""

    def info(self, reason: str, message: str) -> None: ...

    def warning(self, reason: str, message: str) -> None: ...


@dataclass
class ClusterViews:
    """One read-only coordination backend per KafkaCluster, kept between reconciles: its
    watches keep the brokers' leases and the image current without polling."""

    kubeconfig: str | None
    _views: dict[tuple[str, str], KubernetesBackend]
    _lock: threading.Lock

    @classmethod
    def create(cls, kubeconfig: str | None) -> ClusterViews:
        return cls(kubeconfig, {}, threading.Lock())

    def of(self, ref: ClusterRef) -> KubernetesBackend:
        key = (ref.namespace, ref.name)
        with self._lock:
            view = self._views.get(key)
            if view is None:
                view = self._views[key] = KubernetesBackend(
                    KubernetesSettings(ref.namespace, ref.name, self.kubeconfig))
            return view

    def forget(self, ref: ClusterRef) -> None:
        with self._lock:
            view = self._views.pop((ref.namespace, ref.name), None)
        if view is not None:
            view.close()

    def close(self) -> None:
        with self._lock:
            views, self._views = list(self._views.values()), {}
        for view in views:
            view.close()


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


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
    observed = observe(kube, views.of(ref), ref)
    previous = (resource.get("status") or {}).get("conditions") or []
    return cluster_status(
        desired=int(spec.get("replicas", 3)),
        generation=resource["metadata"].get("generation", 0), observed=observed,
        warnings=warnings, bootstrap_servers=ref.bootstrap_servers,
        selector=",".join(f"{k}={v}" for k, v in selector(ref).items()),
        previous=previous, now=_now())


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
