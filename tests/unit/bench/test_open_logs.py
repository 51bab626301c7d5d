"""``python -m bench open-logs``: it opens logs as the broker does, and a new partition
makes only its log file and partition.metadata (its indexes wait for their entries)."""

from __future__ import annotations

from pathlib import Path

from bench.open_logs import open_new_logs


def test_new_logs_make_two_files_each(tmp_path: Path) -> None:
    assert open_new_logs(tmp_path, 3) > 0
    made = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file())
    assert made == [f"open-logs-{i}/{name}" for i in range(3)
                    for name in ("00000000000000000000.log", "partition.metadata")]
