"""The recovery command's report: the table of both systems' seconds and kafkube/Kafka,
where the costs grow apart (marginal cost, not a ratio of totals), the chart, and the docs
section. Reads points; measures nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.run_info import ROOT
from bench.scale import report
from bench.scale.image import CHURN_BROKERS, MAX_PACKED
from bench.scale.recovery_points import Point
from bench.summary import Figure
from bench.systems import PARTITIONS, SYSTEMS
from kafkube.harness import kafka_jars

CURVES = ("recovery", "metadata", "topics", "image")
SECTION = report.Section("scale-recovery", "## Scale curves: recovery, metadata propagation, "
                         "the cluster image (issue 17)",
                         ROOT / "docs" / "scale-recovery.png")


def _x(curve: str, x: float) -> str:
    return f"{x:g} GB" if curve == "recovery" else f"{int(x):,}"


def _s(value: Any) -> str:
    return "-" if value is None else f"{value:.2f}"


def ratio(kafkube: float | None, kafka_: float | None) -> float | None:
    if kafkube is None or not kafka_:
        return None
    return kafkube / kafka_


def table(points: list[Point], markdown: bool = False) -> str:
    """One row per curve and x: both systems' seconds and kafkube/Kafka."""
    rows: list[list[str]] = []
    for curve in CURVES:
        for x in sorted({p.x for p in points if p.curve == curve}):
            rows += _rows(curve, x, [p for p in points if p.curve == curve and p.x == x])
    head = ["curve", "x", "figure", "Kafka", "kafkube", "kafkube/Kafka"]
    return report.markdown([head, *rows]) if markdown else report.plain([head, *rows])


def _rows(curve: str, x: float, points: list[Point]) -> list[list[str]]:
    by = {p.system: p for p in points}
    k, q = by.get("kafka"), by.get("kafkube")

    def fig(p: Point | None, key: str) -> Any:
        return None if p is None else p.figures.get(key)

    def row(label: str, key: str) -> list[str]:
        a, b = fig(k, key), fig(q, key)
        r = ratio(b, a)
        return [curve, _x(curve, x), label, _cell(k, a), _cell(q, b),
                "-" if r is None else f"{r:.2f}x"]
    if curve == "recovery":
        return [row("(a) Metadata, all led, s", "metadata_s"),
                row("(b) last offsets read, s", "readable_s"),
                row("CPU of the restarted process to (b), s", "recovery_cpu_s"),
                row("produce, MB/s", "produce_MBps")]
    if curve in ("metadata", "topics"):
        return [row("CreateTopics answered, s", "create_returned_s"),
                row("every broker: led, full ISR, s", "every_broker_s")]
    if q is None:
        return []
    return [[curve, _x(curve, x), "in the image ConfigMap, s", "n/a (KRaft)", _cell(q, q.seconds),
             "-"],
            [curve, _x(curve, x), "every broker: led, full ISR, s", "n/a",
             _cell(q, fig(q, "every_broker_s")), "-"],
            [curve, _x(curve, x), "image KiB (gzip) / limit share", "n/a",
             "-" if fig(q, "image_bytes") is None else
             f"{fig(q, 'image_bytes') / 1024:.1f} / {100 * fig(q, 'limit_share'):.1f}%", "-"],
            [curve, _x(curve, x), "image writes; ConfigMap PUT ms (mean)", "n/a",
             "-" if fig(q, "image_writes") is None else
             f"{fig(q, 'image_writes')}; {_s(fig(q, 'put_ms'))}", "-"],
            [curve, _x(curve, x), "whole image: encode / decode ms", "n/a",
             "-" if fig(q, "encode_ms") is None else
             f"{fig(q, 'encode_ms'):.0f} / {fig(q, 'decode_ms'):.0f}", "-"]]


def _cell(point: Point | None, value: Any) -> str:
    if point is None:
        return "-"
    if value is None:
        return f"failed ({point.error})" if point.error else "-"
    return f"{value:.2f}" if isinstance(value, float) else str(value)


MARGINAL = (("recovery", "readable_s", "recovery to readable", 1, "GB"),
            ("recovery", "metadata_s", "recovery to Metadata", 1, "GB"),
            ("metadata", "every_broker_s", "metadata propagation", 1000, "1,000 partitions"),
            ("topics", "every_broker_s", "topics propagation", 1000, "1,000 topics"))


def growth(points: list[Point]) -> list[str]:
    """Where kafkube's cost grows faster than Kafka's. A fixed start-up cost (a JVM, a KRaft
    election) moves a ratio of totals without saying anything about growth, so this compares
    marginal costs: each system's added seconds per unit of x from the smallest to the
    largest x both measured; "faster" when kafkube's is over 1.25x Kafka's (and 0.05 s more)."""
    out = []
    for curve, key, label, per, unit in MARGINAL:
        pairs = []
        for x in sorted({p.x for p in points if p.curve == curve}):
            by = {p.system: p.figures.get(key) for p in points if p.curve == curve and p.x == x}
            if by.get("kafka") is not None and by.get("kafkube") is not None:
                pairs.append((x, by["kafka"], by["kafkube"]))
        if len(pairs) < 2:
            continue
        (x0, k0, q0), (x1, k1, q1) = pairs[0], pairs[-1]
        dk, dq = (k1 - k0) / (x1 - x0) * per, (q1 - q0) / (x1 - x0) * per
        verb = ("FASTER than" if dq > 1.25 * dk and dq - dk > 0.05 else
                "slower than" if dq < dk / 1.25 and dk - dq > 0.05 else "about as fast as")
        out.append(f"{label}: kafkube's cost grows {verb} Kafka's: +{dq:.2f} s per {unit} "
                   f"against +{dk:.2f} s ({_x(curve, x0)} -> {_x(curve, x1)}; kafkube "
                   f"{q0:.2f} -> {q1:.2f} s, Kafka {k0:.2f} -> {k1:.2f} s)")
    image = sorted((p for p in points if p.curve == "image" and p.figures.get("image_bytes")),
                   key=lambda p: p.x)
    if image:
        last = image[-1]
        f = last.figures
        per = f["image_bytes"] / last.x
        json_kib = f.get("image_json_bytes", 0) / 1024
        out.append(f"image: {f['image_bytes'] / 1024:.1f} KiB gzip'd ({json_kib:,.0f} KiB of "
                   f"JSON) at {int(last.x):,} partitions, "
                   f"{100 * f['limit_share']:.2f}% of the 1 MiB ConfigMap limit; every image "
                   "write carries, and every broker decodes, the whole image"
                   + (f" ({f['encode_ms']:.0f} ms to encode, {f['decode_ms']:.0f} ms to decode "
                      "here)" if f.get("encode_ms") is not None else ""))
        churned = f.get("churned_bytes_per_partition")
        if churned:
            out.append(f"image limit: this cluster's fresh image compresses to {per:.1f} B per "
                       f"partition, but one with {CHURN_BROKERS} brokers, random placement and "
                       f"epochs (synthetic) takes {churned:.1f} B: the 1 MiB limit is then "
                       f"near {int(MAX_PACKED / churned):,} partitions")
    return out


def chart(points: list[Point], path: Path, title: str) -> None:
    """Three panels: recovery s vs GB, propagation s vs partitions, image KiB and write
    latency vs partitions."""
    fig, axes = report.pyplot().subplots(1, 3, figsize=(16, 4.8))
    colors = report.COLORS
    names = {"kafka": f"Apache Kafka {kafka_jars.version()}", "kafkube": "kafkube"}
    for system in SYSTEMS:
        rec = sorted((p for p in points if p.curve == "recovery" and p.system == system),
                     key=lambda p: p.x)
        for key, style, what in (("readable_s", "-o", "(b) readable"),
                                 ("metadata_s", ":s", "(a) Metadata")):
            xs = [p.x for p in rec if p.figures.get(key) is not None]
            ys = [p.figures[key] for p in rec if p.figures.get(key) is not None]
            if xs:
                axes[0].plot(xs, ys, style, color=colors[system], label=f"{names[system]} {what}")
        meta = sorted((p for p in points if p.curve == "metadata" and p.system == system
                       and p.seconds is not None), key=lambda p: p.x)
        if meta:
            axes[1].plot([p.x for p in meta], [p.seconds for p in meta], "-o",
                         color=colors[system], label=f"{names[system]}, partitions of 1 topic")
        many = sorted((p for p in points if p.curve == "topics" and p.system == system
                       and p.seconds is not None), key=lambda p: p.x)
        if many:
            axes[1].plot([p.x for p in many], [p.seconds for p in many], "--^",
                         color=colors[system], label=f"{names[system]}, topics of 1 partition")
    axes[0].set(xlabel="GB of log at the SIGKILL", ylabel="seconds from restart",
                title="Recovery after SIGKILL, 1 broker")
    axes[1].set(xlabel="partitions (or topics) created at once (RF 3)", ylabel="seconds",
                title="Until every broker serves them led, full ISR", xscale="log")
    image = sorted((p for p in points if p.curve == "image" and p.figures.get("image_bytes")),
                   key=lambda p: p.x)
    if image:
        ax = axes[2]
        xs = [p.x for p in image]
        ax.plot(xs, [p.figures["image_bytes"] / 1024 for p in image], "-o",
                color=colors["kafkube"], label="image ConfigMap, KiB (gzip)")
        ax.set(xlabel="partitions in the cluster", ylabel="KiB",
               title="kafkube image on the Kubernetes backend (no KRaft equivalent)")
        twin = ax.twinx()
        twin.plot(xs, [p.seconds for p in image], "--s", color="#55a868",
                  label="CreateTopics -> in the ConfigMap, s")
        twin.plot(xs, [p.figures.get("every_broker_s") for p in image], "-.d",
                  color="#8172b3", label="CreateTopics -> every broker serves it, s")
        twin.plot(xs, [(p.figures.get("put_ms") or 0) / 1000 for p in image], ":^",
                  color="#c44e52", label="ConfigMap PUT, mean s")
        twin.set_ylabel("seconds")
        lines = ax.get_legend_handles_labels()
        more = twin.get_legend_handles_labels()
        ax.legend(lines[0] + more[0], lines[1] + more[1], fontsize=7, loc="upper left")
    for ax in axes[:2]:
        if ax.lines:
            ax.legend(fontsize=7)
    for ax in axes:
        ax.grid(alpha=0.3)
    report.save_chart(fig, path, title)


def section(result: dict[str, Any], chart_path: Path | None) -> str:
    """The generated docs block, markers included."""
    points = [Point(**p) for p in result["points"]]
    lines = [*SECTION.head(result), *result["header"], "", table(points, markdown=True), ""]
    findings = growth(points)
    if findings:
        lines += ["Where the costs grow apart:", ""] + [f"- {f}" for f in findings] + [""]
    notes = [f"- {p.curve} {_x(p.curve, p.x)}, {p.system}: {n}" for p in points for n in p.notes]
    if notes:
        lines += ["What each system scanned at the restart:", "", *notes, ""]
    if chart_path is not None:
        lines += [f"![scale curves: recovery, metadata propagation, cluster image]"
                  f"({chart_path.name})", ""]
    lines.append(SECTION.end)
    return "\n".join(lines)


def write_docs(text: str, docs: Path | None = None) -> None:
    """The section between its markers (``SECTION``'s docs file unless told)."""
    SECTION.write(text, docs)


def publish(result: dict[str, Any], write: bool) -> None:
    points = [Point(**p) for p in result["points"]]
    print()
    print(table(points))
    print()
    for line in growth(points):
        print(line)
    print(f"machine: {result['machine']}")
    print(f"command: {result['command']}")
    if write:
        chart(points, SECTION.chart, f"kafkube vs Apache Kafka {kafka_jars.version()}, "
                             f"{result['started']}; {result['machine']}")
        write_docs(section(result, SECTION.chart))
        print(f"written: {SECTION.docs} and {SECTION.chart}")


# The headline figure of each curve both systems run, as docs/performance.json names it.
SUMMARY_NAMES = {
    "recovery": "scale: restart after SIGKILL with {x}, until the last offsets read",
    "metadata": "scale: {x} partitions created on 3 brokers, until every broker shows them "
                "led with a full ISR",
    "topics": "scale: {x} topics created on 3 brokers, until every broker shows them led "
              "with a full ISR",
}


def summary_figures(result: dict[str, Any]) -> list[Figure]:
    """docs/performance.json's entries of a run: each curve's headline seconds at its
    largest point where both systems finished; for the recovery curve also the time until
    every partition is led, and the partition count when it is not the default."""
    points = [Point(**p) for p in result["points"]]
    out = []
    for curve, name in SUMMARY_NAMES.items():
        both: dict[float, dict[str, Point]] = {}
        for p in points:
            if p.curve == curve and p.seconds is not None:
                both.setdefault(p.x, {})[p.system] = p
        xs = sorted((x for x, seen in both.items() if len(seen) == len(SYSTEMS)), reverse=True)
        if not xs:
            continue
        seen = both[xs[0]]
        x = _x(curve, xs[0])
        partitions = seen["kafkube"].figures.get("partitions", PARTITIONS)
        if curve == "recovery" and partitions != PARTITIONS:
            x = f"{x} in {partitions:,} partitions"
        out.append(Figure(name.format(x=x), "s", seen["kafkube"].seconds,
                          seen["kafka"].seconds, False, result["command"],
                          result["started"][:10]))
        led = {system: p.figures.get("metadata_s") for system, p in seen.items()}
        if curve == "recovery" and None not in led.values():
            out.append(Figure(f"scale: restart after SIGKILL with {x}, until every partition "
                              "is led", "s", led["kafkube"], led["kafka"], False,
                              result["command"], result["started"][:10]))
    return out
