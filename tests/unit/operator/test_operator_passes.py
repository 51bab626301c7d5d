"""When the operator's timer pass applies a KafkaCluster's spec again (reconcile/cluster.py,
``needs_apply``): only for a generation this process has not applied, a change under way,
objects changed by someone else, or the periodic apply; otherwise a tick only observes."""

from __future__ import annotations

import time
from dataclasses import replace

from kafkube_contract.image import ImageView
from kafkube_operator.model.cluster import ClusterRef, config_hash
from kafkube_operator.model.listener_change import ListenerStep
from kafkube_operator.model.listeners import ListenerLayout, SecuritySpec
from kafkube_operator.model.scale import ScaleDecision
from kafkube_operator.reconcile.cluster import FULL_APPLY_INTERVAL_S, needs_apply
from kafkube_operator.reconcile.outcome import ApplyOutcome
from kafkube_operator.reconcile.snapshot import ClusterSnapshot
from kafkube_operator.reconcile.views import ClusterMemory, TrustedImage

RESOURCE = {"apiVersion": "kafkube.io/v1alpha1", "kind": "KafkaCluster",
            "metadata": {"name": "prod", "namespace": "kafka", "generation": 4},
            "spec": {"replicas": 3}}
REF = ClusterRef.of(RESOURCE)
PROPERTIES = "node.id=0\nmin.insync.replicas=2\n"


def snapshot(replicas: int | None = 3, deployed: str = PROPERTIES,
             deleting: bool = False) -> ClusterSnapshot:
    sts = None if replicas is None else {
        "metadata": {"name": REF.statefulset, **({"deletionTimestamp": "now"} if deleting
                                                 else {})},
        "spec": {"replicas": replicas}}
    return ClusterSnapshot(REF, sts, (), deployed, TrustedImage(ImageView(), "id"), {}, 0)


def applied(**changes: object) -> ClusterMemory:
    """The memory of a pass that applied generation 4 a moment ago, nothing under way."""
    outcome = ApplyOutcome(
        generation=4, warnings=(), scaling=ScaleDecision({"": 3}, {}),
        step=ListenerStep(ListenerLayout.of(SecuritySpec.of({})), True), default_min_isr=2,
        config_hash=config_hash(PROPERTIES), changed=False, at=time.monotonic())
    return ClusterMemory(applied=replace(outcome, **changes))  # type: ignore[arg-type]


def test_a_tick_after_an_apply_with_nothing_under_way_only_observes():
    assert not needs_apply(RESOURCE, snapshot(), applied())


def test_a_generation_not_applied_by_this_process_is_applied():
    assert needs_apply(RESOURCE, snapshot(), ClusterMemory())  # a failover: no memory
    assert needs_apply(RESOURCE, snapshot(), applied(generation=3))  # a missed update


def test_a_change_under_way_is_applied_on_every_tick():
    draining = ScaleDecision({"": 3}, {}, phase="scale-down", waiting="moving 4 partitions")
    assert needs_apply(RESOURCE, snapshot(), applied(scaling=draining))
    refused = ScaleDecision({"": 3}, {}, refused="topic t has 3 replicas")
    assert needs_apply(RESOURCE, snapshot(), applied(scaling=refused))
    between_steps = ListenerStep(ListenerLayout.of(SecuritySpec.of({})), False, "step 1 of 3")
    assert needs_apply(RESOURCE, snapshot(), applied(step=between_steps))
    memory = applied()
    memory.scaling_phase = "scale-down"  # a refused move to retry
    assert needs_apply(RESOURCE, snapshot(), memory)


def test_objects_changed_by_someone_else_are_put_back_at_once():
    assert needs_apply(RESOURCE, snapshot(replicas=None), applied())  # StatefulSet deleted
    assert needs_apply(RESOURCE, snapshot(deleting=True), applied())  # being deleted
    assert needs_apply(RESOURCE, snapshot(replicas=5), applied())  # scaled by hand
    assert needs_apply(RESOURCE, snapshot(deployed="node.id=0\n"), applied())  # edited
    assert needs_apply(RESOURCE, snapshot(deployed=""), applied())  # ConfigMap deleted


def test_the_spec_is_applied_again_periodically():
    due = applied(at=time.monotonic() - FULL_APPLY_INTERVAL_S - 1)
    assert needs_apply(RESOURCE, snapshot(), due)
