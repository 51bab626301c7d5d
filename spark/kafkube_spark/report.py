"""What the jobs wrote, for people and for tests: the totals read back through Spark (which,
for the streaming job's folder, counts only the files its ``_spark_metadata`` log commits), a
small table on stdout, a chart as PNG, and the rows as JSON.

    python -m kafkube_spark.report --output /tmp/totals --chart totals.png
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

from kafkube_spark.events import Total
from kafkube_spark.pipeline import TOTALS_COLUMNS


def read_totals(spark, output: str) -> list[Total]:
    rows = spark.read.parquet(output).select(*TOTALS_COLUMNS).collect()
    return sorted(Total(r.window_start, r.category, r.orders, r.revenue_cents) for r in rows)


def table(totals: Sequence[Total]) -> str:
    """Per category: windows, orders and revenue, over everything written."""
    per: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
    for t in totals:
        acc = per[t.category]
        acc[0] += 1
        acc[1] += t.orders
        acc[2] += t.revenue_cents
    lines = [f"{'category':<10} {'windows':>8} {'orders':>8} {'revenue':>14}"]
    for category, (windows, orders, cents) in sorted(per.items()):
        lines.append(f"{category:<10} {windows:>8} {orders:>8} {cents / 100:>14,.2f}")
    return "\n".join(lines)


def chart(totals: Sequence[Total], path: Path) -> None:
    """Revenue per minute of event time, one line per category."""
    import matplotlib

    matplotlib.use("Agg")
    from datetime import UTC, datetime

    import matplotlib.pyplot as plt

    series: dict[str, list[tuple[datetime, float]]] = defaultdict(list)
    for t in sorted(totals):
        series[t.category].append((datetime.fromtimestamp(t.window_start / 1000, UTC),
                                   t.revenue_cents / 100))
    fig, ax = plt.subplots(figsize=(9, 4.5))
    for category, points in sorted(series.items()):
        ax.plot([p[0] for p in points], [p[1] for p in points], marker=".", label=category)
    ax.set_title("Revenue per minute of event time (Spark, from kafkube)")
    ax.set_xlabel("window start (UTC)")
    ax.set_ylabel("revenue")
    ax.legend(loc="upper left", ncol=len(series) or 1, fontsize="small")
    ax.grid(alpha=0.3)
    fig.autofmt_xdate()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    from kafkube_spark.options import session_for

    parser = argparse.ArgumentParser(prog="python -m kafkube_spark.report",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--output", required=True, help="the job's Parquet folder")
    parser.add_argument("--chart", type=Path, default=None, help="write a PNG chart here")
    parser.add_argument("--json", type=Path, default=None, help="write the rows here")
    parser.add_argument("--master", default="local[1]")
    args = parser.parse_args(argv)
    if not Path(args.output).exists() and "://" not in args.output:
        print(f"report: {args.output} does not exist (has the job run?)", file=sys.stderr)
        return 2
    spark = session_for(parser, "kafkube-orders-report", args.master)
    try:
        totals = read_totals(spark, args.output)
    finally:
        spark.stop()
    print(table(totals))
    if args.chart:
        chart(totals, args.chart)
        print(f"chart: {args.chart}")
    if args.json:
        args.json.write_text(json.dumps([asdict(t) for t in totals]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
