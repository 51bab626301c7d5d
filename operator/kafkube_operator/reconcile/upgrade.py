"""Upgrades of kafkube itself, the acting part of model/upgrade.py: the probe pod of a new
spec.image, made, read and deleted by the apply pass (reconcile/cluster_apply.py) before it
renders the StatefulSet; and ``kafkube.metadata.version`` raised or lowered by the observe
pass (reconcile/cluster_observe.py) once the roll is over, through the cluster's Kafka API
(UpdateFeatures), where the controller checks the level against every registered broker
again.

Non-blocking, as every step of a pass: a probe is made in one pass and read in the next ones
(the apply pass runs every tick while one is under way: reconcile/outcome.py), and a refused
level change is tried again on the next pass.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kafkube_contract.features import METADATA_VERSION
from kafkube_operator.cluster_view import ClusterView
from kafkube_operator.kafka import AdminClients, KafkaRefused
from kafkube_operator.kube import ApplyError, Kube
from kafkube_operator.model.cluster import ClusterRef, stateful_set
from kafkube_operator.model.pools import wanted_ids
from kafkube_operator.model.status import SpecWarning
from kafkube_operator.model.upgrade import (
    DEFAULT_IMAGE,
    ImageDecision,
    LevelChange,
    decide_image,
    deployed_image,
    level_change,
    pod_images,
    probe_name,
    probe_pod,
    read_probe,
    roll_waiting,
    upgrade_status,
)
from kafkube_operator.reconcile.snapshot import ClusterSnapshot
from kafkube_operator.reconcile.views import ClusterMemory, Events, cluster_admin


def spec_image(resource: Mapping) -> str:
    return (resource.get("spec") or {}).get("image") or DEFAULT_IMAGE


def image_step(kube: Kube, resource: Mapping, snapshot: ClusterSnapshot,
               memory: ClusterMemory, events: Events) -> ImageDecision:
    """The image the StatefulSet gets in this pass, with the probe pod made, deleted or
    read on the way; what the probe found is remembered per image."""
    ref = snapshot.ref
    wanted = spec_image(resource)
    name = probe_name(ref)
    pod = kube.get("v1", "Pod", name, ref.namespace)
    decision = decide_image(wanted, deployed_image(snapshot.statefulset, snapshot.pods),
                            snapshot.trusted.image.feature(METADATA_VERSION),
                            memory.image_verdicts.get(wanted),
                            read_probe(pod) if pod is not None else None, name)
    if decision.verdict is not None:
        memory.image_verdicts[wanted] = decision.verdict
        events.info("ImageProbed", f"spec.image {wanted} supports {METADATA_VERSION} up to "
                    f"{decision.verdict}" + ("" if decision.held else "; rolling it out"))
    try:
        if decision.delete_probe and pod is not None:
            kube.delete("v1", "Pod", name, ref.namespace, uid=pod["metadata"].get("uid"))
        if decision.create_probe:
            kube.apply(probe_pod(ref, stateful_set(ref, resource.get("spec") or {}, ""),
                                 wanted))
            events.info("ImageProbing", decision.message or "")
    except ApplyError as e:
        events.warning("ApplyFailed", str(e))
    report(memory, events, "image", decision.warning)
    return decision


def report(memory: ClusterMemory, events: Events, source: str,
           warning: SpecWarning | None) -> None:
    """A Warning event when an upgrade warning of ``source`` first shows or changes, not on
    every pass (the Warning condition says it all along)."""
    message = warning.message if warning is not None else None
    if message != memory.upgrade_reported.get(source) and warning is not None:
        events.warning(warning.reason, warning.message)
    if message is None:
        memory.upgrade_reported.pop(source, None)
    else:
        memory.upgrade_reported[source] = message


@dataclass(frozen=True)
class LevelOutcome:
    """What the level step adds to the status: its warnings, and the fields
    ``finalizedMetadataVersion`` and ``upgrade``."""

    warnings: list[SpecWarning]
    status: dict[str, Any]


def level_step(view: ClusterView, admins: AdminClients, resource: Mapping,
               snapshot: ClusterSnapshot, decision: ImageDecision | None,
               memory: ClusterMemory, events: Events) -> LevelOutcome:
    """kafkube.metadata.version raised or lowered once the roll is over (model/upgrade.py
    ``level_change``), and status.upgrade."""
    spec = resource.get("spec") or {}
    ref = snapshot.ref
    current = snapshot.trusted.image.feature(METADATA_VERSION)
    wanted = spec.get("metadataVersion")
    waiting = roll_waiting(snapshot.statefulsets, snapshot.pods, snapshot.live,
                           wanted_ids(snapshot.pools(spec)))
    change = level_change(int(wanted) if wanted is not None else None, current,
                          {node: b.feature_ranges for node, b in snapshot.live.items()},
                          waiting, decision is None or not decision.held)
    if change.target is not None:
        _change_level(view, admins, ref, change, current, wanted is None, memory, events)
    report(memory, events, "level", change.warning)
    return LevelOutcome(
        [change.warning] if change.warning is not None else [],
        {"finalizedMetadataVersion": current if snapshot.trusted.version is not None
         else None,
         "upgrade": upgrade_status(decision, pod_images(snapshot.pods), change, current)})


def _change_level(view: ClusterView, admins: AdminClients, ref: ClusterRef,
                  change: LevelChange, current: int, automatic: bool,
                  memory: ClusterMemory, events: Events) -> None:
    """UpdateFeatures; a refusal is a Warning event (once per message) and the change is
    tried again on the next pass."""
    assert change.target is not None
    admin = None
    try:
        admin = cluster_admin(admins, ref, view)
        admin.update_feature(METADATA_VERSION, change.target, change.downgrade)
    except KafkaRefused as e:
        if admin is not None:
            admins.drop((ref.namespace, ref.name), admin)
        report(memory, events, "refused", SpecWarning("KafkaRefused", str(e)))
        return
    report(memory, events, "refused", None)
    if change.downgrade:
        events.info("MetadataVersionLowered", (
            f"{METADATA_VERSION} lowered from {current} to {change.target} "
            "(spec.metadataVersion): the brokers write the older image format"))
        return
    why = ("the highest every broker supports" if automatic else "spec.metadataVersion")
    events.info("MetadataVersionRaised", (
        f"{METADATA_VERSION} raised from {current} to {change.target} ({why}): a broker of "
        f"an older kafkube can no longer join; an image rollback needs spec.metadataVersion: "
        f"{max(current, 1)} first"))
