"""The apply pass of a KafkaCluster: its spec made into Kubernetes objects (model/cluster.py)
and applied, with what a change of spec needs first: the scale decision and its partition
moves (model/scale.py), certificates (reconcile/security.py), the next listener step
(model/listener_change.py), a storage change (model/storage.py) and a new spec.image, probed
before it is rolled out (reconcile/upgrade.py).

It runs when the spec changes, and on the timer only while something it started is under
way or drift may have crept in (reconcile/cluster.py, ``needs_apply``); what it decided is
kept (``ApplyOutcome``) for the passes that only observe.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace

from kafkube_operator.cluster_view import ClusterView
from kafkube_operator.kafka import AdminClients, KafkaAdmin, KafkaRefused
from kafkube_operator.kube import ApplyError, Kube
from kafkube_operator.model.broker_config import broker_properties
from kafkube_operator.model.cluster import CONFIG_HASH, config_hash, desired_cluster
from kafkube_operator.model.listener_change import ListenerStep, next_step
from kafkube_operator.model.listeners import (
    ListenerLayout,
    SecuritySpec,
    layout_of_properties,
)
from kafkube_operator.model.pools import node_pools
from kafkube_operator.model.roll import owner_of, pod_state
from kafkube_operator.model.scale import (
    THROTTLED_REPLICAS,
    ScaleDecision,
    cordon_changes,
    held_back_topics,
    min_isr_ceiling,
    pool_scale_decision,
    throttle_rate,
    throttled_replicas,
)
from kafkube_operator.model.sizing import PoolSizing
from kafkube_operator.model.status import SpecWarning
from kafkube_operator.model.storage import claim_change, with_claims_of
from kafkube_operator.model.upgrade import with_image
from kafkube_operator.reconcile.outcome import ApplyOutcome
from kafkube_operator.reconcile.rebalance import rebalance_running
from kafkube_operator.reconcile.security import apply_cluster_pki
from kafkube_operator.reconcile.sizing import pool_sizing
from kafkube_operator.reconcile.snapshot import ClusterSnapshot
from kafkube_operator.reconcile.upgrade import image_step
from kafkube_operator.reconcile.views import ClusterMemory, Events, cluster_admin


@dataclass(frozen=True)
class Applied:
    """What applying the objects did: the warnings, whether anything changed, and the
    server.properties given to the brokers (its hash, to see the ConfigMap edited by hand)."""

    warnings: list[SpecWarning]
    changed: bool
    config_hash: str | None
    sizing: tuple[PoolSizing, ...] = ()


def apply_pass(kube: Kube, view: ClusterView, admins: AdminClients, resource: Mapping,
               snapshot: ClusterSnapshot, memory: ClusterMemory, events: Events
               ) -> ApplyOutcome:
    """Scale, certificates, image, objects, in that order: certificates before the pods that
    mount them, the scale decision before the StatefulSet size it sets, the image's probe
    before the StatefulSet runs it."""
    ref = snapshot.ref
    spec = resource.get("spec") or {}
    image = snapshot.trusted.image
    scaling, moved = scale(view, snapshot, admins, resource, memory, events, kube)
    pki, warnings = apply_cluster_pki(kube, resource, events)
    wanted_min_isr = min(2, scaling.statefulset_replicas)
    # Never raised above what existing topics meet (a cluster grown from one broker); once
    # raised, a topic created later with fewer replicas is its creator's choice, as in Kafka.
    running_min_isr = deployed_min_isr(snapshot.deployed_properties)
    ceiling = min_isr_ceiling(image) \
        if running_min_isr is None or running_min_isr < wanted_min_isr else None
    step = listener_step(snapshot, resource, memory.listener_step)
    if step.final:
        memory.listener_step = None
    elif step.waiting_for is None:
        memory.listener_step = step.description
    upgrade = image_step(kube, resource, snapshot, memory, events)
    first_ids = {pool.name: pool.first_id for pool in snapshot.pools(spec)}
    warnings += [SpecWarning("PoolIdsKept", why) for why in snapshot.moved_ids(spec)]
    applied = apply_cluster(kube, resource, events, scaling.sizes,
                            pki.pod_annotations, ceiling, step.layout, upgrade.image,
                            first_ids)
    applied = replace(applied, changed=applied.changed | leftover_pools(
        kube, snapshot, resource, scaling.sizes, events))
    warnings += applied.warnings
    if upgrade.warning is not None:
        warnings.append(upgrade.warning)
    if ceiling is not None and (held := held_back_topics(image, wanted_min_isr)):
        warnings.append(SpecWarning("MinInsyncReplicasHeld", (
            f"min.insync.replicas stays {min(wanted_min_isr, ceiling or 2)}, not "
            f"{wanted_min_isr}: topic(s) {', '.join(held[:5])} have a smaller replication "
            "factor and no min.insync.replicas of their own, and acks=all writes to them "
            "would be refused; raise their replication factor or set their "
            "min.insync.replicas")))
    if scaling.refused:
        warnings.append(SpecWarning("ScaleDownRefused", scaling.refused))
    default_min_isr = int(broker_properties(ref.name, spec, scaling.statefulset_replicas,
                                            ceiling, step.layout
                                            ).properties["min.insync.replicas"])
    return ApplyOutcome(
        generation=resource["metadata"].get("generation", 0), warnings=tuple(warnings),
        scaling=scaling, step=step, default_min_isr=default_min_isr,
        config_hash=applied.config_hash, changed=applied.changed or moved or bool(pki.actions),
        at=time.monotonic(), upgrade=upgrade, sizing=applied.sizing)


def deployed_min_isr(deployed: Mapping[str, str]) -> int | None:
    """The default min.insync.replicas the brokers were last given."""
    value = deployed.get("min.insync.replicas")
    return int(value) if value and value.isdigit() else None


def listener_step(snapshot: ClusterSnapshot, resource: Mapping,
                  started: str | None = None) -> ListenerStep:
    """The listeners to configure in this pass (model/listener_change.py): the brokers'
    current ones until every broker runs them, then the next step towards spec.listeners.
    The current ones are the brokers' ConfigMap's, else (deleted mid-change) the ones the
    status recorded. ``started``: the description of the step under way, kept in the status
    while the brokers roll onto it (a user sees "step 1 of 3" for the whole step)."""
    wanted = ListenerLayout.of(SecuritySpec.of(resource.get("spec") or {}))
    running = layout_of_properties(snapshot.deployed_properties) or \
        ListenerLayout.of_status(resource.get("status"))
    if running is None or running == wanted:
        return ListenerStep(wanted, True)
    behind = not_rolled_out(snapshot, running)
    if behind:
        return ListenerStep(running, False, f"{started}; waiting for {behind}" if started else (
            f"listener change: waiting for {behind} before the next step (every broker on "
            f"{', '.join(sorted(running.names))}, replicating on {running.inter_broker})"),
            waiting_for=behind)
    return next_step(running, wanted)


def not_rolled_out(snapshot: ClusterSnapshot, layout: ListenerLayout) -> str | None:
    """What keeps the brokers from all running ``layout`` (None: nothing): every broker pod
    of every pool must run its StatefulSet's latest template with the ConfigMap's text (its
    config hash), be ready, and advertise every listener of ``layout``."""
    statefulsets, pods = snapshot.statefulsets or {}, snapshot.pods
    if not statefulsets or any(sts["metadata"].get("deletionTimestamp")
                               for sts in statefulsets.values()):
        # Being recreated (a storage change): what its pods run is known once it is back.
        return "the StatefulSet to be made again" if pods else None
    revisions = {}
    for sts in statefulsets.values():
        status = sts.get("status") or {}
        if status.get("observedGeneration") != sts["metadata"].get("generation"):
            return f"the StatefulSet controller to take up {sts['metadata']['name']}'s " \
                "new template"
        revisions[sts["metadata"]["name"]] = status.get("updateRevision")
    wanted = sum(int(sts["spec"]["replicas"]) for sts in statefulsets.values())
    if len(pods) != wanted:
        return f"{wanted} broker pods (there are {len(pods)})"
    loaded = config_hash(snapshot.deployed)
    only = next(iter(revisions.values())) if len(revisions) == 1 else None
    for pod in pods:
        state = pod_state(pod, revisions.get(owner_of(pod), only))
        annotations = pod["metadata"].get("annotations") or {}
        if state.outdated or annotations.get(CONFIG_HASH) != loaded:
            return f"pod {state.name} to be restarted onto the current configuration"
        if not state.ready or state.broker not in snapshot.live:
            return f"pod {state.name} to be ready"
        advertised = {uri.partition("://")[0]
                      for uri in snapshot.live[state.broker].listeners.split(",") if uri}
        if not layout.names <= advertised:
            return f"broker {state.broker} to advertise {', '.join(sorted(layout.names))}"
    return None


def apply_cluster(kube: Kube, resource: Mapping, events: Events,
                  sizes: Mapping[str, int] | None = None,
                  pod_annotations: Mapping[str, str] | None = None,
                  min_isr_ceiling: int | None = None,
                  layout: ListenerLayout | None = None,
                  broker_image: str | None = None,
                  first_ids: Mapping[str, int] | None = None) -> Applied:
    """Create or update every object the KafkaCluster owns; what could not be applied comes
    back as warnings, with the API server's or the broker's reason. ``layout``: the
    listeners of this pass (``listener_step``), else spec.listeners'; ``broker_image``: the
    image the brokers run in this pass (reconcile/upgrade.py), else spec.image. ``sizes``:
    each pool's StatefulSet size when not its spec's (a scale under way)."""
    sizing, derived, warnings = pool_sizing(kube, resource)
    desired = desired_cluster(resource, sizes, pod_annotations, min_isr_ceiling, layout,
                              first_ids, derived)
    changed = False
    properties = None
    if desired.refused_config:
        warnings.append(SpecWarning("InvalidConfig", "spec.config not applied: " + "; ".join(
            f"{key}: {why}" for key, why in sorted(desired.refused_config.items()))))
    for manifest in desired.objects:
        meta = manifest["metadata"]
        if manifest["kind"] == "ConfigMap" and "server.properties" in manifest.get("data", {}):
            properties = manifest["data"]["server.properties"]
        before = kube.get(manifest["apiVersion"], manifest["kind"], meta["name"],
                          meta.get("namespace"))
        if manifest["kind"] == "StatefulSet" and broker_image is not None:
            manifest = with_image(manifest, broker_image)
        if manifest["kind"] == "StatefulSet" and before is not None:
            applicable, warning = _storage_change(kube, manifest, before, events)
            warnings += [warning] if warning is not None else []
            if applicable is None:  # being recreated: made anew once the old one is gone
                changed = True
                continue
            manifest = applicable
        try:
            after = kube.apply(manifest)
        except ApplyError as e:
            warnings.append(SpecWarning("ApplyFailed", str(e)))
            events.warning("ApplyFailed", str(e))
            continue
        what = f"{manifest['kind']} {meta['name']}"
        if before is None:
            changed = True
            events.info("Created", f"created {what}")
        elif before["metadata"]["resourceVersion"] != after["metadata"]["resourceVersion"]:
            changed = True
            events.info("Updated", f"updated {what}")
    return Applied(warnings, changed, config_hash(properties) if properties is not None else None,
                   tuple(sizing))


def _storage_change(kube: Kube, desired: Mapping, live: Mapping, events: Events
                    ) -> tuple[Mapping | None, SpecWarning | None]:
    """What of a claim template change can be done (model/storage.py): the StatefulSet to
    apply (None: deleted to be made anew with the new template), and a Warning, if any."""
    if live["metadata"].get("deletionTimestamp"):
        return None, None
    change = claim_change(live, desired)
    if change is None:
        return desired, None
    if change.refused is not None:
        return with_claims_of(desired, live), SpecWarning("StorageChangeRefused",
                                                          change.refused)
    meta = desired["metadata"]
    all_claims = kube.list("v1", "PersistentVolumeClaim", meta["namespace"],
                           desired["spec"]["selector"]["matchLabels"])
    grown = 0
    try:
        for template, size in change.grow:
            own = re.compile(rf"{re.escape(template)}-{re.escape(meta['name'])}-\d+")
            for claim in all_claims:
                # data-k-0 is the default pool's, data-k-big-0 pool big's: not the same.
                if not own.fullmatch(claim["metadata"]["name"]):
                    continue
                # deleteClaim: true makes the StatefulSet the claims' owner: they are let go
                # first, so its deletion can never take them along, whatever the propagation.
                owners = claim["metadata"].get("ownerReferences") or []
                kept = [o for o in owners if o.get("uid") != live["metadata"]["uid"]]
                patch: dict = {"spec": {"resources": {"requests": {"storage": size}}}}
                if len(kept) != len(owners):
                    patch["metadata"] = {"ownerReferences": kept or None}
                kube.merge_patch("v1", "PersistentVolumeClaim", claim["metadata"]["name"],
                                 meta["namespace"], patch)
                grown += 1
    except ApplyError as e:
        events.warning("StorageExpansionRefused", str(e))
        return with_claims_of(desired, live), SpecWarning("StorageExpansionRefused", (
            f"{change.described()} not applied: {e} (the StorageClass must allow volume "
            "expansion); the brokers keep their volumes and every other change is applied"))
    # The template can only change with a new StatefulSet object; its pods are orphaned,
    # not stopped, and the new one adopts them (OnDelete: none restarts for this; a volume
    # added reaches each broker when the roll for its new log.dirs recreates the pod).
    kube.delete("apps/v1", "StatefulSet", meta["name"], meta["namespace"], orphan=True)
    if change.grow:
        events.info("VolumesExpanded", f"{grown} claim(s) grown ("
                    + ", ".join(f"{t} to {s}" for t, s in change.grow)
                    + f"); StatefulSet {meta['name']} recreated with the new claim templates")
    if change.added:
        events.info("VolumesAdded", f"claim templates {list(change.added)} added; StatefulSet "
                    f"{meta['name']} recreated; each broker mounts them when it is rolled")
    return None, None


def scale(view: ClusterView, snapshot: ClusterSnapshot, admins: AdminClients,
          resource: Mapping, memory: ClusterMemory, events: Events, kube: Kube
          ) -> tuple[ScaleDecision, bool]:
    """The StatefulSet's size for this pass, and the partition moves a change of
    spec.replicas needs first (model/scale.py), started here; and whether it asked the
    cluster for anything (a cordon, a move, a throttle removed)."""
    ref, image = snapshot.ref, snapshot.trusted.image
    current = snapshot.pool_sizes()
    # The phase of the last pass: this process's memory, else the status (after a failover;
    # the body a pass gets may predate the last status write).
    phase = memory.scaling_phase or \
        ((resource.get("status") or {}).get("scaling") or {}).get("phase")
    live = {b.node_id: b.rack for b in snapshot.live.values()}
    spec = resource.get("spec") or {}
    pods = snapshot.broker_pods()
    decision = pool_scale_decision(snapshot.pools(spec), current, image, live, phase, pods)
    if decision.moves and (other := rebalance_running(kube, ref.namespace, ref.name)):
        # One mover at a time: the scale's moves start once the rebalance is done.
        decision = replace(decision, moves={}, waiting=f"waiting for KafkaRebalance {other} "
                           "to finish moving partitions")
    memory.scaling_phase = decision.phase
    if decision.refused and decision.refused != memory.last_refusal:
        events.warning("ScaleDownRefused", decision.refused)
    memory.last_refusal = decision.refused
    rate = throttle_rate(spec)
    admin: KafkaAdmin | None = None
    asked = False
    # Before any move: a topic created while the drain runs must not land on the brokers it
    # empties (KIP-1066); lifted once they are kept.
    cordon, uncordon = cordon_changes(decision.cordon, image.cordoned(), live, pods)
    try:
        if cordon or uncordon:
            admin = cluster_admin(admins, ref, view)
            admin.cordon(cordon, uncordon)
            asked = True
            if cordon:
                events.info("Cordoned", f"brokers {sorted(cordon)} get no new replicas while "
                            "they are drained")
    except KafkaRefused as e:
        if admin is not None:
            admins.drop((ref.namespace, ref.name), admin)
        admin = None
        events.warning("KafkaRefused", str(e))
    try:
        if decision.moves:
            admin = cluster_admin(admins, ref, view)
            admin.throttle(rate, live, throttled_replicas(image, decision.moves))
            admin.reassign(decision.moves)
            asked = True
            events.info("Reassigning", f"{decision.phase}: moving {len(decision.moves)} "
                        f"partition(s), throttled at {rate} B/s: " + ", ".join(
                            f"{t}-{i} to {list(r)}" for (t, i), r in
                            sorted(decision.moves.items())[:5])
                        + (" ..." if len(decision.moves) > 5 else ""))
        elif phase is not None and decision.phase is None:
            admin = cluster_admin(admins, ref, view)
            admin.throttle(None, live, {
                name: dict.fromkeys(THROTTLED_REPLICAS) for name, topic in image.topics.items()
                if set(THROTTLED_REPLICAS) & set(topic.configs)})
            asked = True
            events.info("ReassignmentDone", f"{phase} done; replication throttle removed")
    except KafkaRefused as e:
        if admin is not None:
            admins.drop((ref.namespace, ref.name), admin)
        events.warning("KafkaRefused", str(e))
        memory.scaling_phase = phase  # try again on the next pass
    for pool in snapshot.pools(spec):
        before, after = (current or {}).get(pool.name), decision.sizes.get(pool.name)
        if before is not None and after is not None and before != after:
            events.info("Scaling", f"StatefulSet {pool.statefulset(ref.name)}: {before} → "
                        f"{after} brokers")
    return decision, asked


def leftover_pools(kube: Kube, snapshot: ClusterSnapshot, resource: Mapping,
                   sizes: Mapping[str, int], events: Events) -> bool:
    """The StatefulSets of pools no longer in spec.pools: kept at the size the scale
    decision gives them while their brokers are drained, deleted once at 0 with no pod
    left; whether anything changed."""
    named = {pool.name for pool in node_pools(resource.get("spec") or {})}
    changed = False
    for name, sts in (snapshot.statefulsets or {}).items():
        if name in named or sts["metadata"].get("deletionTimestamp"):
            continue
        meta, size = sts["metadata"], sizes.get(name, 0)
        if int(sts["spec"]["replicas"]) != size:
            kube.merge_patch("apps/v1", "StatefulSet", meta["name"], meta["namespace"],
                             {"spec": {"replicas": size}})
            changed = True
        elif size == 0 and not any(owner_of(p) == meta["name"] for p in snapshot.pods):
            kube.delete("apps/v1", "StatefulSet", meta["name"], meta["namespace"])
            events.info("PoolRemoved", f"pool {name}'s brokers drained: StatefulSet "
                        f"{meta['name']} deleted")
            changed = True
    return changed
