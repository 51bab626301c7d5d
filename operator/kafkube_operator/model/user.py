"""A KafkaUser → its Secret, its SCRAM credential and its ACL bindings: pure functions of the
resource, what exists now (the Secret's data, the cluster's ACLs) and the time given.

Strimzi's KafkaUser, kept small. The principal is the one the brokers will see: ``User:<name>``
after a SCRAM login, ``User:CN=<name>`` for a client certificate (the subject as the brokers'
default ``ssl.principal.mapping.rules`` map it; the operator issues users' certificates with
the CN only, so no user can carry the brokers' ``O=kafkube``). The user's Secret is named after
the user and owned by the KafkaUser: a SCRAM user's holds ``password`` (generated once, then
kept) and ``sasl.jaas.config``; a TLS user's ``user.crt``, ``user.key`` and ``ca.crt`` (the
clients CA, as Strimzi does; clients verify brokers with ``<cluster>-cluster-ca-cert``).

ACLs are reconciled as Strimzi does: the operator owns every ACL of the user's principal, so
one the spec no longer lists (or one added by hand with ``kafka-acls``) is deleted. So are
the client quotas of the user's name (``spec.quotas``, Strimzi's field names, set as Kafka's
quota keys with AlterClientQuotas): a key the spec no longer has is removed.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import secrets
import string
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kafkube_operator.model.certificates import DEFAULT_VALIDITY_DAYS, KeyPair, issue
from kafkube_operator.model.listeners import SCRAM, TLS, principal
from kafkube_operator.model.pki import held_pair, kept_for_trust, needs_issuing, secret
from kafkube_operator.model.status import FALSE, TRUE, Condition

Manifest = dict[str, Any]
KIND = "KafkaUser"
API_VERSION = "kafkube.io/v1alpha1"
PASSWORD_LENGTH = 32
SCRAM_LOGIN_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
# The CRD's enums, in Kafka's names (the admin API's).
RESOURCE_TYPES = {"topic": "TOPIC", "group": "GROUP", "cluster": "CLUSTER",
                  "transactionalId": "TRANSACTIONAL_ID"}
PATTERN_TYPES = {"literal": "LITERAL", "prefix": "PREFIXED"}
# spec.quotas (Strimzi's names) -> Kafka's client quota keys (KIP-546).
QUOTA_KEYS = {"producerByteRate": "producer_byte_rate", "consumerByteRate": "consumer_byte_rate",
              "requestPercentage": "request_percentage",
              "controllerMutationRate": "controller_mutation_rate"}
OPERATIONS = ("All", "Read", "Write", "Create", "Delete", "Alter", "Describe", "ClusterAction",
              "DescribeConfigs", "AlterConfigs", "IdempotentWrite")


def _kafka_operation(name: str) -> str:
    """``DescribeConfigs`` → ``DESCRIBE_CONFIGS``."""
    return "".join(f"_{c}" if c.isupper() and i else c for i, c in enumerate(name)).upper()


@dataclass(frozen=True, order=True)
class AclBinding:
    """One ACL as Kafka stores it: one operation each, so the desired and the existing sets
    compare entry by entry."""

    principal: str
    host: str
    operation: str       # READ, WRITE, ... (kafka-python's ACLOperation names)
    permission: str      # ALLOW or DENY
    resource_type: str   # TOPIC, GROUP, CLUSTER, TRANSACTIONAL_ID
    resource_name: str
    pattern_type: str    # LITERAL or PREFIXED

    def as_dict(self) -> dict[str, str]:
        return {"principal": self.principal, "host": self.host, "operation": self.operation,
                "permission": self.permission, "resourceType": self.resource_type,
                "resourceName": self.resource_name, "patternType": self.pattern_type}


@dataclass(frozen=True)
class UserSpec:
    name: str
    namespace: str
    uid: str
    cluster: str
    authentication: str | None
    acls: tuple[Mapping, ...]
    authorization: str | None
    quotas: tuple[tuple[str, float], ...] = ()  # (Kafka's key, value), in QUOTA_KEYS order

    @classmethod
    def of(cls, resource: Mapping) -> UserSpec:
        meta = resource["metadata"]
        spec = resource.get("spec") or {}
        authorization = spec.get("authorization") or {}
        quotas = spec.get("quotas") or {}
        return cls(meta["name"], meta.get("namespace", ""), meta.get("uid", ""),
                   str(spec.get("cluster", "")), (spec.get("authentication") or {}).get("type"),
                   tuple(authorization.get("acls") or ()), authorization.get("type"),
                   tuple((key, float(quotas[field])) for field, key in QUOTA_KEYS.items()
                         if quotas.get(field) is not None))

    @property
    def principal(self) -> str:
        return principal(f"CN={self.name}" if self.authentication == TLS else self.name)

    @property
    def quota_names(self) -> tuple[str, ...]:
        """The user entity names of both principals: the first holds the user's quotas,
        the other (left by a change of authentication) none."""
        return tuple(p.removeprefix("User:") for p in (self.principal, *(
            p for p in self.principals if p != self.principal)))

    @property
    def principals(self) -> tuple[str, ...]:
        """Both principals the user may have had: ACLs of either are the operator's."""
        return principal(self.name), principal(f"CN={self.name}")


def problems(user: UserSpec, cluster_spec: Mapping | None) -> list[tuple[str, str]]:
    """What the CRD's schema cannot refuse: an unknown cluster, an authentication the
    cluster has no listener for, ACLs on a cluster without an authorizer."""
    if cluster_spec is None:
        return [("ClusterNotFound", f"no KafkaCluster {user.cluster} in namespace "
                 f"{user.namespace}")]
    found = []
    listeners = cluster_spec.get("listeners") or []
    kinds = {(li.get("authentication") or {}).get("type") for li in listeners}
    if user.authentication not in (SCRAM, TLS):
        found.append(("UnsupportedAuthentication",
                      f"authentication type {user.authentication!r} is not supported "
                      f"(scram-sha-512 or tls)"))
    elif user.authentication not in kinds:
        found.append(("NoListener", f"KafkaCluster {user.cluster} has no listener with "
                      f"authentication {user.authentication}; add one to spec.listeners"))
    if user.acls and (cluster_spec.get("authorization") or {}).get("type") != "simple":
        found.append(("AuthorizationDisabled", f"KafkaCluster {user.cluster} has no "
                      "spec.authorization: the ACLs are kept but not enforced"))
    return found


def secret_conflict(user: UserSpec, existing: Mapping | None) -> str | None:
    """A Secret of the user's name that this KafkaUser does not own (a CA's, a broker
    certificate's, anyone's) is never overwritten."""
    if existing is None:
        return None
    owners = (existing.get("metadata") or {}).get("ownerReferences") or []
    if any(o.get("kind") == KIND and o.get("uid") == user.uid for o in owners):
        return None
    return (f"Secret {user.name} exists and does not belong to this KafkaUser; rename the "
            "user or remove that Secret")


def acl_bindings(user: UserSpec) -> set[AclBinding]:
    bindings = set()
    for acl in user.acls:
        resource = acl.get("resource") or {}
        resource_type = RESOURCE_TYPES[resource.get("type", "topic")]
        # The cluster resource has one name in Kafka.
        name = "kafka-cluster" if resource_type == "CLUSTER" else str(resource.get("name", "*"))
        pattern = PATTERN_TYPES[resource.get("patternType", "literal")]
        for operation in acl.get("operations") or ():
            bindings.add(AclBinding(user.principal, str(acl.get("host", "*")),
                                    _kafka_operation(operation),
                                    str(acl.get("type", "allow")).upper(),
                                    resource_type, name, pattern))
    return bindings


@dataclass(frozen=True)
class AclPlan:
    create: tuple[AclBinding, ...]
    delete: tuple[AclBinding, ...]

    @property
    def empty(self) -> bool:
        return not self.create and not self.delete


def acl_plan(desired: Iterable[AclBinding], current: Iterable[AclBinding]) -> AclPlan:
    """Add what is missing, delete what the spec no longer lists (``current``: every ACL of
    the user's principals)."""
    want, have = set(desired), set(current)
    return AclPlan(tuple(sorted(want - have)), tuple(sorted(have - want)))


@dataclass(frozen=True)
class QuotaPlan:
    """One user entity's AlterClientQuotas: keys to set and keys to remove."""

    user: str
    set: tuple[tuple[str, float], ...]
    remove: tuple[str, ...]

    @property
    def empty(self) -> bool:
        return not self.set and not self.remove


def quota_plans(user: UserSpec, current: Mapping[str, Mapping[str, float]]) -> list[QuotaPlan]:
    """What to change so the user's name holds exactly ``spec.quotas`` and its other
    principal's name none (``current``: each name's quotas as the cluster describes them;
    Kafka's keys the spec cannot name are kept, not the operator's). Only changes."""
    plans = []
    for i, name in enumerate(user.quota_names):
        want = dict(user.quotas) if i == 0 else {}
        have = {k: v for k, v in (current.get(name) or {}).items() if k in QUOTA_KEYS.values()}
        plan = QuotaPlan(name, tuple((k, v) for k, v in want.items() if have.get(k) != v),
                         tuple(sorted(set(have) - set(want))))
        if not plan.empty:
            plans.append(plan)
    return plans


def new_password(length: int = PASSWORD_LENGTH) -> str:
    alphabet = string.ascii_letters + string.digits
    return "".join(secrets.choice(alphabet) for _ in range(length))


def jaas_config(username: str, password: str) -> str:
    return f'{SCRAM_LOGIN_MODULE} required username="{username}" password="{password}";'


# The Secret's keys the operator writes, by authentication; any other key (added by someone
# else) is kept and never compared.
SCRAM_KEYS = ("password", "sasl.jaas.config")
TLS_KEYS = ("user.crt", "user.key", "ca.crt")
OWN_KEYS = frozenset(SCRAM_KEYS + TLS_KEYS)
# On a SCRAM user's Secret: a hash of the password last set in the cluster, so a password
# whose upsert failed is set again on the next pass (the credential itself cannot be read).
CREDENTIAL_ANNOTATION = "kafkube.io/scram-credential"


def credential_hash(user: UserSpec, password: str) -> str:
    """Salted with the KafkaUser's uid and name; only readers of the Secret, who can read
    the password itself, see it."""
    digest = hashlib.sha256(f"{user.uid}/{user.name}/{password}".encode()).hexdigest()
    return f"sha256:{digest}"


@dataclass(frozen=True)
class UserSecret:
    """The Secret to apply (None: keep it as it is), the SCRAM password, whether it must be
    set in the cluster (the Secret does not record it as set there) and the Secret that
    records it, to apply once it is set; and what happened."""

    manifest: Manifest | None
    password: str | None = None
    action: str | None = None
    set_credential: bool = False
    recorded: Manifest | None = None


def secret_metadata(user: UserSpec, annotations: Mapping[str, str] | None = None) -> Manifest:
    metadata: Manifest = {
        "name": user.name, "namespace": user.namespace,
        "labels": {"app.kubernetes.io/name": "kafkube", "kafkube.io/cluster": user.cluster,
                   "kafkube.io/user": user.name,
                   "app.kubernetes.io/managed-by": "kafkube-operator"}}
    if annotations:
        metadata["annotations"] = dict(annotations)
    metadata["ownerReferences"] = [{"apiVersion": API_VERSION, "kind": KIND, "name": user.name,
                                    "uid": user.uid, "controller": True,
                                    "blockOwnerDeletion": True}]
    return metadata


def user_secret(user: UserSpec, current: Mapping[str, str] | None,
                clients_ca: KeyPair | None, now: dt.datetime, renewal_days: int = 30,
                password: Callable[[], str] = new_password, *,
                annotations: Mapping[str, str] | None = None,
                validity_days: int = DEFAULT_VALIDITY_DAYS,
                trusted: str = "", brokers_trust_it: bool = True) -> UserSecret:
    """``current``: the Secret's decoded data (None: no Secret), ``annotations`` its
    annotations. A SCRAM password, once generated, is kept; a certificate is issued again
    when the clients CA changed or it nears its end. Only the operator's keys are compared;
    others are kept. Switching authentication replaces the operator's keys. A renewed
    clients CA (``trusted``: its trust store) issues again only once every broker trusts it
    (``brokers_trust_it``): until then the previous CA's certificate, still good, is kept."""
    others = {k: v for k, v in (current or {}).items() if k not in OWN_KEYS}
    recorded = (annotations or {}).get(CREDENTIAL_ANNOTATION)
    if user.authentication == SCRAM:
        # A password edited in the Secret is the new password: the JAAS line follows it
        # and the credential is set again.
        held = (current or {}).get("password")
        chosen = held or password()
        wanted = {"password": chosen, "sasl.jaas.config": jaas_config(user.name, chosen)}
        applied = credential_hash(user, chosen)
        owned = {k: v for k, v in (current or {}).items() if k in OWN_KEYS}
        data = {**others, **wanted}
        manifest = None
        if owned != wanted:  # written at once (the record kept as it is), then the credential
            manifest = secret(secret_metadata(user, {CREDENTIAL_ANNOTATION: recorded}
                                              if recorded else None), data)
        record = None
        if recorded != applied:
            record = secret(secret_metadata(user, {CREDENTIAL_ANNOTATION: applied}), data)
        action = ("password generated" if not held else
                  "Secret updated" if owned != wanted else None)
        return UserSecret(manifest, chosen, action, set_credential=record is not None,
                          recorded=record)
    if user.authentication == TLS and clients_ca is not None:
        held_cert = held_pair(current, "user.crt", "user.key")
        reissue = needs_issuing(held_cert, clients_ca, now, renewal_days)
        owned_ok = set(current or {}) & OWN_KEYS == set(TLS_KEYS)
        if reissue and not brokers_trust_it and owned_ok and kept_for_trust(
                held_cert, trusted, now, renewal_days):
            return UserSecret(None)
        if not reissue and owned_ok and (current or {}).get("ca.crt") == clients_ca.certificate:
            return UserSecret(None)
        pair = issue(clients_ca, user.name, now, validity_days=validity_days) \
            if reissue or held_cert is None else held_cert
        return UserSecret(secret(secret_metadata(user), {
            **others, "user.crt": pair.certificate, "user.key": pair.key,
            "ca.crt": clients_ca.certificate}),
                          action="certificate issued" if reissue else "Secret updated")
    return UserSecret(None)


def user_status(user: UserSpec, generation: int, found: list[tuple[str, str]],
                ready_message: str | None, previous: list[Mapping], now: str) -> dict[str, Any]:
    """Ready when the Secret, the credential and the ACLs are in place; NotReady with the
    first problem otherwise (each problem also a Warning condition)."""
    before = {c["type"]: c for c in previous if "type" in c}
    if found:
        ready = Condition("Ready", FALSE, found[0][0], "; ".join(m for _, m in found))
        warning = Condition("Warning", TRUE, found[0][0], "; ".join(m for _, m in found))
    else:
        ready = Condition("Ready", TRUE, "UserReady", ready_message or "user ready")
        warning = Condition("Warning", FALSE, "None", "nothing refused")
    status: dict[str, Any] = {
        "observedGeneration": generation,
        "state": "Ready" if not found else "NotReady",
        "username": user.principal.removeprefix("User:"),
        "secret": user.name,
        "conditions": [c.as_dict(now, before) for c in (ready, warning)],
    }
    return status
