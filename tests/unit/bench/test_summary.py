"""bench/summary.py and `bench spark`'s figures: docs/performance.json keeps the latest entry
of each figure, with the ratio and direction a reader needs to judge it."""

from __future__ import annotations

import json
from pathlib import Path

from bench.spark import Run, figures
from bench.summary import Figure, record


def test_a_recorded_figure_replaces_its_earlier_entry_and_keeps_the_others(
        tmp_path: Path) -> None:
    path = tmp_path / "performance.json"
    record([Figure("a", "MB/s", 10.0, 20.0, True, "python -m bench a", "2026-11-01"),
            Figure("b", "ms", 3.0, 2.0, False, "python -m bench b", "2026-11-01")], path)
    record([Figure("a", "MB/s", 30.0, 20.0, True, "python -m bench a", "2026-11-29")], path)

    entries = {e["figure"]: e for e in json.loads(path.read_text())}
    assert entries == {
        "b": {"figure": "b", "unit": "ms", "kafkube": 3.0, "kafka": 2.0, "ratio": 1.5,
              "higher_is_better": False, "command": "python -m bench b", "date": "2026-11-01"},
        "a": {"figure": "a", "unit": "MB/s", "kafkube": 30.0, "kafka": 20.0, "ratio": 1.5,
              "higher_is_better": True, "command": "python -m bench a", "date": "2026-11-29"},
    }


def test_bench_spark_reports_medians_of_rate_and_broker_cpu_per_gb() -> None:
    gb = 10**9
    runs = [Run("kafka", "read", 2.0, 1000, gb, 1.0), Run("kafka", "read", 4.0, 1000, gb, 3.0),
            Run("kafka", "read", 5.0, 1000, gb, 5.0), Run("kafkube", "read", 1.0, 1000, gb, 2.0),
            Run("kafkube", "read", 1.0, 1000, gb, 2.0), Run("kafkube", "read", 3.0, 1000, gb, 9),
            Run("kafka", "job", 10.0, 1000, gb, 1.0), Run("kafkube", "job", 20.0, 1000, gb, 1.0)]
    by_name = {f.figure: f for f in figures(runs, "python -m bench spark")}
    source = by_name["Spark's Kafka source alone"]
    assert (source.kafkube, source.kafka, source.ratio) == (1000, 250, 4.0)
    assert by_name["Spark batch job's plan"].ratio == 0.5
    cpu = by_name["Spark's Kafka source alone, broker CPU per GB"]
    assert (cpu.kafkube, cpu.kafka, cpu.higher_is_better) == (2.0, 3.0, False)
    assert all("spark" in name.lower() for name in by_name)


def test_a_comparison_is_summarised_as_medians_with_units() -> None:
    from bench.compare_report import summary_figures, unit_of
    from bench.figures import Figure as Measured

    def measured(system: str, metric: str, value: float, round_: int) -> dict:
        return vars(Measured(1, "produce acks=1", "rdkafka", metric, "higher", system, value,
                             round=round_))

    figures = [measured(system, "MB/s", value, r)
               for r, (ka, ku) in enumerate(((100.0, 150.0), (120.0, 130.0), (110.0, 200.0)))
               for system, value in (("kafka", ka), ("kafkube", ku))]
    figures += [measured("kafka", "p50 ms", 0.0, 0), measured("kafkube", "p50 ms", 0.0, 0)]
    result = {"figures": figures, "started": "2026-11-30 04:17 UTC", "command": "bench compare"}
    (only,) = summary_figures(result)  # a Kafka median of 0 has no ratio: left out
    assert (only.figure, only.unit, only.kafkube, only.kafka, only.ratio) == (
        "produce acks=1, librdkafka, MB/s", "MB/s", 150.0, 110.0, 1.364)
    assert [unit_of(m) for m in ("broker CPU s/GB", "p99 ms", "s, subscribe to last record")
            ] == ["s/GB", "ms", "s"]
