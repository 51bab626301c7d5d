"""The operator's read-only view of one KafkaCluster's coordination objects: the metadata
ConfigMap (the cluster image) and the brokers' and controller's Leases, read through the
Kubernetes API with the contract's names and readers (kafkube_contract/objects.py), so the
operator needs no broker code and may run another kafkube version than its brokers.

Every question is one request (a GET or a LIST): a pass over a cluster reads its snapshot
once (reconcile/snapshot.py), so that costs a handful of requests per tick, and there is no
cache whose staleness could be judged wrong.

**Liveness.** For the operator a broker is live while its Lease is renewed: a lease duration
has not passed since this view first saw the lease's latest renewal (its resourceVersion),
on the operator's own monotonic clock (kafkube_contract/leases.py), as client-go's leader
election judges a lease by when it observed the renewal, never by the holder's
``renewTime`` (an operator whose clock ran a few seconds ahead of the brokers' would take
every broker for dead). A view that starts takes every lease as just renewed, for one
duration. The brokers judge each other more strictly (broker/cluster/kubernetes.py: the
same renewal clock, but also a holder whose pod shows its process gone fenced at once, the
controller lease tied to its holder's registration, and an API server outage forgiven),
because a broker that took a dead peer for live would wait on it, or one that took a live
one for dead would elect over it and fork a partition's history. The operator needs none of
that: it decides nothing the brokers rely on. Whom it bootstraps from, whether a Topic's
replication factor fits, which brokers a status lists, and whether a roll or a rebalance may
go on (checked again against pods' and ISRs' state) are all retried on the next pass when
wrong, and every change it makes goes through the Kafka API, where the controller applies
its own fencing.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from kubernetes import client as k8s
from kubernetes.client.rest import ApiException

from kafkube_contract.image import ImageView, StoredIdentity, read_image_doc
from kafkube_contract.leases import RenewalClock
from kafkube_contract.objects import (
    CLUSTER_LABEL,
    REQUEST_TIMEOUT_S,
    ROLE_LABEL,
    controller_lease_name,
    controller_of,
    counters_name,
    image_document,
    metadata_name,
    registration_of,
    stored_identity,
)
from kafkube_contract.registration import BrokerRegistration, ControllerLease

NOT_FOUND = 404


class MetadataMissing(Exception):
    """The cluster's metadata ConfigMap is not there (never made, or deleted)."""


def _monotonic_ms() -> int:
    return int(time.monotonic() * 1000)


class ClusterView:
    """What the brokers of one cluster published: the image, who is live, who controls."""

    def __init__(self, client: k8s.ApiClient, namespace: str, cluster: str,
                 now_ms: Callable[[], int] = _monotonic_ms) -> None:
        self.namespace = namespace
        self.cluster = cluster
        self.where = f"ConfigMap {namespace}/{metadata_name(cluster)}"
        self._core = k8s.CoreV1Api(client)
        self._leases = k8s.CoordinationV1Api(client)
        # When this view first saw each lease's latest renewal, on its own clock.
        self._renewals = RenewalClock(now_ms)
        # The last image decoded, by the ConfigMap's resourceVersion: a tick whose image did
        # not change does not decompress and parse it again.
        self._decoded: tuple[str, ImageView] | None = None

    def _config_map(self, name: str) -> Any | None:
        try:
            return self._core.read_namespaced_config_map(
                name, self.namespace, _request_timeout=REQUEST_TIMEOUT_S)
        except ApiException as e:
            if e.status == NOT_FOUND:
                return None
            raise

    def _broker_leases(self) -> list[Any]:
        return self._leases.list_namespaced_lease(
            self.namespace, label_selector=f"{CLUSTER_LABEL}={self.cluster},{ROLE_LABEL}=broker",
            _request_timeout=REQUEST_TIMEOUT_S).items

    def stored_identity(self) -> StoredIdentity | None:
        """The stored image's cluster id and version; None when there is no image."""
        found = self._config_map(metadata_name(self.cluster))
        return stored_identity(found) if found is not None else None

    def stored_image(self) -> tuple[StoredIdentity, ImageView] | None:
        """The stored image with its identity, from one read; None when there is none."""
        found = self._config_map(metadata_name(self.cluster))
        if found is None:
            return None
        identity = stored_identity(found)
        revision = found.metadata.resource_version
        # One local: kopf runs passes on several threads, and another may set _decoded to
        # another revision's image between our write and our read.
        decoded = self._decoded
        if decoded is None or decoded[0] != revision:
            decoded = self._decoded = (
                revision, read_image_doc(image_document(found.binary_data), identity.version))
        return identity, decoded[1]

    def read_image(self) -> ImageView:
        """The image now; ``MetadataMissing`` when the ConfigMap is gone."""
        stored = self.stored_image()
        if stored is None:
            raise MetadataMissing(f"{self.where} is missing: the cluster metadata is gone")
        return stored[1]

    def has_history(self) -> bool:
        """Whether brokers of this cluster ran before (their counters, or a broker Lease, live
        or not): then a missing image is missing, not yet to be made."""
        return self._config_map(counters_name(self.cluster)) is not None \
            or bool(self._broker_leases())

    def live_brokers(self) -> dict[int, BrokerRegistration]:
        """The brokers whose Lease is renewed, by id."""
        return {(r := registration_of(lease)).node_id: r
                for lease in self._broker_leases() if self._renewals.renewed(lease)}

    def controller(self) -> ControllerLease | None:
        """The holder of the controller Lease while it is renewed."""
        try:
            lease = self._leases.read_namespaced_lease(
                controller_lease_name(self.cluster), self.namespace,
                _request_timeout=REQUEST_TIMEOUT_S)
        except ApiException as e:
            if e.status == NOT_FOUND:
                return None
            raise
        return controller_of(lease) if self._renewals.renewed(lease) else None
