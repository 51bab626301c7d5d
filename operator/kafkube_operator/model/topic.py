"""A Topic resource and the cluster image → what to do to the topic, and the Topic's status.

The plan is a value (create, add partitions, change configs, move replicas, or refuse with
a reason); reconcile/topic.py carries it out through the Kafka API. Creating and growing name
counts, never replicas: a topic is created with CreateTopics(partitions, replication factor)
and grown with CreatePartitions(total), and the brokers' controller places the replicas,
rack-aware and away from cordoned brokers, as it does for `kafka-topics` (Kafka's and
Strimzi's topic operators do the same). A changed replication factor is the one exception,
since Kafka has no API for it: a throttled reassignment planned by model/replication.py.
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kafkube_contract.image import NO_LEADER, TopicMetadata
from kafkube_operator.model.replication import Partition, moving, offline, replication_moves
from kafkube_operator.model.scale import THROTTLED_REPLICAS
from kafkube_operator.model.status import TRUE, Condition

ORIGIN_ANNOTATION = "kafkube.io/origin"  # "kafka": made by the operator for a topic it found
_K8S_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")


@dataclass(frozen=True)
class TopicSpec:
    cluster: str
    name: str  # the Kafka topic's name
    partitions: int
    replication_factor: int
    config: dict[str, str]

    @classmethod
    def of(cls, resource: Mapping) -> TopicSpec:
        spec = resource.get("spec") or {}
        return cls(cluster=spec["cluster"],
                   name=spec.get("topicName") or resource["metadata"]["name"],
                   partitions=int(spec.get("partitions", 1)),
                   replication_factor=int(spec.get("replicationFactor", 3)),
                   config={k: _as_text(v) for k, v in (spec.get("config") or {}).items()})


def user_configs(topic: TopicMetadata) -> dict[str, str]:
    """A topic's configs without the throttle lists a scale sets and removes itself."""
    return {k: v for k, v in topic.configs.items() if k not in THROTTLED_REPLICAS}


def _as_text(value: object) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


@dataclass(frozen=True)
class Placement:
    """What a replication-factor change needs to know of the cluster."""

    racks: Mapping[int, str | None]  # the brokers that may take new replicas, id -> rack
    load: Counter[int]  # replicas per broker
    min_isr: int = 1  # the topic's effective min.insync.replicas
    busy: str | None = None  # why no reassignment may start now (a scale, another move)


@dataclass(frozen=True)
class TopicPlan:
    """What brings the topic to its spec. ``refused`` says why part of it cannot be done;
    whatever else can be done is still in the plan."""

    create: bool = False  # CreateTopics with the spec's partitions and replication factor
    add_partitions: int = 0  # how many partitions CreatePartitions adds
    set_configs: dict[str, str] = field(default_factory=dict)
    delete_configs: list[str] = field(default_factory=list)
    reassign: dict[Partition, tuple[int, ...]] = field(default_factory=dict)  # RF change
    refused: list[tuple[str, str]] = field(default_factory=list)  # (reason, message)
    waiting: str | None = None  # a replication-factor change that must wait, and why

    @property
    def empty(self) -> bool:
        return not self.create and not self.add_partitions and not self.set_configs \
            and not self.delete_configs and not self.reassign


def replication_factor(topic: TopicMetadata) -> int:
    """The topic's replication factor once any reassignment is done (its first partition's;
    a topic whose partitions differ is moved to the spec's factor everywhere)."""
    return max((len(s.target_replicas) for s in topic.assignments), default=0)


def topic_plan(spec: TopicSpec, current: TopicMetadata | None, brokers: int,
               placement: Placement | None = None) -> TopicPlan:
    """The steps from ``current`` (None: the topic does not exist) to ``spec``; ``brokers``
    is how many live brokers may take new replicas (not cordoned). Without ``placement`` a
    changed replication factor is left alone (only the other steps are planned)."""
    if current is None:
        if spec.replication_factor > brokers:
            return TopicPlan(refused=[("ReplicationFactorTooLarge", (
                f"replicationFactor {spec.replication_factor} is above the "
                f"{brokers} live broker(s) of cluster {spec.cluster}; the topic is "
                "created once enough brokers are up"))])
        return TopicPlan(create=True)
    refused: list[tuple[str, str]] = []
    added = max(0, spec.partitions - current.partitions)
    if spec.partitions < current.partitions:
        refused.append(("PartitionsDecrease", (
            f"partitions {spec.partitions} is below the topic's {current.partitions}: "
            "Kafka only adds partitions")))
    configs = user_configs(current)
    set_configs = {k: v for k, v in spec.config.items() if configs.get(k) != v}
    delete_configs = sorted(set(configs) - set(spec.config))
    reassign, waiting = _replication_change(spec, current, brokers, placement, refused)
    return TopicPlan(add_partitions=added, set_configs=set_configs,
                     delete_configs=delete_configs, reassign=reassign, refused=refused,
                     waiting=waiting)


def _replication_change(spec: TopicSpec, current: TopicMetadata, brokers: int,
                        placement: Placement | None, refused: list[tuple[str, str]]
                        ) -> tuple[dict[Partition, tuple[int, ...]], str | None]:
    rf = spec.replication_factor
    uneven = any(len(s.target_replicas) != rf for s in current.assignments)
    if placement is None or not uneven:
        return {}, None
    raising = any(len(s.target_replicas) < rf for s in current.assignments)
    if raising and rf > brokers:
        refused.append(("ReplicationFactorTooLarge", (
            f"replicationFactor {rf} is above the {brokers} live broker(s) of cluster "
            f"{spec.cluster} that may take replicas; the topic keeps "
            f"{replication_factor(current)} until enough brokers are up")))
        return {}, None
    if rf < placement.min_isr:
        refused.append(("ReplicationFactorBelowMinIsr", (
            f"replicationFactor {rf} is below the topic's min.insync.replicas "
            f"{placement.min_isr}: producers with acks=all could not write; lower "
            "min.insync.replicas first")))
        return {}, None
    if moving(current):
        return {}, f"{moving(current)} partition(s) of the topic are being moved"
    if offline(current):
        return {}, f"{offline(current)} partition(s) of the topic have no leader"
    if placement.busy is not None:
        return {}, placement.busy
    return replication_moves(current, rf, placement.racks, placement.load), None


def topic_status(spec: TopicSpec, current: TopicMetadata | None, generation: int,
                 problems: list[tuple[str, str]], previous: list[Mapping], now: str,
                 waiting: str | None = None) -> dict[str, Any]:
    """Per-partition replicas, leader and ISR from the cluster image; Ready once the topic
    exists with the spec's partitions and configs and nothing was refused."""
    before = {c["type"]: c for c in previous if "type" in c}
    status: dict[str, Any] = {"observedGeneration": generation, "topicName": spec.name}
    if current is None:
        ready = Condition("Ready", "False", "NotCreated",
                          f"topic {spec.name} does not exist in cluster {spec.cluster} yet")
        partitions: list[dict] = []
    else:
        partitions = [{"partition": i, "leader": p.leader, "replicas": list(p.replicas),
                       "isr": list(p.isr)} for i, p in enumerate(current.assignments)]
        status["topicId"] = current.topic_id
        rf = status["replicationFactor"] = replication_factor(current)
        # Kafka's replication throttle on the topic's moving replicas (None: removed).
        status["replicationThrottle"] = True if set(THROTTLED_REPLICAS) & set(
            current.configs) else None
        moved = sum(1 for s in current.assignments
                    if len(s.target_replicas) == spec.replication_factor and not s.adding
                    and not s.removing)
        reassigning = moved < current.partitions
        status["reassignment"] = None  # a merge patch: None removes the last one shown
        if reassigning:  # a replication-factor change (or another move) under way
            status["reassignment"] = {
                "targetReplicationFactor": spec.replication_factor,
                "partitionsDone": moved, "partitions": current.partitions,
                "partitionsMoving": moving(current), "waiting": waiting}  # None: removed
        in_spec = current.partitions == spec.partitions and not reassigning and all(
            current.configs.get(k) == v for k, v in spec.config.items())
        offline = [i for i, p in enumerate(current.assignments) if p.leader == NO_LEADER]
        message = f"{current.partitions} partition(s) in cluster {spec.cluster}, " \
            f"replication factor {rf}"
        if reassigning:
            message += (f"; moving to {spec.replication_factor}: {moved} of "
                        f"{current.partitions} partition(s) done"
                        + (f" (waiting: {waiting})" if waiting else ""))
        if offline:
            # No leader: no replica in the ISR is alive, and none outside it is elected.
            message += (f"; {len(offline)} offline (no in-sync replica alive): "
                        + ", ".join(str(i) for i in offline[:10]))
        ready = Condition("Ready", TRUE if in_spec and not problems and not offline else "False",
                          "PartitionsOffline" if offline else "Applied" if in_spec else
                          "Reassigning" if reassigning else "Applying", message)
    status["partitions"] = partitions
    status["underReplicated"] = sum(1 for p in partitions if len(p["isr"]) < len(p["replicas"]))
    conditions = [ready]
    if problems:
        conditions.append(Condition("Warning", TRUE, problems[0][0],
                                    "; ".join(message for _, message in problems)))
    else:
        conditions.append(Condition("Warning", "False", "None", "nothing refused"))
    status["conditions"] = [c.as_dict(now, before) for c in conditions]
    return status


def resource_name(topic: str) -> str:
    """A Kubernetes name for a topic found in Kafka: the topic's own name where it is one,
    else a lower-cased, cleaned name with a hash of the original, so two topics never share
    one (Kafka allows upper case and underscores; Kubernetes names do not)."""
    if _K8S_NAME.match(topic) and len(topic) <= 253:
        return topic
    cleaned = re.sub(r"[^a-z0-9.-]+", "-", topic.lower()).strip("-.")[:200] or "topic"
    return f"{cleaned}-{hashlib.sha256(topic.encode()).hexdigest()[:8]}"


def mirror_name(cluster: str, topic: str, taken: Mapping[str, tuple[str, str]]) -> str:
    """A free name for the Topic of ``topic`` found in ``cluster``: the topic's own (as
    ``resource_name``) unless a Topic of that name already stands for another cluster's
    topic or another topic (``taken``: name -> (cluster, topic name) in the namespace),
    then one with the cluster's name in it: two clusters in one namespace each have
    ``connect-offsets``, and neither may take the other's resource."""
    for candidate in (resource_name(topic), resource_name(f"{cluster}.{topic}"),
                      f"{resource_name(f'{cluster}.{topic}')[:200]}-"
                      f"{hashlib.sha256(f'{cluster}/{topic}'.encode()).hexdigest()[:8]}"):
        if taken.get(candidate, (cluster, topic)) == (cluster, topic):
            return candidate
    raise ValueError(f"no free Topic name for {topic} of cluster {cluster}")


def owner_of(resource: Mapping, others: list[Mapping]) -> Mapping | None:
    """The Topic that manages the same topic of the same cluster as ``resource`` and came
    first (by creation time, then name), if not ``resource`` itself: only one may."""
    spec = TopicSpec.of(resource)

    def key(r: Mapping) -> tuple[str, str]:
        meta = r["metadata"]
        return meta.get("creationTimestamp") or "", meta["name"]

    rivals = [r for r in others if (r.get("spec") or {}).get("cluster") == spec.cluster
              and TopicSpec.of(r).name == spec.name]
    first = min([resource, *rivals], key=key)
    return None if first["metadata"]["name"] == resource["metadata"]["name"] else first


def deleted_through_kafka(resource: Mapping, exists: bool) -> bool:
    """A Topic the operator made for a topic it found, whose topic has since been deleted
    through the Kafka API: the resource goes too. Only once its status has shown the topic
    (a ``topicId``), so a mirror is never removed before it was seen; a Topic a user wrote
    is the topic's source of truth instead, and its topic is created again."""
    meta = resource.get("metadata") or {}
    return (not exists and (meta.get("annotations") or {}).get(ORIGIN_ANNOTATION) == "kafka"
            and bool((resource.get("status") or {}).get("topicId"))
            and not meta.get("deletionTimestamp"))


def mirrored_topic(cluster: str, namespace: str, topic: TopicMetadata,
                   name: str | None = None) -> dict[str, Any]:
    """A Topic resource for a topic created through the Kafka API (kafka-topics, a client's
    auto-creation), so `kubectl get topics` lists it; from then on the resource rules it."""
    rf = replication_factor(topic) or 1  # the largest: a mixed topic is not lowered
    return {"apiVersion": "kafkube.io/v1alpha1", "kind": "Topic",
            "metadata": {"name": name or resource_name(topic.name), "namespace": namespace,
                         "labels": {"kafkube.io/cluster": cluster},
                         "annotations": {ORIGIN_ANNOTATION: "kafka"}},
            "spec": {"cluster": cluster, "topicName": topic.name,
                     "partitions": max(1, topic.partitions), "replicationFactor": rf,
                     "config": user_configs(topic)}}
