"""The observe pass of a KafkaCluster, every tick: what its brokers report, one step of the
rolling restart (model/roll.py), the leader rebalance (reconcile/leaders.py), the
kafkube.metadata.version change a finished roll allows (reconcile/upgrade.py) and the status
to write, all from one snapshot (reconcile/snapshot.py) and the last apply's decisions
(reconcile/outcome.py)."""

from __future__ import annotations

from collections.abc import Mapping

from kafkube_contract.image import DEFAULT_BROKER, ImageView
from kafkube_operator.cluster_view import ClusterView
from kafkube_operator.kafka import AdminClients
from kafkube_operator.kube import Kube
from kafkube_operator.model.cluster import ClusterRef, selector
from kafkube_operator.model.listeners import SecuritySpec, listener_status
from kafkube_operator.model.roll import (
    PodState,
    next_restart,
    owner_of,
    pod_state,
    roll_min_isr,
)
from kafkube_operator.model.status import (
    BrokerState,
    ObservedCluster,
    SpecWarning,
    cluster_status,
)
from kafkube_operator.model.upgrade import PROBING
from kafkube_operator.reconcile.leaders import rebalance_leaders
from kafkube_operator.reconcile.outcome import ApplyOutcome
from kafkube_operator.reconcile.snapshot import ClusterSnapshot
from kafkube_operator.reconcile.upgrade import level_step
from kafkube_operator.reconcile.views import ClusterMemory, Events, utc_now


def observe(snapshot: ClusterSnapshot, image: ImageView
            ) -> tuple[ObservedCluster, list[PodState]]:
    revisions = {sts["metadata"]["name"]: (sts.get("status") or {}).get("updateRevision")
                 for sts in (snapshot.statefulsets or {}).values()}
    # A pod without its controller's reference (one orphaned by a storage change, about to
    # be adopted) is judged by the one StatefulSet there is.
    only = next(iter(revisions.values())) if len(revisions) == 1 else None
    pods = [pod_state(p, revisions.get(owner_of(p), only)) for p in snapshot.pods]
    leaders = image.leaders()
    brokers = tuple(BrokerState(b.node_id, b.rack, leaders.get(b.node_id, 0))
                    for b in snapshot.live.values())
    observed = ObservedCluster(pods=len(pods), outdated_pods=sum(p.outdated for p in pods),
                               controller=snapshot.controller, brokers=brokers)
    return observed, pods


def observe_pass(kube: Kube, view: ClusterView, admins: AdminClients,
                 resource: Mapping, snapshot: ClusterSnapshot, outcome: ApplyOutcome,
                 memory: ClusterMemory, events: Events) -> dict:
    """Roll, rebalance and the status, for a cluster whose image is trusted."""
    ref = snapshot.ref
    spec = resource.get("spec") or {}
    image = snapshot.trusted.image
    observed, pods = observe(snapshot, image)
    # Brokers not yet restarted enforce the min ISR they started with: a lowered one gates
    # the roll only once every broker runs it.
    gate = roll_min_isr(outcome.default_min_isr, memory.running_min_isr,
                        bool(observed.outdated_pods))
    if not observed.outdated_pods:
        memory.running_min_isr = outcome.default_min_isr
    waiting, rolled = roll(kube, image, ref, pods, observed, gate, memory, events)
    if not observed.outdated_pods:
        rebalance_leaders(admins, view, ref, image, set(snapshot.live), spec, memory, events,
                          elect_now=rolled)
    level = level_step(view, admins, resource, snapshot, outcome.upgrade, memory, events)
    pending = None if outcome.step.final else outcome.step.description
    if pending is None and outcome.upgrade is not None and outcome.upgrade.phase == PROBING:
        pending = outcome.upgrade.message  # not Ready until spec.image is rolled out
    status = _status(resource, ref, observed, [*outcome.warnings, *level.warnings],
                     outcome.generation, waiting=waiting or outcome.scaling.waiting,
                     pending=pending)
    status["listenerLayout"] = outcome.step.layout.as_status()
    status |= snapshot.trusted.status_fields() | level.status
    status["scaling"] = {"phase": outcome.scaling.phase, "message": outcome.scaling.waiting} \
        if outcome.scaling.phase else None
    status["pools"] = pools_status(snapshot, spec, pods)
    status["sizing"] = [s.as_status() for s in outcome.sizing] or None
    return status


def pools_status(snapshot: ClusterSnapshot, spec: Mapping, pods: list[PodState]
                 ) -> list[dict] | None:
    """Each node pool's size asked, StatefulSet, node ids and ready brokers (None for a
    cluster without spec.pools, whose status stays as it always was)."""
    pools = snapshot.pools(spec)
    if len(pools) == 1:
        return None
    ready = {p.broker for p in pods if p.ready}
    sizes = snapshot.pool_sizes() or {}
    shown = []
    for pool in pools:
        ids = pool.ids(max(pool.replicas, sizes.get(pool.name, 0)))
        shown.append({"name": pool.label(), "replicas": pool.replicas,
                      "statefulSet": pool.statefulset(snapshot.ref.name),
                      "nodeIds": list(ids), "readyReplicas": len(ready & set(ids))})
    return shown


def _status(resource: Mapping, ref: ClusterRef, observed: ObservedCluster,
            warnings: list[SpecWarning], generation: int, waiting: str | None = None,
            pending: str | None = None) -> dict:
    spec = resource.get("spec") or {}
    listeners = listener_status(ref.bootstrap_service, ref.namespace, SecuritySpec.of(spec))
    status = cluster_status(
        desired=int(spec.get("replicas", 3)), generation=generation, observed=observed,
        warnings=warnings, waiting=waiting, pending=pending,
        bootstrap_servers=listeners[0]["bootstrapServers"] if listeners
        else ref.bootstrap_servers,
        selector=",".join(f"{k}={v}" for k, v in selector(ref).items()),
        previous=(resource.get("status") or {}).get("conditions") or [], now=utc_now())
    status["listeners"] = listeners or None
    return status


def problem_status(resource: Mapping, snapshot: ClusterSnapshot, warning: SpecWarning
                   ) -> dict:
    """The status while the image may not be acted on (missing, foreign, older): what the
    pods and leases say, and the problem."""
    observed, _ = observe(snapshot, ImageView())
    status = _status(resource, snapshot.ref, observed, [warning],
                     resource["metadata"].get("generation", 0))
    return status | snapshot.trusted.status_fields()


def roll(kube: Kube, image: ImageView, ref: ClusterRef, pods: list[PodState],
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
