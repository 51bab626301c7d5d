"""A broker's copy of the cluster image in its log dir (broker/cluster/local_copy.py): a copy
that cannot be read is passed over, one in a newer format stops the broker."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from broker.cluster.image import ClusterImage
from broker.cluster.local_copy import (
    IMAGE_COPY,
    forget_other_copies,
    read_image_copy,
    write_image_copy,
)
from kafkube_contract.image import IMAGE_FORMAT, ImageFormatError


def test_the_newest_readable_copy_is_used_and_a_damaged_one_passed_over(tmp_path: Path) -> None:
    dirs = [tmp_path / "a", tmp_path / "b", tmp_path / "c"]
    for d in dirs:
        d.mkdir()
    write_image_copy(dirs[0], "c1", ClusterImage(version=3))
    write_image_copy(dirs[1], "c1", ClusterImage(version=5))
    (dirs[2] / IMAGE_COPY).write_text('{"cluster_id": "c1", "version": 9, "image": {}}')
    found = read_image_copy(dirs, "c1")
    assert found is not None and found.version == 5


def test_a_copy_in_a_newer_format_stops_the_broker(tmp_path: Path) -> None:
    """After a downgrade: passed over, the guard could not tell the store is behind."""
    newer = IMAGE_FORMAT + 1
    copy = {"cluster_id": "c1", "version": 9, "image": {"format": newer, "topics": []}}
    (tmp_path / IMAGE_COPY).write_text(json.dumps(copy))
    with pytest.raises(ImageFormatError, match=f"format {newer}") as refused:
        read_image_copy([tmp_path], "c1")
    assert str(tmp_path / IMAGE_COPY) in str(refused.value)


def test_the_copy_forced_at_shutdown_never_runs_beside_the_periodic_one(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Both wrote the same temporary file, and the second rename failed: the broker exited 1
    at shutdown (seen in a share-group test's teardown). One writer at a time."""
    import asyncio
    import dataclasses
    import threading

    from broker.cluster import metadata as metadata_module
    from broker.config.broker_config import BrokerConfig
    from tests.support.in_process import open_replicas

    config = BrokerConfig.from_dict({"log.dirs": str(tmp_path / "logs"), "node.id": "1"})
    store, _ = open_replicas(config)
    inside, overlapped = threading.Semaphore(1), []
    real = metadata_module.write_image_copy

    def write(*args: object) -> None:
        if not inside.acquire(blocking=False):
            overlapped.append(args)
            return
        try:
            second_started.wait(0.5)  # gives a second writer the chance to come in
            real(*args)
        finally:
            inside.release()

    second_started = threading.Event()
    monkeypatch.setattr(metadata_module, "write_image_copy", write)

    async def both() -> None:
        store.image = dataclasses.replace(store.image, version=store.image.version + 1)
        first = asyncio.ensure_future(store.keep_copy(force=True))
        await asyncio.sleep(0)
        store.image = dataclasses.replace(store.image, version=store.image.version + 1)
        second = asyncio.ensure_future(store.keep_copy(force=True))
        await asyncio.sleep(0.05)
        second_started.set()
        await asyncio.gather(first, second)

    asyncio.run(both())
    assert overlapped == []
    assert (tmp_path / "logs" / IMAGE_COPY).exists()


def test_a_newer_format_copy_older_than_a_readable_one_is_passed_over(tmp_path: Path) -> None:
    """The reviewer's case: after kafkube.metadata.version was lowered, one dir still holds
    a copy in the newer format (written before a dir failure moved the copy, or before the
    broker was killed), another the newer image in the older format: the broker starts from
    the readable one. A newer-format copy newer than every readable one still stops it."""
    first, second = tmp_path / "a", tmp_path / "b"
    first.mkdir(), second.mkdir()
    newer = IMAGE_FORMAT + 1
    (first / IMAGE_COPY).write_text(json.dumps(
        {"cluster_id": "c1", "version": 5, "image": {"format": newer, "topics": []}}))
    write_image_copy(second, "c1", ClusterImage(version=9))
    assert read_image_copy([first, second], "c1").version == 9
    (first / IMAGE_COPY).write_text(json.dumps(
        {"cluster_id": "c1", "version": 12, "image": {"format": newer, "topics": []}}))
    with pytest.raises(ImageFormatError, match=f"format {newer}"):
        read_image_copy([first, second], "c1")
    forget_other_copies([first, second], second)
    assert not (first / IMAGE_COPY).exists() and (second / IMAGE_COPY).exists()
    assert read_image_copy([first, second], "c1").version == 9
