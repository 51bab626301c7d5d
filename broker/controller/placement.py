"""Replica placement for new topics and new partitions, as Apache Kafka places them.

Why this shape: clients and tools (``kafka-topics --describe``, Cruise Control, tests that
assert on layouts) expect Kafka's layouts, so the algorithm is Kafka's own, re-expressed here:
``AdminUtils.assignReplicasToBrokers`` (``assignReplicasToBrokersRackUnaware``,
``assignReplicasToBrokersRackAware`` and ``getRackAlternatedBrokerList``), the placement the
ZooKeeper-era controller and ``kafka-reassign-partitions --generate`` use. KRaft's
``StripedReplicaPlacer`` has the same goals (leaders striped evenly over brokers, followers
shifted so one broker's failure spreads its load, at most one replica per rack while racks
remain) and supplies the error messages, which the KRaft ``ReplicationControlManager``
prefixes with "Unable to replicate the partition N time(s): ".

Rack-unaware: brokers are sorted by id. Partition ``p`` gets its first replica (the preferred
leader) at index ``(start + p) % n``; follower ``j`` sits ``1 + (shift + j) % (n - 1)``
places after it, so followers never collide with the leader or with each other. ``shift``
grows by one every ``n`` partitions, so the followers of one broker's leaders are not always
the same brokers. ``start`` and the initial ``shift`` are random unless fixed.

Rack-aware (every broker has a rack): the brokers are first interleaved by rack (racks in
sorted order, brokers sorted by id within a rack, one from each rack in turn), then placed as
above over that list with the shift scaled by the number of racks, skipping a candidate whose
rack already holds a replica while some rack holds none, and a broker already holding one.

Pure: no I/O and no global randomness; the caller injects ``random.Random``, so a seeded rng
gives the same layout every time. Does not validate manual assignments or topic names.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

__all__ = ["PlacementError", "assign_replicas", "rack_alternated_brokers"]


class PlacementError(Exception):
    """The requested placement cannot be made; ``message`` is Kafka's wording.

    The CreateTopics / CreatePartitions handlers turn it into INVALID_REPLICATION_FACTOR or
    INVALID_REPLICA_ASSIGNMENT with this message as the error message.
    """

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


@dataclass(frozen=True, slots=True)
class _Ring:
    """The brokers in placement order, and where the first partition starts on them."""

    brokers: tuple[int, ...]
    start: int
    shift: int

    def follower(self, first: int, shift: int, j: int) -> int:
        """Index of the ``j``-th candidate follower for a partition led from index ``first``."""
        n = len(self.brokers)
        return (first + 1 + (shift + j) % (n - 1)) % n


def rack_alternated_brokers(racks: Mapping[int, str]) -> tuple[int, ...]:
    """Brokers interleaved by rack: the first of each rack (racks sorted), then the second...

    ``{0: "r1", 1: "r3", 2: "r3", 3: "r2", 4: "r2", 5: "r1"}`` gives ``(0, 3, 1, 5, 4, 2)``.
    """
    by_rack: dict[str, list[int]] = {}
    for broker in sorted(racks):
        by_rack.setdefault(racks[broker], []).append(broker)
    columns = [by_rack[rack] for rack in sorted(by_rack)]
    depth = max((len(c) for c in columns), default=0)
    return tuple(c[row] for row in range(depth) for c in columns if row < len(c))


def assign_replicas(
    brokers: Mapping[int, str | None],
    partitions: int,
    replication_factor: int,
    rng: random.Random,
    start_partition: int = 0,
    fixed_start_index: int | None = None,
) -> list[tuple[int, ...]]:
    """Replica lists for partitions ``start_partition .. start_partition + partitions - 1``.

    ``brokers`` maps each live (unfenced) broker id to its rack, ``None`` for none. Element
    ``i`` of the result is the replica list of partition ``start_partition + i``, preferred
    leader first. ``start_partition`` is the topic's current partition count when adding
    partitions (CreatePartitions), so the new ones continue the existing stripe.
    ``fixed_start_index`` pins both the start index and the initial shift, as Kafka's
    ``fixedStartIndex`` does; when ``None`` both are drawn from ``rng`` (start first).

    Raises ``PlacementError`` when the replication factor is below 1 or above the number of
    brokers, when there are no brokers, or when only some brokers have a rack.
    """
    if partitions < 0:
        raise ValueError(f"partitions must be >= 0, got {partitions}")
    if start_partition < 0:
        raise ValueError(f"start_partition must be >= 0, got {start_partition}")
    if fixed_start_index is not None and fixed_start_index < 0:
        raise ValueError(f"fixed_start_index must be >= 0, got {fixed_start_index}")
    _check_replication_factor(replication_factor, len(brokers))

    racked = {b: r for b, r in brokers.items() if r is not None}
    if racked and len(racked) != len(brokers):
        raise PlacementError(
            "Not all brokers have rack information for replica rack aware assignment."
        )
    order = rack_alternated_brokers(racked) if racked else tuple(sorted(brokers))
    ring = _ring(order, rng, fixed_start_index)
    if racked:
        return _rack_aware(ring, racked, partitions, replication_factor, start_partition)
    return _rack_unaware(ring, partitions, replication_factor, start_partition)


def _check_replication_factor(replication_factor: int, registered: int) -> None:
    prefix = f"Unable to replicate the partition {replication_factor} time(s): "
    if replication_factor < 1:
        raise PlacementError(
            f"{prefix}Invalid replication factor {replication_factor}: "
            "the replication factor must be positive."
        )
    if registered == 0:
        raise PlacementError(f"{prefix}All brokers are currently fenced.")
    if replication_factor > registered:
        raise PlacementError(
            f"{prefix}The target replication factor of {replication_factor} cannot be "
            f"reached because only {registered} broker(s) are registered."
        )


def _ring(order: Sequence[int], rng: random.Random, fixed: int | None) -> _Ring:
    n = len(order)
    if fixed is not None:
        return _Ring(tuple(order), fixed, fixed)
    start = rng.randrange(n)
    shift = rng.randrange(n)
    return _Ring(tuple(order), start, shift)


def _rack_unaware(
    ring: _Ring, partitions: int, replication_factor: int, start_partition: int
) -> list[tuple[int, ...]]:
    n = len(ring.brokers)
    shift = ring.shift
    result: list[tuple[int, ...]] = []
    for partition in range(start_partition, start_partition + partitions):
        # The shift moves on whenever the partition id completes a lap of the brokers, so a
        # call that starts mid-lap (CreatePartitions) bumps it at the next multiple of n.
        if partition > 0 and partition % n == 0:
            shift += 1
        first = (ring.start + partition) % n
        replicas = [ring.brokers[first]]
        replicas.extend(
            ring.brokers[ring.follower(first, shift, j)] for j in range(replication_factor - 1)
        )
        result.append(tuple(replicas))
    return result


def _rack_aware(
    ring: _Ring,
    racks: Mapping[int, str],
    partitions: int,
    replication_factor: int,
    start_partition: int,
) -> list[tuple[int, ...]]:
    n = len(ring.brokers)
    rack_count = len(set(racks.values()))
    shift = ring.shift
    result: list[tuple[int, ...]] = []
    for partition in range(start_partition, start_partition + partitions):
        if partition > 0 and partition % n == 0:
            shift += 1
        first = (ring.start + partition) % n
        leader = ring.brokers[first]
        replicas = [leader]
        used_racks = {racks[leader]}
        candidate = 0
        while len(replicas) < replication_factor:
            broker = ring.brokers[ring.follower(first, shift * rack_count, candidate)]
            candidate += 1
            rack_ok = racks[broker] not in used_racks or len(used_racks) == rack_count
            if rack_ok and broker not in replicas:
                replicas.append(broker)
                used_racks.add(racks[broker])
        result.append(tuple(replicas))
    return result
