"""A replica's files are deleted only for a topic deleted on record (the image's tombstones,
Kafka's RemoveTopicRecords), never because an image lacks the topic: an image rebuilt from an
older copy can (issue 27). Such replicas are kept as strays, served again when the topic comes
back; files of topics deleted while the broker was down are removed at its next start."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

from broker.config.broker_config import BrokerConfig
from broker.server.replica_dirs import DELETE_SUFFIX, STRAY_SUFFIX
from kafkube.harness.wire import build_batch
from tests.support.in_process import open_replicas


def _broker(tmp_path: Path):
    config = BrokerConfig.from_dict({"log.dirs": str(tmp_path / "logs"), "node.id": "0",
                                     "file.delete.delay.ms": "0"})
    return config, *open_replicas(config)


def _write(replicas, topic: str, count: int) -> None:
    partition = replicas.get(topic, 0)
    assert partition is not None and partition.is_leader
    for i in range(count):
        batch = build_batch([(None, f"{topic}-{i}".encode(), (), 0)], 1_700_000_000_000 + i)
        assert partition.append(batch, 1 << 20).error == 0


def _dirs(config: BrokerConfig) -> list[str]:
    return sorted(p.name for p in Path(config.log_dirs[0]).iterdir() if p.is_dir())


def test_a_topic_missing_from_an_image_is_kept_and_comes_back_with_its_data(
        tmp_path: Path) -> None:
    config, store, replicas = _broker(tmp_path)
    asyncio.run(replicas.create_topic("orders", 1, {}, 1, [(0,)]))
    _write(replicas, "orders", 10)
    current = store.image
    older = dataclasses.replace(current, topics={})  # what a copy from before "orders" holds
    replicas.apply_image(older)
    assert replicas.get("orders", 0) is None  # no longer served
    assert _dirs(config) == ["orders-0"]  # but nothing deleted
    replicas.apply_image(current)
    assert replicas.get("orders", 0).log.log_end_offset == 10
    asyncio.run(replicas.shutdown())


def test_a_topic_deleted_on_record_is_deleted(tmp_path: Path) -> None:
    config, store, replicas = _broker(tmp_path)
    asyncio.run(replicas.create_topic("orders", 1, {}, 1, [(0,)]))
    _write(replicas, "orders", 3)
    asyncio.run(replicas.delete_topic("orders"))
    assert store.image.was_deleted(store.image.deleted_topics[-1])
    assert all(name.endswith(DELETE_SUFFIX) for name in _dirs(config))
    asyncio.run(replicas.shutdown())


def test_another_topic_of_the_same_name_sets_the_old_files_aside(tmp_path: Path) -> None:
    """The image has "orders" with another id, and the old id was never deleted on record:
    the old replica's files are set aside (``*-stray``), not deleted, and the new topic
    starts empty beside them."""
    config, store, replicas = _broker(tmp_path)
    asyncio.run(replicas.create_topic("orders", 1, {}, 1, [(0,)]))
    _write(replicas, "orders", 5)
    old = store.image.topics["orders"]
    other = dataclasses.replace(old, topic_id="00000000-0000-4000-8000-000000000001")
    replicas.apply_image(store.image.with_topic(other))
    assert replicas.get("orders", 0).log.log_end_offset == 0
    aside = [name for name in _dirs(config) if name.endswith(STRAY_SUFFIX)]
    assert len(aside) == 1 and aside[0].startswith(f"orders-0.{old.topic_id}.")
    # The metadata gives "orders" its first id back (an image put back): the replica set
    # aside is taken back with its records, and the other one set aside in turn.
    replicas.apply_image(dataclasses.replace(store.image.with_topic(old),
                                             version=store.image.version + 2))
    assert replicas.get("orders", 0).log.log_end_offset == 5
    assert len([n for n in _dirs(config) if n.endswith(STRAY_SUFFIX)]) == 1
    asyncio.run(replicas.shutdown())


def test_at_start_files_of_deleted_topics_go_and_others_stay(tmp_path: Path) -> None:
    config, store, replicas = _broker(tmp_path)
    asyncio.run(replicas.create_topic("gone", 1, {}, 1, [(0,)]))
    asyncio.run(replicas.create_topic("unknown", 1, {}, 1, [(0,)]))
    asyncio.run(replicas.shutdown())
    gone, unknown = store.image.topics["gone"], store.image.topics["unknown"]
    # While the broker is down, "gone" is deleted on record; "unknown" vanishes without a
    # record (an older image put back).
    image = store.image.without_topic("gone")
    image = dataclasses.replace(image, topics={
        k: v for k, v in image.topics.items() if k != "unknown"})
    assert image.was_deleted(gone.topic_id) and not image.was_deleted(unknown.topic_id)
    assert store.backend.write_image(image)
    store.refresh()
    _, restarted = open_replicas(config)
    assert "gone-0" not in _dirs(config)
    assert "unknown-0" in _dirs(config)
    asyncio.run(restarted.shutdown())


def test_a_partition_metadata_left_empty_is_never_adopted(tmp_path: Path) -> None:
    """partition.metadata is made in place (no temporary file and rename): a kill between
    its creation and its one write leaves it empty, as a power cut can on a replica with
    data. An empty one is never taken as the topic's: its dir is set aside as a stray with
    its data, and the replica starts anew (a topic deleted and created again under the
    same name while the broker was down would otherwise get the old one's records)."""
    config, _, replicas = _broker(tmp_path)
    asyncio.run(replicas.create_topic("orders", 1, {}, 1, [(0,)]))
    _write(replicas, "orders", 5)
    asyncio.run(replicas.shutdown())
    metadata = Path(config.log_dirs[0]) / "orders-0" / "partition.metadata"
    metadata.write_text("")
    _, replicas = open_replicas(config)
    assert replicas.get("orders", 0).log.log_end_offset == 0
    strays = [name for name in _dirs(config) if name.endswith(STRAY_SUFFIX)]
    assert len(strays) == 1 and "orders-0" in _dirs(config)
    asyncio.run(replicas.shutdown())
