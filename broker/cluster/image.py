"""The cluster metadata image: what KRaft keeps in its metadata log, as one value.

Every change is made by computing a new image from the current one and writing it with a
compare-and-set on the image version, so two writers (two controllers, a controller and a
leader shrinking its ISR) can never both win. Images are plain values: the controller's
decisions are pure functions from one image to the next, unit-testable without a broker.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field, replace
from typing import Any

from broker.cluster.client_quotas import QuotaEntity, quotas_of_doc, quotas_to_doc
from broker.security.acl import AclBinding
from broker.security.scram import ScramCredential
from kafkube_contract.features import METADATA_VERSION, image_format_at
from kafkube_contract.image import (
    FORMAT_KEY,
    IMAGE_KEYS,
    ImageReads,
    ImageUnreadable,
    PartitionState,
    TopicMetadata,
    broker_configs_of_doc,
    features_of_doc,
    parse_image_json,
    topic_doc,
    topics_of_doc,
    unknown_keys,
)

# Ids of deleted topics kept in the image (~22 bytes each compressed, in every write): a
# broker down for more deletions than this finds its replicas of the oldest ones as strays,
# kept, not deleted (a disk to clean by hand, never data lost).
MAX_TOMBSTONES = 1_000


@dataclass(frozen=True, slots=True)
class ClusterImage(ImageReads):
    """Everything the controller decides. ``version`` is the CAS token, not part of the value.

    ``broker_configs`` holds the dynamic broker configs (Kafka's ConfigRecords of BROKER
    resources): by broker id as a string, and ``DEFAULT_BROKER`` for every broker.
    ``scram_credentials`` holds each user's SCRAM credential per mechanism (Kafka's
    UserScramCredentialRecords); ``acls`` the ACLs (AccessControlEntryRecords).
    ``group_configs`` each group's configs (Kafka's ConfigRecords of GROUP resources).
    ``client_quotas`` the client quotas by entity (Kafka's ClientQuotaRecords; KIP-546,
    broker/cluster/client_quotas.py): an entity without values is not kept.
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
    # Group configs (Kafka's ConfigRecords of GROUP resources): by group id.
    group_configs: dict[str, dict[str, str]] = field(default_factory=dict)
    client_quotas: dict[QuotaEntity, dict[str, float]] = field(default_factory=dict)
    # Top-level keys this code does not know, written back as read (kafkube_contract rule
    # 4): a newer broker's additions outlive an older controller's writes.
    extra: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicMetadata | None:
        for topic in self.topics.values():
            if topic.uuid == topic_id:
                return topic
        return None

    def with_topic(self, topic: TopicMetadata) -> ClusterImage:
        return self.with_topics([topic])

    def with_topics(self, added: list[TopicMetadata]) -> ClusterImage:
        """Several topics added or replaced with one copy of the topics (``with_topic`` per
        topic copied them per topic: 10,000 topics of one request into 10,000 took seconds)."""
        topics = dict(self.topics)
        topics.update((topic.name, topic) for topic in added)
        return replace(self, topics=topics)

    def without_topic(self, name: str) -> ClusterImage:
        return self.without_topics([name])

    def without_topics(self, names: list[str]) -> ClusterImage:
        """The topics removed, their ids kept as deleted (one copy for all of them): all of
        this write's, even past MAX_TOMBSTONES, or a broker applying it would find the rest
        gone but not deleted on record and keep their files; the next deletion trims them."""
        topics = dict(self.topics)
        removed = [topics.pop(name).topic_id for name in names]
        deleted = (*self.deleted_topics, *removed)[-max(MAX_TOMBSTONES, len(removed)):]
        return replace(self, topics=topics, deleted_topics=deleted)

    def was_deleted(self, topic_id: str | None) -> bool:
        return topic_id is not None and topic_id in self.deleted_topics

    def with_partition(self, topic: str, index: int, state: PartitionState) -> ClusterImage:
        return self.with_topic(self.topics[topic].with_partition(index, state))

    def with_partitions(self, states: dict[str, dict[int, PartitionState]]) -> ClusterImage:
        """Many partitions' states at once, by topic and index: one copy of the topics and
        of each topic's assignments, however many change (an ISR batch of thousands)."""
        topics = dict(self.topics)
        for name, changed in states.items():
            assignments = list(topics[name].assignments)
            for index, state in changed.items():
                assignments[index] = state
            topics[name] = replace(topics[name], assignments=tuple(assignments))
        return replace(self, topics=topics)

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

    def with_group_configs(self, group_id: str, configs: dict[str, str]) -> ClusterImage:
        """No configs removes the group's entry."""
        all_configs = dict(self.group_configs)
        if configs:
            all_configs[group_id] = dict(configs)
        else:
            all_configs.pop(group_id, None)
        return replace(self, group_configs=all_configs)

    def with_client_quotas(self, quotas: dict[QuotaEntity, dict[str, float]]) -> ClusterImage:
        """Every entity's values at once (AlterClientQuotas changes a request's entities in
        one write); entities left without values are dropped."""
        return replace(self, client_quotas={e: dict(v) for e, v in quotas.items() if v})

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

    # -- serialisation: one JSON document, as stored by every backend ------------------------

    @property
    def image_format(self) -> int:
        """The format this image is written in: the one its own finalized
        ``kafkube.metadata.version`` says every broker reads."""
        return image_format_at(self.feature(METADATA_VERSION))

    def to_json(self) -> str:
        fmt = self.image_format
        doc: dict[str, Any] = {FORMAT_KEY: fmt,
                               "topics": [topic_doc(t, fmt) for t in self.topics.values()]}
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
        if self.group_configs:
            doc["group_configs"] = self.group_configs
        if self.client_quotas:
            doc["client_quotas"] = quotas_to_doc(self.client_quotas)
        return json.dumps({**doc, **self.extra}, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str, version: int) -> ClusterImage:
        return cls.from_doc(parse_image_json(text), version)

    @classmethod
    def from_doc(cls, doc: dict[str, Any], version: int) -> ClusterImage:
        """The image of a document of format 1 or 2 (``kafkube_contract.image``: with or
        without its ``format`` key, keys it does not know kept aside to be written back); a
        newer format is refused."""
        topics = topics_of_doc(doc)  # ImageUnreadable for a document no broker wrote
        try:
            scram = {user: {m: ScramCredential.from_doc(c) for m, c in mechanisms.items()}
                     for user, mechanisms in doc.get("scram_credentials", {}).items()}
            acls = tuple(AclBinding.from_doc(a) for a in doc.get("acls", ()))
            quotas = quotas_of_doc(doc.get("client_quotas"))
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise ImageUnreadable(f"the cluster image's credentials, ACLs or client quotas "
                                  f"are malformed: {e!r}") from e
        return cls(topics, version, broker_configs_of_doc(doc), scram, acls,
                   tuple(doc.get("deleted_topics", ())), features_of_doc(doc),
                   {g: dict(c) for g, c in doc.get("group_configs", {}).items()},
                   quotas, unknown_keys(doc, IMAGE_KEYS))
