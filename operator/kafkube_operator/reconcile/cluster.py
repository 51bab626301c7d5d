"""Apply a KafkaCluster's model to Kubernetes and read back what its brokers report
(through the cluster's view, reconcile/views.py)."""

from __future__ import annotations

import logging
from collections.abc import Mapping

from broker.cluster.image import DEFAULT_BROKER, ClusterImage
from broker.cluster.kubernetes import KubernetesBackend
from broker.config.broker_config import parse_properties
from kafkube_operator.kafka import AdminClients, KafkaAdmin, KafkaRefused
from kafkube_operator.kube import ApplyError, Kube
from kafkube_operator.model.broker_config import broker_properties
from kafkube_operator.model.cluster import (
    CONFIG_HASH,
    ClusterRef,
    config_hash,
    desired_cluster,
    selector,
)
from kafkube_operator.model.listener_change import ListenerStep, next_step
from kafkube_operator.model.listeners import (
    ListenerLayout,
    SecuritySpec,
    layout_of_properties,
    listener_status,
)
from kafkube_operator.model.roll import PodState, next_restart, pod_state, roll_min_isr
from kafkube_operator.model.scale import (
    THROTTLED_REPLICAS,
    ScaleDecision,
    held_back_topics,
    min_isr_ceiling,
    scale_decision,
    throttled_replicas,
)
from kafkube_operator.model.status import (
    BrokerState,
    ObservedCluster,
    SpecWarning,
    cluster_status,
)
from kafkube_operator.model.storage import claim_change, with_claims_of
from kafkube_operator.reconcile.leaders import rebalance_leaders
from kafkube_operator.reconcile.security import apply_cluster_pki
from kafkube_operator.reconcile.topic import mirror_topics
from kafkube_operator.reconcile.views import (
    ClusterMemory,
    ClusterViews,
    Events,
    cluster_admin,
    trusted_image,
    utc_now,
)

log = logging.getLogger(__name__)
DEFAULT_THROTTLE = 52_428_800  # crds/kafkacluster.yaml's default of throttleBytesPerSecond


def observe(kube: Kube, view: KubernetesBackend, ref: ClusterRef,
            image: ClusterImage) -> tuple[ObservedCluster, list[PodState]]:
    sts = kube.get("apps/v1", "StatefulSet", ref.statefulset, ref.namespace) or {}
    revision = (sts.get("status") or {}).get("updateRevision")
    pods = [pod_state(p, revision) for p in kube.list("v1", "Pod", ref.namespace, selector(ref))]
    controller = view.controller()
    leaders = image.leaders()
    brokers = tuple(BrokerState(b.node_id, b.rack, leaders.get(b.node_id, 0))
                    for b in view.live_brokers().values())
    observed = ObservedCluster(pods=len(pods), outdated_pods=sum(p.outdated for p in pods),
                               controller=controller.holder if controller else None,
                               brokers=brokers)
    return observed, pods


def roll(kube: Kube, image: ClusterImage, ref: ClusterRef, pods: list[PodState],
         observed: ObservedCluster, default_min_isr: int, memory: ClusterMemory,
         events: Events) -> tuple[str | None, bool]:
    """One step of the rolling restart (model/roll.py); what it waits for, and whether the
    roll has just finished."""
    cluster_default = image.broker_configs.get(DEFAULT_BROKER, {}).get("min.insync.replicas")
    fallback = int(cluster_default) if cluster_default else default_min_isr

    def min_isr(topic: str) -> int:
        return int(image.topics[topic].configs.get("min.insync.replicas", fallback))

    step = next_restart(pods, image, min_isr, observed.controller, memory.last_restarted)
    if step.restart is not None:
        pod = step.restart
        if kube.delete("v1", "Pod", pod.name, ref.namespace, uid=pod.uid):
            memory.last_restarted, memory.rolling = pod.broker, True
            why = "stuck, restarted regardless" if pod.stuck else "onto the new revision"
            events.info("RollingRestart", f"restarted pod {pod.name} (broker {pod.broker}) "
                        f"{why}; {step.pending - 1} more to go")
        return None, False
    if step.pending == 0 and step.waiting is None and memory.rolling:
        memory.last_restarted, memory.rolling = None, False
        events.info("RollingRestartDone", "every broker runs the current revision")
        return None, True
    return step.waiting, False


def deployed_config(kube: Kube, ref: ClusterRef) -> str:
    """The server.properties the brokers were last given (their ConfigMap; "" if none)."""
    found = kube.get("v1", "ConfigMap", ref.config_map, ref.namespace)
    return ((found or {}).get("data") or {}).get("server.properties", "")


def deployed_min_isr(deployed: Mapping[str, str]) -> int | None:
    """The default min.insync.replicas the brokers were last given."""
    value = deployed.get("min.insync.replicas")
    return int(value) if value and value.isdigit() else None


def listener_step(kube: Kube, view: KubernetesBackend, ref: ClusterRef, resource: Mapping,
                  deployed: str) -> ListenerStep:
    """The listeners to configure in this pass (model/listener_change.py): the brokers'
    current ones until every broker runs them, then the next step towards spec.listeners.
    The current ones are the brokers' ConfigMap's, else (deleted mid-change) the ones the
    status recorded."""
    wanted = ListenerLayout.of(SecuritySpec.of(resource.get("spec") or {}))
    running = layout_of_properties(parse_properties(deployed)) or \
        ListenerLayout.of_status(resource.get("status"))
    if running is None or running == wanted:
        return ListenerStep(wanted, True)
    behind = not_rolled_out(kube, view, ref, running, deployed)
    if behind:
        return ListenerStep(running, False, (
            f"listener change: waiting for {behind} before the next step (every broker on "
            f"{', '.join(sorted(running.names))}, replicating on {running.inter_broker})"))
    return next_step(running, wanted)


def not_rolled_out(kube: Kube, view: KubernetesBackend, ref: ClusterRef,
                   layout: ListenerLayout, deployed: str) -> str | None:
    """What keeps the brokers from all running ``layout`` (None: nothing): every broker pod
    must run the StatefulSet's latest template with the ConfigMap's text (its config hash),
    be ready, and advertise every listener of ``layout``."""
    sts = kube.get("apps/v1", "StatefulSet", ref.statefulset, ref.namespace)
    pods = kube.list("v1", "Pod", ref.namespace, selector(ref))
    if sts is None or sts["metadata"].get("deletionTimestamp"):
        # Being recreated (a storage change): what its pods run is known once it is back.
        return "the StatefulSet to be made again" if pods else None
    status = sts.get("status") or {}
    if status.get("observedGeneration") != sts["metadata"].get("generation"):
        return "the StatefulSet controller to take up the new template"
    if len(pods) != int(sts["spec"]["replicas"]):
        return f"{int(sts['spec']['replicas'])} broker pods (there are {len(pods)})"
    loaded = config_hash(deployed)
    live = view.live_brokers()
    for pod in pods:
        state = pod_state(pod, status.get("updateRevision"))
        annotations = pod["metadata"].get("annotations") or {}
        if state.outdated or annotations.get(CONFIG_HASH) != loaded:
            return f"pod {state.name} to be restarted onto the current configuration"
        if not state.ready or state.broker not in live:
            return f"pod {state.name} to be ready"
        advertised = {uri.partition("://")[0]
                      for uri in live[state.broker].listeners.split(",") if uri}
        if not layout.names <= advertised:
            return f"broker {state.broker} to advertise {', '.join(sorted(layout.names))}"
    return None


def apply_cluster(kube: Kube, resource: Mapping, events: Events,
                  statefulset_replicas: int | None = None,
                  pod_annotations: Mapping[str, str] | None = None,
                  min_isr_ceiling: int | None = None,
                  layout: ListenerLayout | None = None) -> list[SpecWarning]:
    """Create or update every object the KafkaCluster owns; what could not be applied comes
    back as warnings, with the API server's or the broker's reason. ``layout``: the
    listeners of this pass (``listener_step``), else spec.listeners'."""
    desired = desired_cluster(resource, statefulset_replicas, pod_annotations, min_isr_ceiling,
                              layout)
    warnings = []
    if desired.refused_config:
        warnings.append(SpecWarning("InvalidConfig", "spec.config not applied: " + "; ".join(
            f"{key}: {why}" for key, why in sorted(desired.refused_config.items()))))
    for manifest in desired.objects:
        meta = manifest["metadata"]
        before = kube.get(manifest["apiVersion"], manifest["kind"], meta["name"],
                          meta.get("namespace"))
        if manifest["kind"] == "StatefulSet" and before is not None:
            applicable, warning = _storage_change(kube, manifest, before, events)
            warnings += [warning] if warning is not None else []
            if applicable is None:  # being recreated: made anew once the old one is gone
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
            events.info("Created", f"created {what}")
        elif before["metadata"]["resourceVersion"] != after["metadata"]["resourceVersion"]:
            events.info("Updated", f"updated {what}")
    return warnings


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
    claims = [c for c in kube.list("v1", "PersistentVolumeClaim", meta["namespace"],
                                   desired["spec"]["selector"]["matchLabels"])
              if c["metadata"]["name"].startswith(f"data-{meta['name']}-")]
    try:
        for claim in claims:
            # deleteClaim: true makes the StatefulSet the claims' owner: they are let go
            # first, so its deletion can never take them along, whatever the propagation.
            owners = claim["metadata"].get("ownerReferences") or []
            kept = [o for o in owners if o.get("uid") != live["metadata"]["uid"]]
            patch: dict = {"spec": {"resources": {"requests": {"storage": change.size}}}}
            if len(kept) != len(owners):
                patch["metadata"] = {"ownerReferences": kept or None}
            kube.merge_patch("v1", "PersistentVolumeClaim", claim["metadata"]["name"],
                             meta["namespace"], patch)
    except ApplyError as e:
        events.warning("StorageExpansionRefused", str(e))
        return with_claims_of(desired, live), SpecWarning("StorageExpansionRefused", (
            f"storage.size {change.size} not applied: {e} (the StorageClass must allow volume "
            "expansion); the brokers keep their volumes and every other change is applied"))
    # The template can only change with a new StatefulSet object; its pods are orphaned,
    # not stopped, and the new one adopts them (OnDelete: none restarts for this).
    kube.delete("apps/v1", "StatefulSet", meta["name"], meta["namespace"], orphan=True)
    events.info("VolumesExpanded", f"{len(claims)} claim(s) grown to {change.size}; "
                f"StatefulSet {meta['name']} recreated with the new claim template")
    return None, None


def reconcile_cluster(kube: Kube, views: ClusterViews, admins: AdminClients,
                      resource: Mapping, events: Events) -> dict:
    """One pass: apply the model, observe, and return the status to write."""
    ref = ClusterRef.of(resource)
    spec = resource.get("spec") or {}
    view = views.of(ref)
    memory = views.memory(ref)
    previous = (resource.get("status") or {}).get("conditions") or []
    listeners = listener_status(ref.bootstrap_service, ref.namespace, SecuritySpec.of(spec))
    trusted = trusted_image(view, resource.get("status"), memory)
    if trusted.problem is not None:
        # No scale, roll or Topic pass on an image that is missing, foreign or older: each
        # could take data away. The objects are still applied: the brokers that put the
        # image back must be able to start.
        pki, _ = apply_cluster_pki(kube, resource, events)
        deployed = deployed_config(kube, ref)
        held = layout_of_properties(parse_properties(deployed)) or \
            ListenerLayout.of_status(resource.get("status"))
        apply_cluster(kube, resource, events, current_brokers(kube, ref), pki.pod_annotations,
                      deployed_min_isr(parse_properties(deployed)), held)
        observed, _ = observe(kube, view, ref, ClusterImage())
        status = cluster_status(
            desired=int(spec.get("replicas", 3)),
            generation=resource["metadata"].get("generation", 0), observed=observed,
            warnings=[trusted.problem], bootstrap_servers=listeners[0]["bootstrapServers"]
            if listeners else ref.bootstrap_servers,
            selector=",".join(f"{k}={v}" for k, v in selector(ref).items()),
            previous=previous, now=utc_now())
        status["listenerLayout"] = (held or ListenerLayout.of(SecuritySpec.of(spec))).as_status()
        return status | trusted.status_fields()
    image = trusted.image
    scaling = scale(kube, view, image, admins, ref, resource, memory, events)
    # Certificates before the pods that mount them (nothing without spec.listeners).
    pki, warnings = apply_cluster_pki(kube, resource, events)
    wanted_min_isr = min(2, scaling.statefulset_replicas)
    # Never raised above what existing topics meet (a cluster grown from one broker); once
    # raised, a topic created later with fewer replicas is its creator's choice, as in Kafka.
    deployed = deployed_config(kube, ref)
    running_min_isr = deployed_min_isr(parse_properties(deployed))
    ceiling = min_isr_ceiling(image) \
        if running_min_isr is None or running_min_isr < wanted_min_isr else None
    step = listener_step(kube, view, ref, resource, deployed)
    warnings += apply_cluster(kube, resource, events, scaling.statefulset_replicas,
                              pki.pod_annotations, ceiling, step.layout)
    if ceiling is not None and (held := held_back_topics(image, wanted_min_isr)):
        warnings.append(SpecWarning("MinInsyncReplicasHeld", (
            f"min.insync.replicas stays {min(wanted_min_isr, ceiling or 2)}, not "
            f"{wanted_min_isr}: topic(s) {', '.join(held[:5])} have a smaller replication "
            "factor and no min.insync.replicas of their own, and acks=all writes to them "
            "would be refused; raise their replication factor or set their "
            "min.insync.replicas")))
    if scaling.refused:
        warnings.append(SpecWarning("ScaleDownRefused", scaling.refused))
    observed, pods = observe(kube, view, ref, image)
    default_min_isr = int(broker_properties(ref.name, spec, scaling.statefulset_replicas,
                                            ceiling, step.layout
                                            ).properties["min.insync.replicas"])
    # Brokers not yet restarted enforce the min ISR they started with: a lowered one gates
    # the roll only once every broker runs it.
    gate = roll_min_isr(default_min_isr, memory.running_min_isr, bool(observed.outdated_pods))
    if not observed.outdated_pods:
        memory.running_min_isr = default_min_isr
    waiting, rolled = roll(kube, image, ref, pods, observed, gate, memory, events)
    if not observed.outdated_pods:
        rebalance_leaders(admins, view, ref, spec, memory, events, elect_now=rolled)
    mirror_topics(kube, ref, image, events)
    status = cluster_status(
        desired=int(spec.get("replicas", 3)),
        generation=resource["metadata"].get("generation", 0), observed=observed,
        warnings=warnings, waiting=waiting or scaling.waiting,
        pending=None if step.final else step.description,
        bootstrap_servers=listeners[0]["bootstrapServers"] if listeners
        else ref.bootstrap_servers,
        selector=",".join(f"{k}={v}" for k, v in selector(ref).items()),
        previous=previous, now=utc_now())
    status["listeners"] = listeners or None
    status["listenerLayout"] = step.layout.as_status()
    status |= trusted.status_fields()
    status["scaling"] = {"phase": scaling.phase, "message": scaling.waiting} \
        if scaling.phase else None
    return status


def current_brokers(kube: Kube, ref: ClusterRef) -> int | None:
    """How many brokers the cluster runs: the StatefulSet's size, or, while it is being
    recreated (a storage change orphans its pods), one past the highest broker pod's ordinal,
    so a drain under way is never skipped by a StatefulSet made anew at spec.replicas."""
    sts = kube.get("apps/v1", "StatefulSet", ref.statefulset, ref.namespace)
    if sts is not None and not sts["metadata"].get("deletionTimestamp"):
        return int(sts["spec"]["replicas"])
    ordinals = [int(p["metadata"]["name"].rsplit("-", 1)[1])
                for p in kube.list("v1", "Pod", ref.namespace, selector(ref))
                if p["metadata"]["name"].rsplit("-", 1)[-1].isdigit()]
    if sts is not None:  # terminating: its size still holds until it is gone
        ordinals.append(int(sts["spec"]["replicas"]) - 1)
    return max(ordinals) + 1 if ordinals else None


def scale(kube: Kube, view: KubernetesBackend, image: ClusterImage, admins: AdminClients,
          ref: ClusterRef, resource: Mapping, memory: ClusterMemory,
          events: Events) -> ScaleDecision:
    """The StatefulSet's size for this pass, and the partition moves a change of
    spec.replicas needs first (model/scale.py), started here."""
    current = current_brokers(kube, ref)
    # The phase of the last pass: this process's memory, else the status (after a failover;
    # the body a pass gets may predate the last status write).
    phase = memory.scaling_phase or \
        ((resource.get("status") or {}).get("scaling") or {}).get("phase")
    live = {b.node_id: b.rack for b in view.live_brokers().values()}
    spec = resource.get("spec") or {}
    decision = scale_decision(int(spec.get("replicas", 3)), current, image, live, phase)
    memory.scaling_phase = decision.phase
    if decision.refused and decision.refused != memory.last_refusal:
        events.warning("ScaleDownRefused", decision.refused)
    memory.last_refusal = decision.refused
    rate = int((spec.get("rebalance") or {}).get("throttleBytesPerSecond") or DEFAULT_THROTTLE)
    admin: KafkaAdmin | None = None
    # Before any move: a topic created while the drain runs must not land on the brokers it
    # empties (KIP-1066); lifted once they are kept. Only live brokers take a broker config
    # (clients send it to that broker): a gone one keeps its entry until it comes back.
    cordoned = image.cordoned()
    cordon = (decision.cordon - cordoned) & set(live)
    uncordon = (cordoned - decision.cordon) & set(live)
    try:
        if cordon or uncordon:
            admin = cluster_admin(admins, ref, view)
            admin.cordon(cordon, uncordon)
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
            events.info("ReassignmentDone", f"{phase} done; replication throttle removed")
    except KafkaRefused as e:
        if admin is not None:
            admins.drop((ref.namespace, ref.name), admin)
        events.warning("KafkaRefused", str(e))
        memory.scaling_phase = phase  # try again on the next pass
    if current is not None and decision.statefulset_replicas != current:
        events.info("Scaling", f"StatefulSet {ref.statefulset}: {current} → "
                    f"{decision.statefulset_replicas} brokers")
    return decision


def stop_brokers(kube: Kube, resource: Mapping, events: Events) -> int:
    """Delete the StatefulSet ahead of the garbage collector, so the brokers stop before
    their coordination objects go (a running broker would write them again); the number of
    broker pods still running."""
    ref = ClusterRef.of(resource)
    if kube.delete("apps/v1", "StatefulSet", ref.statefulset, ref.namespace):
        events.info("Deleted", f"deleted StatefulSet {ref.statefulset}")
    return len(kube.list("v1", "Pod", ref.namespace, selector(ref)))


def delete_cluster(kube: Kube, views: ClusterViews, resource: Mapping,
                   events: Events) -> None:
    """What owner references cannot remove, once the brokers stopped: the cluster-scoped
    node-reader binding, and the Leases and ConfigMaps the brokers created for themselves.
    The Services and the rest go with their owner; the claims as the StatefulSet's retention
    policy says. Where the claims are kept (``storage.deleteClaim: false``, the default), so
    are the cluster image and its counters: a KafkaCluster created again with the same name
    finds its brokers' data, topics and offsets as they were (the brokers also keep a copy of
    the image in their volumes, from which they would rebuild it)."""
    ref = ClusterRef.of(resource)
    views.forget(ref)
    kube.delete("rbac.authorization.k8s.io/v1", "ClusterRoleBinding", ref.node_reader_binding)
    claims_deleted = bool(((resource.get("spec") or {}).get("storage") or {}).get("deleteClaim"))
    coordination = {"kafkube.io/cluster": ref.name}
    for api_version, kind in (("coordination.k8s.io/v1", "Lease"), ("v1", "ConfigMap")):
        for obj in kube.list(api_version, kind, ref.namespace, coordination):
            if obj["metadata"].get("ownerReferences"):
                continue
            if kind == "ConfigMap" and not claims_deleted:
                continue
            kube.delete(api_version, kind, obj["metadata"]["name"], ref.namespace)
    events.info("Deleted", f"removed the coordination objects of cluster {ref.name}" + (
        "" if claims_deleted else "; its metadata is kept with its volumes"))
