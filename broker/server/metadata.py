"""Cluster metadata a single broker keeps on its own disk: identity, topics, producer ids.

``meta.properties`` in each log dir carries Kafka's keys (version, cluster.id, node.id) so a
log dir is never mixed up between clusters or nodes. Topics (name, id, partition count,
config overrides) and the producer-id block live in one JSON document written atomically.
This is the embedded stand-in for the coordination backend of a multi-broker cluster
(DESIGN.md §4): the same facts, behind a small interface, on the local disk.
"""

from __future__ import annotations

import base64
import json
import os
import re
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path

from broker.config import ConfigError, parse_properties

METADATA_FILE = "kafkube-metadata.json"
META_PROPERTIES = "meta.properties"
PRODUCER_ID_BLOCK = 1000
MAX_TOPIC_NAME = 249
_LEGAL_TOPIC = re.compile(r"^[a-zA-Z0-9._-]+$")


def topic_name_error(name: str | None) -> str | None:
    """Why ``name`` is not a legal Kafka topic name (Topic.validate), or None."""
    if not name:
        return "Topic name is illegal, it can't be empty"
    if name in (".", ".."):
        return "Topic name cannot be \".\" or \"..\""
    if len(name) > MAX_TOPIC_NAME:
        return f"Topic name is illegal, it can't be longer than {MAX_TOPIC_NAME} characters"
    if not _LEGAL_TOPIC.match(name):
        return (
            f"Topic name \"{name}\" is illegal, it contains a character other than ASCII "
            "alphanumerics, '.', '_' and '-'"
        )
    return None


def new_cluster_id() -> str:
    """A random UUID in Kafka's URL-safe base64 form (Uuid.randomUuid().toString())."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()


@dataclass
class TopicMetadata:
    name: str
    topic_id: str
    partitions: int
    configs: dict[str, str] = field(default_factory=dict)

    @property
    def uuid(self) -> uuid.UUID:
        return uuid.UUID(self.topic_id)


class LocalMetadataStore:
    def __init__(self, log_dirs: list[Path], node_id: int) -> None:
        self.log_dirs = log_dirs
        self.node_id = node_id
        for d in log_dirs:
            d.mkdir(parents=True, exist_ok=True)
        self.cluster_id = self._check_meta_properties()
        self.path = log_dirs[0] / METADATA_FILE
        self.topics: dict[str, TopicMetadata] = {}
        self._next_producer_id = 0
        self._producer_id_limit = 0
        self._load()

    def _check_meta_properties(self) -> str:
        cluster_id = None
        for d in self.log_dirs:
            path = d / META_PROPERTIES
            if not path.exists():
                continue
            props = parse_properties(path.read_text())
            if props.get("node.id") not in (None, str(self.node_id)):
                raise ConfigError(
                    f"log.dirs: {d} belongs to node.id {props['node.id']}, not {self.node_id}"
                )
            if cluster_id and props.get("cluster.id") != cluster_id:
                raise ConfigError(f"log.dirs: {d} belongs to another cluster")
            cluster_id = props.get("cluster.id")
        cluster_id = cluster_id or new_cluster_id()
        for d in self.log_dirs:
            path = d / META_PROPERTIES
            if not path.exists():
                _atomic_write(
                    path, f"version=1\ncluster.id={cluster_id}\nnode.id={self.node_id}\n"
                )
        return cluster_id

    def _load(self) -> None:
        try:
            doc = json.loads(self.path.read_text())
        except FileNotFoundError:
            return
        self.topics = {t["name"]: TopicMetadata(**t) for t in doc.get("topics", [])}
        self._next_producer_id = self._producer_id_limit = doc.get("producer_id_limit", 0)

    def _save(self) -> None:
        doc = {
            "topics": [asdict(t) for t in self.topics.values()],
            "producer_id_limit": self._producer_id_limit,
        }
        _atomic_write(self.path, json.dumps(doc, indent=1))

    def add_topic(self, name: str, partitions: int, configs: dict[str, str]) -> TopicMetadata:
        topic = TopicMetadata(name, str(uuid.uuid4()), partitions, dict(configs))
        self.topics[name] = topic
        self._save()
        return topic

    def remove_topic(self, name: str) -> None:
        del self.topics[name]
        self._save()

    def set_partitions(self, name: str, partitions: int) -> None:
        self.topics[name].partitions = partitions
        self._save()

    def next_producer_id(self) -> int:
        """Unique across restarts: ids are reserved in persisted blocks, as the controller does."""
        if self._next_producer_id >= self._producer_id_limit:
            self._producer_id_limit = self._next_producer_id + PRODUCER_ID_BLOCK
            self._save()
        pid = self._next_producer_id
        self._next_producer_id += 1
        return pid

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicMetadata | None:
        for topic in self.topics.values():
            if topic.uuid == topic_id:
                return topic
        return None


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
