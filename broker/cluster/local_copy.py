"""What a broker keeps of the cluster in its own log dirs: ``meta.properties`` (Kafka's keys:
version, cluster.id, node.id), so a log dir is never mixed up between clusters or nodes, and
a copy of the newest cluster image it applied, from which the image is rebuilt if the store
loses it (broker/cluster/guard.py) while every broker is down: a KafkaCluster deleted and
recreated over its kept volumes, a restore from an old backup.

KRaft brokers keep the metadata log itself in ``__cluster_metadata-0``; this is its
snapshot, one JSON file written atomically (a temporary file, fsync, rename).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from pathlib import Path

from broker.cluster.image import ClusterImage
from kafkube_contract.config_keys import ConfigError
from kafkube_contract.image import ImageFormatError, ImageUnreadable
from kafkube_contract.properties import parse_properties

log = logging.getLogger(__name__)

META_PROPERTIES = "meta.properties"
IMAGE_COPY = "cluster-metadata.json"


def read_cluster_id(log_dirs: list[Path], node_id: int) -> str | None:
    """The cluster these log dirs belong to (None if none holds a meta.properties yet);
    refuses dirs of another node, or of two clusters."""
    found: dict[str, Path] = {}
    for d in log_dirs:
        path = d / META_PROPERTIES
        if not path.exists():
            continue
        props = parse_properties(path.read_text())
        if props.get("node.id") not in (None, str(node_id)):
            raise ConfigError(f"log.dirs: {d} belongs to node.id {props['node.id']}, not {node_id}")
        if props.get("cluster.id"):
            found.setdefault(props["cluster.id"], d)
    if len(found) > 1:
        raise ConfigError("log.dirs: the log dirs belong to different clusters: " + ", ".join(
            f"{d} to {cluster_id}" for cluster_id, d in found.items()))
    return next(iter(found), None)


def write_meta_properties(log_dirs: list[Path], cluster_id: str, node_id: int) -> None:
    """Stamp every log dir that has no meta.properties yet."""
    for d in log_dirs:
        path = d / META_PROPERTIES
        if not path.exists():
            atomic_write(path, f"version=1\ncluster.id={cluster_id}\nnode.id={node_id}\n")


def read_image_copy(log_dirs: list[Path], cluster_id: str | None) -> ClusterImage | None:
    """The newest image kept in these log dirs for ``cluster_id``; a copy that cannot be read
    is reported and passed over (the store, or another broker's copy, is still there). A
    copy in a newer format than this broker reads (kept by a newer kafkube, before a
    downgrade) stops the broker with ``ImageFormatError`` when it is newer than every copy
    this broker can read: passed over, it would hide that the store may hold an image older
    than the broker's data (the guard's BEHIND check). An older one of them (a copy left in
    another dir before the level was lowered) is passed over."""
    best: ClusterImage | None = None
    newer: tuple[int, str] | None = None  # (version, why) of the newest unreadable format
    for d in log_dirs:
        path = d / IMAGE_COPY
        if cluster_id is None or not path.exists():
            continue
        try:
            doc = json.loads(path.read_text())
            if doc["cluster_id"] != cluster_id:
                log.error("%s is a copy of cluster %s, not %s: not used", path,
                          doc["cluster_id"], cluster_id)
                continue
            image = ClusterImage.from_doc(doc["image"], int(doc["version"]))
        except ImageUnreadable as e:
            log.error("%s cannot be read (%s): not used", path, e)
            continue
        except ImageFormatError as e:
            version = int(doc.get("version", -1)) if isinstance(doc, dict) else -1
            if newer is None or version > newer[0]:
                newer = (version, f"{path}, this broker's copy of the cluster image: {e} (was "
                         "this broker downgraded? Run the kafkube version that wrote it, or "
                         "newer)")
            continue
        except (OSError, ValueError, KeyError, TypeError) as e:
            log.error("%s cannot be read (%s): not used", path, e)
            continue
        if best is None or image.version > best.version:
            best = image
    if newer is not None and (best is None or newer[0] > best.version):
        raise ImageFormatError(newer[1])
    return best


def forget_other_copies(log_dirs: list[Path], kept: Path) -> None:
    """Remove the image copies of every log dir but ``kept`` (a copy left behind when the
    first dir went offline, or one written before the format changed, must not outlive the
    newer one; a blocking call). A dir that cannot be written keeps its copy: it is offline
    anyway."""
    for d in log_dirs:
        if d != kept:
            with contextlib.suppress(OSError):
                (d / IMAGE_COPY).unlink(missing_ok=True)


def write_image_copy(log_dir: Path, cluster_id: str, image: ClusterImage) -> None:
    """Keep ``image`` (a blocking write: brokers call it off the event loop)."""
    head = f'{{"cluster_id": {json.dumps(cluster_id)}, "version": {image.version}, "image": '
    atomic_write(log_dir / IMAGE_COPY, head + image.to_json() + "}\n")


def atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
