"""What both scale commands share to report and to run: their section of
docs/performance.md between its markers, text and markdown tables, the chart's frame, the
command line that reproduces a run, and the start of a run (SIGTERM, timestamped log).
It measures nothing and knows no curve."""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.arguments import comma_list
from bench.run_info import DOCS
from bench.systems import SYSTEMS

COLORS = {"kafka": "#4c72b0", "kafkube": "#dd8452"}


@dataclass(frozen=True)
class Section:
    """One command's generated part of docs/performance.md: the block between ``begin``
    and ``end``, added at the end under ``heading`` when the markers are missing. Only
    the block is ever rewritten: other sections of the file are written by others."""

    name: str  # the marker's name, e.g. "scale-load"
    heading: str
    chart: Path
    docs: Path = DOCS

    @property
    def begin(self) -> str:
        return f"<!-- {self.name}:begin -->"

    @property
    def end(self) -> str:
        return f"<!-- {self.name}:end -->"

    def head(self, result: dict[str, Any]) -> list[str]:
        """The block's first lines: the begin marker, when, which commit and command, and
        the machine (a figure means little without them)."""
        return [self.begin, "", f"{result['started']}, commit {result['commit']}: "
                f"`{result['command']}`", "", f"- machine: {result['machine']}"]

    def replace(self, text: str, block: str) -> str:
        """``text`` with the part between the markers replaced by ``block``; the section is
        added at the end, under its heading, if the markers are missing."""
        if self.begin in text and self.end in text.split(self.begin, 1)[1]:
            before, rest = text.split(self.begin, 1)
            return before + block + rest.split(self.end, 1)[1]
        return text.rstrip("\n") + f"\n\n{self.heading}\n\n{block}\n"

    def write(self, block: str, docs: Path | None = None) -> None:
        """The docs file is read right before it is written, as other sections of it are
        written by others."""
        path = docs or self.docs
        path.write_text(self.replace(path.read_text() if path.exists() else "# Performance\n",
                                     block))


def markdown(rows: list[list[str]], align: str | None = None) -> str:
    """``rows[0]`` as the head; ``align`` a letter per column, ``r`` for right-aligned."""
    align = align or "l" * len(rows[0])
    rule = "|" + "".join("---:|" if a == "r" else "---|" for a in align)
    return "\n".join(["| " + " | ".join(rows[0]) + " |", rule,
                      *["| " + " | ".join(r) + " |" for r in rows[1:]]])


def plain(rows: list[list[str]], right: tuple[int, ...] = (), rule: bool = False) -> str:
    """``rows`` in padded columns for a terminal, the ``right`` ones right-aligned; with
    ``rule``, a line of dashes under the head."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]

    def line(r: list[str]) -> str:
        return "  ".join(c.rjust(w) if i in right else c.ljust(w)
                         for i, (c, w) in enumerate(zip(r, widths, strict=True))).rstrip()
    head = [line(rows[0]), "-" * len(line(rows[0]))] if rule else [line(rows[0])]
    return "\n".join([*head, *map(line, rows[1:])])


def publish_run(name: str, result: dict[str, Any], headline: list[str],
                rows: list[list[str]], align: str, docs: Path | None) -> Path:
    """A fault run's figures: the summary printed, the whole result as JSON under the
    cache's bench/ (``<name>-<time>-<seed>.json``), and with ``docs`` its block there
    ("## The last long run"). ``align``: the markdown table's, l or r per column."""
    from kafkube.harness.checkout import cache_dir

    right = tuple(i for i, a in enumerate(align) if a == "r")
    print("\n" + "\n".join(headline) + "\n\n" + plain(rows, right=right, rule=True))
    path = (cache_dir() / "bench"
            / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}-{result['seed']}.json")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=1))
    print(f"\nevery fault and figure: {path}")
    if docs is not None:
        section = Section(name, "## The last long run", docs, docs)
        section.write("\n".join([*section.head(result), *(f"- {line}" for line in headline),
                                 "", markdown(rows, align), "", section.end]))
        print(f"figures written to {docs}")
    return path


def pyplot() -> Any:
    """matplotlib's pyplot without a display (the benchmarks run headless)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_chart(fig: Any, path: Path, title: str,
               rect: tuple[float, float, float, float] | None = None) -> None:
    """Title, layout, the PNG at ``path``, and the figure closed (a run draws several)."""
    fig.suptitle(title, fontsize=9)
    fig.tight_layout(**({"rect": rect} if rect else {}))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    pyplot().close(fig)


def command_line(name: str, argv: list[str], prefix: tuple[str, ...] = ()) -> str:
    """The command that reproduces this run, the interpreter relative to here when it is
    below here."""
    python = os.path.relpath(sys.executable, Path.cwd())
    python = sys.executable if python.startswith("..") else python
    return shlex.join([*prefix, python, "-m", "bench", name, *argv])


def start_run() -> Callable[[str], None]:
    """SIGTERM unwinds like Ctrl-C (through every finally block, so every broker started is
    stopped); returns the run's log, each line stamped with seconds since now."""
    def on_term(_sig: int, _frame: Any) -> None:
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, on_term)
    wall0 = time.monotonic()

    def log(text: str) -> None:
        print(f"[{time.monotonic() - wall0:7.1f}s] {text}", flush=True)
    return log


def new_parser(name: str, description: str | None, curves: tuple[str, ...],
               curves_help: str, systems_help: str) -> argparse.ArgumentParser:
    """The command's parser with the options both commands have first: --curves and
    --systems, each a comma-separated subset."""
    parser = argparse.ArgumentParser(prog=f"python -m bench {name}", description=description,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--curves", type=comma_list(curves), default=list(curves), help=curves_help)
    parser.add_argument("--systems", type=comma_list(SYSTEMS), default=list(SYSTEMS),
                        help=systems_help)
    return parser


def add_output_options(parser: argparse.ArgumentParser, section: Section, what: str) -> None:
    """--json, --no-docs and --render, the same for both commands."""
    parser.add_argument("--json", type=Path, metavar="FILE", help=f"also write every {what} here")
    parser.add_argument("--no-docs", action="store_true",
                        help=f"do not write docs/{section.docs.name} and "
                             f"docs/{section.chart.name}")
    parser.add_argument("--render", type=Path, metavar="FILE",
                        help="run nothing: print and publish a --json FILE")


def render(args: argparse.Namespace, publish: Callable[[dict[str, Any], bool], None]) -> bool:
    """With ``--render FILE``: publish that earlier run's figures (no broker started) and
    say so; the docs and chart are written again unless ``--no-docs``."""
    if args.render is None:
        return False
    publish(json.loads(args.render.read_text()), not args.no_docs)
    return True


def save_json(args: argparse.Namespace, result: dict[str, Any], what: str) -> None:
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
        print(f"{what}: {args.json}")

