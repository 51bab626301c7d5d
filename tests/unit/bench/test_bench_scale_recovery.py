"""The pure parts of ``python -m bench scale-recovery`` (``bench.scale.recovery_cli`` and the
modules it uses): what it reads from logs, checkpoints and the API server's metrics, and the
table and docs block it writes. The measuring itself needs
both systems and minutes, so ``python -m bench scale-recovery`` is its own test."""

from __future__ import annotations

import base64
import gzip
import json
from pathlib import Path
from types import SimpleNamespace

from bench.scale import image, probes, recovery, recovery_report
from bench.scale.recovery_points import Point
from bench.systems import PARTITIONS


def test_records_make_the_size_and_end_every_partition_at_one_offset() -> None:
    records = recovery.records_for(1.0)
    assert records % PARTITIONS == 0
    assert abs(records * recovery.RECORD_SIZE - 1e9) < PARTITIONS * recovery.RECORD_SIZE
    assert recovery.records_for(0.0) == PARTITIONS


def test_a_kafka_checkpoint_file_is_read_by_partition(tmp_path: Path) -> None:
    path = tmp_path / "recovery-point-offset-checkpoint"
    path.write_text("0\n2\nscale-recovery 0 1000\nscale-recovery 15 2000\n")
    assert recovery.read_checkpoint(path) == {"scale-recovery-0": 1000, "scale-recovery-15": 2000}
    assert recovery.read_checkpoint(tmp_path / "missing") == {}


def _segments(tmp_path: Path) -> None:
    for base, size in ((0, 100), (50, 30)):
        part = tmp_path / "t-0"
        part.mkdir(exist_ok=True)
        (part / f"{base:020d}.log").write_bytes(b"x" * size)


def test_the_planned_scan_starts_at_the_segment_holding_the_recovery_point(
        tmp_path: Path) -> None:
    _segments(tmp_path)
    (tmp_path / "recovery-point-offset-checkpoint").write_text("0\n1\nt 0 50\n")
    (note,) = recovery.planned_scan("kafkube", tmp_path)
    assert "1 segments" in note and "0.00 of 0.00 GB" in note
    (tmp_path / "recovery-point-offset-checkpoint").write_text("0\n1\nt 0 10\n")
    assert "2 segments" in recovery.planned_scan("kafkube", tmp_path)[0]


def test_kafka_recovery_lines_are_counted_with_their_segment_sizes(tmp_path: Path) -> None:
    _segments(tmp_path)
    text = (
        "[2026-11-27 12:30:00,000] INFO [LogLoader partition=t-0, dir=/x] Recovering unflushed "
        "segment 0. 0/2 recovered for t-0. (org.apache.kafka.storage.internals.log.LogLoader)\n"
        "[2026-11-27 12:30:00,100] INFO [LogLoader partition=t-0, dir=/x] Recovering unflushed "
        "segment 50. 1/2 recovered for t-0. (org.apache.kafka.storage.internals.log.LogLoader)\n"
        "[2026-11-27 12:30:01,000] INFO Loaded 1 logs in 812ms (kafka.log.LogManager)\n")
    notes = recovery.scanned("kafka", text, tmp_path)
    assert "x 2 (0.00 GB)" in notes[0]
    assert "Loaded 1 logs in 812ms" in notes[1]
    kube = recovery.scanned("kafkube", "INFO loaded 16 partitions in 1.25s\nWARNING recovered "
                            "after an unclean shutdown of /d\nWARNING t-0: truncated 7 bytes of "
                            "invalid", tmp_path)
    assert kube == ["kafkube log: 'loaded 16 partitions in 1.25s'",
                    "kafkube log: unclean shutdown noted: yes; 7 bytes truncated"]


def test_configmap_writes_are_read_from_the_api_server_metrics() -> None:
    text = "\n".join([
        '# HELP apiserver_request_duration_seconds ...',
        'apiserver_request_duration_seconds_bucket{resource="configmaps",verb="PUT",le="0.1"} 3',
        'apiserver_request_duration_seconds_sum{component="apiserver",resource="configmaps",'
        'verb="PUT",version="v1"} 0.5',
        'apiserver_request_duration_seconds_count{component="apiserver",resource="configmaps",'
        'verb="PUT",version="v1"} 4',
        'apiserver_request_duration_seconds_sum{resource="leases",verb="PUT"} 9',
        'etcd_request_duration_seconds_sum{operation="update",type="configmaps"} 0.25',
        'etcd_request_duration_seconds_count{operation="update",type="configmaps"} 5',
    ])
    assert image.parse_metrics(text) == image.ApiMetrics(4, 0.5, 5, 0.25)


def test_the_image_size_is_what_the_configmap_carries() -> None:
    doc = json.dumps({"topics": [{"name": "a"}, {"name": "b"}]}).encode()
    packed = gzip.compress(doc)
    encoded = base64.b64encode(packed).decode()
    obj = SimpleNamespace(binary_data={"image.json.gz": encoded}, metadata=SimpleNamespace(
        annotations={"kafkube.io/image-version": "7"}))
    size = image.image_size(obj)
    assert size == image.ImageSize(7, len(packed), len(encoded), len(doc), frozenset({"a", "b"}))
    assert image.image_size(None) is None


def _partition(leader: int, isr: tuple[int, ...], error: int = 0) -> SimpleNamespace:
    return SimpleNamespace(error_code=error, leader_id=leader, isr_nodes=isr)


def test_led_needs_every_partition_with_a_leader_and_a_full_isr() -> None:
    def answer(*parts: SimpleNamespace) -> SimpleNamespace:
        return SimpleNamespace(topics=(SimpleNamespace(name="t", error_code=0,
                                                       partitions=parts),))
    assert probes.led(answer(_partition(0, (0, 1, 2)), _partition(1, (1, 2, 0))), "t", 2, 3)
    assert not probes.led(answer(_partition(0, (0, 1, 2)), _partition(-1, (1, 2, 0))), "t", 2, 3)
    assert not probes.led(answer(_partition(0, (0, 1)), _partition(1, (1, 2, 0))), "t", 2, 3)
    assert not probes.led(answer(_partition(0, (0, 1, 2))), "t", 2, 3)
    assert not probes.led(None, "t", 2, 3)


def _points() -> list[Point]:
    return [
        Point("recovery", "kafka", 1, 10.0, {"metadata_s": 9.0, "readable_s": 10.0}),
        Point("recovery", "kafkube", 1, 2.0, {"metadata_s": 1.0, "readable_s": 2.0}),
        Point("recovery", "kafka", 30, 20.0, {"metadata_s": 12.0, "readable_s": 20.0}),
        Point("recovery", "kafkube", 30, 40.0, {"metadata_s": 3.0, "readable_s": 40.0},
                 ["kafkube log: 'loaded 16 partitions in 38s'"]),
        Point("metadata", "kafka", 100, 1.0, {"every_broker_s": 1.0}),
        Point("metadata", "kafkube", 100, None, error="not on every broker within 9 s"),
        Point("image", "kafkube", 1000, 0.5, {"image_bytes": 10240, "limit_share": 0.01,
                                                 "image_writes": 3, "put_ms": 12.0,
                                                 "every_broker_s": 1.5}),
    ]


def test_the_table_gives_both_systems_their_ratio_and_failures() -> None:
    text = recovery_report.table(_points())
    assert "0.20x" in text  # readable at 1 GB: 2 / 10
    assert "2.00x" in text  # readable at 30 GB: 40 / 20
    assert "failed (not on every broker within 9 s)" in text
    assert "n/a (KRaft)" in text and "10.0 / 1.0%" in text


def test_growth_names_where_kafkube_grows_faster() -> None:
    lines = recovery_report.growth(_points())
    assert any(line.startswith("recovery to readable: kafkube's cost grows FASTER") and
               "+1.31 s per GB against +0.34 s" in line for line in lines)
    # A ratio of totals would say "faster" here too (0.11x -> 0.25x); the added seconds
    # per GB (0.07 against 0.10) say it grows no faster than Kafka's.
    assert any(line.startswith("recovery to Metadata: kafkube's cost grows about as fast")
               for line in lines)
    assert any(line.startswith("image: 10.0 KiB") for line in lines)


def test_the_docs_block_is_replaced_between_its_markers(tmp_path: Path) -> None:
    docs = tmp_path / "performance.md"
    docs.write_text("# Performance\n\n## Other\n\nkept\n")
    result = {"started": "today", "commit": "abc", "machine": "2 CPUs", "command": "flock x",
              "header": ["- one"], "points": [vars(p) for p in _points()]}
    recovery_report.write_docs(recovery_report.section(result, None), docs)
    first = docs.read_text()
    assert first.count(recovery_report.SECTION.begin) == 1 and "## Other\n\nkept" in first
    assert "loaded 16 partitions in 38s" in first
    docs.write_text(first + "\n## After\n\nalso kept\n")
    result["commit"] = "def"
    recovery_report.write_docs(recovery_report.section(result, None), docs)
    second = docs.read_text()
    assert second.count(recovery_report.SECTION.begin) == 1
    assert "commit def" in second and "commit abc" not in second
    assert "also kept" in second


def test_the_restart_phases_come_from_each_systems_log_stamps() -> None:
    kafka_log = (
        "[2026-11-27 12:30:00,000] INFO Registered kafka (kafka.utils.Log4j)\n"
        "[2026-11-27 12:30:01,500] INFO Loaded 16 logs in 812ms (kafka.log.LogManager)\n"
        "[2026-11-27 12:30:09,250] INFO [KafkaRaftServer nodeId=0] Kafka Server started "
        "(kafka.server.KafkaRaftServer)\n")
    assert recovery.kafka_phases(kafka_log) == [
        "kafka log, from its first line: logs loaded at +1.5 s, broker started at +9.2 s"]
    kafkube_log = (
        "   10.000 [bench] restarted broker 0 (pid 7)\n"
        "   12.500 [broker 0] 2026-11-27 INFO broker.server.replica_manager: loaded 16 "
        "partitions in 2.40s\n"
        "   12.600 [broker 0] kafkube broker 0 listening on PLAINTEXT://127.0.0.1:9092\n")
    assert recovery.kafkube_phases(kafkube_log) == [
        "kafkube log, from the restart: logs loaded at +2.5 s, listening at +2.6 s"]


def test_the_summary_takes_each_curves_largest_point_both_systems_finished() -> None:
    def point(curve: str, system: str, x: float, seconds: float | None) -> dict:
        return vars(Point(curve, system, x, seconds))

    result = {"started": "2026-11-30 03:00 UTC", "command": "python -m bench scale-recovery",
              "points": [point("metadata", "kafka", 1000, 1.0),
                         point("metadata", "kafkube", 1000, 0.3),
                         point("metadata", "kafka", 5000, 1.4),
                         point("metadata", "kafkube", 5000, None),  # did not finish
                         point("recovery", "kafka", 30.0, 15.0),
                         point("recovery", "kafkube", 30.0, 3.0),
                         point("image", "kafkube", 10000, 2.0)]}
    figures = {f.figure: f for f in recovery_report.summary_figures(result)}
    assert sorted(figures) == [
        "scale: 1,000 partitions created on 3 brokers, until every broker shows them led "
        "with a full ISR",
        "scale: restart after SIGKILL with 30 GB, until the last offsets read"]
    assert figures["scale: restart after SIGKILL with 30 GB, until the last offsets read"
                   ].ratio == 0.2


def test_a_recovery_over_many_partitions_is_named_so_with_its_time_to_lead() -> None:
    def point(system: str, seconds: float, led: float) -> dict:
        return vars(Point("recovery", system, 1.0, seconds,
                          figures={"partitions": 1000, "metadata_s": led}))

    result = {"started": "2026-11-30 07:00 UTC", "command": "python -m bench scale-recovery",
              "points": [point("kafka", 9.0, 6.0), point("kafkube", 3.0, 1.5)]}
    figures = {f.figure: f for f in recovery_report.summary_figures(result)}
    assert sorted(figures) == [
        "scale: restart after SIGKILL with 1 GB in 1,000 partitions, until every partition "
        "is led",
        "scale: restart after SIGKILL with 1 GB in 1,000 partitions, until the last offsets "
        "read"]
    assert figures["scale: restart after SIGKILL with 1 GB in 1,000 partitions, until every "
                   "partition is led"].ratio == 0.25


def test_all_led_needs_every_topic_of_the_prefix_led_with_a_full_isr() -> None:
    def answer(*topics: tuple[str, tuple]) -> SimpleNamespace:
        return SimpleNamespace(topics=tuple(
            SimpleNamespace(name=name, error_code=0, partitions=parts)
            for name, parts in topics))
    other = ("orders", (_partition(-1, (0,)),))  # not ours: not looked at
    good = [(f"mt-{i}", (_partition(i % 3, (0, 1, 2)),)) for i in range(3)]
    assert probes.all_led(answer(*good, other), "mt-", 3, 3)
    assert not probes.all_led(answer(*good[:2], other), "mt-", 3, 3)  # one not there yet
    assert not probes.all_led(answer(*good[:2], ("mt-2", (_partition(-1, (0, 1, 2)),))),
                              "mt-", 3, 3)
    assert not probes.all_led(answer(*good[:2], ("mt-2", (_partition(0, (0, 1)),))),
                              "mt-", 3, 3)
    assert not probes.all_led(answer(*good[:2], ("mt-2", ())), "mt-", 3, 3)
    assert not probes.all_led(None, "mt-", 3, 3)


def test_the_topics_curve_has_its_own_summary_figure() -> None:
    result = {"started": "2026-11-30 03:00 UTC", "command": "python -m bench scale-recovery",
              "points": [vars(Point("topics", "kafka", 10000, 12.0)),
                         vars(Point("topics", "kafkube", 10000, 3.0))]}
    figures = recovery_report.summary_figures(result)
    assert [(f.figure, f.ratio) for f in figures] == [
        ("scale: 10,000 topics created on 3 brokers, until every broker shows them led with "
         "a full ISR", 0.25)]
