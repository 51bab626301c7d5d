"""A KafkaRebalance resource as values: its spec, the load the planner is given (from
DescribeLogDirs and the brokers' counters), and the status it shows in each state of
Strimzi's flow: ``PendingProposal`` (rates being measured) → ``ProposalReady`` (the moves and
the goals before/after, waiting for ``kafkube.io/rebalance=approve``) → ``Rebalancing`` (a
throttled reassignment, with progress) → ``Ready``; ``Stopped`` on ``stop``; ``NotReady``
with why when it cannot go on. Pure, so each is tested without a cluster.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kafkube_contract.image import NO_LEADER, ImageView
from kafkube_operator.model.balance import (
    GOALS,
    BalanceInput,
    Broker,
    BrokerLoad,
    PartitionLoad,
    Proposal,
    Tolerances,
)

Partition = tuple[str, int]

ANNOTATION = "kafkube.io/rebalance"  # approve | refresh | stop, removed once acted on
AUTO_LABEL = "kafkube.io/rebalance-auto"  # a KafkaRebalance the cluster's auto mode made
# "true": a proposal is executed without waiting for approve (Strimzi's auto-approval).
AUTO_APPROVAL = "kafkube.io/rebalance-auto-approval"
NEW, PENDING, PROPOSAL_READY = "New", "PendingProposal", "ProposalReady"
REBALANCING, READY, STOPPED, NOT_READY = "Rebalancing", "Ready", "Stopped", "NotReady"
STATES = (NEW, PENDING, PROPOSAL_READY, REBALANCING, READY, STOPPED, NOT_READY)
FULL, ADD_BROKERS, REMOVE_BROKERS = "full", "add-brokers", "remove-brokers"


@dataclass(frozen=True)
class RebalanceSpec:
    """What a KafkaRebalance asks for (crds/kafkarebalance.yaml)."""

    cluster: str
    mode: str = FULL
    brokers: tuple[int, ...] = ()
    goals: tuple[str, ...] = GOALS
    tolerances: Tolerances = field(default_factory=Tolerances)
    max_moves: int = 50
    throttle: int | None = None  # None: the cluster's spec.rebalance.throttleBytesPerSecond

    @classmethod
    def of(cls, resource: Mapping) -> RebalanceSpec:
        spec = resource.get("spec") or {}
        t = spec.get("tolerances") or {}
        default = Tolerances()
        return cls(
            cluster=spec.get("cluster", ""), mode=spec.get("mode", FULL),
            brokers=tuple(sorted(int(b) for b in spec.get("brokers") or ())),
            goals=tuple(g for g in GOALS if g in (spec.get("goals") or GOALS)),
            tolerances=Tolerances(
                disk=float(t.get("diskUsage", default.disk)),
                bytes_in=float(t.get("leaderBytesIn", default.bytes_in)),
                bytes_out=float(t.get("leaderBytesOut", default.bytes_out)),
                min_rate=float(t.get("minRateBytesPerSecond", default.min_rate))),
            max_moves=int(spec.get("maxMovesPerProposal", 50)),
            throttle=int(spec["throttleBytesPerSecond"])
            if spec.get("throttleBytesPerSecond") else None)


@dataclass(frozen=True)
class LogDirs:
    """One broker's DescribeLogDirs answer: its disk's total bytes and each hosted
    partition's size."""

    total: int
    sizes: Mapping[Partition, int]


def disk_capacity(reported: int, claim: int | None) -> int:
    """A broker's capacity: what its log dir's file system reports (DescribeLogDirs v4's
    TotalBytes), but never more than its claim asked for (a volume may be bigger than asked,
    or shared, as on one machine, where TotalBytes is the whole disk)."""
    if reported <= 0:
        return claim or 0
    return min(reported, claim) if claim else reported


def counter_rates(then: Mapping[int, Mapping[Partition, tuple[int, int]]],
                  now: Mapping[int, Mapping[Partition, tuple[int, int]]],
                  seconds: float) -> dict[Partition, tuple[float, float]]:
    """Each partition's (bytes in, bytes out) per second between two readings of every
    broker's leader counters. Only the leader counts, so summing over brokers is right even
    when leadership moved between the readings; a counter that went down (a restarted
    broker) counts from zero."""
    rates: dict[Partition, list[float]] = {}
    for broker, counters in now.items():
        before = then.get(broker, {})
        for p, (bytes_in, bytes_out) in counters.items():
            was_in, was_out = before.get(p, (0, 0))
            d_in = bytes_in - was_in if bytes_in >= was_in else bytes_in
            d_out = bytes_out - was_out if bytes_out >= was_out else bytes_out
            rate = rates.setdefault(p, [0.0, 0.0])
            rate[0] += d_in / seconds
            rate[1] += d_out / seconds
    return {p: (r[0], r[1]) for p, r in rates.items()}


def balance_input(spec: RebalanceSpec, image: ImageView, racks: Mapping[int, str | None],
                  log_dirs: Mapping[int, LogDirs], claim: int | None,
                  rates: Mapping[Partition, tuple[float, float]]) -> BalanceInput:
    """The planner's input: every partition's target replicas (preferred leader first), its
    size (the largest replica's) and its leader's rates; the live brokers (``racks``) with
    their capacity. A partition being moved, without a leader, or with a replica on a
    broker not live is pinned: its load counts, it is not moved."""
    placement, load, pinned = {}, {}, []
    for name, topic in sorted(image.topics.items()):
        for index, state in enumerate(topic.assignments):
            p = (name, index)
            placement[p] = tuple(state.target_replicas)
            size = max((dirs.sizes.get(p, 0) for dirs in log_dirs.values()), default=0)
            bytes_in, bytes_out = rates.get(p, (0.0, 0.0))
            load[p] = PartitionLoad(size, bytes_in, bytes_out)
            if state.adding or state.removing or state.leader == NO_LEADER or \
                    not set(state.target_replicas) <= set(racks):
                pinned.append(p)
    brokers = {b: Broker(rack, disk_capacity(log_dirs[b].total if b in log_dirs else 0, claim))
               for b, rack in racks.items()}
    return BalanceInput(
        placement, load, brokers, spec.tolerances, spec.max_moves, pinned,
        remove=spec.brokers if spec.mode == REMOVE_BROKERS else (),
        only_onto=spec.brokers if spec.mode == ADD_BROKERS else None, goals=spec.goals)


def _fraction(value: float) -> str:
    return f"{value:.3f}"


def _spread(goal: str, low: float, high: float) -> dict[str, str]:
    if goal == "DiskUsage":
        return {"min": _fraction(low), "max": _fraction(high)}
    return {"min": f"{low:.0f}", "max": f"{high:.0f}"}


def _broker(load: BrokerLoad) -> dict[str, Any]:
    return {"diskUsage": _fraction(load.disk), "leaderBytesIn": round(load.bytes_in),
            "leaderBytesOut": round(load.bytes_out), "replicas": load.replicas,
            "leaders": load.leaders}


def proposal_status(proposal: Proposal) -> dict[str, Any]:
    """What ``status.proposal`` shows: counts, each goal before and after (its violation: 0
    when met, and the brokers' lowest and highest value), each broker before and after, why
    the search stopped short, and the moves themselves (bounded by maxMovesPerProposal), so
    the operator executes exactly the proposal that was approved."""
    return {
        "replicaMoves": proposal.replica_moves,
        "leadershipChanges": proposal.leadership_changes,
        "partitions": len(proposal.moves),
        "dataToMoveBytes": proposal.data_to_move,
        "goals": [{"goal": g.goal, "metBefore": g.met_before, "metAfter": g.met_after,
                   "violationBefore": round(g.violation_before, 3),
                   "violationAfter": round(g.violation_after, 3),
                   "before": _spread(g.goal, *g.before), "after": _spread(g.goal, *g.after)}
                  for g in proposal.goals],
        "brokers": [{"id": b.broker, "before": _broker(b), "after": _broker(a)}
                    for b, a in zip(proposal.before, proposal.after, strict=True)],
        **({"stoppedShort": proposal.stopped} if proposal.stopped else {}),
        "moves": [{"topic": t, "partition": i, "from": list(f), "to": list(r)}
                  for (t, i), (f, r) in sorted(_with_origin(proposal).items())],
    }


def _with_origin(proposal: Proposal) -> dict[Partition, tuple[tuple[int, ...], tuple[int, ...]]]:
    return {p: (proposal.origin.get(p, ()), r) for p, r in proposal.moves.items()}


def stored_moves(status: Mapping) -> dict[Partition, tuple[tuple[int, ...], tuple[int, ...]]]:
    """The approved proposal's moves, (from, to) per partition, as the status keeps them."""
    moves = ((status.get("proposal") or {}).get("moves")) or []
    return {(m["topic"], int(m["partition"])): (tuple(m["from"]), tuple(m["to"]))
            for m in moves}


def stale(moves: Mapping[Partition, tuple[tuple[int, ...], tuple[int, ...]]],
          image: ImageView) -> list[Partition]:
    """The partitions of a proposal whose replicas changed since it was made (someone else
    moved them, or the topic went): executing it then would undo their move."""
    found = []
    for (topic, index), (origin, _) in sorted(moves.items()):
        t = image.topics.get(topic)
        if t is None or index >= len(t.assignments) or \
                tuple(t.assignments[index].target_replicas) != origin:
            found.append((topic, index))
    return found


@dataclass(frozen=True)
class Progress:
    """How far an approved proposal's reassignment is: partitions at their new replicas,
    still moving, and the ones whose preferred leader does not lead yet."""

    done: int
    moving: int
    total: int
    unelected: tuple[Partition, ...]

    @property
    def finished(self) -> bool:
        return self.done == self.total

    def as_status(self) -> dict[str, int]:
        return {"partitions": self.total, "partitionsDone": self.done,
                "partitionsMoving": self.moving}


def progress(moves: Mapping[Partition, tuple[tuple[int, ...], tuple[int, ...]]],
             image: ImageView) -> Progress:
    done, unelected = 0, []
    for (topic, index), (_, target) in sorted(moves.items()):
        t = image.topics.get(topic)
        if t is None or index >= len(t.assignments):
            done += 1  # the topic went: nothing left to move
            continue
        state = t.assignments[index]
        if tuple(state.replicas) == target and not (state.adding or state.removing):
            done += 1
            if state.leader != target[0] and target[0] in state.isr:
                unelected.append((topic, index))
    return Progress(done, len(moves) - done, len(moves), tuple(unelected))


def rebalance_status(state: str, generation: int, reason: str, message: str,
                     previous: Mapping, now: str, **fields: Any) -> dict[str, Any]:
    """The status of a pass: the state (also a condition of that type, as Strimzi shows it),
    a Warning condition when ``state`` is NotReady, and the fields given (the proposal,
    progress) over the ones kept from before."""
    old = {c["type"]: c for c in previous.get("conditions") or []}
    condition = {"type": state, "status": "True", "reason": reason, "message": message}
    before = old.get(state)
    condition["lastTransitionTime"] = before["lastTransitionTime"] if before and \
        before.get("status") == "True" and before.get("lastTransitionTime") else now
    conditions = [condition]
    if state == NOT_READY:
        conditions.append({**condition, "type": "Warning"})
    kept = {k: v for k, v in previous.items()
            if k in ("proposal", "progress", "sessionStarted")}
    return {**kept, **fields, "state": state, "observedGeneration": generation,
            "conditions": conditions}


def plain(values: Iterable[Partition]) -> str:
    """Partitions as a user reads them: ``orders-3, orders-7``."""
    return ", ".join(f"{t}-{i}" for t, i in values)


# The automatic mode: a KafkaCluster's spec.rebalance.auto.

FINAL_STATES = (READY, STOPPED, NOT_READY)


@dataclass(frozen=True)
class AutoSpec:
    """``spec.rebalance.auto`` of a KafkaCluster: when a goal is violated beyond its
    threshold (a tolerance wider than the KafkaRebalance's own, so the cluster is not
    rebalanced for every small drift), a KafkaRebalance is made and run without approval."""

    enabled: bool = False
    thresholds: Tolerances = field(default_factory=lambda: Tolerances(
        disk=0.2, bytes_in=0.5, bytes_out=0.5))
    max_moves: int = 50

    @classmethod
    def of(cls, cluster: Mapping) -> AutoSpec:
        auto = (((cluster.get("spec") or {}).get("rebalance") or {}).get("auto")) or {}
        t = auto.get("thresholds") or {}
        default = cls().thresholds
        return cls(bool(auto.get("enabled", False)), Tolerances(
            disk=float(t.get("diskUsage", default.disk)),
            bytes_in=float(t.get("leaderBytesIn", default.bytes_in)),
            bytes_out=float(t.get("leaderBytesOut", default.bytes_out)),
            min_rate=float(t.get("minRateBytesPerSecond", default.min_rate))),
            int(auto.get("maxMovesPerProposal", 50)))


AUTO_GOALS = ("DiskUsage", "LeaderBytesIn", "LeaderBytesOut")  # what auto mode watches


def auto_name(cluster: str) -> str:
    return f"{cluster}-auto-rebalance"


def auto_trigger(violations: Mapping[str, float], running: str | None) -> str | None:
    """Why to start an automatic rebalance now (None: not now): a watched goal violated
    beyond its threshold (``violations``: goal → violation under the thresholds), and no
    other KafkaRebalance of the cluster under way (``running``: its name), so at most one
    runs at a time."""
    beyond = [g for g in AUTO_GOALS if violations.get(g, 0.0) > 0.0]
    if not beyond or running is not None:
        return None
    return ", ".join(beyond) + " beyond the thresholds of spec.rebalance.auto"


def auto_rebalance(cluster: Mapping, auto: AutoSpec, owner: Mapping[str, Any]) -> dict:
    """The KafkaRebalance the automatic mode applies: owned by the cluster, auto-approved,
    with the default tolerances (tighter than the thresholds that started it)."""
    meta = cluster["metadata"]
    return {"apiVersion": "kafkube.io/v1alpha1", "kind": "KafkaRebalance",
            "metadata": {"name": auto_name(meta["name"]), "namespace": meta["namespace"],
                         "labels": {"kafkube.io/cluster": meta["name"], AUTO_LABEL: "true"},
                         "annotations": {AUTO_APPROVAL: "true"},
                         "ownerReferences": [dict(owner)]},
            "spec": {"cluster": meta["name"], "maxMovesPerProposal": auto.max_moves}}
