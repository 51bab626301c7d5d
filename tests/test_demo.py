"""The README's main job runs end to end."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_demo_pipeline_runs(tmp_path):
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "demo.py"), "--once", "--port", "0",
         "--events", "5000", "--data-dir", str(tmp_path / "demo")],
        capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert "produced 5000 order events to 'orders'" in result.stdout
    assert "consumed them back: 100 customers" in result.stdout
    assert "3 brokers running" in result.stdout
    assert "cluster stopped cleanly" in result.stdout
