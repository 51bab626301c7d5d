"""Apply a KafkaUser's model (model/user.py): its Secret through the Kubernetes API, its
SCRAM credential, its ACLs and its client quotas through its cluster's Kafka API (the
operator's admin client, on the replication listener of a secured cluster), and the status
that says how far it got."""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Mapping
from dataclasses import astuple, replace

from kafkube_operator.kafka import AdminClients, KafkaAdmin, KafkaRefused, acl_fields, make_acl
from kafkube_operator.kube import ApplyError, Kube
from kafkube_operator.model.certificates import KeyPair, ca_problem
from kafkube_operator.model.cluster import API_VERSION, CLIENTS_CA_HASH, ClusterRef, config_hash
from kafkube_operator.model.listeners import SCRAM, TLS, SecuritySpec
from kafkube_operator.model.pki import CaPolicy, decode, held_ca
from kafkube_operator.model.user import (
    AclBinding,
    Manifest,
    UserSecret,
    UserSpec,
    acl_bindings,
    acl_plan,
    problems,
    quota_plans,
    secret_conflict,
    user_secret,
    user_status,
)
from kafkube_operator.reconcile.security import brokers_trust
from kafkube_operator.reconcile.views import ClusterViews, Events, cluster_admin, utc_now

log = logging.getLogger(__name__)


def _clients_ca(kube: Kube, ref: ClusterRef) -> tuple[KeyPair | None, str]:
    """The clients CA and its trust store (the renewed CA, then the previous one)."""
    held = held_ca(decode(kube.get("v1", "Secret", ref.clients_ca, ref.namespace)))
    return held if held else (None, "")


def _brokers_trust(kube: Kube, ref: ClusterRef, cluster_spec: Mapping, trusted: str) -> bool:
    """Whether every running broker loaded the clients CA's trust store ``trusted`` (no
    listener that authenticates by certificate: none needs to)."""
    if not trusted or not SecuritySpec.of(cluster_spec).uses_clients_ca:
        return True
    loaded = brokers_trust(kube, ref, CLIENTS_CA_HASH)
    return loaded is None or loaded == config_hash(trusted)


def reconcile_user(kube: Kube, views: ClusterViews, admins: AdminClients, resource: Mapping,
                   events: Events, now: dt.datetime | None = None) -> dict:
    """One pass: Secret, credential, ACLs; the status to write."""
    user = UserSpec.of(resource)
    generation = resource["metadata"].get("generation", 0)
    previous = (resource.get("status") or {}).get("conditions") or []
    cluster = kube.get(API_VERSION, "KafkaCluster", user.cluster, user.namespace)
    cluster_spec = (cluster.get("spec") or {}) if cluster is not None else None
    found = problems(user, cluster_spec)
    if found or cluster is None or cluster_spec is None:
        return user_status(user, generation, found, None, previous, utc_now())
    ref = ClusterRef.of(cluster)
    clients_ca, trusted = _clients_ca(kube, ref) if user.authentication == TLS else (None, "")
    if user.authentication == TLS and clients_ca is None:
        return user_status(user, generation, [("WaitingForCa", (
            f"the clients CA of KafkaCluster {ref.name} (Secret {ref.clients_ca}) is not "
            "there yet"))], None, previous, utc_now())
    moment = now or dt.datetime.now(dt.UTC)
    unusable = ca_problem(clients_ca, moment) if clients_ca is not None else None
    if unusable:
        return user_status(user, generation, [("CaUnusable", (
            f"the clients CA of KafkaCluster {ref.name} (Secret {ref.clients_ca}) cannot "
            f"sign: {unusable}"))], None, previous, utc_now())
    existing = kube.get("v1", "Secret", user.name, user.namespace)
    conflict = secret_conflict(user, existing)
    if conflict:
        return user_status(user, generation, [("SecretConflict", conflict)], None, previous,
                           utc_now())
    current = decode(existing)
    policy = CaPolicy.of(cluster_spec.get("clientsCa"))
    decision = user_secret(user, current, clients_ca, moment, policy.renewal_days,
                           annotations=((existing or {}).get("metadata") or {}).get("annotations"),
                           validity_days=policy.validity_days, trusted=trusted,
                           brokers_trust_it=_brokers_trust(kube, ref, cluster_spec, trusted))
    # The Secret first (it needs no broker); a SCRAM password's hash is recorded on it once
    # the cluster took it, so one it refused is set again on the next pass.
    if decision.manifest is not None:
        failed = _apply_secret(kube, user, decision.manifest, decision.action, events)
        if failed:
            return user_status(user, generation, [failed], None, previous, utc_now())
    admin: KafkaAdmin | None = None
    try:
        admin = cluster_admin(admins, ref, views.of(ref))
        _apply_credential(admin, user, decision, events)
        if decision.recorded is not None:
            failed = _apply_secret(kube, user, decision.recorded, None, events)
            if failed:
                return user_status(user, generation, [failed], None, previous, utc_now())
        if SecuritySpec.of(cluster_spec).authorization:
            _apply_acls(admin, user, events)
        _apply_quotas(admin, user, events)
    except KafkaRefused as e:
        events.warning("KafkaRefused", str(e))
        if admin is not None:
            admins.drop((ref.namespace, ref.name), admin)
        return user_status(user, generation, [("KafkaRefused", str(e))], None, previous,
                           utc_now())
    acls = len(acl_bindings(user))
    message = f"{user.authentication} user {user.principal}, Secret {user.name}, {acls} ACL(s)"
    return user_status(user, generation, [], message, previous, utc_now())


def _apply_secret(kube: Kube, user: UserSpec, manifest: Manifest, action: str | None,
                  events: Events) -> tuple[str, str] | None:
    """The problem when the Secret could not be applied."""
    try:
        kube.apply(manifest)
    except ApplyError as e:
        events.warning("ApplyFailed", str(e))
        return ("ApplyFailed", str(e))
    if action:
        events.info("UserSecret", f"Secret {user.name}: {action}")
    return None


def _apply_credential(admin: KafkaAdmin, user: UserSpec, decision: UserSecret,
                      events: Events) -> None:
    """SCRAM: upserted when the Secret does not record this password as set in the cluster,
    or the cluster lacks it; a user that moved to TLS loses its credential."""
    has = user.name in admin.scram_users([user.name])
    if user.authentication == SCRAM and decision.password and \
            (decision.set_credential or not has):
        admin.upsert_scram(user.name, decision.password)
        events.info("CredentialSet", f"SCRAM-SHA-512 credential of {user.name} set")
    elif user.authentication != SCRAM and has:
        admin.delete_scram(user.name)
        events.info("CredentialDeleted", f"SCRAM-SHA-512 credential of {user.name} deleted")


def _current_acls(admin: KafkaAdmin, user: UserSpec) -> set[AclBinding]:
    return {AclBinding(*acl_fields(acl)) for principal in user.principals
            for acl in admin.acls_of(principal)}


def _apply_acls(admin: KafkaAdmin, user: UserSpec, events: Events) -> None:
    plan = acl_plan(acl_bindings(user), _current_acls(admin, user))
    if plan.create:
        admin.create_acls([make_acl(*astuple(b)) for b in plan.create])
    if plan.delete:
        admin.delete_acls([make_acl(*astuple(b)) for b in plan.delete])
    if not plan.empty:
        events.info("AclsChanged", f"{user.principal}: {len(plan.create)} ACL(s) added, "
                    f"{len(plan.delete)} removed")


def _apply_quotas(admin: KafkaAdmin, user: UserSpec, events: Events,
                  keep: bool = True) -> None:
    """The user's name holds spec.quotas, nothing else of its keys (``keep`` False: none)."""
    if not keep:
        user = replace(user, quotas=())
    for plan in quota_plans(user, admin.quotas_of(user.quota_names)):
        admin.alter_quotas(plan.user, plan.set, plan.remove)
        events.info("QuotasChanged", f"client quotas of user {plan.user}: "
                    f"{', '.join(f'{k}={v:g}' for k, v in plan.set) or 'none'} set, "
                    f"{', '.join(plan.remove) or 'none'} removed")


def delete_user(kube: Kube, views: ClusterViews, admins: AdminClients, resource: Mapping,
                events: Events) -> bool:
    """Remove the user's credential and ACLs from its cluster; True when done (or when the
    cluster is gone). Its Secret goes with it (owner reference)."""
    user = UserSpec.of(resource)
    cluster = kube.get(API_VERSION, "KafkaCluster", user.cluster, user.namespace)
    if cluster is None or not SecuritySpec.of(cluster.get("spec") or {}).enabled \
            or cluster["metadata"].get("deletionTimestamp"):
        return True  # nothing to remove, or it goes with its cluster
    ref = ClusterRef.of(cluster)
    admin: KafkaAdmin | None = None
    try:
        admin = cluster_admin(admins, ref, views.of(ref))
        if user.name in admin.scram_users([user.name]):
            admin.delete_scram(user.name)
        if SecuritySpec.of(cluster.get("spec") or {}).authorization:
            existing = _current_acls(admin, user)
            if existing:
                admin.delete_acls([make_acl(*astuple(b)) for b in sorted(existing)])
        _apply_quotas(admin, user, events, keep=False)
    except KafkaRefused as e:
        events.warning("KafkaRefused", str(e))
        if admin is not None:
            admins.drop((ref.namespace, ref.name), admin)
        return False
    events.info("UserDeleted", f"credential, ACLs and quotas of {user.principal} removed")
    return True
