"""A KafkaCluster's status, from what the operator observed: pure, so every condition and
printer-column value is tested without a cluster.

A broker counts as ready when it holds a live broker Lease (it registered with the cluster,
as a Kafka broker is ready once the controller unfenced it), not when its pod's TCP probe
passes: a pod can listen long before it serves. The cluster is Ready when every desired
broker is, a controller is elected and no pod waits for a restart.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

TRUE, FALSE = "True", "False"


@dataclass(frozen=True)
class BrokerState:
    id: int
    rack: str | None
    leaders: int


@dataclass(frozen=True)
class ObservedCluster:
    """What the Kubernetes API says about one KafkaCluster's brokers right now."""

    pods: int = 0                 # pods the StatefulSet has
    outdated_pods: int = 0        # pods not yet restarted onto the current template
    controller: int | None = None
    brokers: tuple[BrokerState, ...] = ()   # registered, with a live lease


@dataclass(frozen=True)
class Condition:
    type: str
    status: str
    reason: str
    message: str

    def as_dict(self, now: str, previous: Mapping[str, Mapping]) -> dict[str, str]:
        """``lastTransitionTime`` moves only when the status does, as Kubernetes expects."""
        before = previous.get(self.type)
        since = before.get("lastTransitionTime", now) if before and \
            before.get("status") == self.status else now
        return {"type": self.type, "status": self.status, "reason": self.reason,
                "message": self.message, "lastTransitionTime": since}


@dataclass(frozen=True)
class SpecWarning:
    """Something in the spec the operator could not do, with why: shown, never acted on."""

    reason: str
    message: str


def metadata_problem(stored: tuple[str, int] | None, recorded_id: str | None,
                     history: bool, where: str,
                     recorded_version: int | None = None) -> SpecWarning | None:
    """Why the operator must not act on the cluster image now, judged as the brokers judge it
    (broker/cluster/guard.py): ``stored`` is the (cluster id, version) the store holds,
    ``recorded_id`` and ``recorded_version`` what this KafkaCluster's status recorded last,
    ``history`` whether brokers of this cluster ran before. A cluster whose first broker has
    not started yet has no image and no problem."""
    if stored is None:
        if recorded_id is None and not history:
            return None
        return SpecWarning("MetadataMissing", (
            f"{where} is missing: the brokers put it back from their copies (the first broker "
            "to start does if none runs); until then no topic, scale or roll is acted on"))
    if recorded_id is not None and stored[0] != recorded_id:
        return SpecWarning("MetadataOfAnotherCluster", (
            f"{where} holds cluster {stored[0]}, but this KafkaCluster is cluster "
            f"{recorded_id}: the brokers refuse it and keep their data. Delete that ConfigMap "
            f"(the brokers put theirs back) or restore the one of cluster {recorded_id}"))
    if recorded_version is not None and stored[1] < recorded_version:
        return SpecWarning("MetadataWentBack", (
            f"{where} went back to version {stored[1]} from {recorded_version} (an old copy "
            "put back?): the brokers put the newer one back; until then nothing is acted on"))
    return None


def ready_brokers(desired: int, observed: ObservedCluster) -> list[BrokerState]:
    return [b for b in observed.brokers if 0 <= b.id < desired]


def cluster_conditions(desired: int, observed: ObservedCluster,
                       warnings: Sequence[SpecWarning],
                       waiting: str | None = None, pending: str | None = None,
                       ) -> tuple[bool, tuple[Condition, ...]]:
    """``pending``: a change of the spec still to be rolled out in a later step (a listener
    change's next step): not Ready until it is, though no pod is outdated between steps."""
    ready_count = len(ready_brokers(desired, observed))
    ready = ready_count == desired and observed.controller is not None \
        and observed.outdated_pods == 0 and pending is None
    summary = f"{ready_count}/{desired} brokers registered"
    if observed.controller is not None:
        summary += f", controller {observed.controller}"
    if ready:
        reason = "BrokersReady"
    elif observed.outdated_pods:
        reason = "RollingRestart"
        summary += f", {observed.outdated_pods} pod(s) to restart"
        if waiting:
            summary += f": {waiting}"
        if pending:
            summary += f"; {pending}"
    elif pending is not None and ready_count == desired:
        reason = "RollingRestart"
        summary += f"; {pending}"
    elif observed.pods > desired:
        reason = "ScalingDown"
    elif ready_count < desired:
        reason = "BrokersStarting"
    else:
        reason = "NoController"
    conditions = [
        Condition("Ready", TRUE if ready else FALSE, reason, summary),
        Condition("Reconciling", FALSE if ready else TRUE, reason, summary),
    ]
    if warnings:
        conditions.append(Condition("Warning", TRUE, warnings[0].reason,
                                    "; ".join(w.message for w in warnings)))
    else:
        conditions.append(Condition("Warning", FALSE, "None", "nothing refused"))
    return ready, tuple(conditions)


def cluster_status(desired: int, generation: int, observed: ObservedCluster,
                   warnings: Sequence[SpecWarning], bootstrap_servers: str, selector: str,
                   previous: Sequence[Mapping], now: str,
                   waiting: str | None = None, pending: str | None = None) -> dict[str, Any]:
    """The whole ``status`` of a KafkaCluster: what ``kubectl get kafkaclusters`` prints
    (state, ready, controller) and what a user or a script waits on (conditions)."""
    ready, conditions = cluster_conditions(desired, observed, warnings, waiting, pending)
    before = {c["type"]: c for c in previous if "type" in c}
    state = "Warning" if warnings else "Ready" if ready else "Reconciling"
    status: dict[str, Any] = {
        "observedGeneration": generation,
        "state": state,
        "replicas": observed.pods,
        "readyReplicas": len(ready_brokers(desired, observed)),
        "selector": selector,
        "controller": observed.controller,
        "bootstrapServers": bootstrap_servers,
        "brokers": [{"id": b.id, "rack": b.rack, "leaders": b.leaders}
                    for b in sorted(observed.brokers, key=lambda b: b.id)],
        "conditions": [c.as_dict(now, before) for c in conditions],
    }
    for broker in status["brokers"]:
        if broker["rack"] is None:
            del broker["rack"]
    return status
