"""Leader rebalance, the operator's on Kubernetes: every
``leader.imbalance.check.interval.seconds`` (and at once after a rolling restart) the
contract's pure function (kafkube_contract/leadership.py, the one the brokers' controller
uses too) picks the partitions to hand back to their preferred leaders when a broker's
imbalance passes ``leader.imbalance.per.broker.percentage``, and the operator asks
the cluster for those preferred-leader elections (ElectLeaders), as `kafka-leader-election`
would. The keys are read from the KafkaCluster's spec.config, with Kafka's defaults."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from kafkube_contract.broker_keys import BROKER_KEYS
from kafkube_contract.image import ImageView
from kafkube_contract.leadership import leader_imbalance, preferred_leader_moves
from kafkube_operator.cluster_view import ClusterView
from kafkube_operator.kafka import AdminClients, KafkaAdmin, KafkaRefused
from kafkube_operator.model.cluster import ClusterRef
from kafkube_operator.reconcile.views import ClusterMemory, Events, cluster_admin


def _setting(config: Mapping, key: str) -> Any:
    known = BROKER_KEYS[key]
    value = config.get(key)
    return known.default if value is None else known.parse(str(value).lower())


def rebalance_leaders(admins: AdminClients, view: ClusterView, ref: ClusterRef,
                      image: ImageView, live: set[int], spec: Mapping,
                      memory: ClusterMemory, events: Events, elect_now: bool = False) -> None:
    """Preferred-leader elections where the pass's image (``live``: the brokers holding a
    lease) shows a broker's imbalance past the threshold."""
    config = spec.get("config") or {}
    if not _setting(config, "auto.leader.rebalance.enable"):
        return
    now = time.monotonic()
    if not elect_now and now < memory.next_leader_check:
        return
    memory.next_leader_check = now + _setting(config, "leader.imbalance.check.interval.seconds")
    percentage = _setting(config, "leader.imbalance.per.broker.percentage")
    moves = preferred_leader_moves(image, live, percentage)
    if not moves:
        return
    worst = max(leader_imbalance(image).values(), default=0.0)
    admin: KafkaAdmin | None = None
    try:
        admin = cluster_admin(admins, ref, view)
        admin.elect_preferred(moves)
    except KafkaRefused as e:
        # Often a broker just restarted that the client still takes for the controller:
        # try again on the next pass rather than an interval later.
        if admin is not None:
            admins.drop((ref.namespace, ref.name), admin)
        memory.next_leader_check = 0.0
        events.warning("KafkaRefused", str(e))
        return
    events.info("LeadersRebalanced", (
        f"{len(moves)} partition(s) handed back to their preferred leaders (largest broker "
        f"imbalance {worst:.0f}% > leader.imbalance.per.broker.percentage {percentage})"))
