"""The source checkout the harness runs from, for the pieces that drive its scripts/,
deploy/, charts/ and examples/ (a local kube-apiserver, the kind cluster of the e2e tier).

Those pieces ship with the product like the rest of the harness, but only a checkout has
the scripts they run: installed without one, they say so instead of failing obscurely.
"""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def cache_dir() -> Path:
    """Where scripts/setup.sh and the other scripts keep what they download and build
    (``$KAFKUBE_CACHE``, by default ~/.cache/kafkube), and the demo its data."""
    return Path(os.environ.get("KAFKUBE_CACHE") or Path.home() / ".cache" / "kafkube")


def repo_file(*parts: str) -> Path:
    """``REPO/parts...``, which must exist: FileNotFoundError naming it otherwise."""
    path = REPO.joinpath(*parts)
    if not path.exists():
        raise FileNotFoundError(f"{path} is not there: this needs a kafkube source checkout")
    return path
