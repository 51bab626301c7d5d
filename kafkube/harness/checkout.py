"""The source checkout the harness runs from, for the pieces that drive its scripts/,
deploy/, charts/ and examples/ (a local kube-apiserver, the kind cluster of the e2e tier).

Those pieces ship with the product like the rest of the harness, but only a checkout has
the scripts they run: installed without one, they say so instead of failing obscurely.
"""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def repo_file(*parts: str) -> Path:
    """``REPO/parts...``, which must exist: FileNotFoundError naming it otherwise."""
    path = REPO.joinpath(*parts)
    if not path.exists():
        raise FileNotFoundError(f"{path} is not there: this needs a kafkube source checkout")
    return path
