"""The broker's layers hold: no folder imports one above it, and no two modules import each
other (docs/architecture.md, "Layers").

The order is Kafka's, bottom to top. A layer may import the layers below it and itself, never
one above: an upward import is the first step to a broker where everything knows everything.
Imports count wherever they are written (inside a function, under ``TYPE_CHECKING``): a lazy
import is still a dependency. Circles between modules are judged on the imports that run:
an annotation-only import (``TYPE_CHECKING``) cannot make two modules wait on each other.
"""

from __future__ import annotations

import ast
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tests.support import REPO

ROOT = REPO / "broker"

# Bottom to top. A new folder of broker/ must be placed here before it can be imported.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("common",),  # metrics, GC tuning, the loop watchdog: no Kafka semantics
    ("config",),  # Kafka's configuration keys, server.properties, listeners
    ("protocol",),  # the wire format: messages, record batches
    ("storage",),  # segments, logs, indexes, the cleaner, producer state
    ("security",),  # TLS, SASL, SCRAM, ACLs
    ("cluster",),  # the cluster metadata on Kubernetes (or SQLite) and this broker's view of it
    ("network",),  # connections to other brokers
    ("controller",),  # the rules that change the metadata: elections, placement, topics
    ("server",),  # replica manager, partitions, replica fetchers, this broker's lifecycle
    ("coordinator",),  # group and transaction coordinators
    ("share",),  # share groups' partitions: records acquired, acknowledged, redelivered
    ("handlers",),  # one function per Kafka API
    ("frontend",),  # the socket server
    ("app", "health"),  # what wires it all: `kafkube broker` runs these
)


@dataclass(frozen=True)
class Import:
    source: str  # dotted module that imports
    target: str  # dotted module (or package) imported
    line: int
    runs: bool  # False under ``if TYPE_CHECKING:``


def module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def imports_of(root: Path, path: Path) -> Iterator[Import]:
    """Every import of ``root``'s package written in ``path``, relative ones resolved."""
    source = module_name(root, path)
    package = source if path.name == "__init__.py" else source.rpartition(".")[0]
    top = root.name

    def visit(node: ast.AST, runs: bool) -> Iterator[Import]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child.test):
                for stmt in child.body:
                    yield from visit_stmt(stmt, False)
                for stmt in child.orelse:
                    yield from visit_stmt(stmt, runs)
            else:
                yield from visit_stmt(child, runs)

    def visit_stmt(node: ast.AST, runs: bool) -> Iterator[Import]:
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == top:
                    yield Import(source, alias.name, node.lineno, runs)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] == top:
                for alias in node.names:  # ``from broker.x import y``: y may be a module
                    yield Import(source, f"{target}.{alias.name}", node.lineno, runs)
        else:
            yield from visit(node, runs)

    yield from visit(ast.parse(path.read_text(), str(path)), True)


def all_imports(root: Path) -> list[Import]:
    return [imp for path in sorted(root.rglob("*.py")) for imp in imports_of(root, path)]


def _existing_module(root: Path, dotted: str) -> str:
    """``broker.x.y.Name`` -> ``broker.x.y``: the longest prefix that is a module or package."""
    parts = dotted.split(".")
    while len(parts) > 1:
        path = root.parent.joinpath(*parts)
        if path.with_suffix(".py").is_file() or (path / "__init__.py").is_file():
            return ".".join(parts)
        parts.pop()
    return parts[0]


def unit_of(dotted: str) -> str | None:
    """The layer unit of a module: its folder under broker/, or a top-level module's name."""
    parts = dotted.split(".")
    return parts[1] if len(parts) > 1 else None


def layer_violations(root: Path, layers: tuple[tuple[str, ...], ...]) -> list[str]:
    rank = {unit: i for i, units in enumerate(layers) for unit in units}
    found = []
    units = {p.stem if p.is_file() else p.name for p in root.iterdir()
             if (p.suffix == ".py" and p.name != "__init__.py")
             or (p.is_dir() and (p / "__init__.py").exists())}
    for unit in sorted(units - rank.keys()):
        found.append(f"broker/{unit} is in no layer: place it in LAYERS")
    for imp in all_imports(root):
        target = _existing_module(root, imp.target)
        src, dst = unit_of(imp.source), unit_of(target)
        if src is None or dst is None or src == dst or src not in rank or dst not in rank:
            continue
        message = f"{imp.source} (line {imp.line}) imports {target}: {src} is below {dst}"
        if rank[dst] > rank[src] and message not in found:
            found.append(message)
    return found


def import_circles(root: Path) -> list[list[str]]:
    """Groups of modules that import each other at run time (strongly connected, size > 1)."""
    graph: dict[str, set[str]] = {}
    for imp in all_imports(root):
        graph.setdefault(imp.source, set())
        if imp.runs:
            target = _existing_module(root, imp.target)
            if target != imp.source and not imp.source.startswith(target + "."):
                graph[imp.source].add(target)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles = []

    def connect(node: str) -> None:  # Tarjan's algorithm
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph.get(node, ()):
            if nxt not in index:
                connect(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                circles.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            connect(node)
    return circles


def test_no_broker_folder_imports_one_above_it():
    assert layer_violations(ROOT, LAYERS) == []


def test_no_two_broker_modules_import_each_other():
    assert import_circles(ROOT) == []


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "broker"
    for name, text in {"__init__.py": "", **files}.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_the_checks_catch_an_upward_import_a_lazy_one_and_a_circle(tmp_path):
    root = _tree(tmp_path, {
        "low/__init__.py": "",
        "low/a.py": "def f():\n    from broker.high import b\n",  # lazy, still upward
        "low/c.py": "from . import d\n",
        "low/d.py": "from broker.low.c import X\n",
        "high/__init__.py": "",
        "high/b.py": "from broker.low import a\n",
        "stray/__init__.py": "",
    })
    layers = (("low",), ("high",))
    assert layer_violations(root, layers) == [
        "broker/stray is in no layer: place it in LAYERS",
        "broker.low.a (line 2) imports broker.high.b: low is below high",
    ]
    # The lazy import runs when f is called: with b's import of a, a circle too.
    assert import_circles(root) == [["broker.high.b", "broker.low.a"],
                                    ["broker.low.c", "broker.low.d"]]


def test_an_annotation_only_import_is_a_layer_question_but_not_a_circle(tmp_path):
    root = _tree(tmp_path, {
        "low/__init__.py": "",
        "low/a.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                    "    from broker.low.b import B\n    from broker.high import h\n",
        "low/b.py": "from broker.low.a import A\n",
        "high/__init__.py": "",
        "high/h.py": "",
    })
    assert import_circles(root) == []
    assert layer_violations(root, (("low",), ("high",))) == [
        "broker.low.a (line 4) imports broker.high.h: low is below high"]


OPERATOR_ONLY = {"kopf", "kafka", "kafkube_operator", "kafkube"}  # kafka: kafka-python


def third_party_imports(root: Path) -> dict[str, set[str]]:
    """Top-level names imported outside ``root``'s own package, with the modules that do."""
    found: dict[str, set[str]] = {}
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module] if isinstance(node, ast.ImportFrom) and not node.level
                     and node.module else [])
            for name in names:
                found.setdefault(name.split(".")[0], set()).add(module_name(root, path))
    return found


def test_the_broker_needs_none_of_the_operators_dependencies():
    """A broker image installs kafkube without the ``operator`` extra (operator/Dockerfile adds
    it): no broker module may import the operator, the command line above both, kopf or
    kafka-python, and the base dependencies must not pull them in."""
    imported = third_party_imports(ROOT)
    assert {name: sorted(mods) for name, mods in imported.items() if name in OPERATOR_ONLY} == {}
    project = tomllib.loads((ROOT.parent / "pyproject.toml").read_text())["project"]
    base = {req.split("=")[0].split(">")[0].split("[")[0].strip()
            for req in project["dependencies"]}
    assert base.isdisjoint({"kopf", "kafka-python"}), base
    assert {"kopf", "kafka-python"} <= {
        req.split("=")[0] for req in project["optional-dependencies"]["operator"]}


TEST_ONLY = {"confluent_kafka", "pytest", "aiokafka", "kafka", "kopf", "kafkube_operator",
             "hypothesis", "matplotlib", "tests", "bench"}


def imports_reached(path: Path, package: str) -> dict[str, set[str]]:
    """Top-level names imported by ``path`` and, transitively, by the modules of ``package``
    it imports (wherever the import is written), with the files that import them."""
    root = ROOT.parent
    found: dict[str, set[str]] = {}
    todo, seen = [path], set()
    while todo:
        current = todo.pop()
        if current in seen:
            continue
        seen.add(current)
        for node in ast.walk(ast.parse(current.read_text(), str(current))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module] if isinstance(node, ast.ImportFrom) and not node.level
                     and node.module else [])
            for name in names:
                found.setdefault(name.split(".")[0], set()).add(str(current.relative_to(root)))
                if name.startswith(package):
                    target = root.joinpath(*name.split("."))
                    for candidate in (target.with_suffix(".py"), target / "__init__.py"):
                        if candidate.is_file():
                            todo.append(candidate)
    return found


def test_kafkube_dev_runs_on_the_products_dependencies_alone():
    """`kafkube dev` ships with the broker: the harness modules it uses import nothing of the
    test extras (kafkube/harness/metadata.py, which needs confluent-kafka, is not among them)."""
    imported = imports_reached(ROOT.parent / "kafkube" / "dev.py", "kafkube.harness")
    assert {name: sorted(files) for name, files in imported.items() if name in TEST_ONLY} == {}
