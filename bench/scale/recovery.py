"""Curve 1 of the recovery command: one broker holding 1, 10 and 30 GB of log, SIGKILLed at
the last ack and started again on the same log dir; timed until it answers Metadata with
every partition led and until the last offset of every partition is read. What each system
scanned comes from its checkpoint (before the restart) and its own log (after)."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import clients
from bench.scale.clusters import Node, create_topic_async, single_node
from bench.scale.probes import POLL_S, Probe, fetch_works, latest_offsets, led, metadata_request
from bench.scale.recovery_points import Point
from bench.systems import PARTITIONS
from kafkube.harness.procstat import cpu_seconds
from kafkube.harness.waiting import wait_until

RECORD_SIZE = 1024
TOPIC = "scale-recovery"
PRODUCE_FLOOR_MBPS = 20.0  # a produce slower than this counts as failed (its timeout)


def records_for(size_gb: float, partitions: int = PARTITIONS) -> int:
    """Records of RECORD_SIZE making ``size_gb`` GB (10^9 bytes), a multiple of
    ``partitions`` so every partition ends at the same offset."""
    return max(partitions, round(size_gb * 1e9 / RECORD_SIZE / partitions) * partitions)


def log_bytes(directory: Path) -> int:
    return sum(p.stat().st_size for p in directory.rglob("*.log") if p.is_file())


def recovery_point(system: str, size_gb: float, libs: Path | None, timeout: float,
                   log: Callable[[str], None], partitions: int = PARTITIONS) -> Point:
    point = Point("recovery", system, size_gb, None)
    records = records_for(size_gb, partitions)
    produce_timeout = 120 + size_gb * 1e3 / PRODUCE_FLOOR_MBPS
    with single_node(system, libs, timeout) as node:
        create_topic_async(node.address, TOPIC, partitions, 1).result(120)
        probe = Probe(node.address)
        wait_until(lambda: led(probe.request(metadata_request(TOPIC)), TOPIC, partitions, 1),
                   120, "the topic led", POLL_S / 2)
        log(f"{system}: producing {records:,} x {RECORD_SIZE} B ({size_gb:g} GB) ...")
        produced = clients.run_in_process(
            clients.produce, (node.address, TOPIC, partitions, records, RECORD_SIZE,
                              produce_timeout, {}), produce_timeout + 60)
        node.kill()  # the moment the last ack is in: nothing flushed since
        probe.close()
        point.figures |= {"produce_s": round(produced["seconds"], 1),
                          "produce_MBps": round(produced["bytes"] / produced["seconds"] / 1e6, 1),
                          "log_bytes": log_bytes(node.data_dir), "partitions": partitions}
        point.notes += planned_scan(system, node.data_dir)
        log(f"{system}: SIGKILLed with {point.figures['log_bytes'] / 1e9:.2f} GB of log; "
            "restarting ...")
        expected = records // partitions
        timings = time_recovery(node, expected, partitions, timeout)
        point.figures |= timings
        point.seconds = timings.get("readable_s")
        point.notes += scanned(system, node.log_since_restart(), node.data_dir)
        if point.seconds is None:
            point.error = f"not readable within {timeout:.0f} s"
    return point


def time_recovery(node: Node, expected: int, partitions: int,
                  timeout: float) -> dict[str, Any]:
    """Restart ``node`` and time (a) every partition led in a Metadata answer and (b) the
    last offset of every partition listed and fetched; bounded by ``timeout``."""
    probe = Probe(node.address, timeout=30)
    out: dict[str, Any] = {}
    t0 = time.monotonic()
    node.restart()
    deadline = t0 + timeout
    try:
        while time.monotonic() < deadline:
            if "metadata_s" not in out:
                if led(probe.request(metadata_request(TOPIC)), TOPIC, partitions, 1):
                    out["metadata_s"] = round(time.monotonic() - t0, 2)
            else:
                offsets = latest_offsets(probe, TOPIC, partitions)
                if offsets is not None and all(o == expected for o in offsets.values()) \
                        and fetch_works(probe, TOPIC, {p: o - 1 for p, o in offsets.items()}):
                    out["readable_s"] = round(time.monotonic() - t0, 2)
                    break
                if offsets is not None and any(o > expected for o in offsets.values()):
                    out["bad_offsets"] = offsets
            if "readable_s" not in out:
                time.sleep(POLL_S / 2)  # a poll interval between probes, not a sync point
    finally:
        probe.close()
    # The restarted process's whole CPU so far (its start-up too): read while it still runs.
    out["recovery_cpu_s"] = round(cpu_seconds(node.pid()), 1)
    return out


def planned_scan(system: str, data_dir: Path) -> list[str]:
    """What the recovery checkpoint left by the killed broker says must be rescanned:
    every segment from the one holding the partition's recovery point on (both systems
    trust the segments before it). Read before the restart, which rewrites the file."""
    checkpoint = data_dir / "recovery-point-offset-checkpoint"
    points = read_checkpoint(checkpoint)
    segments = segments_by_partition(data_dir)
    after = 0
    count = 0
    for tp, bases in segments.items():
        point = points.get(tp, 0)
        for i, (_base, size) in enumerate(bases):
            nxt = bases[i + 1][0] if i + 1 < len(bases) else None
            if nxt is None or nxt > point:
                after += size
                count += 1
    total = sum(size for bases in segments.values() for _, size in bases)
    return [f"{system} checkpoint before restart: {len(points)} partitions, "
            f"{count} segments ({after / 1e9:.2f} of {total / 1e9:.2f} GB) at or after their "
            "recovery point"]


def read_checkpoint(path: Path) -> dict[str, int]:
    """``topic-partition -> offset`` of a Kafka offset checkpoint file (version, count,
    then ``topic partition offset`` lines); empty if it is missing or unreadable."""
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return {}
    out = {}
    for line in lines[2:]:
        parts = line.split()
        if len(parts) == 3 and parts[1].isdigit():
            out[f"{parts[0]}-{parts[1]}"] = int(parts[2])
    return out


def segments_by_partition(data_dir: Path) -> dict[str, list[tuple[int, int]]]:
    """``topic-partition -> [(base offset, bytes)]`` of every ``.log`` segment."""
    out: dict[str, list[tuple[int, int]]] = {}
    for path in sorted(data_dir.glob("*/*.log")):
        if path.stem.isdigit():
            out.setdefault(path.parent.name, []).append((int(path.stem), path.stat().st_size))
    return out


KAFKA_RECOVERING = re.compile(r"Recovering unflushed segment (\d+).*? for (\S+?)\.?\s")
KAFKA_LOADED = re.compile(r"Loaded (\d+) logs in (\d+)ms")
KUBE_LOADED = re.compile(r"loaded (\d+) partitions in ([\d.]+)s")
KUBE_TRUNCATED = re.compile(r"truncated (\d+) bytes")


def scanned(system: str, text: str, data_dir: Path) -> list[str]:
    """What the restarted broker's own log says it scanned."""
    if system == "kafka":
        segments = KAFKA_RECOVERING.findall(text)
        sizes = segments_by_partition(data_dir)
        nbytes = sum(size for base, tp in segments for b, size in sizes.get(tp, ())
                     if b == int(base))
        loaded = KAFKA_LOADED.findall(text)
        notes = [f"kafka log: 'Recovering unflushed segment' x {len(segments)} "
                 f"({nbytes / 1e9:.2f} GB)"]
        if loaded:
            notes.append(f"kafka log: 'Loaded {loaded[-1][0]} logs in {loaded[-1][1]}ms'")
        if "no clean shutdown file" in text:
            notes.append("kafka log: no clean shutdown file: recovery from the checkpoints")
        return notes + kafka_phases(text)
    notes = []
    for count, secs in KUBE_LOADED.findall(text)[-1:]:
        notes.append(f"kafkube log: 'loaded {count} partitions in {secs}s'")
    truncated = sum(int(n) for n in KUBE_TRUNCATED.findall(text))
    notes.append(f"kafkube log: unclean shutdown noted: "
                 f"{'yes' if 'unclean shutdown' in text else 'no'}; "
                 f"{truncated} bytes truncated")
    return notes + kafkube_phases(text)


ROUTER_STAMP = re.compile(r"^\s*(\d+\.\d+) ")
KAFKUBE_MILESTONES = (("logs loaded", "loaded "), ("listening", "listening on"))


def kafkube_phases(text: str) -> list[str]:
    """Where the restarted kafkube's seconds went, from ``bench.cluster``'s stamps on its
    output: the restart (Popen) to its logs loaded and to its listening line."""
    start = None
    parts = []
    for line in text.splitlines():
        match = ROUTER_STAMP.match(line)
        if match is None:
            continue
        at = float(match.group(1))
        if start is None and "[bench] restarted broker" in line:
            start = at
        elif start is not None:
            for label, mark in KAFKUBE_MILESTONES:
                if mark in line and not any(p.startswith(label) for p in parts) and \
                        (mark != "loaded " or "partitions in" in line):
                    parts.append(f"{label} at +{at - start:.1f} s")
    return [f"kafkube log, from the restart: {', '.join(parts)}"] if parts else []


KAFKA_STAMP = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})\]")
KAFKA_MILESTONES = (("logs loaded", "Loaded "), ("broker started", "Kafka Server started"))


def kafka_phases(text: str) -> list[str]:
    """Where the restarted Kafka's seconds went, from its own log's timestamps: its first
    line (the JVM is up) to the logs loaded and to the server started. The time before the
    first line (JVM start) is the rest of (a)."""
    import datetime as dt

    stamps: list[tuple[float, str]] = []
    for line in text.splitlines():
        match = KAFKA_STAMP.match(line)
        if match:
            at = dt.datetime.strptime(match.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
            stamps.append((at, line))
    if not stamps:
        return []
    first = stamps[0][0]
    parts = []
    for label, mark in KAFKA_MILESTONES:
        hit = next((at for at, line in stamps if mark in line and
                    (mark != "Loaded " or "logs in" in line)), None)
        if hit is not None:
            parts.append(f"{label} at +{hit - first:.1f} s")
    return [f"kafka log, from its first line: {', '.join(parts)}"] if parts else []

