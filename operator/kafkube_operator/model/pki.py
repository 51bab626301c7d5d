"""A secured KafkaCluster's certificate authorities and the certificates they sign, as the
Secrets that hold them: pure decisions from what the Secrets hold now and the time given.

Strimzi's scheme and names: the cluster CA (``<cluster>-cluster-ca``: ca.crt, ca.key) signs
the brokers' certificate and the operator's; the clients CA (``<cluster>-clients-ca``) signs
the KafkaUsers'. Each CA's certificate alone is also in ``<cluster>-cluster-ca-cert`` /
``<cluster>-clients-ca-cert``, the Secrets clients and brokers read (the brokers mount only
ca.crt: a CA's key never leaves the operator's Secrets). The operator generates a CA unless
the spec says ``generateCertificateAuthority: false``: then the user's Secret is used as is
and never renewed. A generated CA is renewed within ``renewalDays`` of its expiry; its
ca.crt keeps the previous CA's certificate while that is valid, so certificates it signed
are still trusted until they are issued again by the new CA: once every broker trusts it
(model/cluster_pki.py's two rolls; a KafkaUser's certificate likewise), at once for a
certificate that is missing. A brought CA's ca.crt should hold the previous CA's
certificate too, or the brokers' certificates change in one roll.
"""

from __future__ import annotations

import base64
import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kafkube_operator.model.certificates import (
    DEFAULT_RENEWAL_DAYS,
    DEFAULT_VALIDITY_DAYS,
    KeyPair,
    ca_problem,
    dns_names,
    leaf_needs_renewal,
    needs_renewal,
    new_ca,
    signed_by,
    split_pem,
    still_valid,
)

Manifest = dict[str, Any]
CLUSTER_CA, CLIENTS_CA = "cluster-ca", "clients-ca"


@dataclass(frozen=True)
class CaPolicy:
    """spec.clusterCa / spec.clientsCa (Strimzi's names)."""

    generate: bool = True
    validity_days: int = DEFAULT_VALIDITY_DAYS
    renewal_days: int = DEFAULT_RENEWAL_DAYS

    @classmethod
    def of(cls, section: Mapping | None) -> CaPolicy:
        section = section or {}
        validity = max(int(section.get("validityDays", DEFAULT_VALIDITY_DAYS)), 1)
        # The CRD refuses renewalDays >= validityDays; kept below here too, since a
        # certificate that is due for renewal as soon as it is issued would be issued on
        # every pass.
        renewal = min(int(section.get("renewalDays", DEFAULT_RENEWAL_DAYS)), validity - 1)
        return cls(bool(section.get("generateCertificateAuthority", True)), validity, renewal)


def encode(data: Mapping[str, str]) -> dict[str, str]:
    return {k: base64.b64encode(v.encode()).decode() for k, v in sorted(data.items())}


def decode(secret: Mapping | None) -> dict[str, str] | None:
    """A Secret's data as text; None when there is no Secret."""
    if secret is None:
        return None
    return {k: base64.b64decode(v).decode() for k, v in (secret.get("data") or {}).items()}


def secret(metadata: Manifest, data: Mapping[str, str]) -> Manifest:
    return {"apiVersion": "v1", "kind": "Secret", "metadata": metadata, "type": "Opaque",
            "data": encode(data)}


@dataclass(frozen=True)
class CaDecision:
    """The CA to sign with, the Secrets to apply (none when they are right as they are),
    what happened (for an Event) and what is wrong (for a Warning)."""

    pair: KeyPair | None
    trusted: str = ""  # ca.crt: the current certificate, then a previous still valid
    secrets: tuple[Manifest, ...] = ()
    action: str | None = None
    problem: str | None = None


def held_ca(data: Mapping[str, str] | None) -> tuple[KeyPair, str] | None:
    if not data or not data.get("ca.crt") or not data.get("ca.key"):
        return None
    certificates = split_pem(data["ca.crt"])
    if not certificates:
        return None
    return KeyPair(certificates[0], data["ca.key"]), data["ca.crt"]


def ca_decision(which: str, secret_name: str, metadata: Manifest,
                current: Mapping[str, str] | None, policy: CaPolicy, now: dt.datetime,
                common_name: str) -> CaDecision:
    """Keep, create or renew the CA held in Secret ``secret_name`` (``current``: its data,
    None if there is none); ``metadata`` for the Secrets, named after it. A held CA the
    operator cannot sign with (an encrypted or unsupported key, one not the certificate's,
    an expired brought CA) is a problem, and left as it is."""
    held = held_ca(current)
    cert_name = f"{secret_name}-cert"
    if held is not None:
        # An expired generated CA is renewed below; an expired brought one is a problem.
        unusable = ca_problem(held[0], None if policy.generate else now)
        if unusable:
            return CaDecision(None, problem=f"{which}: Secret {secret_name}: {unusable}")
    if not policy.generate:
        if held is None:
            return CaDecision(None, problem=(
                f"{which}: generateCertificateAuthority is false but Secret {secret_name} "
                f"does not hold ca.crt and ca.key"))
        pair, trusted = held
        return CaDecision(pair, trusted, (secret({**metadata, "name": cert_name},
                                                 {"ca.crt": trusted}),))
    if held is not None and not needs_renewal(held[0], now, policy.renewal_days):
        pair, trusted = held
        return CaDecision(pair, trusted, (secret({**metadata, "name": cert_name},
                                                 {"ca.crt": trusted}),))
    pair = new_ca(common_name, now, policy.validity_days)
    trusted = pair.certificate
    if held is not None and still_valid(held[0].certificate, now):
        trusted += held[0].certificate
    action = "renewed" if held is not None else "created"
    return CaDecision(pair, trusted, (
        secret({**metadata, "name": secret_name}, {"ca.crt": trusted, "ca.key": pair.key}),
        secret({**metadata, "name": cert_name}, {"ca.crt": trusted})), action)


def held_pair(data: Mapping[str, str] | None, cert_key: str, key_key: str) -> KeyPair | None:
    if not data or not data.get(cert_key) or not data.get(key_key):
        return None
    return KeyPair(data[cert_key], data[key_key])


def needs_issuing(current: KeyPair | None, ca: KeyPair, now: dt.datetime, renewal_days: int,
                  names: Sequence[str] = ()) -> bool:
    """A certificate is issued again when missing, signed by another CA (renewed, or the
    user's), lacking a name it must carry, or near its end."""
    return (current is None or not signed_by(current, ca)
            or sorted(dns_names(current)) != sorted(names)
            or leaf_needs_renewal(current, ca, now, renewal_days))


def kept_for_trust(held: KeyPair | None, trusted: str, now: dt.datetime, renewal_days: int,
                   names: Sequence[str] = ()) -> bool:
    """Whether ``held`` is good under one of the CAs of ``trusted`` (a CA's trust store, the
    renewed CA then the previous one): valid, not due, with its names. Such a certificate
    of the previous CA stays in use until every broker trusts the renewed CA, since brokers
    load their trust store when they start (model/cluster_pki.py)."""
    return held is not None and still_valid(held.certificate, now) and any(
        not needs_issuing(held, KeyPair(ca, ""), now, renewal_days, names)
        for ca in split_pem(trusted))
