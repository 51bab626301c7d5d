"""What every reconcile step shares: where actions are reported, the read-only view of each
KafkaCluster's coordination objects (the brokers' Leases and the cluster image, read with the
contract's readers: cluster_view.py), the operator's memory of each cluster, and the image a
pass may act on."""

from __future__ import annotations

import datetime as dt
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from kubernetes import client as k8s

from kafkube_contract.image import ImageFormatError, ImageUnreadable, ImageView
from kafkube_contract.objects import api_client
from kafkube_operator.cluster_view import ClusterView
from kafkube_operator.kafka import AdminClients, KafkaAdmin
from kafkube_operator.model.cluster import ClusterRef
from kafkube_operator.model.listeners import PLAINTEXT_DEFAULT, REPLICATION
from kafkube_operator.model.status import SpecWarning, metadata_problem
from kafkube_operator.reconcile.load import RateWindow
from kafkube_operator.reconcile.outcome import ApplyOutcome


class Events(Protocol):
    """Where the operator reports each action (kopf posts them as Kubernetes Events)."""

    def info(self, reason: str, message: str) -> None: ...

    def warning(self, reason: str, message: str) -> None: ...


WENT_BACK_GRACE_S = 60.0


@dataclass
class ClusterMemory:
    """What the operator remembers of a cluster between passes (lost on failover, which only
    makes the next operator check the leaders at once and the roll rely on min ISR alone)."""

    last_restarted: int | None = None  # the broker the rolling restart restarted last
    rolling: bool = False
    next_leader_check: float = 0.0  # time.monotonic() of the next leader-imbalance check
    last_refusal: str | None = None  # a refused scale-down, reported once as an Event
    scaling_phase: str | None = None  # model/scale.py's phase of the last pass
    # (the version recorded, time.monotonic()) when the image was first seen older than it
    went_back_at: tuple[int, float] | None = None
    running_min_isr: int | None = None  # the default min ISR every broker last ran with
    applied: ApplyOutcome | None = None  # the last apply pass's decisions
    listener_step: str | None = None  # the description of the listener step under way
    # Readings of the brokers' partition byte counters, for a rebalance's rates.
    load: RateWindow = field(default_factory=RateWindow)
    next_auto_check: float = 0.0  # time.monotonic() of spec.rebalance.auto's next check
    # The highest kafkube.metadata.version each image probed supports (model/upgrade.py):
    # an image is probed once per operator process.
    image_verdicts: dict[str, int] = field(default_factory=dict)
    # The upgrade Warnings last posted as Events, by source (reconcile/upgrade.py).
    upgrade_reported: dict[str, str] = field(default_factory=dict)


@dataclass
class ClusterViews:
    """One read-only view per KafkaCluster (each keeps its last decoded image), on one API
    client, and the operator's memory of each cluster, kept between reconciles."""

    kubeconfig: str | None
    _views: dict[tuple[str, str], ClusterView]
    _memory: dict[tuple[str, str], ClusterMemory]
    _lock: threading.Lock
    _client: k8s.ApiClient | None = None

    @classmethod
    def create(cls, kubeconfig: str | None) -> ClusterViews:
        return cls(kubeconfig, {}, {}, threading.Lock())

    def of(self, ref: ClusterRef) -> ClusterView:
        key = (ref.namespace, ref.name)
        with self._lock:
            if self._client is None:
                self._client = api_client(self.kubeconfig)
            view = self._views.get(key)
            if view is None:
                view = self._views[key] = ClusterView(self._client, ref.namespace, ref.name)
            return view

    def memory(self, ref: ClusterRef) -> ClusterMemory:
        with self._lock:
            return self._memory.setdefault((ref.namespace, ref.name), ClusterMemory())

    def forget(self, ref: ClusterRef) -> None:
        with self._lock:
            self._memory.pop((ref.namespace, ref.name), None)
            self._views.pop((ref.namespace, ref.name), None)

    def close(self) -> None:
        with self._lock:
            client, self._client, self._views = self._client, None, {}
        if client is not None:
            client.close()


@dataclass(frozen=True)
class TrustedImage:
    """The cluster image the operator may act on, or the problem that forbids it."""

    image: ImageView
    cluster_id: str | None
    problem: SpecWarning | None = None
    version: int | None = None  # the highest version seen, for the status to record

    def status_fields(self) -> dict[str, object]:
        return {"clusterId": self.cluster_id, "metadataVersion": self.version}


def trusted_image(view: ClusterView, cluster_status: Mapping | None,
                  memory: ClusterMemory) -> TrustedImage:
    """The image, unless it is missing where brokers ran, belongs to another cluster than
    the one the KafkaCluster's status recorded, or is older than the version it recorded;
    an empty one before the first broker made it. An older one is taken after
    WENT_BACK_GRACE_S: running brokers put back a newer one within a second, so none had it
    (every broker was down, and their copies lag the store by a few seconds). An image in a
    format newer than this operator reads (brokers upgraded past it) is not acted on
    either: the status says to upgrade the operator; nor is one that cannot be read
    (damaged, empty, without its topics, a version that is not a number)."""
    recorded = cluster_status or {}
    recorded_id, recorded_version = recorded.get("clusterId"), recorded.get("metadataVersion")
    try:
        found = view.stored_image()  # one read: the identity judged is the image's
    except ImageFormatError as e:
        # Damaged, or no document a broker writes (ImageUnreadable), or of a newer format:
        # never acted on, least of all as an empty image (every Topic mirrored would go).
        reason = ("MetadataUnreadable" if isinstance(e, ImageUnreadable)
                  else "MetadataFormatUnknown")
        return TrustedImage(ImageView(), recorded_id, SpecWarning(
            reason, f"{view.where}: {e}"), recorded_version)
    stored = found[0] if found is not None else None
    identity = (stored.cluster_id, stored.version) if stored is not None else None
    history = stored is not None or view.has_history()  # (judged only when missing)
    problem = metadata_problem(identity, recorded_id, history, view.where, recorded_version)
    if problem is not None and problem.reason == "MetadataWentBack" and stored is not None:
        now = time.monotonic()
        # Counted from the first pass that saw it behind, while it stays behind the version
        # recorded (brokers writing on top of it move its version, not the grace).
        if memory.went_back_at is None or memory.went_back_at[0] != recorded_version:
            memory.went_back_at = (recorded_version, now)
        elif now - memory.went_back_at[1] >= WENT_BACK_GRACE_S:
            problem = None
    if problem is not None or found is None:
        return TrustedImage(ImageView(), recorded_id, problem, recorded_version)
    image = found[1]
    return TrustedImage(image, found[0].cluster_id, None, image.version)


def utc_now() -> str:
    """A condition's lastTransitionTime, as Kubernetes writes them."""
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def cluster_admin(admins: AdminClients, ref: ClusterRef, view: ClusterView) -> KafkaAdmin:
    """The cluster's admin client, bootstrapped from its live brokers' advertised addresses
    on a listener every one of them has (model/listener_change.py: during a listener change
    brokers of two steps run side by side)."""
    brokers = sorted(view.live_brokers().values(), key=lambda b: b.node_id)
    listener = admin_listener([b.listeners for b in brokers])
    return admins.of((ref.namespace, ref.name), lambda: [
        "{}:{}".format(*b.endpoint(listener)) if listener else f"{b.host}:{b.port}"
        for b in brokers], listener)


def admin_listener(advertised: list[str]) -> str | None:
    """Of the listeners the operator can log in on, its replication listener or else the
    default PLAINTEXT one, the first every broker advertises (``NAME://host:port,...``);
    None: none of them, the brokers' inter-broker addresses."""
    common = set.intersection(*({uri.partition("://")[0] for uri in a.split(",") if uri}
                                for a in advertised)) if advertised else set()
    return next((name for name in (REPLICATION.upper(), PLAINTEXT_DEFAULT.config_name)
                 if name in common), None)
