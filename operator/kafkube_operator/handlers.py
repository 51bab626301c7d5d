"""kopf registrations, and only those: each handler hands its resource to one reconcile step
(reconcile/) and writes back the status it returns.

Handlers are plain functions, so kopf runs them in its thread pool: the steps they call use
the blocking Kubernetes client. A per-resource lock keeps a timer tick and a change handler of
one KafkaCluster from reconciling it at the same time.
"""

from __future__ import annotations

import copy
import functools
import logging
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import kopf

from kafkube_operator import metrics
from kafkube_operator.kafka import AdminClients
from kafkube_operator.kube import Kube
from kafkube_operator.model.cluster import GROUP, VERSION
from kafkube_operator.reconcile.cluster import delete_cluster, reconcile_cluster, stop_brokers
from kafkube_operator.reconcile.rebalance import reconcile_rebalance
from kafkube_operator.reconcile.rebalance_auto import auto_pass
from kafkube_operator.reconcile.topic import delete_topic, mirror_cluster_topics, reconcile_topic
from kafkube_operator.reconcile.user import delete_user, reconcile_user
from kafkube_operator.reconcile.views import ClusterViews

log = logging.getLogger(__name__)
CLUSTERS = (GROUP, VERSION, "kafkaclusters")
TOPICS = (GROUP, VERSION, "topics")
USERS = (GROUP, VERSION, "kafkausers")
REBALANCES = (GROUP, VERSION, "kafkarebalances")
FINALIZER = f"{GROUP}/operator"
# How often a KafkaCluster's status is refreshed when nothing changes in its spec.
STATUS_INTERVAL_S = 5.0
# A KafkaUser changes only with its spec, its Secret or its cluster's CA: checked less often
# (each check describes the user's credential and ACLs).
USER_INTERVAL_S = 30.0


@dataclass
class OperatorContext:
    """The operator-wide state handlers share, passed to kopf as its memo."""

    kube: Kube
    views: ClusterViews
    admins: AdminClients = field(default_factory=AdminClients)
    locks: defaultdict[str, threading.Lock] = field(
        default_factory=lambda: defaultdict(threading.Lock))


class KopfEvents:
    """Events on the resource being handled, posted by kopf."""

    def __init__(self, body: Mapping) -> None:
        self._body = body

    def info(self, reason: str, message: str) -> None:
        log.info("%s/%s: %s", self._body.metadata.namespace, self._body.metadata.name, message)
        metrics.ACTIONS.labels(reason).inc()
        kopf.info(self._body, reason=reason, message=message)

    def warning(self, reason: str, message: str) -> None:
        log.warning("%s/%s: %s", self._body.metadata.namespace, self._body.metadata.name,
                    message)
        metrics.WARNINGS.labels(reason).inc()
        kopf.warn(self._body, reason=reason, message=message)


def _context(memo: Any) -> OperatorContext:
    return memo.context


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    settings.persistence.finalizer = FINALIZER
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=GROUP)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=GROUP, key="last-handled-configuration")
    # Each action of ours is an Event (KopfEvents, posted at INFO); of kopf's own per-object
    # log lines, which it posts as Events too, only failures: a timer's every success would
    # flood both the log and the Events.
    settings.posting.level = logging.INFO
    logging.getLogger("kopf.objects").setLevel(logging.WARNING)
    settings.watching.server_timeout = 300
    settings.execution.max_workers = 8
    # A resource deleted while its timer runs keeps its finalizer until the timer has exited;
    # kopf re-checks every `cancellation_polling` seconds (60 by default), which held a
    # deleted Topic for a minute. A pass ends within seconds, so check each second.
    settings.background.instant_exit_timeout = 1.0
    settings.background.cancellation_polling = 1


@kopf.on.login()
def login(memo: kopf.Memo, **_: Any) -> kopf.ConnectionInfo:
    """kopf talks to the API server with the credentials the rest of the operator uses (a
    service account in a pod, ``--kubeconfig`` outside one)."""
    conf = _context(memo).kube.api.configuration
    # Refreshed first: a service account's token rotates; kopf logs in again on a 401.
    scheme, _, token = (conf.get_api_key_with_prefix("BearerToken") or "").partition(" ")
    return kopf.ConnectionInfo(
        server=conf.host, ca_path=conf.ssl_ca_cert, insecure=not conf.verify_ssl,
        certificate_path=conf.cert_file, private_key_path=conf.key_file,
        scheme=scheme or None, token=token or None, expiration=None)


@kopf.on.resume(*CLUSTERS)
@kopf.on.create(*CLUSTERS)
@kopf.on.update(*CLUSTERS)
def cluster_changed(body: kopf.Body, patch: kopf.Patch, memo: kopf.Memo, **_: Any) -> None:
    """A spec to apply: a pass that applies, then observes."""
    _reconcile("KafkaCluster", functools.partial(reconcile_cluster, spec_changed=True), body,
               patch, _context(memo))


@kopf.timer(*CLUSTERS, id="cluster_tick", interval=STATUS_INTERVAL_S, sharp=True)
def cluster_tick(body: kopf.Body, patch: kopf.Patch, memo: kopf.Memo, **_: Any) -> None:
    """The status refreshed, the roll and rebalance moved on; the spec applied again only
    while a change is under way or drift may have crept in (reconcile/cluster.py)."""
    _reconcile("KafkaCluster", functools.partial(reconcile_cluster, spec_changed=False), body,
               patch, _context(memo))


@kopf.timer(*CLUSTERS, id="topic_mirror", interval=STATUS_INTERVAL_S, sharp=True)
def cluster_topics(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    """Topics made through the Kafka API get Topic resources (reconcile/topic.py)."""
    if body.metadata.get("deletionTimestamp"):
        return
    context = _context(memo)
    with context.locks[body.metadata["uid"]]:
        mirror_cluster_topics(context.kube, context.views, copy.deepcopy(dict(body)),
                              KopfEvents(body))


@kopf.timer(*CLUSTERS, id="rebalance_auto", interval=STATUS_INTERVAL_S, sharp=True)
def cluster_auto_rebalance(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    """spec.rebalance.auto: a KafkaRebalance when a goal drifts beyond its threshold
    (reconcile/rebalance_auto.py; it looks at the load once a minute at most)."""
    if body.metadata.get("deletionTimestamp") or not (
            (body.get("spec") or {}).get("rebalance") or {}).get("auto", {}).get("enabled"):
        return
    context = _context(memo)
    with context.locks[body.metadata["uid"]]:
        auto_pass(context.kube, context.views, context.admins, copy.deepcopy(dict(body)),
                  KopfEvents(body))


def _reconcile(kind: str, step: Callable[..., dict], body: kopf.Body, patch: kopf.Patch,
               context: OperatorContext) -> None:
    """One pass of ``step`` for a resource not being deleted, timed and counted; its status
    written back."""
    if body.metadata.get("deletionTimestamp"):
        return
    started = time.monotonic()
    try:
        with context.locks[body.metadata["uid"]]:
            # kopf's body is a live view that a watch event can swap mid-pass; a pass works
            # on one snapshot, so the observedGeneration it writes is the spec it applied.
            resource = copy.deepcopy(dict(body))
            status = step(context.kube, context.views, context.admins, resource,
                          KopfEvents(body))
    except Exception:
        metrics.RECONCILES.labels(kind, "error").inc()
        raise
    finally:
        metrics.RECONCILE_SECONDS.labels(kind).observe(time.monotonic() - started)
    metrics.RECONCILES.labels(kind, "ok").inc()
    patch.status.update(status)


@kopf.on.delete(*CLUSTERS)
def cluster_deleted(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    context = _context(memo)
    events = KopfEvents(body)
    with context.locks[body.metadata["uid"]]:
        running = stop_brokers(context.kube, body, events)
        if running:
            raise kopf.TemporaryError(f"waiting for {running} broker pod(s) to stop", delay=3)
        delete_cluster(context.kube, context.views, body, events)
    context.locks.pop(body.metadata["uid"], None)


@kopf.on.resume(*TOPICS)
@kopf.on.create(*TOPICS)
@kopf.on.update(*TOPICS)
@kopf.timer(*TOPICS, id="topic_tick", interval=STATUS_INTERVAL_S, sharp=True)
def topic_reconcile(body: kopf.Body, patch: kopf.Patch, memo: kopf.Memo, **_: Any) -> None:
    _reconcile("Topic", reconcile_topic, body, patch, _context(memo))


@kopf.on.delete(*TOPICS)
def topic_deleted(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    context = _context(memo)
    with context.locks[body.metadata["uid"]]:
        if not delete_topic(context.kube, context.views, context.admins, body,
                            KopfEvents(body)):
            raise kopf.TemporaryError("waiting for the topic to leave the cluster", delay=3)
    context.locks.pop(body.metadata["uid"], None)


@kopf.on.resume(*USERS)
@kopf.on.create(*USERS)
@kopf.on.update(*USERS)
@kopf.timer(*USERS, id="user_tick", interval=USER_INTERVAL_S, sharp=True)
def user_reconcile(body: kopf.Body, patch: kopf.Patch, memo: kopf.Memo, **_: Any) -> None:
    _reconcile("KafkaUser", reconcile_user, body, patch, _context(memo))


@kopf.on.resume(*REBALANCES)
@kopf.on.create(*REBALANCES)
@kopf.on.update(*REBALANCES)
@kopf.timer(*REBALANCES, id="rebalance_tick", interval=STATUS_INTERVAL_S, sharp=True)
def rebalance_reconcile(body: kopf.Body, patch: kopf.Patch, memo: kopf.Memo, **_: Any) -> None:
    """A KafkaRebalance's next step (reconcile/rebalance.py): measure, propose, wait for
    approval, execute, follow. No finalizer: deleting one mid-move leaves the moves to end
    under their throttle, which the next mover's pass removes."""
    _reconcile("KafkaRebalance", reconcile_rebalance, body, patch, _context(memo))


@kopf.on.delete(*USERS)
def user_deleted(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    context = _context(memo)
    with context.locks[body.metadata["uid"]]:
        if not delete_user(context.kube, context.views, context.admins, body,
                           KopfEvents(body)):
            raise kopf.TemporaryError("waiting to remove the user from its cluster", delay=3)
    context.locks.pop(body.metadata["uid"], None)
