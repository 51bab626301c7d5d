"""docs/performance.json: the figures of docs/performance.md's summary table, for programs.

Each entry is one figure as the table has it: {figure, unit, kafkube, kafka, ratio
(kafkube / Kafka), higher_is_better, command, date}. A bench run with ``--record`` replaces
the entries of the figures it measured and keeps the others, so the file is always the
latest measurement of each figure, whichever bench made it.
"""

from __future__ import annotations

import datetime
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from kafkube.harness.checkout import REPO

PATH = REPO / "docs" / "performance.json"


@dataclass(frozen=True)
class Figure:
    figure: str
    unit: str
    kafkube: float
    kafka: float
    higher_is_better: bool
    command: str
    date: str = field(default_factory=lambda: datetime.date.today().isoformat())

    @property
    def ratio(self) -> float:
        return round(self.kafkube / self.kafka, 3)

    def entry(self) -> dict:
        return {**asdict(self), "ratio": self.ratio}


def record(figures: list[Figure], path: Path = PATH) -> None:
    """Writes FIGURES into the file, replacing entries of the same figure name."""
    entries = json.loads(path.read_text()) if path.exists() else []
    names = {f.figure for f in figures}
    kept = [e for e in entries if e["figure"] not in names]
    merged = kept + [f.entry() for f in figures]
    path.write_text(json.dumps(merged, indent=1) + "\n")
    print(f"{len(figures)} figures written to {path}")
