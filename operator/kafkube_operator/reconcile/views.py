"""What every reconcile step shares: where actions are reported, and the read-only view of
each KafkaCluster's coordination objects (the brokers' Leases and the cluster image) through
the broker's own Kubernetes backend, the same code and liveness rules the brokers use, so the
operator never has a second opinion on which broker is alive or who leads a partition."""

from __future__ import annotations

import datetime as dt
import threading
from dataclasses import dataclass
from typing import Protocol

from broker.cluster.kubernetes import KubernetesBackend, KubernetesSettings
from kafkube_operator.model.cluster import ClusterRef


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


def utc_now() -> str:
    """A condition's lastTransitionTime, as Kubernetes writes them."""
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
