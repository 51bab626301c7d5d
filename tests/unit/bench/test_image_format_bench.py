"""``python -m bench image-format`` on a small image: both formats measured, format 2 the
smaller, and each image read back equal to what was written."""

from __future__ import annotations

import pytest

from bench.image_format import image_of, main
from broker.cluster.image import ClusterImage


def test_both_formats_are_measured_and_format_2_is_smaller(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--partitions", "200", "--rounds", "1"]) == 0
    rows = [line.split() for line in capsys.readouterr().out.splitlines()[1:]]
    assert [row[:2] for row in rows] == [["200", "1"], ["200", "2"]]
    assert float(rows[1][2]) < float(rows[0][2]) / 2  # JSON KB: arrays, not objects
    for level in (1, 2):
        image = image_of(200, level)
        assert sum(t.partitions for t in image.topics.values()) == 200
        assert ClusterImage.from_json(image.to_json(), 0) == image
