"""A KafkaRebalance, one pass at a time (model/rebalance.py has the states): measure the load,
plan (model/balance.py), show the proposal, and once ``kafkube.io/rebalance=approve`` is set,
execute it as the scale and the replication-factor change do: Kafka's replication throttle,
AlterPartitionReassignments, progress read from the cluster image, the throttle removed and
preferred leaders elected at the end.

One mover at a time in a cluster: an approved proposal waits while partitions are being
moved (a scale, a Topic's replication factor, another rebalance) or the cluster is scaling,
and those wait for it (``rebalance_running``, asked by reconcile/cluster_apply.py and
reconcile/topic.py). A proposal whose partitions were moved by someone else since it was
made is planned again and must be approved again.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from kubernetes.utils.quantity import parse_quantity

from kafkube_contract.image import ImageView
from kafkube_operator.cluster_view import ClusterView
from kafkube_operator.kafka import AdminClients, KafkaAdmin, KafkaRefused
from kafkube_operator.kube import ApplyError, Kube
from kafkube_operator.model.balance import plan_balance
from kafkube_operator.model.cluster import API_VERSION, ClusterRef
from kafkube_operator.model.rebalance import (
    ANNOTATION,
    AUTO_APPROVAL,
    NEW,
    NOT_READY,
    PENDING,
    PROPOSAL_READY,
    READY,
    REBALANCING,
    STOPPED,
    LogDirs,
    RebalanceSpec,
    balance_input,
    plain,
    progress,
    proposal_status,
    rebalance_status,
    stale,
    stored_moves,
)
from kafkube_operator.model.scale import (
    THROTTLED_REPLICAS,
    in_progress,
    throttle_rate,
    throttled_replicas,
)
from kafkube_operator.reconcile.load import MIN_WINDOW_S
from kafkube_operator.reconcile.views import (
    ClusterViews,
    Events,
    cluster_admin,
    trusted_image,
    utc_now,
)

log = logging.getLogger(__name__)
KIND = "KafkaRebalance"


def rebalance_running(kube: Kube, namespace: str, cluster: str,
                      but: str | None = None) -> str | None:
    """The name of a KafkaRebalance of ``cluster`` that is moving partitions (other than
    ``but``), if any: the other movers wait for it."""
    for r in kube.list(API_VERSION, KIND, namespace):
        if (r.get("spec") or {}).get("cluster") == cluster and r["metadata"]["name"] != but \
                and (r.get("status") or {}).get("state") == REBALANCING:
            return r["metadata"]["name"]
    return None


def reconcile_rebalance(kube: Kube, views: ClusterViews, admins: AdminClients,
                        resource: Mapping, events: Events) -> dict:
    """One pass; the status to write."""
    meta = resource["metadata"]
    spec = RebalanceSpec.of(resource)
    status = dict(resource.get("status") or {})
    generation = meta.get("generation", 0)
    state = status.get("state") or NEW
    action = (meta.get("annotations") or {}).get(ANNOTATION)
    if action is None and state == PROPOSAL_READY and \
            (meta.get("annotations") or {}).get(AUTO_APPROVAL) == "true":
        action = "approve"

    def show(new_state: str, reason: str, message: str, **fields: Any) -> dict:
        return rebalance_status(new_state, generation, reason, message, status, utc_now(),
                                **fields)

    cluster = kube.get(API_VERSION, "KafkaCluster", spec.cluster, meta["namespace"])
    if cluster is None:
        return show(NOT_READY, "ClusterNotFound",
                    f"no KafkaCluster {spec.cluster} in namespace {meta['namespace']}")
    ref = ClusterRef.of(cluster)
    view = views.of(ref)
    memory = views.memory(ref)
    trusted = trusted_image(view, cluster.get("status"), memory)
    if trusted.problem is not None:
        return show(NOT_READY, trusted.problem.reason, trusted.problem.message)
    image = trusted.image
    admin: KafkaAdmin | None = None
    try:
        if state == REBALANCING:
            return _follow(kube, view, admins, ref, resource, image, action, show, events)
        if action == "stop":
            _unannotate(kube, resource)
            events.info("RebalanceStopped", "stopped before it started")
            return show(STOPPED, "Stopped", "stopped by kafkube.io/rebalance=stop")
        changed = status.get("observedGeneration") not in (None, generation)
        if state == PROPOSAL_READY and action == "approve" and not changed:
            return _start(kube, view, admins, ref, cluster, resource, image, show, events)
        if state in (NEW, PENDING, NOT_READY) or action == "refresh" or changed:
            admin = cluster_admin(admins, ref, view)
            return _propose(kube, view, admin, cluster, resource, spec, image, show, events,
                            memory.load, refresh=action == "refresh")
        condition = next((c for c in status.get("conditions") or [] if c["type"] == state), {})
        return show(state, condition.get("reason", state), condition.get("message", ""))
    except KafkaRefused as e:
        admins.drop((ref.namespace, ref.name), admin)
        events.warning("KafkaRefused", str(e))
        return show(NOT_READY if state != REBALANCING else REBALANCING, "KafkaRefused", str(e))


def _unannotate(kube: Kube, resource: Mapping) -> None:
    meta = resource["metadata"]
    if ANNOTATION in (meta.get("annotations") or {}):
        try:
            kube.merge_patch(API_VERSION, KIND, meta["name"], meta["namespace"],
                             {"metadata": {"annotations": {ANNOTATION: None}}})
        except ApplyError as e:  # the next pass acts on it again, to the same effect
            log.warning("%s: annotation not removed: %s", meta["name"], e)


def claim_bytes(cluster: Mapping) -> int | None:
    """Each broker's claim (spec.storage.size) in bytes: the cap of its capacity."""
    size = ((cluster.get("spec") or {}).get("storage") or {}).get("size")
    return int(parse_quantity(size)) if size else None


def _propose(kube: Kube, view: ClusterView, admin: KafkaAdmin, cluster: Mapping,
             resource: Mapping, spec: RebalanceSpec, image: ImageView, show: Any,
             events: Events, window: Any, refresh: bool) -> dict:
    """Measure, plan, show. While the rates' window is shorter than MIN_WINDOW_S the state
    is PendingProposal."""
    live = view.live_brokers()
    cordoned = image.cordoned()
    racks = {b: r.rack for b, r in live.items() if b not in cordoned}
    rates, seconds = window.read(live)
    if rates is None:
        return show(PENDING, "MeasuringLoad", f"reading the brokers' partition byte counters: "
                    f"{seconds:.0f} s of the {MIN_WINDOW_S:.0f} s the rates take")
    answers = admin.log_dirs(live)
    log_dirs = {b: LogDirs(total, sizes) for b, (total, sizes) in answers.items()}
    proposal = plan_balance(balance_input(spec, image, racks, log_dirs, claim_bytes(cluster),
                                          rates))
    if refresh:
        _unannotate(kube, resource)
    unread = f"; no rates from brokers {list(window.missing)} (no metrics endpoint)" \
        if window.missing else ""
    shown = proposal_status(proposal)
    if proposal.empty:
        why = proposal.stopped or "every goal is met"
        return show(READY, "NothingToMove", f"nothing to move: {why}{unread}", proposal=shown)
    disk = next((g for g in proposal.goals if g.goal == "DiskUsage"), None)
    spread = f"; disk usage {disk.before[0]:.1%}-{disk.before[1]:.1%} → " \
        f"{disk.after[0]:.1%}-{disk.after[1]:.1%}" if disk is not None else ""
    message = (f"{proposal.replica_moves} replica move(s), {proposal.leadership_changes} "
               f"leadership change(s), {proposal.data_to_move} bytes to copy{spread}; approve "
               f"with kubectl annotate kafkarebalance {resource['metadata']['name']} "
               f"{ANNOTATION}=approve{unread}")
    events.info("ProposalReady", message)
    return show(PROPOSAL_READY, "ProposalReady", message, proposal=shown)


def _busy(kube: Kube, cluster: Mapping, image: ImageView, name: str) -> str | None:
    scaling = ((cluster.get("status") or {}).get("scaling") or {}).get("phase")
    if scaling:
        return f"the cluster is {scaling.lower()}"
    if (moving := in_progress(image)):
        return f"{moving} partition(s) of the cluster are being moved"
    other = rebalance_running(kube, cluster["metadata"]["namespace"],
                              cluster["metadata"]["name"], but=name)
    return f"KafkaRebalance {other} is running" if other else None


def _start(kube: Kube, view: ClusterView, admins: AdminClients, ref: ClusterRef,
           cluster: Mapping, resource: Mapping, image: ImageView, show: Any,
           events: Events) -> dict:
    """Execute the approved proposal, unless another move runs (then wait, approved) or
    its partitions moved since (then plan again: the user approves the new one)."""
    status = resource.get("status") or {}
    moves = stored_moves(status)
    name = resource["metadata"]["name"]
    moved = stale(moves, image)
    if moved:
        _unannotate(kube, resource)
        return show(NEW, "ProposalOutdated", f"partitions {plain(moved[:5])} moved since the "
                    "proposal was made: a new one is planned, to be approved again")
    busy = _busy(kube, cluster, image, name)
    if busy:
        return show(PROPOSAL_READY, "Approved", f"approved; waiting: {busy}")
    targets = {p: to for p, (_, to) in moves.items()}
    rate = RebalanceSpec.of(resource).throttle or throttle_rate(cluster.get("spec") or {})
    admin = cluster_admin(admins, ref, view)
    admin.throttle(rate, view.live_brokers(), throttled_replicas(image, targets))
    admin.reassign(targets)
    _unannotate(kube, resource)
    events.info("RebalanceStarted", f"moving {len(targets)} partition(s), throttled at "
                f"{rate} B/s")
    done = progress(moves, image)
    return show(REBALANCING, "Rebalancing", f"moving {len(targets)} partition(s), throttled "
                f"at {rate} B/s", progress=done.as_status(), sessionStarted=utc_now())


def _follow(kube: Kube, view: ClusterView, admins: AdminClients, ref: ClusterRef,
            resource: Mapping, image: ImageView, action: str | None, show: Any,
            events: Events) -> dict:
    """Progress; at the end the throttle goes and preferred leaders are elected. ``stop``
    cancels the moves still running (their partitions keep the replicas they had)."""
    moves = stored_moves(resource.get("status") or {})
    done = progress(moves, image)
    admin = cluster_admin(admins, ref, view)
    if action == "stop" and not done.finished:
        running = [p for p in moves if p in _moving(image)]
        admin.cancel_reassignments(running)
        _unthrottle(admin, view, moves)
        _unannotate(kube, resource)
        events.info("RebalanceStopped", f"{len(running)} move(s) cancelled, {done.done} done")
        return show(STOPPED, "Stopped", f"stopped: {done.done} of {done.total} partition(s) "
                    f"moved, {len(running)} cancelled", progress=done.as_status())
    if not done.finished:
        return show(REBALANCING, "Rebalancing", f"{done.done} of {done.total} partition(s) "
                    f"moved, {done.moving} moving", progress=done.as_status())
    if done.unelected:
        admin.elect_preferred(done.unelected)
    _unthrottle(admin, view, moves)
    _unannotate(kube, resource)
    events.info("RebalanceDone", f"{done.total} partition(s) moved; replication throttle "
                "removed")
    return show(READY, "Rebalanced", f"{done.total} partition(s) moved; throttle removed",
                progress=done.as_status())


def _moving(image: ImageView) -> set[tuple[str, int]]:
    return {(name, i) for name, t in image.topics.items()
            for i, s in enumerate(t.assignments) if s.adding or s.removing}


def _unthrottle(admin: KafkaAdmin, view: ClusterView,
                moves: Mapping[tuple[str, int], Any]) -> None:
    """The throttled-replica lists of the moved topics go, and the brokers' rates."""
    topics = sorted({t for t, _ in moves})
    admin.throttle(None, view.live_brokers(), {t: dict.fromkeys(THROTTLED_REPLICAS)
                                               for t in topics})
