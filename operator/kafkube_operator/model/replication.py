"""A Topic's replication factor changed (``spec.replicationFactor`` up or down): each
partition's new replica list, as a pure function of the topic, the brokers that may take
replicas (id → rack: live and not cordoned) and how many replicas each broker holds.

The moves are Kafka's reassignment (KIP-455): replicas are added first and join the ISR, then
the ones leaving are dropped, so raising the factor never shrinks the ISR. Raising adds each
new replica on the least loaded broker of a rack the partition does not use yet (a broker of a
used rack only when every rack has one; equal loads taken in turn). Lowering never drops the
leader (so an in-sync replica always stays), and drops first the replicas on brokers that may
not hold replicas (dead, cordoned), then those out of the ISR, then others before the
preferred leader, then those sharing a rack, then those on the most loaded brokers: the
partition keeps as many healthy in-sync replicas as it can, its preferred leader while that is
in sync, and one replica per rack while racks suffice. The same inputs give the same moves, so
an operator restarted half-way plans the same thing. A partition without a leader is not
planned (the caller waits for it).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

from kafkube_contract.image import NO_LEADER, PartitionState, TopicMetadata

Partition = tuple[str, int]


def replication_moves(topic: TopicMetadata, factor: int, racks: Mapping[int, str | None],
                      load: Counter[int]) -> dict[Partition, tuple[int, ...]]:
    """The partitions of ``topic`` whose replica count is not ``factor``, each with its new
    replica list. ``load`` is counted on (moves already planned count); ``racks`` holds the
    brokers new replicas may go to, and ``factor`` must not exceed them when raising."""
    moves: dict[Partition, tuple[int, ...]] = {}
    for index, state in enumerate(topic.assignments):
        current = list(state.target_replicas)
        if state.leader == NO_LEADER:
            continue  # offline: nothing in sync to copy from, nothing safe to drop
        if len(current) < factor:
            target = _raised(current, factor, racks, load, index)
        elif len(current) > factor:
            target = _lowered(state, current, factor, racks, load)
        else:
            continue
        if tuple(target) != tuple(current):
            moves[(topic.name, index)] = tuple(target)
    return moves


def _raised(current: list[int], factor: int, racks: Mapping[int, str | None],
            load: Counter[int], index: int) -> list[int]:
    target = list(current)
    order = {b: i for i, b in enumerate(sorted(racks))}
    while len(target) < factor:
        candidates = [b for b in racks if b not in target]
        if not candidates:
            break  # fewer brokers than the factor: the caller refuses that first
        used = {racks.get(b) for b in target}
        fresh = [b for b in candidates if racks[b] not in used]
        # Equal loads: the brokers taken in turn from the partition's index on, so a
        # topic's partitions do not all pick the lowest ids first.
        chosen = min(fresh or candidates,
                     key=lambda b: (load[b], (order[b] - index) % len(order)))
        target.append(chosen)
        load[chosen] += 1
    return target


def _lowered(state: PartitionState, current: list[int], factor: int,
             racks: Mapping[int, str | None], load: Counter[int]) -> list[int]:
    target = list(current)
    preferred = current[0]
    while len(target) > factor:
        droppable = [b for b in target if b != state.leader]
        rack_count = Counter(racks.get(b) for b in target)
        # Healthy, then in sync, then alone in its rack (one replica per rack outlasts
        # durability's loss of a rack), then the preferred leader kept if it can be.
        dropped = min(droppable, key=lambda b, shared=rack_count: (
            b in racks, b in state.isr, shared[racks.get(b)] <= 1, b == preferred, -load[b],
            -b))
        target.remove(dropped)
        load[dropped] -= 1
    if preferred in target:  # the preferred leader stays first
        target.remove(preferred)
        target.insert(0, preferred)
    elif state.leader in target:  # else the leader, so no election follows
        target.remove(state.leader)
        target.insert(0, state.leader)
    return target


def replica_load(topics: Mapping[str, TopicMetadata]) -> Counter[int]:
    """Replicas per broker, counting where each partition's replicas will be."""
    return Counter(b for t in topics.values() for s in t.assignments
                   for b in s.target_replicas)


def offline(topic: TopicMetadata) -> int:
    """Partitions of ``topic`` without a leader."""
    return sum(1 for s in topic.assignments if s.leader == NO_LEADER)


def moving(topic: TopicMetadata) -> int:
    """Partitions of ``topic`` with a reassignment in progress."""
    return sum(1 for s in topic.assignments if s.adding or s.removing)
