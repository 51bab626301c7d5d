"""The cluster metadata image: what KRaft keeps in its metadata log, as one value.

Every change is made by computing a new image from the current one and writing it with a
compare-and-set on the image version, so two writers (two controllers, a controller and a
leader shrinking its ISR) can never both win. Images are plain values: the controller's
decisions are pure functions from one image to the next, unit-testable without a broker.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from broker.security.acl import AclBinding
from broker.security.scram import ScramCredential

NO_LEADER = -1


@dataclass(frozen=True, slots=True)
class PartitionState:
    """One partition's replica set and leadership, as Kafka's PartitionRegistration.

    ``replicas[0]`` is the preferred leader. During a reassignment ``replicas`` is the union
    of old and new, ``adding`` the new ones still catching up and ``removing`` the old ones
    that leave once every added replica is in the ISR (KIP-455).
    """

    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int
    leader_epoch: int = 0
    partition_epoch: int = 0
    adding: tuple[int, ...] = ()
    removing: tuple[int, ...] = ()

    @property
    def preferred_leader(self) -> int:
        return self.replicas[0] if self.replicas else NO_LEADER

    @property
    def target_replicas(self) -> tuple[int, ...]:
        """Where the replicas will be once the reassignment (if any) completes."""
        return tuple(r for r in self.replicas if r not in self.removing)

    def with_leader(self, leader: int, isr: tuple[int, ...] | None = None) -> PartitionState:
        """A leadership change: the leader epoch moves on, so stale leaders are fenced."""
        return replace(
            self, leader=leader, isr=self.isr if isr is None else isr,
            leader_epoch=self.leader_epoch + 1, partition_epoch=self.partition_epoch + 1,
        )

    def with_isr(self, isr: tuple[int, ...]) -> PartitionState:
        return replace(self, isr=isr, partition_epoch=self.partition_epoch + 1)


@dataclass(frozen=True, slots=True)
class TopicMetadata:
    name: str
    topic_id: str
    configs: dict[str, str] = field(default_factory=dict)
    assignments: tuple[PartitionState, ...] = ()

    @property
    def partitions(self) -> int:
        return len(self.assignments)

    @property
    def uuid(self) -> uuid.UUID:
        return uuid.UUID(self.topic_id)

    def with_partition(self, index: int, state: PartitionState) -> TopicMetadata:
        states = list(self.assignments)
        states[index] = state
        return replace(self, assignments=tuple(states))


DEFAULT_BROKER = ""  # the name of the cluster-wide dynamic broker configs, as in Kafka
CORDONED_LOG_DIRS = "cordoned.log.dirs"
# Ids of deleted topics kept in the image (~22 bytes each compressed, in every write): a
# broker down for more deletions than this finds its replicas of the oldest ones as strays,
# kept, not deleted (a disk to clean by hand, never data lost).
MAX_TOMBSTONES = 1_000


@dataclass(frozen=True, slots=True)
class ClusterImage:
    """Everything the controller decides. ``version`` is the CAS token, not part of the value.

    ``broker_configs`` holds the dynamic broker configs (Kafka's ConfigRecords of BROKER
    resources): by broker id as a string, and ``DEFAULT_BROKER`` for every broker.
    ``scram_credentials`` holds each user's SCRAM credential per mechanism (Kafka's
    UserScramCredentialRecords); ``acls`` the ACLs (AccessControlEntryRecords).
    ``features`` the finalized feature levels (Kafka's FeatureLevelRecords), a feature not
    named being at level 0, as for a cluster made before kafkube knew it.
    ``deleted_topics`` the ids of the topics deleted (Kafka's RemoveTopicRecords), the newest
    MAX_TOMBSTONES: a broker deletes a replica's files only for a topic deleted on record,
    never for one it merely does not find, which an image rebuilt from an older copy can
    lack (broker/cluster/guard.py).
    """

    topics: dict[str, TopicMetadata] = field(default_factory=dict)
    version: int = 0
    broker_configs: dict[str, dict[str, str]] = field(default_factory=dict)
    scram_credentials: dict[str, dict[str, ScramCredential]] = field(default_factory=dict)
    acls: tuple[AclBinding, ...] = ()
    deleted_topics: tuple[str, ...] = ()
    features: dict[str, int] = field(default_factory=dict)

    def partition(self, topic: str, index: int) -> PartitionState | None:
        meta = self.topics.get(topic)
        if meta is None or not 0 <= index < meta.partitions:
            return None
        return meta.assignments[index]

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicMetadata | None:
        for topic in self.topics.values():
            if topic.uuid == topic_id:
                return topic
        return None

    def with_topic(self, topic: TopicMetadata) -> ClusterImage:
        topics = dict(self.topics)
        topics[topic.name] = topic
        return replace(self, topics=topics)

    def without_topic(self, name: str) -> ClusterImage:
        topics = dict(self.topics)
        removed = topics.pop(name)
        deleted = (*self.deleted_topics, removed.topic_id)[-MAX_TOMBSTONES:]
        return replace(self, topics=topics, deleted_topics=deleted)

    def was_deleted(self, topic_id: str | None) -> bool:
        return topic_id is not None and topic_id in self.deleted_topics

    def with_partition(self, topic: str, index: int, state: PartitionState) -> ClusterImage:
        return self.with_topic(self.topics[topic].with_partition(index, state))

    def feature(self, name: str) -> int:
        """The finalized level of ``name`` (0 when never set)."""
        return self.features.get(name, 0)

    def with_feature(self, name: str, level: int) -> ClusterImage:
        features = {**self.features, name: level}
        if level == 0:
            del features[name]
        return replace(self, features=features)

    def with_broker_configs(self, name: str, configs: dict[str, str]) -> ClusterImage:
        """``name`` is a broker id or DEFAULT_BROKER; no configs removes the entry."""
        all_configs = dict(self.broker_configs)
        if configs:
            all_configs[name] = dict(configs)
        else:
            all_configs.pop(name, None)
        return replace(self, broker_configs=all_configs)

    def with_scram_credential(self, user: str, mechanism: str,
                              credential: ScramCredential | None) -> ClusterImage:
        """Set (or, with None, remove) one user's credential for one mechanism."""
        users = dict(self.scram_credentials)
        mechanisms = dict(users.get(user, {}))
        if credential is None:
            mechanisms.pop(mechanism, None)
        else:
            mechanisms[mechanism] = credential
        if mechanisms:
            users[user] = mechanisms
        else:
            users.pop(user, None)
        return replace(self, scram_credentials=users)

    def with_acls(self, acls: tuple[AclBinding, ...]) -> ClusterImage:
        return replace(self, acls=acls)

    def cordoned(self) -> frozenset[int]:
        """Brokers off-limits for new replicas (KIP-1066): their ``cordoned.log.dirs`` is
        ``*``. A broker of kafkube keeps one placement for all its log dirs, so a list of
        paths cordons only the paths named, which placement across brokers does not see."""
        return frozenset(int(name) for name, configs in self.broker_configs.items()
                         if name != DEFAULT_BROKER and name.isdigit()
                         and configs.get(CORDONED_LOG_DIRS, "").strip() == "*")

    def leaders(self) -> dict[int, int]:
        """Partitions led per broker."""
        counts: dict[int, int] = {}
        for topic in self.topics.values():
            for p in topic.assignments:
                if p.leader != NO_LEADER:
                    counts[p.leader] = counts.get(p.leader, 0) + 1
        return counts

    # -- serialisation: one JSON document, as stored by every backend ------------------------

    def to_json(self) -> str:
        doc: dict[str, Any] = {"topics": [_topic_doc(t) for t in self.topics.values()]}
        if self.broker_configs:
            doc["broker_configs"] = self.broker_configs
        if self.scram_credentials:
            doc["scram_credentials"] = {
                user: {m: c.to_doc() for m, c in mechanisms.items()}
                for user, mechanisms in self.scram_credentials.items()}
        if self.acls:
            doc["acls"] = [a.to_doc() for a in self.acls]
        if self.deleted_topics:
            doc["deleted_topics"] = list(self.deleted_topics)
        if self.features:
            doc["features"] = self.features
        return json.dumps(doc, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str, version: int) -> ClusterImage:
        return cls.from_doc(json.loads(text) if text else {}, version)

    @classmethod
    def from_doc(cls, doc: dict[str, Any], version: int) -> ClusterImage:
        topics = {}
        for t in doc.get("topics", []):
            states = tuple(
                PartitionState(
                    tuple(p["replicas"]), tuple(p["isr"]), p["leader"], p["leader_epoch"],
                    p["partition_epoch"], tuple(p.get("adding", ())),
                    tuple(p.get("removing", ())),
                )
                for p in t["assignments"]
            )
            topics[t["name"]] = TopicMetadata(t["name"], t["topic_id"], t["configs"], states)
        scram = {user: {m: ScramCredential.from_doc(c) for m, c in mechanisms.items()}
                 for user, mechanisms in doc.get("scram_credentials", {}).items()}
        acls = tuple(AclBinding.from_doc(a) for a in doc.get("acls", ()))
        return cls(topics, version, doc.get("broker_configs", {}), scram, acls,
                   tuple(doc.get("deleted_topics", ())), dict(doc.get("features", {})))


def _topic_doc(topic: TopicMetadata) -> dict[str, Any]:
    doc = asdict(topic)
    doc["assignments"] = [asdict(p) for p in topic.assignments]
    return doc
