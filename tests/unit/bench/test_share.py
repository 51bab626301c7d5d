"""`bench share`'s parsing of Kafka's tools: ShareConsumerPerformance's stats lines (the
clock and the record count the figures hang on), ``kafka-share-groups.sh --describe
--offsets`` (the check that every record was acknowledged) and ``kafka-features.sh
describe``. A live run shows a misparse only as a wrong figure, so the text is pinned here,
copied from Kafka 4.4.0's tools."""

from __future__ import annotations

import datetime

import pytest

from bench.figures import Figure
from bench.share import (
    Line,
    Offsets,
    all_acknowledged,
    end_offsets,
    first_record,
    parse_offsets,
    parse_perf,
    share_version,
    summary_entries,
)

STAMPS = "2026-11-29 12:58:48.671 +0000, 2026-11-29 12:59:03.722 +0000"
PERF_OUT = f"""\
start.time, end.time, data.consumed.in.MB, MB.sec, nMsg.sec, data.consumed.in.nMsg, fetch.time.ms
Share consumer 1 having client id perf-share-consumer-client-1 consumption metrics- \
{STAMPS}, 4.4355, 0.2947, 301.7740, 4542, 15051
Share consumer 2 having client id perf-share-consumer-client-2 consumption metrics- \
{STAMPS}, 15.0958, 1.0030, 1027.0000, 15458, 15051
2026-11-29 12:58:48.671 +0000, 2026-11-29 12:59:04.219 +0000, 19.5313, 1.2562, 1286.3391, \
20000, 15548
"""


def test_perf_runs_from_the_tools_start_to_the_arrival_of_its_final_line() -> None:
    start = datetime.datetime(2026, 11, 29, 12, 58, 48, 671000,
                              tzinfo=datetime.UTC).timestamp()
    lines = [Line(start + 20.0, text) for text in PERF_OUT.splitlines()]
    result = parse_perf(lines)
    assert result.start == pytest.approx(start)
    assert result.seconds == pytest.approx(20.0)  # the arrival, not the tool's end.time
    assert result.delivered_s == pytest.approx(15.548)
    assert result.records == 20000
    assert result.per_consumer == (4542, 15458)


def test_perf_without_a_final_line_is_an_error() -> None:
    with pytest.raises(ValueError, match="no final stats line"):
        parse_perf([Line(0.0, PERF_OUT.splitlines()[0])])


DESCRIBE = """
GROUP           TOPIC           PARTITION  LEADER-EPOCH  START-OFFSET  LAG
g1              share-bench     0          0             8624          0
g1              share-bench     1          0             -             -
g1              other           0          0             5             7
"""


def test_offsets_are_read_by_column_name_and_dashes_are_none() -> None:
    found = parse_offsets(DESCRIBE, "share-bench")
    assert found == {0: Offsets(0, 8624, 0), 1: Offsets(1, None, None)}
    assert not all_acknowledged(found, 2)  # partition 1 has no state yet
    short = parse_offsets(DESCRIBE.replace("LEADER-EPOCH  ", "").replace(
        "0          0  ", "0  "), "share-bench")
    assert short[0] == Offsets(0, 8624, 0)


def test_all_acknowledged_needs_every_partition_at_lag_zero() -> None:
    assert all_acknowledged({0: Offsets(0, 8624, 0), 1: Offsets(1, 10000, 0)}, 2)
    assert not all_acknowledged({0: Offsets(0, 10000, 0)}, 2)
    assert not all_acknowledged({0: Offsets(0, 9000, 0), 1: Offsets(1, 9000, 3)}, 2)


def test_end_offsets_of_round_robin() -> None:
    assert end_offsets(100_000, 2) == {0: 50_000, 1: 50_000}
    assert end_offsets(5, 2) == {0: 3, 1: 2}
    assert sum(end_offsets(10, 3).values()) == 10


def test_share_version_is_the_finalized_level() -> None:
    text = ("Feature: group.version\tSupportedMinVersion: 0\tSupportedMaxVersion: 1\t"
            "FinalizedVersionLevel: 1\tEpoch: 0\n"
            "Feature: share.version                             SupportedMinVersion: 0"
            "                SupportedMaxVersion: 2                FinalizedVersionLevel: 2"
            "                Epoch: 30\n")
    assert share_version(text) == 2
    assert share_version(text.replace("FinalizedVersionLevel: 2", "FinalizedVersionLevel: 0")) == 0
    assert share_version("Feature: group.version\tFinalizedVersionLevel: 1") == 0


def test_first_record_exact_from_a_first_line_of_one_record_else_bounded() -> None:
    late = "2026-11-29 13:07:24.449 +0000, 2026-11-29 13:07:31.114 +0000, 0.0010, 0.0001, " \
           "0.1500, 1, 6665 for share consumer 1"
    soon = "2026-11-29 13:07:30.000 +0000, 2026-11-29 13:07:35.000 +0000, 1.9199, 2.9297, " \
           "3000.0000, 1966, 5000 for share consumer 2"
    again = "2026-11-29 13:07:31.114 +0000, 2026-11-29 13:07:31.769 +0000, 1.9199, 2.9297, " \
            "3000.0000, 1966, 655 for share consumer 1"
    base = datetime.datetime(2026, 11, 29, 13, 7, tzinfo=datetime.UTC).timestamp()
    assert first_record([Line(0, late), Line(0, again)]) == pytest.approx(base + 31.114)
    # consumer 2's first batch came within 100 ms of its start at :30.000
    assert first_record([Line(0, late), Line(0, soon)]) == pytest.approx(base + 30.1)
    assert first_record([Line(0, "start.time, end.time")]) is None


def test_summary_entries_are_medians_of_the_three_recorded_metrics() -> None:
    name = "share group of 4, 2 partitions"
    figures = [Figure(2, name, "java", metric, better, system, value, {}, rnd)
               for metric, better in (("records/s", "higher"), ("MB/s", "higher"),
                                      ("records/s after the first", "higher"),
                                      ("broker CPU s/GB", "lower"))
               for system, values in (("kafka", (10.0, 30.0, 20.0)),
                                      ("kafkube", (40.0, 50.0, 60.0)))
               for rnd, value in enumerate(values)]
    entries = {e.figure: e for e in summary_entries(figures, "python -m bench share")}
    assert sorted(entries) == [f"{name}, Java share consumer",
                               f"{name}, Java share consumer, after the first record",
                               f"{name}, Java share consumer, broker CPU per GB"]
    cpu = entries[f"{name}, Java share consumer, broker CPU per GB"]
    assert (cpu.kafka, cpu.kafkube, cpu.unit, cpu.higher_is_better) == (20.0, 50.0, "CPU-s/GB",
                                                                          False)
