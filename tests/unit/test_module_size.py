"""No source file of the repository is over 600 lines: a module that grows past it is doing
more than one job, and is split (the style every part of kafkube keeps)."""

from __future__ import annotations

import subprocess

from tests.support import REPO

LIMIT = 600


def test_no_python_file_is_over_600_lines() -> None:
    files = subprocess.run(["git", "ls-files", "*.py"], cwd=REPO, check=True,
                           capture_output=True, text=True).stdout.split()
    assert len(files) > 100  # the repository's files, not an empty list
    too_long = {}
    for name in files:
        path = REPO / name
        if path.is_file():
            lines = path.read_text(errors="replace").count("\n")
            if lines > LIMIT:
                too_long[name] = lines
    assert too_long == {}, f"split these (over {LIMIT} lines): {too_long}"
