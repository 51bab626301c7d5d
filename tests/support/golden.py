"""Golden files: a rendering compared byte for byte with the file that holds what it should
be, so a change to it shows up in review as a diff of that file.

Regenerate them after an intended change with ``KAFKUBE_UPDATE_GOLDEN=1``, e.g.
``KAFKUBE_UPDATE_GOLDEN=1 .venv/bin/pytest tests/unit/operator``, and review the diff."""

from __future__ import annotations

import os
from pathlib import Path

UPDATE_ENV = "KAFKUBE_UPDATE_GOLDEN"


def assert_golden(path: Path, text: str) -> None:
    """``text`` equals the golden file ``path``; with ``KAFKUBE_UPDATE_GOLDEN`` set, ``path``
    is (re)written from ``text`` first."""
    if os.environ.get(UPDATE_ENV):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    assert path.exists(), f"{path} missing: run with {UPDATE_ENV}=1"
    assert text == path.read_text(), f"{path.name} differs from the rendering"
