"""The Secrets of a secured KafkaCluster (spec.listeners set): its two CAs (model/pki.py),
the brokers' certificate and the operator's own, from what the Secrets hold now and the time
given. Pure: the reconcile reads the Secrets, calls ``cluster_pki`` and applies what it says.

The brokers' certificate (``<cluster>-kafka-brokers``: broker.crt, broker.key and broker.pem,
the PEM key store) is one for every broker: its SANs name every broker through the headless
service with a wildcard, so scaling needs no new certificate. The operator's certificate
(``<cluster>-operator-certs``) is how it logs in on the replication listener as a super
user; it is a Secret rather than memory so a failed-over operator uses the same one.

Brokers load their certificates when they start, so the pod template carries a hash of
them (``kafkube.io/certificates-hash``): a renewed certificate or CA rolls the brokers.
A renewed cluster CA takes two rolls, as in Strimzi: a broker restarted with a certificate
of the new CA would be refused by the brokers that still trust only the old one, so the
first roll brings the new CA into every broker's trust store (``kafkube.io/cluster-ca-hash``
says which trust store a pod loaded) while the certificates of the old CA stay in use; once
every broker trusts it, the brokers' and the operator's certificates are issued again by
the new CA, and the second roll brings them in.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass, field

from kafkube_operator.model.certificates import KeyPair, issue
from kafkube_operator.model.cluster import (
    CERTIFICATES_HASH,
    CLIENTS_CA_HASH,
    CLUSTER_CA_HASH,
    ClusterRef,
    Manifest,
    config_hash,
    labels,
    owner_reference,
)
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
    kept_for_trust,
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
    pod_annotations: dict[str, str] = field(default_factory=dict)  # the brokers' pod template


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


def _kept_until_trusted(held: KeyPair | None, trusted: str, now: dt.datetime, renewal: int,
                        names: list[str], brokers_trust: str | None) -> bool:
    """Whether ``held``, which the current cluster CA did not sign, stays in use for now:
    some brokers do not trust that CA yet, and the previous CA's certificate is still good."""
    if brokers_trust is None or brokers_trust == config_hash(trusted):
        return False
    return kept_for_trust(held, trusted, now, renewal, names)


def cluster_pki(resource: Mapping, current: Mapping[str, Mapping[str, str] | None],
                now: dt.datetime, brokers_trust: str | None = None) -> ClusterPki:
    """``current``: the decoded data of each Secret of ``secret_names`` (None: missing).
    ``brokers_trust``: the ``kafkube.io/cluster-ca-hash`` every running broker pod carries
    ("" when they differ, None when no broker runs): a certificate of a renewed cluster CA
    waits until it is that of the CA's current trust store."""
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
    trusted = cluster_ca.trusted
    broker = held_pair(current.get(ref.broker_certs), "broker.crt", "broker.key")
    operator = held_pair(current.get(ref.operator_certs), "operator.crt", "operator.key")
    # Not an Event (a pass every few seconds would repeat it): the roll's own are the news.
    waiting = [what for what, held, wanted in (("brokers'", broker, names),
                                                 ("operator's", operator, []))
               if needs_issuing(held, cluster_ca.pair, now, renewal, wanted)
               and _kept_until_trusted(held, trusted, now, renewal, wanted, brokers_trust)]
    if needs_issuing(broker, cluster_ca.pair, now, renewal, names) and "brokers'" not in waiting:
        broker = issue(cluster_ca.pair, f"{ref.name}-kafka", now, dns_names=names,
                       organization=ORGANIZATION, validity_days=policy.validity_days)
        result.secrets.append(secret(secret_metadata(ref, ref.broker_certs), {
            "broker.crt": broker.certificate, "broker.key": broker.key,
            BROKER_KEYSTORE: broker.keystore}))
        result.actions.append("brokers' certificate issued")
    if needs_issuing(operator, cluster_ca.pair, now, renewal) and "operator's" not in waiting:
        operator = issue(cluster_ca.pair, OPERATOR_COMMON_NAME, now, organization=ORGANIZATION,
                         validity_days=policy.validity_days)
        result.secrets.append(secret(secret_metadata(ref, ref.operator_certs), {
            "operator.crt": operator.certificate, "operator.key": operator.key}))
        result.actions.append("operator's certificate issued")
    loaded = [broker.certificate if broker else "", trusted]
    if SecuritySpec.of(spec).uses_clients_ca:
        loaded.append(clients_ca.trusted)
    annotations = {CLUSTER_CA_HASH: config_hash(trusted),
                   CERTIFICATES_HASH: config_hash("".join(loaded))}
    if SecuritySpec.of(spec).uses_clients_ca:
        annotations[CLIENTS_CA_HASH] = config_hash(clients_ca.trusted)
    return ClusterPki(result.secrets, result.actions, result.problems, operator,
                      trusted, clients_ca.pair, annotations)
