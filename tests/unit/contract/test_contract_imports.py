"""Neither side imports the other: the operator no broker module, the broker no operator
module, and the contract nothing of either, nor of the command line, kopf or kafka-python,
only the standard library and the ``kubernetes`` client (kafkube_contract/__init__.py). A
broker and an operator of different versions then share exactly the contract."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

from tests.support import REPO

PACKAGES = {
    "broker": Path("broker"),
    "kafkube_operator": Path("operator/kafkube_operator"),
    "kafkube_contract": Path("contract/kafkube_contract"),
}
# package -> top-level names it must not import
FORBIDDEN = {
    "kafkube_operator": {"broker"},
    "broker": {"kafkube_operator", "kafkube", "kopf", "kafka"},
    "kafkube_contract": {"broker", "kafkube_operator", "kafkube", "kopf", "kafka"},
}
CONTRACT_MAY_IMPORT = set(sys.stdlib_module_names) | {"kubernetes", "kafkube_contract"}


def imported_names(package: Path) -> dict[str, set[str]]:
    """Top-level names imported (absolutely, wherever the import is written) by the files of
    ``package``, with the files that import each."""
    found: dict[str, set[str]] = {}
    for path in sorted(package.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module] if isinstance(node, ast.ImportFrom) and not node.level
                     and node.module else [])
            for name in names:
                found.setdefault(name.split(".")[0], set()).add(path.name)
    return found


def violations(repo: Path) -> list[str]:
    """Every forbidden import in the tree at ``repo``, as ``package imports name (files)``."""
    found = []
    for package, forbidden in FORBIDDEN.items():
        if not (repo / PACKAGES[package]).is_dir():
            continue
        imported = imported_names(repo / PACKAGES[package])
        for name in sorted(imported.keys() & forbidden):
            found.append(f"{package} imports {name} ({', '.join(sorted(imported[name]))})")
    contract = repo / PACKAGES["kafkube_contract"]
    if contract.is_dir():
        for name, files in sorted(imported_names(contract).items()):
            if name not in CONTRACT_MAY_IMPORT | FORBIDDEN["kafkube_contract"]:
                found.append(f"kafkube_contract imports {name} ({', '.join(sorted(files))}): "
                             "only the standard library and kubernetes")
    return found


def test_broker_operator_and_contract_import_only_what_they_may() -> None:
    assert violations(REPO) == []


def test_the_check_catches_each_forbidden_import(tmp_path: Path) -> None:
    for package, text in (("broker", "from kafkube_operator.kube import Kube\n"),
                          ("kafkube_operator", "def f():\n    import broker.cluster.image\n"),
                          ("kafkube_contract", "from kopf import on\nimport yaml\n")):
        path = tmp_path / PACKAGES[package] / "m.py"
        path.parent.mkdir(parents=True)
        path.write_text(text)
    assert violations(tmp_path) == [
        "kafkube_operator imports broker (m.py)",
        "broker imports kafkube_operator (m.py)",
        "kafkube_contract imports kopf (m.py)",
        "kafkube_contract imports yaml (m.py): only the standard library and kubernetes",
    ]
