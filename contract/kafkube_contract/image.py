"""The cluster image as both sides read it: its partition and topic values, the JSON codec of
its topics, and the operator's read model.

The brokers keep the cluster image (KRaft's metadata, as one value) in one JSON document;
the broker's own ``ClusterImage`` (broker/cluster/image.py) also holds what only brokers
read (ACLs, SCRAM credentials, deleted topics) and all the ways to change it. What is here
is what a reader of another version must agree on: the names and meaning of the document's
keys, and how a document of another contract revision is read.

The document, format 1::

    {"format": 1,
     "topics": [{"name", "topic_id", "configs": {..},          # required, if empty
                 "assignments": [{"replicas", "isr", "leader", "leader_epoch",
                                  "partition_epoch",            # these five required
                                  "adding", "removing"}, ..]}, ..],
     "broker_configs": {"<broker id>" | "": {key: value}},   # optional
     "features": {name: level},                              # optional
     "group_configs": {"<group id>": {key: value}},          # optional
     "client_quotas": [{"entity": {"user" | "client-id" | "ip": name | null},
                        "values": {key: number}}, ..],       # optional (KIP-546)
     "scram_credentials", "acls", "deleted_topics"}          # the brokers' own, optional

Format 2 (``IMAGE_FORMAT``, written once ``kafkube.metadata.version`` is finalized at 2:
kafkube_contract/features.py) is format 1 with each partition an array instead of an
object, as partitions are most of an image and their key names most of its text::

     "assignments": [[replicas, isr, leader, leader_epoch, partition_epoch,
                      adding, removing,     # optional, together, when either is not empty
                      {key: value}], ..]    # optional: keys added later, by name

Documents written before the contract carry no ``format`` key: they are format 1. A reader
is tolerant (``read_image_doc``): keys it does not know are ignored at every level, and
optional keys missing take their defaults, so a broker of a later revision of format 1 may
add keys without breaking an older operator. The values keep those keys aside (``extra``:
not part of their equality, kept by ``dataclasses.replace``) and the broker writes them back
as read, so an older controller does not drop a newer broker's additions (rule 4 of
``kafkube_contract``: a key tied to others' meaning waits for a feature level that says
every broker knows it). A document whose format is newer than this reader knows is refused
(``ImageFormatError``) rather than half understood, and so is one that is no image a
broker writes (``ImageUnreadable``): empty, not an object, without ``topics``, a partition
without its replicas, ISR, leader or epochs. Never is such a document read as an empty
image: a reader acting on that would take every topic for gone.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any, Protocol

#: The newest image document format this code reads and writes (which one it writes is the
#: finalized ``kafkube.metadata.version``'s: kafkube_contract/features.py). A change a reader
#: of the newest format could misread (a key whose meaning changes, a required key added)
#: makes a new one, and a new level of that feature.
IMAGE_FORMAT = 2
FORMAT_KEY = "format"

NO_LEADER = -1
DEFAULT_BROKER = ""  # the name of the cluster-wide dynamic broker configs, as in Kafka
CORDONED_LOG_DIRS = "cordoned.log.dirs"


# The keys of format 1 at each level of the document. A reader keeps any other key it meets
# and writes it back as read (``kafkube_contract`` rule 4).
IMAGE_KEYS = frozenset({FORMAT_KEY, "topics", "broker_configs", "features", "group_configs",
                        "client_quotas", "scram_credentials", "acls", "deleted_topics"})
TOPIC_KEYS = frozenset({"name", "topic_id", "configs", "assignments"})
PARTITION_KEYS = frozenset({"replicas", "isr", "leader", "leader_epoch", "partition_epoch",
                            "adding", "removing"})


class ImageFormatError(ValueError):
    """An image document this reader cannot read: written in a newer format, or malformed."""


class ImageUnreadable(ImageFormatError):
    """An image document that is not one a broker writes: damaged (its base64, gzip or JSON),
    not an object, without its ``topics``, lacking a required key, or with a version
    annotation that is not a number. Never read as an empty image: acting on that would
    delete every topic's resources."""


@dataclass(frozen=True, slots=True)
class StoredIdentity:
    """Which cluster's image the store holds, and its version: what a broker checks before it
    trusts the image (broker/cluster/guard.py), and the operator before it acts on it."""

    cluster_id: str
    version: int


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
    # Keys of the partition's document this code does not know, written back as read
    # (``kafkube_contract`` rule 4); not part of the value.
    extra: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

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
    # Keys of the topic's document this code does not know, written back as read.
    extra: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

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


# -- the codec ---------------------------------------------------------------------------------

def image_format(doc: Mapping[str, Any]) -> int:
    """The document's format (1 when it names none: every image written before the contract),
    refused with ``ImageFormatError`` when newer than ``IMAGE_FORMAT``."""
    if not isinstance(doc, Mapping):
        raise ImageUnreadable(f"the cluster image is a JSON {type(doc).__name__}, not an object")
    found = doc.get(FORMAT_KEY, 1)
    if not isinstance(found, int) or isinstance(found, bool) or found < 1:
        raise ImageFormatError(f"the cluster image names format {found!r}: not a format")
    if found > IMAGE_FORMAT:
        raise ImageFormatError(
            f"the cluster image is in format {found}, newer than format {IMAGE_FORMAT}, the "
            f"newest this kafkube reads: it was written by newer brokers. Upgrade this "
            "component to their version (or newer) before it reads the image.")
    return found


def _known(value: Any) -> dict[str, Any]:
    """A dataclass value's document keys, without the keys it carries unknown."""
    doc = {f.name: getattr(value, f.name) for f in fields(value) if f.name != "extra"}
    return {k: list(v) if isinstance(v, tuple) else v for k, v in doc.items()}


def partition_doc(partition: PartitionState, fmt: int = 1) -> dict[str, Any] | list[Any]:
    """One partition as a document of format ``fmt`` holds it: an object (1) or an array
    (2), with the keys it was read with that this code does not know."""
    if fmt == 1:
        return {**_known(partition), **partition.extra}
    p = partition
    row: list[Any] = [list(p.replicas), list(p.isr), p.leader, p.leader_epoch,
                      p.partition_epoch]
    if p.adding or p.removing or p.extra:
        row += [list(p.adding), list(p.removing)]
    if p.extra:
        row.append(dict(p.extra))
    return row


def topic_doc(topic: TopicMetadata, fmt: int = 1) -> dict[str, Any]:
    """One topic as a document of format ``fmt`` holds it, with the keys it was read with
    that this code does not know."""
    doc = _known(topic)
    doc["configs"] = dict(topic.configs)
    doc["assignments"] = [partition_doc(p, fmt) for p in topic.assignments]
    return {**doc, **topic.extra}


def unknown_keys(doc: Mapping[str, Any], known: frozenset[str]) -> dict[str, Any]:
    """The keys of ``doc`` a reader of this revision does not know, to write back as read."""
    return {k: v for k, v in doc.items() if k not in known}


def _partition_of_doc(doc: Any) -> PartitionState:
    if isinstance(doc, list):
        return _partition_of_row(doc)
    return PartitionState(
        # The epochs are required: one read as 0 would unfence a stale leader.
        tuple(doc["replicas"]), tuple(doc["isr"]), doc["leader"], doc["leader_epoch"],
        doc["partition_epoch"], tuple(doc.get("adding", ())),
        tuple(doc.get("removing", ())), unknown_keys(doc, PARTITION_KEYS))


def _partition_of_row(row: list[Any]) -> PartitionState:
    """A partition of format 2: an array of its five required values, then optionally its
    adding and removing replicas, then optionally an object of keys added later."""
    if not 5 <= len(row) <= 8:
        raise ImageUnreadable(f"a partition of the cluster image has {len(row)} values: "
                              "format 2 has 5 to 8 (keys added later go in the eighth)")
    extra = row[7] if len(row) > 7 else {}
    if not isinstance(extra, dict):
        raise ImageUnreadable("a partition's added keys are not an object")
    return PartitionState(tuple(row[0]), tuple(row[1]), row[2], row[3], row[4],
                          tuple(row[5]) if len(row) > 5 else (),
                          tuple(row[6]) if len(row) > 6 else (), dict(extra))


def topic_of_doc(doc: Mapping[str, Any], fmt: int = 1) -> TopicMetadata:
    """One topic of a document of format ``fmt``; the keys it does not know are kept aside
    (``extra``). A partition of the other format than the document's is refused."""
    rows = doc.get("assignments", ())
    expected = dict if fmt == 1 else list
    if any(not isinstance(p, expected) for p in rows):
        raise ImageUnreadable(f"topic {doc.get('name')!r} has a partition that is not a JSON "
                              f"{'object' if fmt == 1 else 'array'}, as format {fmt} has")
    return TopicMetadata(doc["name"], doc["topic_id"], dict(doc.get("configs", {})),
                         tuple(_partition_of_doc(p) for p in rows),
                         unknown_keys(doc, TOPIC_KEYS))


def topics_of_doc(doc: Mapping[str, Any]) -> dict[str, TopicMetadata]:
    """The topics of a whole document, by name, after checking its format. A document
    without ``topics`` (brokers always write it, if empty) is refused, never read as none."""
    fmt = image_format(doc)
    if not isinstance(doc.get("topics"), list):
        raise ImageUnreadable("the cluster image has no list of topics (\"topics\"): it is "
                              "not one a broker wrote")
    try:
        topics = [topic_of_doc(t, fmt) for t in doc["topics"]]
    except KeyError as e:
        raise ImageUnreadable(f"the cluster image lacks a required key: {e}") from e
    except (TypeError, ValueError, AttributeError) as e:
        raise ImageUnreadable(f"the cluster image is malformed: {e}") from e
    return {t.name: t for t in topics}


def broker_configs_of_doc(doc: Mapping[str, Any]) -> dict[str, dict[str, str]]:
    return {name: dict(configs) for name, configs in doc.get("broker_configs", {}).items()}


def features_of_doc(doc: Mapping[str, Any]) -> dict[str, int]:
    return dict(doc.get("features", {}))


# -- what both sides read of an image -----------------------------------------------------------

class ImageReads:
    """The read-only questions both the broker's ``ClusterImage`` and the operator's
    ``ImageView`` answer, written once so the two never disagree on them. A subclass has
    ``topics``, ``broker_configs`` and ``features``."""

    __slots__ = ()
    topics: dict[str, TopicMetadata]
    broker_configs: dict[str, dict[str, str]]
    features: dict[str, int]

    def partition(self, topic: str, index: int) -> PartitionState | None:
        meta = self.topics.get(topic)
        if meta is None or not 0 <= index < meta.partitions:
            return None
        return meta.assignments[index]

    def feature(self, name: str) -> int:
        """The finalized level of ``name`` (0 when never set)."""
        return self.features.get(name, 0)

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


class TopicsImage(Protocol):
    """Any image with topics: the broker's ClusterImage or the operator's ImageView."""

    @property
    def topics(self) -> Mapping[str, TopicMetadata]: ...


@dataclass(frozen=True, slots=True)
class ImageView(ImageReads):
    """The image as the operator reads it: topics, dynamic broker configs and finalized
    features at a version. Not the brokers' credentials or ACLs: the operator has no use for
    them, and what it does not read cannot tie it to their format."""

    topics: dict[str, TopicMetadata] = field(default_factory=dict)
    version: int = 0
    broker_configs: dict[str, dict[str, str]] = field(default_factory=dict)
    features: dict[str, int] = field(default_factory=dict)


def read_image_doc(doc: Mapping[str, Any], version: int) -> ImageView:
    """The tolerant reader: an ``ImageView`` of a document of format 1 or 2 or of an earlier
    revision, whatever keys it has beyond those of ``ImageView``."""
    return ImageView(topics_of_doc(doc), version, broker_configs_of_doc(doc),
                     features_of_doc(doc))


def read_image_json(text: str, version: int) -> ImageView:
    return read_image_doc(parse_image_json(text), version)


def parse_image_json(text: str) -> Any:
    """The image document of ``text``, not yet read; ``ImageUnreadable`` when it is empty or
    not JSON."""
    if not text.strip():
        raise ImageUnreadable("the cluster image is empty")
    try:
        return json.loads(text)
    except ValueError as e:
        raise ImageUnreadable(f"the cluster image is not JSON: {e}") from e
