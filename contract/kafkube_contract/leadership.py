"""Automatic preferred-leader rebalance, as a pure function of the cluster image.

Why: leadership drifts away from the preferred replica (``replicas[0]``) whenever a broker
restarts, because its partitions fail over to followers and stay there. Kafka's controller
moves it back periodically (``auto.leader.rebalance.enable``, every
``leader.imbalance.check.interval.seconds``): ``KafkaController.checkAndTriggerAutoLeaderRebalance``
groups partitions by preferred replica, computes per broker the share of those partitions it
does not currently lead, and, for every broker whose share is strictly above
``leader.imbalance.per.broker.percentage``, runs a preferred election
(``PartitionLeaderElectionAlgorithms.preferredReplicaPartitionLeaderElection``) on the
partitions whose preferred replica is live and in the ISR. Partitions under reassignment are
left alone, as the ZooKeeper-era controller did. (KRaft's ``ReplicationControlManager``
balances leaders without the per-broker threshold; the threshold is kept here because it is
the documented, configurable behaviour operators tune.)

Written once, with no I/O, and kept in the contract, so the broker's controller and the
Kubernetes operator (which runs the rebalance on Kubernetes, the brokers running with
``auto.leader.rebalance.enable=false``) never disagree on what "imbalanced" means, whatever
their versions. The election itself is the controller's write (``elect_preferred`` in
broker/controller/elections.py); the operator asks for it through ElectLeaders.
"""

from __future__ import annotations

from collections.abc import Set

from kafkube_contract.image import PartitionState, TopicsImage

__all__ = ["leader_imbalance", "preferred_leader_moves"]


def _by_preferred(image: TopicsImage) -> dict[int, list[tuple[str, int, PartitionState]]]:
    """Partitions grouped by preferred replica; partitions with no replicas are left out."""
    groups: dict[int, list[tuple[str, int, PartitionState]]] = {}
    for name, topic in image.topics.items():
        for index, state in enumerate(topic.assignments):
            if state.replicas:
                groups.setdefault(state.preferred_leader, []).append((name, index, state))
    return groups


def _off_preferred(partitions: list[tuple[str, int, PartitionState]], broker: int) -> int:
    return sum(1 for _, _, state in partitions if state.leader != broker)


def leader_imbalance(image: TopicsImage) -> dict[int, float]:
    """Per preferred-leader broker, the percentage of its preferred partitions it does not lead.

    Only brokers that are the preferred replica of at least one partition appear. A partition
    with no leader at all counts as not led by its preferred replica, as in Kafka.
    """
    return {
        broker: 100 * _off_preferred(partitions, broker) / len(partitions)
        for broker, partitions in sorted(_by_preferred(image).items())
    }


def preferred_leader_moves(
    image: TopicsImage, live: Set[int], imbalance_percentage: int
) -> list[tuple[str, int]]:
    """The partitions ``(topic, index)`` to hand back to their preferred replica, sorted.

    A broker's partitions are considered only when its imbalance is strictly greater than
    ``imbalance_percentage`` (``leader.imbalance.per.broker.percentage``, default 10). Of
    those, a partition moves when its preferred replica is in ``live``, in the ISR and not
    already the leader, and no reassignment is in progress (``adding`` / ``removing`` empty).
    """
    moves: list[tuple[str, int]] = []
    for broker, partitions in _by_preferred(image).items():
        off = _off_preferred(partitions, broker)
        # Integer form of off / total * 100 > threshold: no float rounding at the boundary.
        if off * 100 <= imbalance_percentage * len(partitions):
            continue
        if broker not in live:
            continue
        moves.extend(
            (name, index)
            for name, index, state in partitions
            if state.leader != broker
            and broker in state.isr
            and not state.adding
            and not state.removing
        )
    return sorted(moves)

