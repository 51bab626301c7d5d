"""A KafkaCluster's automatic rebalance (``spec.rebalance.auto``): on a timer of its own, the
load is measured as for a KafkaRebalance, judged against the auto mode's thresholds, and when
a watched goal is violated beyond them, the cluster's KafkaRebalance ``<cluster>-auto-
rebalance`` is made (or refreshed) with auto-approval, so it runs the usual flow: proposal,
throttled reassignment, Ready. At most one at a time: nothing starts while any KafkaRebalance
of the cluster is under way, the cluster scales or partitions are being moved.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping

from kafkube_operator.kafka import AdminClients, KafkaAdmin, KafkaRefused
from kafkube_operator.kube import ApplyError, Kube
from kafkube_operator.model.balance import plan_balance
from kafkube_operator.model.cluster import API_VERSION, ClusterRef, owner_reference
from kafkube_operator.model.rebalance import (
    ANNOTATION,
    FINAL_STATES,
    AutoSpec,
    LogDirs,
    RebalanceSpec,
    auto_name,
    auto_rebalance,
    auto_trigger,
    balance_input,
)
from kafkube_operator.model.scale import in_progress
from kafkube_operator.reconcile.rebalance import KIND, claim_bytes
from kafkube_operator.reconcile.views import ClusterViews, Events, cluster_admin, trusted_image

log = logging.getLogger(__name__)
AUTO_CHECK_INTERVAL_S = 60.0  # a check costs a DescribeLogDirs of every broker


def auto_pass(kube: Kube, views: ClusterViews, admins: AdminClients, resource: Mapping,
              events: Events) -> None:
    """One look at a cluster with ``spec.rebalance.auto.enabled``."""
    auto = AutoSpec.of(resource)
    if not auto.enabled:
        return
    ref = ClusterRef.of(resource)
    view, memory = views.of(ref), views.memory(ref)
    if time.monotonic() < memory.next_auto_check:
        return
    trusted = trusted_image(view, resource.get("status"), memory)
    if trusted.problem is not None or in_progress(trusted.image) or \
            ((resource.get("status") or {}).get("scaling") or {}).get("phase"):
        return
    theirs = [r for r in kube.list(API_VERSION, KIND, ref.namespace)
              if (r.get("spec") or {}).get("cluster") == ref.name]
    running = next((r["metadata"]["name"] for r in theirs
                    if (r.get("status") or {}).get("state") not in FINAL_STATES), None)
    if running is not None:
        return
    live = view.live_brokers()
    rates, _ = memory.load.read(live)
    if rates is None:
        return  # the window is still short: the next tick looks again
    memory.next_auto_check = time.monotonic() + AUTO_CHECK_INTERVAL_S
    admin: KafkaAdmin | None = None
    try:
        admin = cluster_admin(admins, ref, view)
        answers = admin.log_dirs(live)
    except KafkaRefused as e:
        admins.drop((ref.namespace, ref.name), admin)
        log.info("%s/%s: automatic rebalance check skipped: %s", ref.namespace, ref.name, e)
        return
    cordoned = trusted.image.cordoned()
    racks = {b: r.rack for b, r in live.items() if b not in cordoned}
    judge = RebalanceSpec(ref.name, tolerances=auto.thresholds, max_moves=0)
    data = balance_input(judge, trusted.image, racks,
                         {b: LogDirs(total, sizes) for b, (total, sizes) in answers.items()},
                         claim_bytes(resource), rates)
    violations = {g.goal: g.violation_before for g in plan_balance(data).goals}
    why = auto_trigger(violations, running)
    if why is None:
        return
    name = auto_name(ref.name)
    try:
        if any(r["metadata"]["name"] == name for r in theirs):
            kube.merge_patch(API_VERSION, KIND, name, ref.namespace,
                             {"metadata": {"annotations": {ANNOTATION: "refresh"}}})
        else:
            kube.apply(auto_rebalance(resource, auto, owner_reference(ref)))
    except ApplyError as e:
        events.warning("AutoRebalanceFailed", f"KafkaRebalance {name}: {e}")
        return
    events.info("AutoRebalance", f"KafkaRebalance {name} started: {why}")
