"""The Secrets of a secured KafkaCluster (spec.listeners set): its two CAs (model/pki.py),
the brokers' certificate and the operator's own, from what the Secrets hold now and the time
given. Pure: the reconcile reads the Secrets, calls ``cluster_pki`` and applies what it says.

The brokers' certificate (``<cluster>-kafka-brokers``: broker.crt, broker.key and broker.pem,
the PEM key store) is one for every broker: its SANs name every broker through the headless
service with a wildcard, so scaling needs no new certificate. The operator's certificate
(``<cluster>-operator-certs``) is how it logs in on the replication listener as a super
user; it is a Secret rather than memory so a failed-over operator uses the same one.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass, field

from kafkube_operator.model.certificates import KeyPair, issue
from kafkube_operator.model.cluster import ClusterRef, Manifest, labels, owner_reference
from kafkube_operator.model.listeners import (
    BROKER_KEYSTORE,
    OPERATOR_COMMON_NAME,
    ORGANIZATION,
    SecuritySpec,
    broker_dns_names,
)
from kafkube_operator.model.pki import (
    CLIENTS_CA,
    CLUSTER_CA,
    CaDecision,
    CaPolicy,
    ca_decision,
    held_pair,
    needs_issuing,
    secret,
)


@dataclass(frozen=True)
class ClusterPki:
    """What to apply, what happened (Events) and what could not be done (Warnings); the
    operator's key pair and the cluster CA's certificates, for its admin client."""

    secrets: list[Manifest] = field(default_factory=list)
    actions: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    operator: KeyPair | None = None
    cluster_ca_trusted: str = ""
    clients_ca: KeyPair | None = None


def secret_metadata(ref: ClusterRef, name: str) -> Manifest:
    return {"name": name, "namespace": ref.namespace, "labels": labels(ref),
            "ownerReferences": [owner_reference(ref)]}


def secret_names(ref: ClusterRef) -> list[str]:
    """The Secrets ``cluster_pki`` reads."""
    return [ref.cluster_ca, ref.clients_ca, ref.broker_certs, ref.operator_certs]


def _ca(ref: ClusterRef, which: str, name: str, spec: Mapping,
        current: Mapping[str, Mapping[str, str] | None], now: dt.datetime) -> CaDecision:
    section = "clusterCa" if which == CLUSTER_CA else "clientsCa"
    return ca_decision(which, name, secret_metadata(ref, name), current.get(name),
                       CaPolicy.of(spec.get(section)), now,
                       f"kafkube {which} {ref.namespace}/{ref.name}")


def cluster_pki(resource: Mapping, current: Mapping[str, Mapping[str, str] | None],
                now: dt.datetime) -> ClusterPki:
    """``current``: the decoded data of each Secret of ``secret_names`` (None: missing)."""
    ref = ClusterRef.of(resource)
    spec = resource.get("spec") or {}
    if not SecuritySpec.of(spec).enabled:
        return ClusterPki()
    result = ClusterPki()
    cluster_ca = _ca(ref, CLUSTER_CA, ref.cluster_ca, spec, current, now)
    clients_ca = _ca(ref, CLIENTS_CA, ref.clients_ca, spec, current, now)
    for which, decision in ((CLUSTER_CA, cluster_ca), (CLIENTS_CA, clients_ca)):
        result.secrets.extend(decision.secrets)
        if decision.action:
            result.actions.append(f"{which} {decision.action}")
        if decision.problem:
            result.problems.append(decision.problem)
    if cluster_ca.pair is None:
        return ClusterPki(result.secrets, result.actions, result.problems,
                          clients_ca=clients_ca.pair)
    policy = CaPolicy.of(spec.get("clusterCa"))
    renewal = policy.renewal_days
    names = broker_dns_names(ref.headless_service, ref.bootstrap_service, ref.namespace)
    broker = held_pair(current.get(ref.broker_certs), "broker.crt", "broker.key")
    if needs_issuing(broker, cluster_ca.pair, now, renewal, names):
        broker = issue(cluster_ca.pair, f"{ref.name}-kafka", now, dns_names=names,
                       organization=ORGANIZATION, validity_days=policy.validity_days)
        result.secrets.append(secret(secret_metadata(ref, ref.broker_certs), {
            "broker.crt": broker.certificate, "broker.key": broker.key,
            BROKER_KEYSTORE: broker.keystore}))
        result.actions.append("brokers' certificate issued")
    operator = held_pair(current.get(ref.operator_certs), "operator.crt", "operator.key")
    if needs_issuing(operator, cluster_ca.pair, now, renewal):
        operator = issue(cluster_ca.pair, OPERATOR_COMMON_NAME, now, organization=ORGANIZATION,
                         validity_days=policy.validity_days)
        result.secrets.append(secret(secret_metadata(ref, ref.operator_certs), {
            "operator.crt": operator.certificate, "operator.key": operator.key}))
        result.actions.append("operator's certificate issued")
    return ClusterPki(result.secrets, result.actions, result.problems, operator,
                      cluster_ca.trusted, clients_ca.pair)
