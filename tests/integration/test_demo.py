"""The README's main job runs end to end: cluster, events, the Spark job, its table and
chart, and the totals checked against the events."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.support import REPO

ROOT = REPO
# The demo runs a Spark job: it shares a pytest-xdist worker with the other Spark tests.
pytestmark = pytest.mark.xdist_group("spark")


def test_demo_pipeline_runs(tmp_path):
    data = tmp_path / "demo"
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "demo.py"), "--once", "--port", "0",
         "--events", "5000", "--data-dir", str(data)],
        capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "3 brokers running" in result.stdout
    assert "produced 5000 order events to 'orders'" in result.stdout
    assert "window totals equal the ones computed from the events" in result.stdout
    assert "category    windows   orders" in result.stdout
    chart = data / "spark" / "order-totals.png"
    assert chart.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "cluster stopped cleanly" in result.stdout
