"""``python -m bench scale-load`` (``bench.scale.load`` and the modules it uses): the pieces
that decide its figures (memory and connection sampling, the ratio table, the sentence
naming where kafkube's cost grows faster, the docs section) on made-up points."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from bench.scale import load, load_report, sampling
from bench.scale import partitions as partitions_module
from bench.scale.connections import split
from bench.scale.load_points import Point, failure_text, merge_rounds
from bench.scale.load_report import SECTION, findings, table
from bench.scale.sampling import Sampler, count_established
from kafkube.harness import procstat

SETTINGS = {"rate": 10.0, "records": 1000, "record_size": 1024}

# Two broker-side connections on port 0x2384 (9092), a client side of one (remote 9092),
# a listening socket (state 0A) and one on another port.
PROC_NET_TCP = """\
  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid
   0: 0100007F:2384 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0
   1: 0100007F:2384 0100007F:D431 01 00000000:00000000 00:00000000 00000000     0
   2: 0100007F:2384 0100007F:D432 01 00000000:00000000 00:00000000 00000000     0
   3: 0100007F:D431 0100007F:2384 01 00000000:00000000 00:00000000 00000000     0
   4: 0100007F:1F90 0100007F:D433 01 00000000:00000000 00:00000000 00000000     0
"""


def test_established_counts_the_broker_side_only():
    assert count_established(PROC_NET_TCP, {9092}) == 2
    assert count_established(PROC_NET_TCP, {9092, 8080}) == 3
    assert count_established(PROC_NET_TCP, {1234}) == 0




def test_sampler_samples_on_entry_and_exit():
    with Sampler([os.getpid()], ports={1}) as sampler:
        pass
    assert len(sampler.rss) >= 2 and sampler.peak_mib > 1
    assert sampler.peak_connections == 0


def test_split_shares_out_everything():
    assert split(10, 4) == [3, 3, 2, 2]
    assert split(200, 4) == [50] * 4
    assert sum(split(300_001, 4)) == 300_001


def test_failure_text_names_timeouts():
    assert failure_text(TimeoutError("x"), 300) == "timed out after 300 s"
    assert failure_text(RuntimeError("produce client still running after 360s"), 300) == \
        "timed out after 300 s"
    assert failure_text(RuntimeError("boom\nBrokerDied: gone"), 300) == "failed: BrokerDied: gone"
    assert failure_text(RuntimeError("client failed:\nRuntimeError: produce: 102180 "
                                     "undelivered, 0 failed (None)"), 300) == \
        "timed out after 300 s (102,180 unacknowledged)"
    assert failure_text(RuntimeError('KafkaError{code=POLICY_VIOLATION,val=44,str="x"}'),
                        300) == "refused: POLICY_VIOLATION"


def points() -> list[Point]:
    """kafkube's CPU per GB grows faster than Kafka's (ratio 0.5 -> 2.0); its throughput
    keeps pace; at 10,000 partitions kafkube timed out creating the topic."""
    out = []
    for x, ka_cpu, ku_cpu, ka_mbps, ku_mbps in ((1, 2.0, 1.0, 100, 200), (100, 2.0, 4.0, 90, 180)):
        for system, cpu, mbps in (("kafka", ka_cpu, ka_mbps), ("kafkube", ku_cpu, ku_mbps)):
            out.append(Point("partitions", x, system,
                             {"produce_cpu": cpu, "produce_mbps": mbps, "rss_idle": 300.0}))
    out.append(Point("partitions", 10000, "kafka", {"create_s": 5.0}))
    out.append(Point("partitions", 10000, "kafkube", {}, {"create_s": "timed out after 300 s"}))
    return out


def test_table_has_both_systems_and_the_ratio():
    text = table(points(), SETTINGS)
    row = next(line for line in text.splitlines()
               if "broker CPU per GB produced" in line and " 100 " in line)
    assert row.split()[-4:] == ["2.00", "4.00", "2.00", "lower"]
    assert "timed out after 300 s" in text
    markdown = table(points(), SETTINGS, markdown=True)
    assert markdown.splitlines()[1].startswith("|---")


def test_findings_name_the_figure_that_grows_faster():
    text = findings(points(), SETTINGS)
    assert "broker CPU per GB produced" in text and "4.0x worse" in text
    assert "produce, acks=1" not in text  # its ratio stays 2.0
    assert text.startswith("Where one system reached a point and the other did not: kafkube "
                           "at 10,000 partitions, create the topic, until every partition is "
                           "led: timed out after 300 s")
    assert "at 1 partition, " in text  # singular


def test_the_summary_takes_each_figures_largest_point_with_both_systems():
    result = {"points": [vars(p) for p in points()], "settings": SETTINGS,
              "started": "2026-11-30 03:00 UTC", "command": "python -m bench scale-load"}
    figures = {f.figure: f for f in load_report.summary_figures(result)}
    cpu = figures["scale: 100 partitions, broker CPU per GB produced"]
    assert (cpu.kafkube, cpu.kafka, cpu.ratio, cpu.higher_is_better, cpu.date) == (
        4.0, 2.0, 2.0, False, "2026-11-30")
    assert figures["scale: 100 partitions, produce, acks=1"].higher_is_better
    # 10,000 partitions: kafkube has no create_s, so no figure of it; no 1-partition ones.
    assert not [name for name in figures if "10,000" in name or " 1 partition" in name]
    assert "scale: 100 partitions, broker RSS with the topic, idle" in figures


def test_findings_when_nothing_grows_faster():
    even = [Point("connections", x, s, {"produce_cpu": 1.0}) for x in (1, 10)
            for s in ("kafka", "kafkube")]
    assert "grows no faster" in findings(even, SETTINGS)


def test_replace_section_appends_then_replaces(tmp_path: Path):
    begin, end, heading = SECTION.begin, SECTION.end, SECTION.heading
    assert begin == "<!-- scale-load:begin -->" and end == "<!-- scale-load:end -->"
    original = "# Performance\n\n## Other\n\ntext\n"
    once = SECTION.replace(original, f"{begin}\nfirst\n{end}")
    assert once.startswith(original.rstrip("\n")) and heading in once and "first" in once
    twice = SECTION.replace(once + "\n## Later section\n", f"{begin}\nsecond\n{end}")
    assert "first" not in twice and "second" in twice and twice.count(heading) == 1
    assert twice.endswith("## Later section\n")


def test_write_docs_writes_chart_and_section(tmp_path: Path):
    docs, chart = tmp_path / "performance.md", tmp_path / "scale-load.png"
    docs.write_text("# Performance\n")
    result = {"started": "today", "commit": "abc", "command": "python -m bench scale-load",
              "machine": "2 CPUs", "settings": SETTINGS, "notes": ["a note"],
              "points": [p.__dict__ for p in points()]}
    load_report.write_docs(result, docs, chart)
    text = docs.read_text()
    assert chart.stat().st_size > 0 and "(scale-load.png)" in text
    assert "`python -m bench scale-load`" in text and "2 CPUs" in text


def test_points_option_needs_one_curve():
    args = load.parse(["--curves", "partitions", "--points", "1,100"])
    assert args.partition_points == [1, 100]
    assert load.plan(args) == [("partitions", 1, "kafka"), ("partitions", 1, "kafkube"),
                                     ("partitions", 100, "kafka"),
                                     ("partitions", 100, "kafkube")]
    with pytest.raises(SystemExit):
        load.parse(["--points", "1,100"])


def test_thread_cpu_names_this_process_threads():
    before = sampling.thread_cpu([os.getpid()])
    sum(i * i for i in range(300_000))  # some CPU on this thread
    top = sampling.busiest(before, sampling.thread_cpu([os.getpid()]), top=2)
    assert top and all(len(t) == 3 for t in top) and top[0][1] + top[0][2] >= 0
    assert len(top) <= 2


def test_thread_cpu_is_each_threads_own_not_the_processs():
    """A thread that sleeps while another spins shows no CPU of its own, and the threads'
    figures add up to the process's (reading /proc/<tid>/stat gave every thread the whole
    process's CPU, so a pool of 8 threads counted it 8 times)."""
    release = threading.Event()
    sleepers = [threading.Thread(target=release.wait, daemon=True) for _ in range(4)]
    for thread in sleepers:
        thread.start()
    pid = os.getpid()
    process0, before = sum(procstat.cpu_times(pid)), sampling.thread_cpu([pid])
    sleeper0 = [sum(procstat.cpu_times(pid, t.native_id)) for t in sleepers]
    deadline = time.process_time() + 0.5
    while time.process_time() < deadline:  # half a second of CPU on this thread
        pass
    spent = sum(user + system for _, user, system in
                sampling.busiest(before, sampling.thread_cpu([pid]), top=100))
    process = sum(procstat.cpu_times(pid)) - process0
    slept = [sum(procstat.cpu_times(pid, t.native_id)) - s0
             for t, s0 in zip(sleepers, sleeper0, strict=True)]
    release.set()
    for thread in sleepers:
        thread.join(5)
    assert max(slept) < 0.05, slept
    assert 0.3 <= spent <= process + 0.05, (spent, process)


def test_thread_notes_for_the_largest_point():
    pts = points()
    pts[-2].raw["produce_threads"] = [["data-plane-kafka-request-handler", 20.5, 0.25]]
    assert load_report.thread_notes(pts) == [
        "kafka, 10,000 partitions, produce: data-plane-kafka-request-handler 20.5+0.2"]


def test_a_refused_large_create_is_made_in_steps(monkeypatch):
    """Kafka refuses 10,000 new partitions in one request: the topic is created with
    STEP, then grown STEP at a time, and the point says so."""
    from confluent_kafka import KafkaError, KafkaException

    calls: list[tuple[str, int]] = []

    def create(_env, _topic, _rf, _config, timeout, partitions):
        calls.append(("create", partitions))
        if partitions > partitions_module.STEP:
            raise KafkaException(KafkaError(KafkaError.POLICY_VIOLATION,
                                            "Unable to perform excessively large batch "
                                            "operation."))

    monkeypatch.setattr(partitions_module, "create_topic", create)
    monkeypatch.setattr(partitions_module, "grow_topic",
                        lambda _env, total, _timeout: calls.append(("grow", total)))
    raw: dict = {}
    partitions_module.timed_create(None, 12_000, 60.0, raw)
    assert calls == [("create", 12_000), ("create", 5_000), ("grow", 10_000), ("grow", 12_000)]
    assert "excessively large batch operation" in raw["create_note"]


def test_rounds_repeat_the_plan_interleaved_and_merge_into_medians():
    args = load.parse(["--curves", "connections", "--points", "200", "--rounds", "3"])
    assert load.plan(args) == [("connections", 200, "kafka"), ("connections", 200, "kafkube")] * 3
    rounds = [Point("connections", 200, "kafkube", {"rate_p99": p99, "produce_mbps": 20.0},
                    {}, {"wall_s": 1.0})
              for p99 in (900.0, 100.0, 300.0)]
    rounds[1].values.pop("produce_mbps")
    rounds[1].failed["produce_mbps"] = "timed out after 300 s"
    (merged,) = merge_rounds(rounds)
    assert merged.values == {"produce_mbps": 20.0, "rate_p99": 300.0}
    assert merged.failed == {}
    assert [r["values"].get("rate_p99") for r in merged.raw["rounds"]] == [900.0, 100.0, 300.0]
    (failed,) = merge_rounds([Point("connections", 1, "kafka", {}, {"rate_p99": "x"}, {}),
                              Point("connections", 1, "kafka", {}, {"rate_p99": "y"}, {})])
    assert failed.failed == {"rate_p99": "x"} and failed.values == {}


def test_a_pinned_runs_figures_are_named_apart_from_the_shared_ones():
    result = {"points": [vars(p) for p in points()], "settings": {**SETTINGS, "pinned": True},
              "started": "2026-11-30 03:00 UTC", "command": "python -m bench scale-load --pin"}
    names = {f.figure for f in load_report.summary_figures(result)}
    assert "scale: 100 partitions, produce, acks=1, a core each (--pin)" in names
    assert all(name.endswith(", a core each (--pin)") for name in names)


def test_the_consumer_curve_is_planned_named_and_charted(tmp_path: Path):
    """The consumer connection curve (issue 34) goes through the same plan, summary and
    chart as the others, its figures named by its own rate."""
    args = load.parse(["--curves", "consumers", "--points", "1,2000", "--consumer-rate", "80"])
    assert args.consumer_points == [1, 2000]
    assert load.plan(args) == [("consumers", x, s) for x in (1, 2000)
                               for s in ("kafka", "kafkube")]
    settings = {**SETTINGS, "consumer_rate": 80.0}
    curve = [Point("consumers", x, s, {"idle_cpu": idle, "rate_cpu": 2 * idle,
                                       "rate_p99": 5.0, "rate_mbps": 0.1 * x,
                                       "rss_idle": 60.0, "rss_peak": 90.0, "connections": 2 * x})
             for x, s, idle in ((1, "kafka", 2.0), (1, "kafkube", 1.0),
                                (2000, "kafka", 40.0), (2000, "kafkube", 30.0))]
    result = {"points": [vars(p) for p in curve], "settings": settings,
              "started": "2026-11-30 18:00 UTC", "command": "python -m bench scale-load",
              "commit": "abc", "machine": "2 CPUs", "notes": []}
    figures = {f.figure: f for f in load_report.summary_figures(result)}
    idle = figures["scale: 2,000 consumer connections, broker CPU with every consumer "
                   "long-polling, nothing to read"]
    assert (idle.kafkube, idle.kafka, idle.ratio, idle.higher_is_better) == (
        30.0, 40.0, 0.75, False)
    assert "scale: 2,000 consumer connections, p99 from produce() to a consumer, 80 " \
           "records/s" in figures
    assert not [name for name in figures if "delivered" in name]  # context, no better side
    assert "rate_p99" not in table(curve, settings) and "consumers" in table(curve, settings)
    docs, chart = tmp_path / "performance.md", tmp_path / "scale-load.png"
    docs.write_text("# Performance\n")
    load_report.write_docs(result, docs, chart)
    text = docs.read_text()
    assert chart.stat().st_size > 0 and "| 1 consumer connection | 2,000 consumer" in text
