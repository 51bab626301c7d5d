"""Apply a secured KafkaCluster's certificate Secrets (model/cluster_pki.py), and tell the
admin clients how to log in on it (its replication listener, with the operator's own
certificate)."""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Callable, Mapping

from kafkube_operator.kafka import AdminSecurity, KafkaRefused
from kafkube_operator.kube import ApplyError, Kube
from kafkube_operator.model.cluster import (
    API_VERSION,
    CERTIFICATES_HASH,
    CLIENTS_CA_HASH,
    CLUSTER_CA_HASH,
    ClusterRef,
    selector,
)
from kafkube_operator.model.cluster_pki import ClusterPki, cluster_pki, secret_names
from kafkube_operator.model.listeners import PLAINTEXT_DEFAULT, SecuritySpec
from kafkube_operator.model.pki import decode
from kafkube_operator.model.status import SpecWarning
from kafkube_operator.reconcile.views import Events


def read_secrets(kube: Kube, namespace: str, names: list[str]) -> dict[str, dict[str, str] | None]:
    return {name: decode(kube.get("v1", "Secret", name, namespace)) for name in names}


def brokers_trust(kube: Kube, ref: ClusterRef, which: str = CLUSTER_CA_HASH) -> str | None:
    """The trust store of a CA every broker pod loaded (its annotation ``which``,
    ``kafkube.io/cluster-ca-hash`` or ``clients-ca-hash``): None when no pod runs, "" when
    they differ (a roll under way, or pods older than the annotation)."""
    hashes = {((p.get("metadata") or {}).get("annotations") or {}).get(which) or ""
              for p in kube.list("v1", "Pod", ref.namespace, selector(ref))}
    if not hashes:
        return None
    return hashes.pop() if len(hashes) == 1 else ""


def apply_cluster_pki(kube: Kube, resource: Mapping, events: Events,
                      now: dt.datetime | None = None) -> tuple[ClusterPki, list[SpecWarning]]:
    """Create or renew the CAs and certificates the spec needs (nothing without listeners);
    what could not be done comes back as warnings."""
    ref = ClusterRef.of(resource)
    if not SecuritySpec.of(resource.get("spec") or {}).enabled:
        return ClusterPki(), []
    current = read_secrets(kube, ref.namespace, secret_names(ref))
    pki = cluster_pki(resource, current, now or dt.datetime.now(dt.UTC),
                      brokers_trust(kube, ref))
    warnings = [SpecWarning("CertificateAuthority", p) for p in pki.problems]
    # In order, CAs first, and none after one fails: a certificate is stored only once the
    # CA that signed it is (else brokers would get a certificate of a CA no Secret holds,
    # and the next pass would make another CA).
    failed = False
    for manifest in pki.secrets:
        try:
            kube.apply(manifest)
        except ApplyError as e:
            warnings.append(SpecWarning("ApplyFailed", str(e)))
            events.warning("ApplyFailed", f"{e}; the certificate Secrets after it are applied "
                           "on the next pass")
            failed = True
            break
    for action in pki.actions if not failed else ():
        events.info("Certificates", f"{action} ({ref.name})")
    for problem in pki.problems:
        events.warning("CertificateAuthority", problem)
    if failed or pki.problems:
        # The hashes would be of Secrets not stored (or of a CA that cannot sign): keep the
        # pods' as they are rather than roll every broker onto nothing new.
        pki = dataclasses.replace(pki, pod_annotations=current_pod_annotations(kube, ref))
    return pki, warnings


def current_pod_annotations(kube: Kube, ref: ClusterRef) -> dict[str, str]:
    """The certificate hashes the StatefulSet's pod template carries now."""
    sts = kube.get("apps/v1", "StatefulSet", ref.statefulset, ref.namespace) or {}
    template = ((sts.get("spec") or {}).get("template") or {}).get("metadata") or {}
    return {k: v for k, v in (template.get("annotations") or {}).items()
            if k in (CERTIFICATES_HASH, CLUSTER_CA_HASH, CLIENTS_CA_HASH)}


def admin_security(kube: Kube
                   ) -> Callable[[tuple[str, str], str | None], AdminSecurity | None]:
    """For AdminClients: on the replication listener the operator logs in with its
    certificate from ``<cluster>-operator-certs``, trusting ``<cluster>-cluster-ca-cert``; on
    the default PLAINTEXT one in plaintext; on a listener not named (the brokers'
    inter-broker addresses), as the spec says: the replication listener if it has listeners."""

    def security(key: tuple[str, str], listener: str | None = None) -> AdminSecurity | None:
        namespace, name = key
        if listener == PLAINTEXT_DEFAULT.config_name:
            return None
        cluster = kube.get(API_VERSION, "KafkaCluster", name, namespace)
        if cluster is None:
            return None
        if listener is None and not SecuritySpec.of(cluster.get("spec") or {}).enabled:
            return None
        ref = ClusterRef.of(cluster)
        own = decode(kube.get("v1", "Secret", ref.operator_certs, namespace)) or {}
        ca = decode(kube.get("v1", "Secret", f"{ref.cluster_ca}-cert", namespace)) or {}
        if not own.get("operator.crt") or not ca.get("ca.crt"):
            # Not issued yet (the cluster's first pass does it): plaintext would not do.
            raise KafkaRefused(f"cluster {name}", "the operator's certificate is not issued yet")
        return AdminSecurity(ca["ca.crt"], own["operator.crt"], own["operator.key"])

    return security
