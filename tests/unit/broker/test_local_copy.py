"""A broker's copy of the cluster image in its log dir (broker/cluster/local_copy.py): a copy
that cannot be read is passed over, one in a newer format stops the broker."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from broker.cluster.image import ClusterImage
from broker.cluster.local_copy import IMAGE_COPY, read_image_copy, write_image_copy
from kafkube_contract.image import ImageFormatError


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
    copy = {"cluster_id": "c1", "version": 9, "image": {"format": 2, "topics": []}}
    (tmp_path / IMAGE_COPY).write_text(json.dumps(copy))
    with pytest.raises(ImageFormatError, match="format 2") as refused:
        read_image_copy([tmp_path], "c1")
    assert str(tmp_path / IMAGE_COPY) in str(refused.value)
