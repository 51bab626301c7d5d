"""Scaling a KafkaCluster through ``spec.replicas``: the partition moves that come with it,
as pure functions of the cluster image.

Scale down removes the highest broker ids (a StatefulSet removes its highest ordinals), so
their replicas move first (a drain); it is refused while a topic's replication factor is
above the brokers that would remain, since no placement exists then. Scale up adds empty
brokers, so replicas move onto them until every broker holds within one replica of the mean.
Both keep one replica per rack while there are racks enough, keep each partition's replica
order (its preferred leader stays first, or its stand-in takes that place), and choose the
same moves on every run, so an operator restarting half-way resumes the same plan.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Mapping
from dataclasses import dataclass, replace

from kafkube_contract.image import NO_LEADER, ImageView
from kafkube_operator.model.pools import DEFAULT_POOL, NodePool, wanted_ids

Partition = tuple[str, int]


SCALING_UP, DRAINING = "ScalingUp", "Draining"
# Set on the moving topics while a scale moves replicas, removed when it is done: the
# operator's, so Topic resources neither show nor reset them (model/topic.py).
THROTTLED_REPLICAS = ("leader.replication.throttled.replicas",
                      "follower.replication.throttled.replicas")
THROTTLED_RATES = ("leader.replication.throttled.rate", "follower.replication.throttled.rate")
DEFAULT_THROTTLE = 52_428_800  # crds/kafkacluster.yaml's default of throttleBytesPerSecond


def throttle_rate(cluster_spec: Mapping) -> int:
    """Bytes/s every move of a KafkaCluster runs at (a scale, a replication factor, a
    rebalance without its own): its ``spec.rebalance.throttleBytesPerSecond``."""
    return int((cluster_spec.get("rebalance") or {}).get("throttleBytesPerSecond")
               or DEFAULT_THROTTLE)


@dataclass(frozen=True)
class ScaleDecision:
    """How many brokers each pool's StatefulSet should have now (by pool name,
    model/pools.py), the reassignments to start (when none is running), and the phase to
    remember in the status until the moves are done."""

    sizes: Mapping[str, int]
    moves: dict[Partition, tuple[int, ...]]
    phase: str | None = None
    refused: str | None = None
    waiting: str | None = None
    # Brokers to keep off-limits for new replicas (KIP-1066's cordoned.log.dirs=*): the
    # ones a scale-down is draining, so a topic created meanwhile is not placed on them.
    cordon: frozenset[int] = frozenset()

    @property
    def statefulset_replicas(self) -> int:
        """The brokers of every pool together."""
        return sum(self.sizes.values())


def largest_replication_factor(image: ImageView) -> tuple[int, str | None]:
    rf, name = 0, None
    for topic_name, topic in sorted(image.topics.items()):
        for state in topic.assignments:
            if len(state.target_replicas) > rf:
                rf, name = len(state.target_replicas), topic_name
    return rf, name


def _load(image: ImageView) -> Counter[int]:
    return Counter(b for t in image.topics.values() for s in t.assignments
                   for b in s.target_replicas)


def _pick(candidates: list[int], used_racks: set[str | None], racks: Mapping[int, str | None],
          load: Counter[int]) -> int:
    """The least loaded candidate in a rack the partition does not use yet, if any."""
    fresh = [b for b in candidates if racks.get(b) not in used_racks]
    return min(fresh or candidates, key=lambda b: (load[b], b))


def drain_moves(image: ImageView, removed: set[int],
                racks: Mapping[int, str | None]) -> dict[Partition, tuple[int, ...]]:
    """Every partition with a replica on a ``removed`` broker, re-placed on the others
    (``racks``: the brokers that stay, id → rack)."""
    load = _load(image)
    moves: dict[Partition, tuple[int, ...]] = {}
    for name, topic in sorted(image.topics.items()):
        for index, state in enumerate(topic.assignments):
            current = list(state.target_replicas)
            if not removed & set(current):
                continue
            target = list(current)
            for i, broker in enumerate(current):
                if broker not in removed:
                    continue
                candidates = [b for b in racks if b not in target]
                used = {racks.get(b) for b in target if b not in removed}
                chosen = _pick(candidates, used, racks, load)
                target[i] = chosen
                load[chosen] += 1
                load[broker] -= 1
            moves[(name, index)] = tuple(target)
    return moves


def spread_moves(image: ImageView,
                 racks: Mapping[int, str | None]) -> dict[Partition, tuple[int, ...]]:
    """Moves that bring every broker of ``racks`` within one replica of the mean, topic by
    topic (so every topic gains the new brokers, as `kafka-reassign-partitions --generate`
    spreads the topics it is given), from the most loaded brokers onto the least loaded,
    never putting two replicas of a partition in one rack where it had none."""
    overall = _load(image)
    moves: dict[Partition, tuple[int, ...]] = {}
    for name, topic in sorted(image.topics.items()):
        load: Counter[int] = Counter({b: 0 for b in racks})
        for state in topic.assignments:
            load.update(state.target_replicas)
        total = sum(load[b] for b in racks)
        if not racks or not total:
            continue
        ceiling, floor = -(-total // len(racks)), total // len(racks)
        for index, state in enumerate(topic.assignments):
            target = list(state.target_replicas)
            for i, broker in enumerate(target):
                if load[broker] <= ceiling and not (load[broker] > floor and any(
                        load[b] < floor for b in racks)):
                    continue
                others = {racks.get(b) for j, b in enumerate(target) if j != i}
                candidates = [b for b in racks if b not in target and load[b] < floor
                              and (racks.get(b) not in others or racks.get(broker) in others)]
                if not candidates:
                    continue
                chosen = min(candidates, key=lambda b: (load[b], overall[b], b))
                target[i] = chosen
                for counts in (load, overall):
                    counts[chosen] += 1
                    counts[broker] -= 1
            if tuple(target) != state.target_replicas:
                moves[(name, index)] = tuple(target)
    return moves


def min_isr_ceiling(image: ImageView) -> int | None:
    """The smallest replication factor among topics that follow the brokers' default
    min.insync.replicas (no value of their own): the highest default that still lets each of
    them take acks=all writes. A cluster grown from one broker has RF 1 topics, internal
    ones included, until they are given more replicas (``raise_internal_moves``)."""
    factors = [len(t.assignments[0].target_replicas) for t in image.topics.values()
               if t.assignments and "min.insync.replicas" not in t.configs]
    return min(factors) if factors else None


def held_back_topics(image: ImageView, wanted: int) -> list[str]:
    """Topics of users (not ``__`` internal ones, which the operator grows itself) whose
    replication factor keeps the default min ISR below ``wanted``."""
    return sorted(name for name, t in image.topics.items()
                  if not name.startswith("__") and t.assignments
                  and "min.insync.replicas" not in t.configs
                  and len(t.assignments[0].target_replicas) < wanted)


def raise_internal_moves(image: ImageView, rf: int,
                         racks: Mapping[int, str | None]) -> dict[Partition, tuple[int, ...]]:
    """Internal topics (``__consumer_offsets``, ``__transaction_state``) created while the
    cluster was smaller get replicas added up to ``rf``, least loaded brokers first, one per
    rack where racks allow, as Kafka would have placed them on a cluster of this size."""
    load = _load(image)
    moves: dict[Partition, tuple[int, ...]] = {}
    for name, topic in sorted(image.topics.items()):
        if not name.startswith("__"):
            continue
        for index, state in enumerate(topic.assignments):
            target = list(state.target_replicas)
            while len(target) < min(rf, len(racks)):
                candidates = [b for b in racks if b not in target]
                chosen = _pick(candidates, {racks.get(b) for b in target}, racks, load)
                target.append(chosen)
                load[chosen] += 1
            if len(target) > len(state.target_replicas):
                moves[(name, index)] = tuple(target)
    return moves


def in_progress(image: ImageView) -> int:
    """Partitions still under reassignment (KIP-455: replicas being added or removed)."""
    return sum(1 for t in image.topics.values() for s in t.assignments if s.adding or s.removing)


def scale_decision(desired: int, current: int | None, image: ImageView,
                   live: Mapping[int, str | None], phase: str | None,
                   pods: Collection[int] = ()) -> ScaleDecision:
    """``pool_scale_decision`` for a cluster of one pool (ids 0 to ``desired`` - 1)."""
    pool = NodePool(DEFAULT_POOL, desired, 0, {})
    return pool_scale_decision([pool], None if current is None else {DEFAULT_POOL: current},
                               image, live, phase, pods)


def pool_scale_decision(pools: list[NodePool], current: Mapping[str, int] | None,
                        image: ImageView, live: Mapping[int, str | None], phase: str | None,
                        pods: Collection[int] = ()) -> ScaleDecision:
    """The size of each pool's StatefulSet for this pass and the moves to start.
    ``current``: each pool's StatefulSet size now (None before any exists; a pool missing
    has none yet); ``live``: the registered brokers, id → rack; ``phase``: the phase the
    previous pass left in the status (a scale-up spreads replicas after the StatefulSets
    already have their new sizes); ``pods``: the ids of the broker pods that exist (a broker
    whose Lease looks lapsed may still run).

    Brokers join first and leave last: pools that grow get their new size at once, pools
    that shrink keep theirs until the brokers leaving are drained (onto every broker that
    stays, the new ones included) and cordoned, so brokers move from one pool to another in
    one change."""
    if current is None:
        return ScaleDecision({pool.name: pool.replicas for pool in pools}, {})
    pools, held = _without_overlaps(pools, current)
    desired = {pool.name: pool.replicas for pool in pools}
    decision = _decide(pools, desired, current, image, live, phase, pods)
    if held and decision.waiting is None and decision.refused is None:
        decision = replace(decision, phase=decision.phase or SCALING_UP, waiting=held)
    return decision


def _without_overlaps(pools: list[NodePool], current: Mapping[str, int]
                      ) -> tuple[list[NodePool], str | None]:
    """The pools with any that would take node ids another pool's brokers still hold (a
    pool shrinking, being drained) kept at their current size until those are gone: two
    brokers of one id would fence each other, and the drain would move replicas onto the
    wrong one. Why, if any is kept."""
    kept, held = [], []
    for pool in pools:
        now = current.get(pool.name, 0)
        new_ids = set(pool.ids()) - set(pool.ids(now))
        taken = sorted(new_ids & {i for other in pools if other.name != pool.name
                                  for i in other.ids(current.get(other.name, 0))})
        if taken:
            kept.append(NodePool(pool.name, now, pool.first_id, pool.spec))
            held.append(f"pool {pool.label()} waits for node ids {taken[0]}-{taken[-1]} to "
                        "be drained from the pool that holds them")
        else:
            kept.append(pool)
    return kept, "; ".join(held) or None


def _decide(pools: list[NodePool], desired: dict[str, int], current: Mapping[str, int],
            image: ImageView, live: Mapping[int, str | None], phase: str | None,
            pods: Collection[int]) -> ScaleDecision:
    wanted = sorted(wanted_ids(pools))
    existing = {i for pool in pools for i in pool.ids(current.get(pool.name, 0))}
    added, removed = set(wanted) - existing, existing - set(wanted)
    # During the change: every pool at the larger of its sizes.
    during = {name: max(size, current.get(name, 0)) for name, size in desired.items()}
    moving = in_progress(image)
    if not added and not removed:
        # Replicas on ids no pool has (a topic created between the last look and the
        # shrink, a `kubectl scale statefulset`): moved onto the brokers left.
        stranded = {b for b in _load(image) if b not in set(wanted)}
        if stranded:
            moves = drain_moves(image, stranded, {b: live.get(b) for b in wanted})
            # A partition with no leader has no replica to copy from: it stays (offline, as
            # its Topic's status says) rather than hold every later reassignment up.
            offline = {p for p in moves
                       if image.topics[p[0]].assignments[p[1]].leader == NO_LEADER}
            moves = {p: r for p, r in moves.items() if p not in offline}
            if moves or moving:
                return ScaleDecision(desired, {} if moving else moves, DRAINING, waiting=(
                    f"moving {len(moves)} partition(s) off brokers {sorted(stranded)}, which "
                    "no longer run" + (f"; {len(offline)} offline there" if offline else "")))
    # A drain given up (5 -> 3 -> 5 while moving) is a scale-up: the moves in flight finish
    # under the throttle, then replicas spread back onto the brokers that were emptied.
    # So is an internal topic with fewer replicas than the cluster now allows (made while
    # the cluster was smaller, or before all its brokers had registered).
    short = not added and not removed and all(b in live for b in wanted) and bool(
        raise_internal_moves(image, min(3, len(wanted)), {b: live[b] for b in wanted}))
    if added or short or (not removed and phase in (SCALING_UP, DRAINING)):
        missing = [b for b in wanted if b not in live]
        if missing:
            return ScaleDecision(during, {}, SCALING_UP,
                                 waiting=f"waiting for brokers {missing} to register")
        if moving:
            return ScaleDecision(during, {}, SCALING_UP,
                                 waiting=f"{moving} partition(s) moving onto the new brokers")
        if not removed:
            brokers = {b: live[b] for b in wanted}
            moves = spread_moves(image, brokers) or raise_internal_moves(
                image, min(3, len(wanted)), brokers)
            if not moves:
                return ScaleDecision(desired, {})
            return ScaleDecision(desired, moves, SCALING_UP, waiting=(
                f"{len(moves)} partition(s) moving onto the new brokers"))
    if not removed:
        return ScaleDecision(desired, {})
    kept = {name: (size if size > current.get(name, 0) else current.get(name, 0))
            for name, size in desired.items()}
    rf, topic = largest_replication_factor(image)
    if rf > len(wanted):
        asked = f"spec.replicas {len(wanted)} is" if len(pools) == 1 else \
            f"{_sizes_said(pools)} leave {len(wanted)} brokers,"
        return ScaleDecision(kept, {}, refused=(
            f"{asked} below the replication factor {rf} of topic {topic}: keeping "
            f"{len(existing)} brokers; lower the topics' replication factor first"))
    moves = drain_moves(image, removed, {b: live.get(b) for b in wanted})
    if moves or moving:
        return ScaleDecision(during, {} if moving else moves, DRAINING, waiting=(
            f"draining brokers {sorted(removed)}: {len(moves)} partition(s) still on them"),
            cordon=frozenset(removed))
    # Every removed broker that may still run: live, or with a pod whatever its Lease says
    # (one judged dead may be placing replicas).
    running_removed = removed & (set(live) | set(pods))
    if not running_removed <= image.cordoned():
        # Shrink only once the cordon shows in the image: a topic created before it could
        # still have been placed on them, and the next pass would see it.
        return ScaleDecision(during, {}, DRAINING, cordon=frozenset(removed),
                             waiting=f"cordoning brokers {sorted(running_removed)} before "
                             "they go")
    return ScaleDecision(desired, {}, cordon=frozenset(removed))


def _sizes_said(pools: list[NodePool]) -> str:
    """The sizes asked for, in the spec's words: ``spec.replicas 0 and pool big 2``."""
    return " and ".join([f"spec.replicas {pools[0].replicas}",
                         *(f"pool {p.name} {p.replicas}" for p in pools[1:])])


def cordon_changes(wanted: frozenset[int], cordoned: frozenset[int], live: Collection[int],
                   pods: Collection[int]) -> tuple[frozenset[int], frozenset[int]]:
    """The brokers to cordon and to uncordon now, given the ones a decision wants cordoned
    and the ones the image shows cordoned. A cordon is a broker config, so it goes only to a
    broker that may run: live, or with a pod (one judged dead may still run and place
    replicas, and the shrink waits for its cordon). An uncordon goes only to a live broker;
    a gone one keeps its entry until it is back."""
    cordon = (wanted - cordoned) & (set(live) | set(pods))
    uncordon = (cordoned - wanted) & set(live)
    return frozenset(cordon), frozenset(uncordon)


def throttled_replicas(image: ImageView,
                       moves: Mapping[Partition, tuple[int, ...]]) -> dict[str, dict[str, str]]:
    """Per moving topic, the throttled-replica lists Kafka's reassignment tool sets: the
    current replicas as leaders (they serve the copies), the new ones as followers (they
    fetch them), so copying is held to the throttle rate and nothing else is."""
    lists: dict[str, dict[str, list[str]]] = {}
    for (topic, index), target in sorted(moves.items()):
        current = image.topics[topic].assignments[index].replicas
        sides = lists.setdefault(topic, {key: [] for key in THROTTLED_REPLICAS})
        sides[THROTTLED_REPLICAS[0]] += [f"{index}:{b}" for b in current]
        sides[THROTTLED_REPLICAS[1]] += [f"{index}:{b}" for b in target if b not in current]
    return {topic: {key: ",".join(v) for key, v in sides.items() if v}
            for topic, sides in lists.items()}
