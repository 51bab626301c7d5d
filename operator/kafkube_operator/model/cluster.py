"""A KafkaCluster → the Kubernetes objects that run it, as plain manifests.

Pure functions of the resource (name, namespace, uid and spec): no API calls, so every object
the operator will apply is tested as a golden file without a cluster, and the operator applies
exactly these with server-side apply (a field it does not render is a field it does not own).

The brokers run as one StatefulSet per node pool (model/pools.py; one, named after the cluster,
without ``spec.pools``) with ``updateStrategy: OnDelete``: Kubernetes never restarts a broker
by itself; the operator deletes pods one at a time under the min-ISR gate (roll.py).
A pod template change (image, server.properties through ``kafkube.io/config-hash``) becomes a
new update revision of the StatefulSet, which is how the operator knows which pods to roll.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from kafkube_operator.model.broker_config import (
    HEALTH_PORT,
    METRICS_PORT,
    PORT,
    broker_properties,
)
from kafkube_operator.model.listeners import (
    BROKER_CERTS_DIR,
    CLIENTS_CA_DIR,
    CLUSTER_CA_DIR,
    PLAINTEXT_DEFAULT,
    REPLICATION,
    ListenerLayout,
    SecuritySpec,
    advertised_listeners,
)
from kafkube_operator.model.pools import (
    NODE_ID_OFFSET,
    NODE_ID_OFFSET_ENV,
    POOL_LABEL,
    NodePool,
    node_pools,
)
from kafkube_operator.model.sizing import SIZED_GENERATION, Sized
from kafkube_operator.model.storage import Volume, log_dirs, volumes

GROUP = "kafkube.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "KafkaCluster"
CLUSTER_LABEL = f"{GROUP}/cluster"
NAMESPACE_LABEL = f"{GROUP}/namespace"
CONFIG_HASH = f"{GROUP}/config-hash"
# A secured cluster's (model/cluster_pki.py): what the brokers load at start, and of it the
# two CAs' trust stores.
CERTIFICATES_HASH = f"{GROUP}/certificates-hash"
CLUSTER_CA_HASH = f"{GROUP}/cluster-ca-hash"
CLIENTS_CA_HASH = f"{GROUP}/clients-ca-hash"
CONTAINER = "broker"
# Shipped by the chart and the bundle: get on nodes, for broker.rack (pod_identity.py). A
# ClusterRoleBinding per cluster grants it, since a RoleBinding cannot grant cluster-scoped reads.
NODE_READER_CLUSTER_ROLE = "kafkube-broker-nodes"
CONFIG_DIR = "/etc/kafkube"
DEFAULT_RESOURCES = {"requests": {"cpu": "100m", "memory": "256Mi"},
                     "limits": {"memory": "1Gi"}}
# Long enough for a controlled shutdown: leadership moves before the process exits on SIGTERM.
TERMINATION_GRACE_S = 60

Manifest = dict[str, Any]
PLAINTEXT_ONLY = ListenerLayout.of(SecuritySpec())  # no spec.listeners: the default listener


@dataclass(frozen=True)
class ClusterRef:
    """Which KafkaCluster: everything its objects are named and owned by."""

    name: str
    namespace: str
    uid: str

    @classmethod
    def of(cls, resource: Mapping) -> ClusterRef:
        meta = resource["metadata"]
        return cls(meta["name"], meta["namespace"], meta.get("uid", ""))

    @property
    def statefulset(self) -> str:
        return self.name

    @property
    def headless_service(self) -> str:
        return f"{self.name}-brokers"

    @property
    def bootstrap_service(self) -> str:
        return f"{self.name}-bootstrap"

    @property
    def config_map(self) -> str:
        return f"{self.name}-config"

    @property
    def service_account(self) -> str:
        return f"{self.name}-broker"

    @property
    def cluster_ca(self) -> str:
        return f"{self.name}-cluster-ca"

    @property
    def clients_ca(self) -> str:
        return f"{self.name}-clients-ca"

    @property
    def broker_certs(self) -> str:
        return f"{self.name}-kafka-brokers"

    @property
    def operator_certs(self) -> str:
        """The operator's own client certificate for the replication listener."""
        return f"{self.name}-operator-certs"

    @property
    def node_reader_binding(self) -> str:
        """Cluster-scoped, so the namespace is part of the name."""
        return f"kafkube-{self.namespace}-{self.name}-nodes"

    @property
    def bootstrap_servers(self) -> str:
        return f"{self.bootstrap_service}.{self.namespace}.svc:{PORT}"

    def pod(self, node_id: int) -> str:
        return f"{self.statefulset}-{node_id}"


def selector(ref: ClusterRef) -> dict[str, str]:
    """The brokers' pods, and nothing else (the brokers' own ConfigMaps and Leases carry
    ``kafkube.io/cluster`` too, but not the app name)."""
    return {"app.kubernetes.io/name": "kafkube", CLUSTER_LABEL: ref.name}


def labels(ref: ClusterRef) -> dict[str, str]:
    return {**selector(ref), "app.kubernetes.io/instance": ref.name,
            "app.kubernetes.io/managed-by": "kafkube-operator"}


def owner_reference(ref: ClusterRef) -> Manifest:
    return {"apiVersion": API_VERSION, "kind": KIND, "name": ref.name, "uid": ref.uid,
            "controller": True, "blockOwnerDeletion": True}


def _metadata(ref: ClusterRef, name: str, owned: bool = True) -> Manifest:
    meta: Manifest = {"name": name, "labels": labels(ref)}
    if owned:
        meta["namespace"] = ref.namespace
        meta["ownerReferences"] = [owner_reference(ref)]
    else:  # cluster-scoped: no owner reference can point at a namespaced owner
        meta["labels"] = {**meta["labels"], NAMESPACE_LABEL: ref.namespace}
    return meta


def config_map(ref: ClusterRef, properties_text: str) -> Manifest:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": _metadata(ref, ref.config_map),
            "data": {"server.properties": properties_text}}


def _kafka_ports(layout: ListenerLayout, replication: bool) -> list[Manifest]:
    """Named after the listeners (``kafka`` for the default one); the replication listener
    only on the headless service, which is what brokers and the operator dial."""
    # targetPort by number: in the last roll of a listener change a port may be renamed (the
    # default listener's 9092 taken by spec.listeners'), and a name would leave the pods not
    # yet restarted out of the Service.
    return [{"name": "kafka" if li == PLAINTEXT_DEFAULT else li.name, "port": li.port,
             "targetPort": li.port}
            for li in layout.listeners if replication or li.name != REPLICATION]


def headless_service(ref: ClusterRef, layout: ListenerLayout = PLAINTEXT_ONLY) -> Manifest:
    """Stable DNS names per broker, the advertised addresses; not-ready pods are published so
    brokers reach each other while starting."""
    return {"apiVersion": "v1", "kind": "Service",
            "metadata": _metadata(ref, ref.headless_service),
            "spec": {"clusterIP": "None", "publishNotReadyAddresses": True,
                     "selector": selector(ref),
                     "ports": _kafka_ports(layout, replication=True)}}


def bootstrap_service(ref: ClusterRef, metrics: bool,
                      layout: ListenerLayout = PLAINTEXT_ONLY) -> Manifest:
    ports = _kafka_ports(layout, replication=False)
    if metrics:
        ports.append({"name": "metrics", "port": METRICS_PORT, "targetPort": "metrics"})
    # Every running broker: a ready one is back in all its ISRs (/ready), which only a
    # node drain needs to know; any live broker answers a client's bootstrap.
    return {"apiVersion": "v1", "kind": "Service",
            "metadata": _metadata(ref, ref.bootstrap_service),
            "spec": {"selector": selector(ref), "ports": ports,
                     "publishNotReadyAddresses": True}}


def pod_disruption_budget(ref: ClusterRef) -> Manifest:
    """One broker at a time through voluntary disruptions (node drains), and the next only
    once the last is ready again, i.e. back in the ISR of every partition it follows (the
    broker's /ready): with RF 3 and min ISR 2 that keeps every partition writable."""
    return {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": _metadata(ref, ref.statefulset),
            "spec": {"maxUnavailable": 1, "selector": {"matchLabels": selector(ref)}}}


def service_account(ref: ClusterRef) -> Manifest:
    return {"apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": _metadata(ref, ref.service_account)}


def role(ref: ClusterRef) -> Manifest:
    """Leases (controller election, broker liveness), ConfigMaps (the cluster image, epochs)
    and pods (a crashed broker fenced from its pod's status: broker/cluster/pod_liveness.py)."""
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": _metadata(ref, ref.service_account),
            "rules": [
                {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
                 "verbs": ["get", "list", "watch", "create", "update", "delete"]},
                {"apiGroups": [""], "resources": ["configmaps"],
                 "verbs": ["get", "list", "watch", "create", "update"]},
                {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]},
            ]}


def role_binding(ref: ClusterRef) -> Manifest:
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": _metadata(ref, ref.service_account),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                        "name": ref.service_account},
            "subjects": [{"kind": "ServiceAccount", "name": ref.service_account,
                          "namespace": ref.namespace}]}


def node_reader_binding(ref: ClusterRef) -> Manifest:
    """Deleted by the operator's finalizer: being cluster-scoped, it has no owner to go with."""
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": _metadata(ref, ref.node_reader_binding, owned=False),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                        "name": NODE_READER_CLUSTER_ROLE},
            "subjects": [{"kind": "ServiceAccount", "name": ref.service_account,
                          "namespace": ref.namespace}]}


def config_hash(properties_text: str) -> str:
    return hashlib.sha256(properties_text.encode()).hexdigest()[:16]


def _env(ref: ClusterRef, rack_label: str, first_id: int = 0) -> list[Manifest]:
    def field(path: str) -> Manifest:
        return {"fieldRef": {"fieldPath": path}}

    return [
        {"name": "POD_NAME", "valueFrom": field("metadata.name")},
        {"name": "POD_NAMESPACE", "valueFrom": field("metadata.namespace")},
        # With the pod's uid, brokers fence a broker whose container they see end
        # (broker/cluster/pod_liveness.py) instead of waiting for its lease to expire.
        {"name": "POD_UID", "valueFrom": field("metadata.uid")},
        {"name": "NODE_NAME", "valueFrom": field("spec.nodeName")},
        {"name": "KAFKUBE_HEADLESS_SERVICE", "value": ref.headless_service},
        {"name": "KAFKUBE_RACK_LABEL", "value": rack_label},
        *([{"name": NODE_ID_OFFSET_ENV, "value": str(first_id)}] if first_id else []),
    ]


def _security_args(ref: ClusterRef, layout: ListenerLayout) -> list[str]:
    """advertised.listeners for every listener: per pod, so not in the shared ConfigMap."""
    if layout.default:
        return []
    return ["--override", "advertised.listeners="
            + advertised_listeners(ref.headless_service, ref.namespace, layout)]


def _certificate_volumes(ref: ClusterRef, layout: ListenerLayout) -> list[Manifest]:
    """The brokers' key store, and of each CA its certificate only (items: ca.crt), never
    its key."""
    if not layout.uses_tls:
        return []
    volumes: list[Manifest] = [
        {"name": "broker-certs", "secret": {"secretName": ref.broker_certs}},
        {"name": "cluster-ca", "secret": {"secretName": f"{ref.cluster_ca}-cert",
                                          "items": [{"key": "ca.crt", "path": "ca.crt"}]}}]
    if layout.uses_clients_ca:
        volumes.append({"name": "clients-ca", "secret": {
            "secretName": f"{ref.clients_ca}-cert",
            "items": [{"key": "ca.crt", "path": "ca.crt"}]}})
    return volumes


def _certificate_mounts(layout: ListenerLayout) -> list[Manifest]:
    if not layout.uses_tls:
        return []
    mounts = [{"name": "broker-certs", "mountPath": BROKER_CERTS_DIR, "readOnly": True},
              {"name": "cluster-ca", "mountPath": CLUSTER_CA_DIR, "readOnly": True}]
    if layout.uses_clients_ca:
        mounts.append({"name": "clients-ca", "mountPath": CLIENTS_CA_DIR, "readOnly": True})
    return mounts


def _claim_spec(volume: Volume) -> Manifest:
    spec: Manifest = {"accessModes": ["ReadWriteOnce"],
                      "resources": {"requests": {"storage": volume.size}}}
    if volume.storage_class:
        spec["storageClassName"] = volume.storage_class
    return spec


def _pool_args(cluster_spec: Mapping, pool_spec: Mapping) -> list[str]:
    """A pool with volumes of its own (JBOD) has log dirs of its own; the shared
    server.properties has the cluster's."""
    own = log_dirs(pool_spec)
    return [] if own == log_dirs(cluster_spec) else ["--override", f"log.dirs={own}"]


def _placement(spec: Mapping) -> Manifest:
    """Where the pool's pods may run: its nodeSelector, tolerations and affinity."""
    return {key: spec[key] for key in ("nodeSelector", "tolerations", "affinity")
            if spec.get(key)}


def stateful_set(ref: ClusterRef, spec: Mapping, properties_text: str,
                 replicas: int | None = None,
                 pod_annotations: Mapping[str, str] | None = None,
                 layout: ListenerLayout | None = None,
                 pool: NodePool | None = None,
                 derived: Sized | None = None) -> Manifest:
    """The StatefulSet of ``pool`` (default: the cluster's own brokers), rendered from the
    pool's spec. ``replicas``: when not the pool's size, the size a scale keeps until the
    brokers to remove are drained (model/scale.py). ``layout``: the listeners of this step
    of a listener change (model/listener_change.py), else spec.listeners'. ``derived``: the
    broker's resources sized from its nodes (model/sizing.py), where the spec has none."""
    pool = pool or node_pools(spec)[0]
    cluster_spec, spec = spec, pool.spec
    name = pool.statefulset(ref.name)
    # A pool's pods carry its name, in its own selector too; the default pool's selector
    # stays the one a cluster made before pools has (a selector cannot change).
    own = {} if pool.default else {POOL_LABEL: pool.label()}
    offset = {} if pool.default else {NODE_ID_OFFSET: str(pool.first_id)}
    rack_label = (spec.get("rack") or {}).get("topologyKey") or "topology.kubernetes.io/zone"
    storage = spec.get("storage") or {}
    metrics = (spec.get("metrics") or {}).get("enabled", True)
    claim_policy = "Delete" if storage.get("deleteClaim", False) else "Retain"
    disks = volumes(spec)
    layout = layout or ListenerLayout.of(SecuritySpec.of(spec))
    ports = [{"name": p["name"], "containerPort": p["port"]}
             for p in _kafka_ports(layout, replication=True)]
    ports.append({"name": "health", "containerPort": HEALTH_PORT})
    if metrics:
        ports.append({"name": "metrics", "containerPort": METRICS_PORT})
    pod_labels = {**labels(ref), **own}
    container: Manifest = {
        "name": CONTAINER,
        "image": spec.get("image", "localhost/kafkube:dev"),
        "imagePullPolicy": "IfNotPresent",
        "args": ["broker", "--pod-identity", "--config", f"{CONFIG_DIR}/server.properties",
                 *_security_args(ref, layout), *_pool_args(cluster_spec, spec)],
        "env": _env(ref, rack_label, pool.first_id),
        "ports": ports,
        "readinessProbe": {"httpGet": {"path": "/ready", "port": "health"},
                           "periodSeconds": 2, "failureThreshold": 1},
        "resources": spec.get("resources") or (derived.resources if derived else None)
        or DEFAULT_RESOURCES,
        # A broker that refuses to start (a cluster finalized past its kafkube, exit 3)
        # says why in its last lines: kubectl describe pod shows them.
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "volumeMounts": [*({"name": v.claim, "mountPath": v.mount} for v in disks),
                         {"name": "config", "mountPath": CONFIG_DIR, "readOnly": True},
                         *_certificate_mounts(layout)],
    }
    pod_spec: Manifest = {
        "serviceAccountName": ref.service_account,
        "terminationGracePeriodSeconds": TERMINATION_GRACE_S,
        "securityContext": {"runAsNonRoot": True, "runAsUser": 1000, "fsGroup": 1000},
        # Brokers spread over the racks first, then over nodes; ScheduleAnyway, so a
        # cluster with fewer racks than brokers still schedules every broker.
        "topologySpreadConstraints": [
            {"maxSkew": 1, "topologyKey": key, "whenUnsatisfiable": "ScheduleAnyway",
             "labelSelector": {"matchLabels": selector(ref)}}
            for key in (rack_label, "kubernetes.io/hostname")],
        **_placement(spec),
        "containers": [container],
        "volumes": [{"name": "config", "configMap": {"name": ref.config_map}},
                    *_certificate_volumes(ref, layout)],
    }
    metadata = _metadata(ref, name)
    if derived is not None and derived.generation is not None and not spec.get("resources"):
        metadata["annotations"] = {SIZED_GENERATION: str(derived.generation)}
    metadata["labels"] = {**metadata["labels"], **own}
    return {
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": metadata,
        "spec": {
            "serviceName": ref.headless_service,
            "replicas": pool.replicas if replicas is None else replicas,
            "podManagementPolicy": "Parallel",
            "updateStrategy": {"type": "OnDelete"},
            "persistentVolumeClaimRetentionPolicy": {"whenDeleted": claim_policy,
                                                     "whenScaled": claim_policy},
            "selector": {"matchLabels": {**selector(ref), **own}},
            "template": {
                "metadata": {"labels": pod_labels,
                             "annotations": {CONFIG_HASH: config_hash(properties_text),
                                             **offset, **(pod_annotations or {})}},
                "spec": pod_spec,
            },
            "volumeClaimTemplates": [{"metadata": {"name": v.claim,
                                                   "labels": {**selector(ref), **own}},
                                      "spec": _claim_spec(v)} for v in disks],
        },
    }


@dataclass(frozen=True)
class DesiredCluster:
    """Everything one KafkaCluster should own, and what of its spec could not be used."""

    objects: list[Manifest]
    refused_config: dict[str, str]

    def by_kind(self, kind: str) -> list[Manifest]:
        return [o for o in self.objects if o["kind"] == kind]


def desired_cluster(resource: Mapping, sizes: Mapping[str, int] | None = None,
                    pod_annotations: Mapping[str, str] | None = None,
                    min_isr_ceiling: int | None = None,
                    layout: ListenerLayout | None = None,
                    first_ids: Mapping[str, int] | None = None,
                    derived: Mapping[str, Sized] | None = None) -> DesiredCluster:
    """The objects, in the order they are applied: identity and configuration before the
    pods that need them. ``sizes``: each pool's StatefulSet size when not its spec's (a
    scale under way, model/scale.py). ``pod_annotations``: more for the pod template (a
    secured cluster's certificate hashes, model/cluster_pki.py), each a roll when it changes.
    ``layout``: the listeners of this step of a listener change, else spec.listeners'.
    ``first_ids``: a pool's first node id where its StatefulSet's differs from the spec's
    (reconcile/snapshot.py ``pools``: the brokers' volumes were made with those ids).
    ``derived``: each pool's resources sized from its nodes (model/sizing.py)."""
    ref = ClusterRef.of(resource)
    spec = resource.get("spec") or {}
    layout = layout or ListenerLayout.of(SecuritySpec.of(spec))
    pools = [replace(p, first_id=(first_ids or {}).get(p.name, p.first_id))
             for p in node_pools(spec)]
    brokers = sum((sizes or {}).get(p.name, p.replicas) for p in pools) if sizes else None
    props = broker_properties(ref.name, spec, brokers, min_isr_ceiling, layout)
    metrics = (spec.get("metrics") or {}).get("enabled", True)
    objects = [
        service_account(ref), role(ref), role_binding(ref), node_reader_binding(ref),
        config_map(ref, props.text), headless_service(ref, layout),
        bootstrap_service(ref, metrics, layout),
        pod_disruption_budget(ref),
        *(stateful_set(ref, spec, props.text, (sizes or {}).get(pool.name), pod_annotations,
                       layout, pool, (derived or {}).get(pool.name)) for pool in pools),
    ]
    return DesiredCluster(objects, props.refused)
