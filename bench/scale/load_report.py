"""The load curves' report: the ratio tables (kafkube/Kafka at every point), the sentence
naming where kafkube's cost grows faster than Kafka's, where the broker CPU went, the
chart, and the docs section. Reads points; measures nothing."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.figures import fmt
from bench.run_info import ROOT
from bench.scale import report
from bench.scale.load_points import (
    CURVES,
    METRICS,
    SYSTEMS,
    UNIT_NAMES,
    Metric,
    Point,
    at,
    find,
    label,
)
from bench.summary import Figure
from kafkube.harness import kafka_jars

SECTION = report.Section("scale-load",
                         "## Scale curves: partitions and producer connections (issue 17)",
                         ROOT / "docs" / "scale-load.png")


def cell(point: Point | None, key: str) -> str:
    if point is None:
        return "-"
    if key in point.values:
        value = point.values[key]
        return f"{value:,.0f}" if key == "connections" else fmt(value)
    return point.failed.get(key, "-")


def ratio(points: list[Point], curve: str, x: int, key: str) -> float | None:
    """kafkube / Kafka at one point, when both have the figure."""
    ka, ku = (find(points, curve, x, s) for s in SYSTEMS)
    if ka is None or ku is None or key not in ka.values or key not in ku.values:
        return None
    return ku.values[key] / ka.values[key] if ka.values[key] else None


def table_rows(points: list[Point], settings: dict[str, Any]) -> list[list[str]]:
    """One row per curve, figure and point, the points of a figure one under the other, so
    each figure reads as a curve down the rows."""
    rows = []
    for curve in CURVES:
        xs = sorted({p.x for p in points if p.curve == curve})
        for metric in METRICS[curve]:
            for x in xs:
                r = ratio(points, curve, x, metric.key)
                rows.append([curve, label(metric, settings), metric.unit, f"{x:,}",
                             cell(find(points, curve, x, "kafka"), metric.key),
                             cell(find(points, curve, x, "kafkube"), metric.key),
                             "-" if r is None else f"{r:.2f}", metric.better])
    return rows


HEAD = ["curve", "figure", "unit", "x", f"Kafka {kafka_jars.version()}", "kafkube",
        "kafkube/Kafka", "better"]


def table(points: list[Point], settings: dict[str, Any], markdown: bool = False) -> str:
    rows = [HEAD, *table_rows(points, settings)]
    if markdown:
        return report.markdown(rows, "lllrrrrl")
    return report.plain(rows, right=(3, 4, 5, 6), rule=True)


def wide_table(points: list[Point], settings: dict[str, Any]) -> str:
    """Markdown, one row per curve and figure, one column per point: "Kafka · kafkube
    (kafkube/Kafka)", so a row reads as both curves side by side."""
    out = []
    for curve in CURVES:
        xs = sorted({p.x for p in points if p.curve == curve})
        if not xs:
            continue
        out += ["", f"| {curve}: Kafka · kafkube (ratio) | unit | better | "
                + " | ".join(at(x, curve) for x in xs) + " |",
                "|---|---|---|" + "---:|" * len(xs)]
        for metric in METRICS[curve]:
            cells = []
            for x in xs:
                ka, ku = (cell(find(points, curve, x, s), metric.key).split(" (")[0]
                          for s in SYSTEMS)
                r = ratio(points, curve, x, metric.key)
                cells.append(f"{ka} · {ku}" + ("" if r is None else f" ({r:.2f})"))
            out.append(f"| {label(metric, settings)} | {metric.unit} | {metric.better} | "
                       + " | ".join(cells) + " |")
    return "\n".join(out[1:])


@dataclass(frozen=True)
class Growth:
    """How a figure's kafkube/Kafka ratio moves from a curve's first point to a later one: a
    ``worse`` above 1 means kafkube's cost grows faster than Kafka's up to that point."""

    curve: str
    metric: Metric
    first_x: int
    last_x: int
    first: float  # kafkube/Kafka at first_x
    last: float  # ... at last_x

    @property
    def worse(self) -> float:
        change = self.last / self.first
        return 1 / change if self.metric.better == "higher" else change


def growths(points: list[Point]) -> list[Growth]:
    """Per curve and figure with a better side: the ratio at the first point both systems
    reached and at the later one where it is worst against that (a point one system did not
    reach is named apart, in ``failures``)."""
    out = []
    for curve in CURVES:
        xs = sorted({p.x for p in points if p.curve == curve})
        for metric in METRICS[curve]:
            if not metric.better or metric.key == "rss_topic":  # rss_topic: near 0 at x=1
                continue
            both = [(x, r) for x in xs
                    if (r := ratio(points, curve, x, metric.key)) is not None and r > 0]
            if len(both) >= 2:
                grown = [Growth(curve, metric, both[0][0], x, both[0][1], r)
                         for x, r in both[1:]]
                out.append(max(grown, key=lambda g: g.worse))
    return out


def failures(points: list[Point], settings: dict[str, Any]) -> list[str]:
    """Points where one system has a figure and the other could not reach it, the figures
    that failed for one reason named together."""
    out = []
    for p in points:
        other = find(points, p.curve, p.x, "kafka" if p.system == "kafkube" else "kafkube")
        reasons: dict[str, list[str]] = {}
        for metric in METRICS[p.curve]:
            why = p.failed.get(metric.key, "")
            if other is not None and metric.key in other.values and why \
                    and not why.startswith("no "):
                reasons.setdefault(why, []).append(label(metric, settings))
        out += [f"{p.system} at {at(p.x, p.curve)}, {' / '.join(names)}: {why}"
                for why, names in reasons.items()]
    return out


def findings(points: list[Point], settings: dict[str, Any], threshold: float = 1.2) -> str:
    """The sentence naming where kafkube's cost grows faster than Kafka's: every figure
    whose kafkube/Kafka ratio worsens by more than ``threshold`` over its curve."""
    every = growths(points)
    worst = sorted((g for g in every if g.worse > threshold), key=lambda g: -g.worse)
    parts = [f"{label(g.metric, settings)} (kafkube/Kafka {g.first:.2f} at "
             f"{at(g.first_x, g.curve)}, {g.last:.2f} at {at(g.last_x, g.curve)}: "
             f"{g.worse:.1f}x worse)" for g in worst]
    failed = failures(points, settings)
    text = ("Where one system reached a point and the other did not: " + "; ".join(failed)
            + ". " if failed else "")
    if not every:
        text += "No figure has both systems at two points or more: no growth to compare."
    elif parts:
        text += ("Over the points both reached, kafkube's cost grows faster than Kafka's in: "
                 + "; ".join(parts) + ".")
    else:
        text += ("Over the points both reached, kafkube's cost grows no faster than Kafka's on "
                 f"any figure (no kafkube/Kafka ratio worsens by more than {threshold:g}x).")
    return text


def thread_notes(points: list[Point]) -> list[str]:
    """Where each system's broker CPU went at each curve's largest point, phase by phase:
    the busiest thread names with their user/system seconds."""
    out = []
    for curve in CURVES:
        xs = [p.x for p in points if p.curve == curve]
        for p in points:
            if p.curve != curve or p.x != max(xs, default=None):
                continue
            for key in ("create_threads", "produce_threads", "consume_threads",
                        "idle_threads", "rate_threads"):
                spent = p.raw.get(key)
                if spent:
                    busy = ", ".join(f"{name} {user:.1f}+{system:.1f}"
                                     for name, user, system in spent)
                    out.append(f"{p.system}, {at(p.x, curve)}, "
                               f"{key.removesuffix('_threads')}: {busy}")
    return out


def chart(points: list[Point], settings: dict[str, Any], path: Path, title: str) -> None:
    """One row per curve; columns MB/s, broker CPU s/GB, RSS MiB and times (create, or p99
    ack latency) against x (log), one colour per system, one line style per figure."""
    plt = report.pyplot()
    curves = [c for c in CURVES if any(p.curve == c for p in points)]
    if not curves:
        return
    panels = {
        "partitions": (("MB/s", ("produce_mbps", "consume_mbps")),
                       ("broker CPU s/GB", ("produce_cpu", "consume_cpu")),
                       ("broker RSS MiB", ("rss_peak", "rss_idle")),
                       ("s (log)", ("writable_s", "create_s"))),
        "connections": (("MB/s", ("produce_mbps",)),
                        ("broker CPU s/GB", ("produce_cpu", "rate_cpu")),
                        ("broker RSS MiB", ("rss_peak", "rss_idle")),
                        ("ms (log)", ("rate_p99",))),
        "consumers": (("% of a core", ("rate_cpu", "idle_cpu")),
                      ("MB/s delivered", ("rate_mbps",)),
                      ("broker RSS MiB", ("rss_peak", "rss_idle")),
                      ("ms (log)", ("rate_p99",))),
    }
    colors = report.COLORS
    styles = ("-", "--")
    fig, axes = plt.subplots(len(curves), 4, figsize=(19, 4.6 * len(curves)), squeeze=False)
    for row, curve in zip(axes, curves, strict=True):
        xs = sorted({p.x for p in points if p.curve == curve})
        metrics = {m.key: m for m in METRICS[curve]}
        for ax, (unit, keys) in zip(row, panels[curve], strict=True):
            for row_at, system in enumerate(SYSTEMS):
                for style, key in zip(styles, keys, strict=False):
                    pts = [(x, p.values[key]) for x in xs
                           if (p := find(points, curve, x, system)) and key in p.values]
                    if pts:
                        ax.plot(*zip(*pts, strict=True), style, marker="o", markersize=3,
                                color=colors[system],
                                label=f"{'Kafka' if system == 'kafka' else 'kafkube'}: "
                                      f"{label(metrics[key], settings)}")
                # A point this system did not reach: one short mark per x, at the bottom.
                for x in xs:
                    p = find(points, curve, x, system)
                    why = next((p.failed[k] for k in keys if p and k in p.failed), None)
                    if why:
                        ax.annotate(f"x {system}: {why.split(' (')[0]}", (x, 0.03 + 0.06 * row_at),
                                    xycoords=("data", "axes fraction"), fontsize=6,
                                    color=colors[system], ha="right")
            ax.set_xscale("log")
            ax.set_xticks(xs, [f"{x:,}" for x in xs])
            ax.set_xlabel(UNIT_NAMES[curve])
            ax.set_ylabel(unit)
            if unit.endswith("(log)"):
                ax.set_yscale("log")
            else:
                ax.set_ylim(bottom=0)
            ax.grid(alpha=0.3)
            ax.legend(fontsize=6.5)
    report.save_chart(fig, path, title, rect=(0, 0, 1, 0.97))


def docs_block(result: dict[str, Any], chart_path: Path | None) -> str:
    points = [Point(**p) for p in result["points"]]
    settings = result["settings"]
    lines = [*SECTION.head(result), *[f"- {line}" for line in result["notes"]], "",
             wide_table(points, settings), "", findings(points, settings), ""]
    for p in points:
        if p.raw.get("create_note"):
            lines += [f"Note: {p.system} at {at(p.x, p.curve)}: "
                      f"{p.raw['create_note']}.", ""]
    busy = thread_notes(points)
    if busy:
        lines += ["Broker CPU by thread at the largest points (thread name: user+system "
                  "seconds over the phase; create: CreateTopics and the write to each "
                  "partition):", "", *[f"- {line}" for line in busy], ""]
    if chart_path is not None:
        lines += [f"![scale curves, kafkube and Apache Kafka]({chart_path.name})", ""]
    return "\n".join([*lines, SECTION.end])


def write_docs(result: dict[str, Any], docs: Path | None = None,
               chart_path: Path | None = None) -> None:
    """Chart first, then the section (``SECTION``'s files unless told)."""
    chart_path = chart_path or SECTION.chart
    points = [Point(**p) for p in result["points"]]
    chart(points, result["settings"], chart_path,
          f"kafkube and Apache Kafka {kafka_jars.version()}, one broker each, "
          f"{result['started']}; {result['machine']}")
    SECTION.write(docs_block(result, chart_path), docs)


def publish(result: dict[str, Any], write: bool) -> None:
    """Print the table, the findings and where the CPU went; with ``write``, also the
    chart and the docs section (only a run of both systems has ratios worth publishing)."""
    points = [Point(**p) for p in result["points"]]
    print()
    print(table(points, result["settings"]))
    print()
    print(findings(points, result["settings"]))
    print("\n".join(thread_notes(points)))
    for p in points:
        if p.raw.get("create_note"):
            print(f"note: {p.system} at {at(p.x, p.curve)}: {p.raw['create_note']}")
    print(f"machine: {result['machine']}")
    print(f"command: {result['command']}")
    if write:
        write_docs(result)
        print(f"written: {SECTION.docs} and {SECTION.chart}")


def summary_figures(result: dict[str, Any]) -> list[Figure]:
    """docs/performance.json's entries of a run: every figure with a better side at the
    largest point of each curve where both systems have it (the figures the summary table
    quotes), named with the curve's x, e.g. "scale: 10,000 partitions, produce, acks=1"."""
    points = [Point(**p) for p in result["points"]]
    settings = result["settings"]
    date = result["started"][:10]
    pinned = ", a core each (--pin)" if settings.get("pinned") else ""
    out = []
    for curve in CURVES:
        for metric in METRICS[curve]:
            if not metric.better:
                continue
            xs = [x for x in sorted({p.x for p in points if p.curve == curve}, reverse=True)
                  if ratio(points, curve, x, metric.key) is not None]
            if not xs:
                continue
            ka, ku = (find(points, curve, xs[0], s) for s in SYSTEMS)
            assert ka is not None and ku is not None
            out.append(Figure(f"scale: {at(xs[0], curve)}, {label(metric, settings)}{pinned}",
                              metric.unit, round(ku.values[metric.key], 3),
                              round(ka.values[metric.key], 3), metric.better == "higher",
                              result["command"], date))
    return out
