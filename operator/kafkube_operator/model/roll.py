"""Which broker pod the rolling restart may delete next, if any: pure, from the pods and the
cluster image.

The rule is Strimzi's KafkaRoller's: one pod at a time, and a broker is restarted only if
none of the partitions whose ISR it is in would drop below ``min.insync.replicas`` without
it, except partitions whose replication factor is at most their min ISR (they could never
be restarted otherwise; a producer with acks=all is refused on them during any restart). The
active controller goes last, so leadership of the cluster moves once, and the next broker
waits until every pod is ready and every partition's ISR is whole again. A pod that cannot be
serving (stuck Pending, crash-looping, its image not pulled) is restarted regardless, since
waiting for it would stall the roll forever and only the new template can mend it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from kafkube_contract.image import ImageView
from kafkube_operator.model.pools import pod_node_id

STUCK_REASONS = frozenset({"CrashLoopBackOff", "ImagePullBackOff", "ErrImagePull",
                           "CreateContainerConfigError", "CreateContainerError",
                           "InvalidImageName"})


@dataclass(frozen=True)
class PodState:
    broker: int
    name: str
    uid: str
    outdated: bool  # not on the StatefulSet's current revision
    ready: bool
    stuck: bool  # cannot be serving; restarting it is the only way forward


def pod_state(pod: Mapping, update_revision: str | None,
              container: str = "broker") -> PodState:
    """A broker pod as the roll sees it (pod as the API returns it, camelCase keys). Only
    the broker's own container can make it stuck: a sidecar an admission webhook injected,
    waiting on its image, says nothing of the broker, and restarting the pod regardless of
    the min-ISR gate for it would be a restart the roll's rules forbid."""
    meta, status = pod["metadata"], pod.get("status") or {}
    conditions = {c["type"]: c for c in status.get("conditions") or []}
    waiting = {(s.get("state") or {}).get("waiting", {}).get("reason")
               for s in status.get("containerStatuses") or []
               if s.get("name", container) == container}
    unschedulable = (conditions.get("PodScheduled") or {}).get("reason") == "Unschedulable"
    revision = (meta.get("labels") or {}).get("controller-revision-hash")
    return PodState(
        broker=pod_node_id(pod) or 0, name=meta["name"], uid=meta.get("uid", ""),
        outdated=bool(update_revision) and revision != update_revision,
        ready=(conditions.get("Ready") or {}).get("status") == "True"
        and not meta.get("deletionTimestamp"),
        stuck=unschedulable or bool(waiting & STUCK_REASONS))


def owner_of(pod: Mapping) -> str | None:
    """The name of the StatefulSet a pod belongs to (its controller)."""
    return next((o.get("name") for o in pod["metadata"].get("ownerReferences") or []
                 if o.get("kind") == "StatefulSet"), None)


def roll_min_isr(new_default: int, running: int | None, rolling: bool) -> int:
    """The default min ISR a roll is judged by: while some broker still runs the config it
    started with (``rolling``), the higher of that one's (``running``) and the new one, since
    a broker not yet restarted enforces its own."""
    return max(new_default, running or new_default) if rolling else new_default


@dataclass(frozen=True)
class RollStep:
    """The pod to delete now, or why none; ``pending`` counts pods still to restart."""

    restart: PodState | None
    waiting: str | None
    pending: int


def under_min_isr_without(broker: int, image: ImageView,
                          min_isr: Callable[[str], int]) -> str | None:
    """The first partition that restarting ``broker`` would take below its min ISR."""
    for name, topic in sorted(image.topics.items()):
        minimum = min_isr(name)
        for index, state in enumerate(topic.assignments):
            if broker not in state.isr or len(state.replicas) <= minimum:
                continue
            if len(state.isr) - 1 < minimum:
                return f"{name}-{index}"
    return None


def catching_up(broker: int, image: ImageView) -> int:
    """Partitions with a replica on ``broker`` that is not in their ISR yet."""
    return sum(1 for topic in image.topics.values() for state in topic.assignments
               if broker in state.replicas and broker not in state.isr)


def next_restart(pods: Sequence[PodState], image: ImageView, min_isr: Callable[[str], int],
                 controller: int | None, last_restarted: int | None = None) -> RollStep:
    """``last_restarted``: the broker this roll restarted last, which must be back in every
    ISR it belongs to first (partitions under-replicated for other reasons, a follower on a
    slow disk, do not stall the roll: the min ISR rule keeps them writable)."""
    outdated = sorted((p for p in pods if p.outdated), key=lambda p: p.broker)
    stuck = [p for p in outdated if p.stuck]
    if stuck:
        return RollStep(stuck[0], None, len(outdated))
    # The last restart is not over until its broker is back in its ISRs, the roll's last one
    # included: a roll reported done earlier would have its preferred-leader election skip
    # that broker's partitions (not in their ISR yet) until the next imbalance check.
    # Once every pod is on the new revision, only the one restarted last holds the roll (a
    # scaled-up pod stuck Pending is not the roll's business).
    not_ready = sorted(p.name for p in pods if not p.ready
                       and (outdated or p.broker == last_restarted))
    if not_ready:
        return RollStep(None, f"waiting for pod {not_ready[0]} to be ready", len(outdated))
    lagging = catching_up(last_restarted, image) if last_restarted is not None else 0
    if lagging:
        return RollStep(None, f"waiting for broker {last_restarted} to rejoin the ISR of "
                        f"{lagging} partition(s)", len(outdated))
    if not outdated:
        return RollStep(None, None, 0)
    order = [p for p in outdated if p.broker != controller] + \
        [p for p in outdated if p.broker == controller]
    blocked = []
    for pod in order:
        partition = under_min_isr_without(pod.broker, image, min_isr)
        if partition is None:
            return RollStep(pod, None, len(outdated))
        blocked.append(f"{pod.name} ({partition})")
    return RollStep(None, "restarting any would take a partition below min.insync.replicas: "
                    + ", ".join(blocked), len(outdated))
