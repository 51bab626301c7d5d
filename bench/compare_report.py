"""What ``python -m bench compare`` publishes: the ratio table on the terminal, and with
``write`` the chart (docs/kafka-compare.png) and the generated block of docs/performance.md's
"Side by side with Apache Kafka" section."""

from __future__ import annotations

import re
import statistics
from pathlib import Path
from typing import Any

from bench import summary
from bench.figures import Figure, fmt, raw_table, summarise, table
from bench.run_info import DOCS, ROOT, machine
from kafkube.harness import kafka_jars

CHART = ROOT / "docs" / "kafka-compare.png"
BEGIN = "<!-- bench compare: begin (written by `python -m bench compare`) -->"
END = "<!-- bench compare: end -->"
SHORT_NAMES = {1: "produce\nacks=1", 2: "produce\nacks=all", 3: "consume\n", 5: "group\nof 3"}


def chart(figures: list[Figure], path: Path, title: str) -> None:
    """Two panels: throughput (MB/s, higher is better) and latency (ms, lower is better)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    summaries = summarise(figures)
    tput = [x for x in summaries if x.metric == "MB/s"]
    lat = [x for x in summaries if x.metric.endswith(" ms")]
    panels = [p for p in ((tput, "MB/s (higher is better)"), (lat, "ms (lower is better)")) if p[0]]
    if not panels:
        return
    fig, axes = plt.subplots(1, len(panels), figsize=(7.5 * len(panels), 5.2), squeeze=False,
                             gridspec_kw={"width_ratios": [max(len(p[0]), 2) for p in panels]})
    colors = {"kafka": "#4c72b0", "kafkube": "#dd8452"}
    for ax, (rows, unit) in zip(axes[0], panels, strict=True):
        labels = []
        for i, x in enumerate(rows):
            if x.metric == "MB/s":
                labels.append(f"{x.workload}. {SHORT_NAMES.get(x.workload, '')}\n{x.client}")
            else:  # "p99 ms" of "e2e latency at 20 MB/s, ..."
                at = re.search(r"at ([\d.]+) MB/s", x.name)
                labels.append(f"{x.metric.split()[0]}, " + (f"{at.group(1)} MB/s" if at else
                                                            "1 in flight\n(EndToEndLatency)"))
            for j, (sys_name, values) in enumerate((("kafka", x.kafka), ("kafkube", x.kafkube))):
                if not values:
                    continue
                middle = statistics.median(values)
                # The bar is the median; the whisker spans the rounds' lowest to highest.
                bar = ax.bar(i + (j - 0.5) * 0.38, middle, 0.38, color=colors[sys_name],
                             yerr=[[middle - min(values)], [max(values) - middle]],
                             error_kw={"elinewidth": 0.8, "capsize": 2},
                             label=(f"Apache Kafka {kafka_jars.version()}" if sys_name == "kafka"
                                    else "kafkube") if i == 0 else None)
                ax.bar_label(bar, labels=[fmt(middle)], fontsize=6.5, padding=1)
            if x.ratios:
                ax.annotate(f"{statistics.median(x.ratios):.2f}x", (i, 0),
                            xycoords=("data", "axes fraction"),
                            xytext=(0, -46), textcoords="offset points", ha="center",
                            fontsize=7, color="#555")
        ax.set_xticks(range(len(rows)), labels, fontsize=7)
        ax.set_ylabel(unit)
        top = max((v for x in rows for v in (*x.kafka, *x.kafkube)), default=1.0)
        if unit.startswith("ms"):
            ax.set_yscale("log")
            ax.set_ylim(top=top * 6)  # room for the legend above the bars
        else:
            ax.set_ylim(0, top * 1.2)
        ax.legend(fontsize=8, loc="upper left", ncols=2)
        ax.grid(axis="y", alpha=0.3)
    fig.suptitle(title, fontsize=9)
    fig.text(0.01, 0.01, "bars: medians over the rounds, whiskers: their range; below each "
             "pair: the median of kafkube / Kafka per round", fontsize=7, color="#555")
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_docs(figures: list[Figure], header: list[str], chart_path: Path | None) -> None:
    """Replace the generated block of docs/performance.md's "Side by side with Apache Kafka"
    section (the section is added at the end if it is missing)."""
    block = [BEGIN, "", *header, "", table(figures, markdown=True), ""]
    if chart_path is not None:
        block += [f"![kafkube and Apache Kafka side by side]({chart_path.name})", ""]
    block += ["Raw numbers (seconds: the timed span; broker CPU: all broker processes over "
              "the client process's life; machine busy: all cores, 100% = one core):", "",
              raw_table(figures), "", END]
    text = DOCS.read_text() if DOCS.exists() else "# Performance\n"
    if BEGIN in text and END in text:
        before, rest = text.split(BEGIN, 1)
        after = rest.split(END, 1)[1]
        text = before + "\n".join(block) + after
    else:
        text = (text.rstrip("\n") + "\n\n## Side by side with Apache Kafka\n\n"
                + "\n".join(block) + "\n")
    DOCS.write_text(text)


def publish(result: dict[str, Any], write: bool) -> None:
    """Print the ratio table; with ``write``, also the chart and docs/performance.md."""
    figures = [Figure(**f) for f in result["figures"]]
    print()
    print(table(figures))
    print()
    print(f"ratio: kafkube / Kafka. {result['header'][-1][2:]}")
    print(f"machine: {machine()}")
    print(f"command: {result['command']}")
    if write:
        chart(figures, CHART, f"kafkube vs Apache Kafka {kafka_jars.version()}, "
                              f"{result['started']}; {machine()}")
        write_docs(figures, result["header"], CHART)
        print(f"written: {DOCS} and {CHART}")


CLIENT_NAMES = {"rdkafka": "librdkafka", "java": "Java client"}
UNITS = ("s/GB", "MB/s", "ms", "s")


def unit_of(metric: str) -> str:
    """The unit a figure's metric names: "broker CPU s/GB" -> s/GB, "p99 ms" -> ms,
    "s, subscribe to last record" -> s."""
    words = metric.replace(",", " ").split()
    return next((unit for unit in UNITS if unit in words), metric)


def summary_figures(result: dict[str, Any]) -> list[summary.Figure]:
    """docs/performance.json's entries of a run: every figure both systems measured, as the
    medians over the rounds, named "<workload>, <client>, <metric>" (the broker CPU ones
    "…, broker CPU s/GB"); a figure whose Kafka median is 0 has no ratio and is left out."""
    out = []
    for s in summarise([Figure(**f) for f in result["figures"]]):
        if not s.kafka or not s.kafkube or not statistics.median(s.kafka):
            continue
        out.append(summary.Figure(
            f"{s.name}, {CLIENT_NAMES.get(s.client, s.client)}, {s.metric}",
            unit_of(s.metric), round(statistics.median(s.kafkube), 3),
            round(statistics.median(s.kafka), 3), s.better == "higher", result["command"],
            result["started"][:10]))
    return out
