"""The figures of a side-by-side run (kafkube and Apache Kafka, interleaved rounds) and
their tables: each figure's median over the rounds with its range, the ratio as the median
of the per-round ratios, and every run's raw numbers.

Shared by ``python -m bench compare`` and ``python -m bench transactions``."""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from bench.systems import SYSTEMS
from kafkube.harness import kafka_jars


@dataclass
class Figure:
    """One measured figure of one workload, client and system."""

    workload: int
    name: str  # e.g. "produce acks=1, 1 broker"
    client: str  # "rdkafka" or "java"
    metric: str  # e.g. "MB/s", "p99 ms"
    better: str  # "higher" or "lower"
    system: str
    value: float
    raw: dict[str, Any] = field(default_factory=dict)
    round: int = 0  # which of the interleaved rounds (--rounds) measured it


@dataclass(frozen=True)
class Summary:
    """One figure over the rounds: each system's values in round order, and kafkube/Kafka
    per round (the two runs of a round are adjacent in time, so they share the machine's
    mood; their ratio is steadier than a ratio of medians)."""

    workload: int
    name: str
    client: str
    metric: str
    better: str
    kafka: tuple[float, ...]
    kafkube: tuple[float, ...]
    ratios: tuple[float, ...]


def summarise(figures: list[Figure]) -> list[Summary]:
    """Per workload, client and metric (in workload order, then first measured), both
    systems' values over the rounds."""
    keys: dict[tuple[int, str, str, str], dict[str, dict[int, float]]] = {}
    better: dict[tuple[int, str, str, str], str] = {}
    for f in figures:
        key = (f.workload, f.name, f.client, f.metric)
        keys.setdefault(key, {s: {} for s in SYSTEMS})[f.system][f.round] = f.value
        better[key] = f.better
    out = []
    for key, by_system in sorted(keys.items(), key=lambda kv: kv[0][0]):
        kafka_, kafkube_ = by_system["kafka"], by_system["kafkube"]
        ratios = tuple(kafkube_[r] / kafka_[r] for r in sorted(kafka_.keys() & kafkube_.keys())
                       if kafka_[r])
        out.append(Summary(*key, better[key], tuple(v for _, v in sorted(kafka_.items())),
                           tuple(v for _, v in sorted(kafkube_.items())), ratios))
    return out


def percentile(values: list[float], q: float) -> float:
    """Nearest rank below: the sorted values' element at ``int(q * n)`` (q in 0-1), the
    figure every latency of the benches is quoted with."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def spread(values: tuple[float, ...], formatter: Callable[[float], str]) -> str:
    """The median, and with more than one value their range: "1.23 (1.10-1.31)"."""
    if not values:
        return "-"
    middle = formatter(statistics.median(values))
    if len(values) == 1:
        return middle
    return f"{middle} ({formatter(min(values))}-{formatter(max(values))})"


def fmt(value: float | None) -> str:
    """A figure for a table: one decimal from 10 up, two below; "-" for none."""
    if value is None:
        return "-"
    return f"{value:,.1f}" if abs(value) >= 10 else f"{value:,.2f}"


def ratio_fmt(value: float) -> str:
    """A ratio for a table: two decimals."""
    return f"{value:.2f}"


def ahead(summary: Summary) -> str:
    """Who leads on the median ratio."""
    if not summary.ratios:
        return ""
    ratio = statistics.median(summary.ratios)
    return "kafkube ahead" if (ratio >= 1 if summary.better == "higher" else ratio <= 1) \
        else "Kafka ahead"


def table(figures: list[Figure], markdown: bool = False) -> str:
    """Each figure's median over the rounds with its range, for both systems, and the
    median of the per-round ratios with theirs."""
    rows = [[str(s.workload), s.name, s.client, s.metric, spread(s.kafka, fmt),
             spread(s.kafkube, fmt), spread(s.ratios, ratio_fmt), f"{s.better} is better",
             ahead(s)] for s in summarise(figures)]
    head = ["#", "workload", "client", "unit", f"Kafka {kafka_jars.version()}", "kafkube",
            "kafkube/Kafka", "", ""]
    if markdown:
        out = ["| " + " | ".join(head[:7]) + " | better | |",
               "|---|---|---|---|---:|---:|---:|---|---|"]
        out += ["| " + " | ".join(r) + " |" for r in rows]
        return "\n".join(out)
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    right = {4, 5, 6}

    def line(r: list[str]) -> str:
        return "  ".join(c.rjust(w) if i in right else c.ljust(w)
                         for i, (c, w) in enumerate(zip(r, widths, strict=True))).rstrip()
    return "\n".join([line(head), "-" * len(line(head)), *map(line, rows)])


def raw_table(figures: list[Figure]) -> str:
    """Markdown: every run's raw numbers, one row per round, system, workload and client."""
    out = ["| # | workload | client | round | system | records | bytes | seconds | "
           "broker CPU s | broker CPU s/GB | machine busy | other |",
           "|---|---|---|---:|---|---:|---:|---:|---:|---:|---:|---|"]
    done: set[tuple[str, int, str, str, int]] = set()
    first: dict[tuple[int, str, str], int] = {}  # rows in run order, within a workload
    for f in figures:
        first.setdefault((f.workload, f.name, f.client), len(first))
    for f in sorted(figures, key=lambda f: (f.workload, first[f.workload, f.name, f.client],
                                            f.round, SYSTEMS.index(f.system))):
        key = (f.system, f.workload, f.client, f.name, f.round)
        if key in done:
            continue
        done.add(key)
        r = f.raw
        nbytes = r.get("bytes", 0)
        per_gb = r["broker_cpu_s"] / (nbytes / 1e9) if nbytes else 0
        other = {k: v for k, v in r.items() if k not in (
            "records", "bytes", "seconds", "broker_cpu_s", "machine_busy", "client_cpu",
            "client_main_cpu")}
        other_text = ", ".join(f"{k}={short(v)}" for k, v in other.items())
        out.append(f"| {f.workload} | {f.name} | {f.client} | {f.round + 1} | {f.system} | "
                   f"{r.get('records', '-'):,} | "
                   f"{nbytes:,} | {fmt(r.get('seconds'))} | {r['broker_cpu_s']:.2f} | "
                   f"{per_gb:.2f} | {100 * r['machine_busy']:.0f}% | {other_text} |")
    return "\n".join(out)


def short(v: Any) -> str:
    """A raw value for the "other" column: short floats, flat dicts."""
    if isinstance(v, float):
        return f"{v:.3g}" if abs(v) < 1000 else f"{v:,.0f}"
    if isinstance(v, dict):
        return "{" + " ".join(f"{k}:{short(x)}" for k, x in v.items()) + "}"
    return str(v)
