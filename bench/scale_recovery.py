"""``python -m bench scale-recovery``: three scale curves of issue 17, beside Apache Kafka.

1. **recovery**: one broker holding 1, 10 and 30 GB (``--sizes``) of log, 16 partitions of
   1 KiB records produced flat out with librdkafka (``bench.clients.produce``), SIGKILLed the
   moment the last record is acked (its tail never flushed: a crash), started again on the
   same log dirs. Timed from the restart's ``Popen`` until (a) the port answers Metadata with
   every partition led and (b) ListOffsets(latest) of every partition equals what was
   produced and a Fetch at the last offset returns it. What each system scanned comes from
   its own log (Kafka's ``Recovering unflushed segment`` lines) or, for kafkube, which does
   not name its segments, from its recovery checkpoint read before the restart.
2. **metadata**: a 3-broker cluster, one CreateTopics of 100, 1,000 and 5,000 partitions
   (``--metadata-partitions``), RF 3; timed from the call until EVERY broker, asked directly
   over its own connection, answers Metadata with every partition led and a full ISR.
3. **image** (kafkube only: KRaft keeps its metadata in its own replicated log, nothing like
   one object in an API server): 3 brokers on the Kubernetes backend against a real
   kube-apiserver and etcd (``tests.kube_control_plane``); topics are created until the
   cluster holds 100, 1,000, 5,000 and 10,000 partitions (``--image-partitions``), and each
   step reports the image ConfigMap's size (against the API server's 1 MiB limit), the time
   until the CreateTopics is in it, and the API server's PUT latency for ConfigMaps.

Every point gets a fresh cluster (the image curve grows one), which is stopped and its data
dir deleted before the next starts, so the 30 GB point never sits beside another. The two
systems never run at the same time. Every wait is bounded; a point that does not finish in
its bound is recorded as such and the run goes on.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import gzip
import json
import os
import re
import shlex
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

from bench import clients, kafka
from bench.broker import cpu_seconds
from bench.cluster import BenchCluster
from bench.compare import SHARED_BROKER_CONFIG, _commit, _list, machine

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs" / "performance.md"
CHART = ROOT / "docs" / "scale-recovery.png"
BEGIN = "<!-- scale-recovery:begin -->"
END = "<!-- scale-recovery:end -->"
CURVES = ("recovery", "metadata", "image")
SYSTEMS = ("kafka", "kafkube")
PARTITIONS = 16
RECORD_SIZE = 1024
TOPIC = "scale-recovery"
POLL_S = 0.2  # between two probes of one broker: often enough, light on 2 shared cores
PRODUCE_FLOOR_MBPS = 20.0  # a produce slower than this counts as failed (its timeout)
# The API server refuses a ConfigMap whose data pass 1 MiB (broker.cluster.kubernetes).
CONFIGMAP_LIMIT = 1024 * 1024
MAX_PACKED = CONFIGMAP_LIMIT - 4096  # broker.cluster.kubernetes.MAX_IMAGE_BYTES
OK = 0


@dataclass
class Point:
    """One measured point of one curve and system. ``seconds`` is the curve's headline
    figure (recovery: (b), readable; metadata: every broker; image: committed), None when
    the point did not finish; ``figures`` holds the rest, ``notes`` what was seen."""

    curve: str
    system: str
    x: float  # GB of log, or partitions
    seconds: float | None
    figures: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    error: str | None = None


# -- raw wire probes: one connection per broker, so "this broker answers" is exact ---------

class Probe:
    """A blocking connection to ONE broker, opened again after any failure. librdkafka picks
    which broker answers a metadata request; this does not, which is what a per-broker
    propagation time needs."""

    def __init__(self, address: str, timeout: float = 10.0) -> None:
        self.address = address
        self.timeout = timeout
        self._client: Any = None

    def request(self, body: Any) -> Any | None:
        """The decoded response, or None if the broker cannot be reached or fails."""
        from tests.wire import ConnectionClosed, WireClient

        try:
            if self._client is None:
                host, _, port = self.address.rpartition(":")
                self._client = WireClient(host, int(port), self.timeout, "scale-recovery")
            return self._client.request(body)
        except (OSError, ConnectionClosed, TimeoutError, ValueError, AssertionError):
            self.close()
            return None

    def close(self) -> None:
        if self._client is not None:
            with contextlib.suppress(OSError):
                self._client.close()
            self._client = None


def metadata_request(topic: str) -> Any:
    from tests.wire import metadata_request as request

    return request([topic], auto_create=False)


def led(response: Any, topic: str, partitions: int, rf: int) -> bool:
    """Every partition of ``topic`` has a leader and an ISR of ``rf``, in one answer."""
    if response is None:
        return False
    found = [t for t in response.topics if t.name == topic]
    if len(found) != 1 or found[0].error_code != OK or len(found[0].partitions) != partitions:
        return False
    return all(p.error_code == OK and p.leader_id >= 0 and len(p.isr_nodes) >= rf
               for p in found[0].partitions)


def list_offsets_request(topic: str, partitions: int) -> Any:
    from kio.schema.list_offsets.v7.request import (
        ListOffsetsPartition,
        ListOffsetsRequest,
        ListOffsetsTopic,
    )

    return ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=(ListOffsetsTopic(
        name=topic, partitions=tuple(ListOffsetsPartition(partition_index=p, timestamp=-1)
                                     for p in range(partitions))),))


def fetch_request(topic: str, offsets: dict[int, int]) -> Any:
    from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic

    return FetchRequest(
        max_wait=timedelta(0), min_bytes=0, max_bytes=64 << 20,
        topics=(FetchTopic(topic=topic, partitions=tuple(
            FetchPartition(partition=p, fetch_offset=o, partition_max_bytes=2 << 20)
            for p, o in offsets.items())),),
        forgotten_topics_data=())


def latest_offsets(probe: Probe, topic: str, partitions: int) -> dict[int, int] | None:
    """ListOffsets(latest) of every partition, or None if any partition errs."""
    response = probe.request(list_offsets_request(topic, partitions))
    if response is None or len(response.topics) != 1:
        return None
    found = response.topics[0].partitions
    if len(found) != partitions or any(p.error_code != OK for p in found):
        return None
    return {p.partition_index: p.offset for p in found}


def fetch_works(probe: Probe, topic: str, last: dict[int, int]) -> bool:
    """A Fetch at each partition's last offset returns records and no error."""
    response = probe.request(fetch_request(topic, last))
    if response is None or response.error_code != OK or len(response.responses) != 1:
        return False
    data = response.responses[0].partitions
    return len(data) == len(last) and all(p.error_code == OK and p.records for p in data)


# -- the clusters ---------------------------------------------------------------------------

class RestartableKafka(kafka.KafkaCluster):
    """``bench.kafka.KafkaCluster`` plus SIGKILL and a restart of one node on its own log
    dir, same command line and port (KafkaCluster starts nodes only once)."""

    def kill(self, node: int) -> None:
        proc = self.procs[node]
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)

    def restart(self, node: int) -> int:
        """Start node ``node`` again without waiting; returns its log's length before, so
        the restart's own lines can be told from the first run's."""
        offset = self.log_path(node).stat().st_size
        with self.log_path(node).open("ab") as log:
            self.procs[node] = subprocess.Popen(
                self.commands[node], stdout=log, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, start_new_session=True, cwd=self.node_dir(node))
        return offset

    def log_since(self, node: int, offset: int) -> str:
        with self.log_path(node).open("rb") as f:
            f.seek(offset)
            return f.read().decode(errors="replace")

    def data_path(self, node: int) -> Path:
        return self.node_dir(node) / "data"


@dataclass
class Node:
    """One broker of either system as the recovery curve sees it."""

    system: str
    address: str
    data_dir: Path  # the log dir(s), to size and to read checkpoints from
    pid: Callable[[], int]
    kill: Callable[[], None]
    restart: Callable[[], None]  # returns at once; the probes tell when it is back
    log_since_restart: Callable[[], str]


@contextlib.contextmanager
def single_node(system: str, libs: Path | None, timeout: float) -> Iterator[Node]:
    """A fresh 1-broker cluster with the settings ``bench compare`` gives both systems;
    stopped and its data dir deleted on the way out, whatever happens inside."""
    if system == "kafka":
        assert libs is not None
        with RestartableKafka(libs, 1, SHARED_BROKER_CONFIG) as cluster:
            offset = [0]

            def restart() -> None:
                offset[0] = cluster.restart(0)
            yield Node(system, cluster.bootstrap, cluster.data_path(0),
                       lambda: cluster.procs[0].pid, lambda: cluster.kill(0), restart,
                       lambda: cluster.log_since(0, offset[0]))
        return
    overrides = [f"{k}={v}" for k, v in SHARED_BROKER_CONFIG.items()]
    with BenchCluster(1, overrides) as cluster, \
            contextlib.ExitStack() as stack:
        started: list[threading.Thread] = []
        offset = [0]

        def restart() -> None:  # BenchCluster.restart blocks until it listens: not here
            offset[0] = cluster.log_path.stat().st_size
            thread = threading.Thread(target=_quietly, args=(cluster.restart, 0, timeout),
                                      daemon=True)
            thread.start()
            started.append(thread)

        def log_since() -> str:
            with cluster.log_path.open("rb") as f:
                f.seek(offset[0])
                return f.read().decode(errors="replace")
        stack.callback(lambda: [t.join(5) for t in started])
        yield Node(system, cluster.bootstrap, cluster.brokers[0].log_dir,
                   lambda: cluster.pids()[0], lambda: cluster.kill(0), restart, log_since)


def _quietly(fn: Callable[..., Any], *args: Any) -> None:
    """Run ``fn`` in a thread whose failure the probes will show anyway (a broker that
    never comes back times the point out)."""
    with contextlib.suppress(Exception):
        fn(*args)


@contextlib.contextmanager
def three_brokers(system: str, libs: Path | None, overrides: dict[str, str] | None = None
                  ) -> Iterator[list[str]]:
    """A fresh 3-broker cluster; yields each broker's address."""
    if system == "kafka":
        assert libs is not None
        with kafka.KafkaCluster(libs, 3, SHARED_BROKER_CONFIG) as cluster:
            yield cluster.bootstrap.split(",")
        return
    settings = {**SHARED_BROKER_CONFIG, **(overrides or {})}
    with BenchCluster(3, [f"{k}={v}" for k, v in settings.items()]) as cluster:
        yield cluster.bootstrap.split(",")


def admin(bootstrap: str) -> Any:
    from confluent_kafka.admin import AdminClient

    from bench.compare import _silent_logger

    return AdminClient({"bootstrap.servers": bootstrap, "logger": _silent_logger()})


def create_topic_async(bootstrap: str, topic: str, partitions: int, rf: int) -> Any:
    """Send a CreateTopics; returns the future (librdkafka's thread does the waiting)."""
    from confluent_kafka.admin import NewTopic

    client = admin(bootstrap)
    future = client.create_topics([NewTopic(topic, partitions, rf)], request_timeout=600)[topic]
    future.client = client  # keep the client (and its thread) alive as long as the future
    return future


def wait_future(future: Any, timeout: float) -> float | None:
    """Seconds until ``future`` resolves (raising its error), None if it does not in time."""
    started = time.monotonic()
    try:
        future.result(timeout)
    except TimeoutError:
        return None
    return time.monotonic() - started


# -- curve 1: recovery after SIGKILL --------------------------------------------------------

def records_for(size_gb: float) -> int:
    """Records of RECORD_SIZE making ``size_gb`` GB (10^9 bytes), a multiple of PARTITIONS
    so every partition ends at the same offset."""
    return max(PARTITIONS, round(size_gb * 1e9 / RECORD_SIZE / PARTITIONS) * PARTITIONS)


def log_bytes(directory: Path) -> int:
    return sum(p.stat().st_size for p in directory.rglob("*.log") if p.is_file())


def recovery_point(system: str, size_gb: float, libs: Path | None, timeout: float,
                   log: Callable[[str], None]) -> Point:
    point = Point("recovery", system, size_gb, None)
    records = records_for(size_gb)
    produce_timeout = 120 + size_gb * 1e3 / PRODUCE_FLOOR_MBPS
    with single_node(system, libs, timeout) as node:
        create_topic_async(node.address, TOPIC, PARTITIONS, 1).result(120)
        probe = Probe(node.address)
        wait_for(lambda: led(probe.request(metadata_request(TOPIC)), TOPIC, PARTITIONS, 1),
                 60, "the topic led")
        log(f"{system}: producing {records:,} x {RECORD_SIZE} B ({size_gb:g} GB) ...")
        produced = clients.run_in_process(
            clients.produce, (node.address, TOPIC, PARTITIONS, records, RECORD_SIZE,
                              produce_timeout, {}), produce_timeout + 60)
        node.kill()  # the moment the last ack is in: nothing flushed since
        probe.close()
        point.figures |= {"produce_s": round(produced["seconds"], 1),
                          "produce_MBps": round(produced["bytes"] / produced["seconds"] / 1e6, 1),
                          "log_bytes": log_bytes(node.data_dir)}
        point.notes += planned_scan(system, node.data_dir)
        log(f"{system}: SIGKILLed with {point.figures['log_bytes'] / 1e9:.2f} GB of log; "
            "restarting ...")
        expected = records // PARTITIONS
        timings = time_recovery(node, expected, timeout)
        point.figures |= timings
        point.seconds = timings.get("readable_s")
        point.notes += scanned(system, node.log_since_restart(), node.data_dir)
        if point.seconds is None:
            point.error = f"not readable within {timeout:.0f} s"
    return point


def time_recovery(node: Node, expected: int, timeout: float) -> dict[str, Any]:
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
                if led(probe.request(metadata_request(TOPIC)), TOPIC, PARTITIONS, 1):
                    out["metadata_s"] = round(time.monotonic() - t0, 2)
            else:
                offsets = latest_offsets(probe, TOPIC, PARTITIONS)
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


# -- curve 2: metadata propagation after CreateTopics ---------------------------------------

def metadata_point(system: str, partitions: int, libs: Path | None, timeout: float,
                   log: Callable[[str], None]) -> Point:
    point = Point("metadata", system, partitions, None)
    with three_brokers(system, libs) as addresses:
        log(f"{system}: CreateTopics of {partitions:,} partitions, RF 3, on 3 brokers ...")
        point.figures |= propagation(addresses, ",".join(addresses), f"meta-{partitions}",
                                     partitions, timeout)
    point.seconds = point.figures.get("every_broker_s")
    if point.seconds is None:
        point.error = f"not on every broker within {timeout:.0f} s"
    return point


def propagation(addresses: list[str], bootstrap: str, topic: str, partitions: int,
                timeout: float) -> dict[str, Any]:
    """CreateTopics, then ask every broker, each from a thread of its own, until each has
    answered once with every partition led and a full ISR; seconds from the call, per
    broker and for the last, and when the CreateTopics answer came (a callback, so a broker
    slow to answer Metadata delays no other figure)."""
    out: dict[str, Any] = {}
    t0 = time.monotonic()
    future = create_topic_async(bootstrap, topic, partitions, 3)
    future.add_done_callback(lambda _f: out.setdefault(
        "create_returned_s", round(time.monotonic() - t0, 2)))
    with BrokerWatch(addresses, topic, partitions, t0, t0 + timeout) as watch:
        out |= watch.result()
    if wait_future(future, max(1.0, t0 + timeout - time.monotonic())) is None:
        out["create_error"] = "no CreateTopics answer in time"
    return out


class BrokerWatch:
    """One thread per broker, each asking its broker over its own connection, every
    ``POLL_S``, until it answers ``topic`` with every partition led and a full ISR (RF 3),
    or the deadline passes. Threads, because a broker busy opening thousands of partitions
    can take seconds to answer, and the others must not wait behind it."""

    def __init__(self, addresses: list[str], topic: str, partitions: int, t0: float,
                 deadline: float) -> None:
        self.addresses, self.topic, self.partitions = addresses, topic, partitions
        self.t0, self.deadline = t0, deadline
        self._pool = ThreadPoolExecutor(len(addresses), thread_name_prefix="broker-watch")
        self._futures: list[Future[float | None]] = []

    def __enter__(self) -> BrokerWatch:
        self._futures = [self._pool.submit(self._watch, a) for a in self.addresses]
        return self

    def __exit__(self, *exc: object) -> None:
        self.deadline = 0.0  # stops every thread after its current request
        self._pool.shutdown(wait=True)

    def _watch(self, address: str) -> float | None:
        probe = Probe(address, timeout=30)
        try:
            while time.monotonic() < self.deadline:
                if led(probe.request(metadata_request(self.topic)), self.topic,
                       self.partitions, 3):
                    return time.monotonic() - self.t0
                time.sleep(POLL_S)  # a poll interval: the answers decide, not the sleep
            return None
        finally:
            probe.close()

    def result(self) -> dict[str, Any]:
        """Per-broker seconds (None: not in time), waiting at most to the deadline."""
        seen = [f.result(max(0.0, self.deadline - time.monotonic()) + 35)
                for f in self._futures]
        out: dict[str, Any] = {"per_broker_s": [None if s is None else round(s, 2)
                                                for s in seen]}
        if all(s is not None for s in seen):
            out["every_broker_s"] = round(max(s for s in seen if s is not None), 2)
            out["first_broker_s"] = round(min(s for s in seen if s is not None), 2)
        return out


def wait_for(condition: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"not within {timeout:.0f}s: {what}")
        time.sleep(POLL_S / 2)


# -- curve 3: the cluster image on the Kubernetes backend -----------------------------------

@dataclass(frozen=True)
class ApiMetrics:
    """Cumulative ConfigMap PUT figures of kube-apiserver's /metrics at one moment."""

    put_count: float
    put_seconds: float
    etcd_count: float
    etcd_seconds: float


METRIC = re.compile(r"^(\w+)\{([^}]*)\}\s+(\S+)$")


def parse_metrics(text: str) -> ApiMetrics:
    """ConfigMap writes from Prometheus text: the API server's request latency (verb PUT)
    and etcd's (operation update), sums and counts."""
    values = {"put_count": 0.0, "put_seconds": 0.0, "etcd_count": 0.0, "etcd_seconds": 0.0}
    for line in text.splitlines():
        match = METRIC.match(line)
        if match is None:
            continue
        name, labels, value = match.groups()
        if name.startswith("apiserver_request_duration_seconds_") and \
                'resource="configmaps"' in labels and 'verb="PUT"' in labels:
            key = "put_count" if name.endswith("_count") else "put_seconds"
        elif name.startswith("etcd_request_duration_seconds_") and \
                re.search(r'(type|resource)="configmaps"', labels) and \
                'operation="update"' in labels:  # "type" until 1.3x, "resource" since
            key = "etcd_count" if name.endswith("_count") else "etcd_seconds"
        else:
            continue
        if name.endswith(("_count", "_sum")):
            values[key] += float(value)
    return ApiMetrics(**values)


class ControlPlane:
    """``tests.kube_control_plane.LocalControlPlane`` in a temp dir, with what the image
    curve reads from it: the image ConfigMap and the server's metrics."""

    def __init__(self) -> None:
        from tests.kube_control_plane import LocalControlPlane, build_apiserver

        self.dir = Path(tempfile.mkdtemp(prefix="kafkube-bench-kube-"))
        self.plane = LocalControlPlane(self.dir / "plane", build_apiserver())
        self._api: Any = None

    def __enter__(self) -> ControlPlane:
        try:
            self.plane.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        try:
            self.plane.stop()
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)

    @property
    def core(self) -> Any:
        if self._api is None:
            from kubernetes import client as k8s

            from broker.cluster.kubernetes import api_client

            self._api = k8s.CoreV1Api(api_client(str(self.plane.kubeconfig)))
        return self._api

    def image_object(self, cluster: str) -> Any | None:
        from kubernetes.client.rest import ApiException

        from broker.cluster.kubernetes import metadata_name

        try:
            return self.core.read_namespaced_config_map(metadata_name(cluster), "default",
                                                        _request_timeout=10)
        except ApiException:
            return None

    def metrics(self) -> ApiMetrics:
        from tests.kube_control_plane import ADMIN_TOKEN

        context = ssl.create_default_context(cafile=str(self.plane.dir / "ca.crt"))
        request = urllib.request.Request(f"{self.plane.url}/metrics",
                                         headers={"Authorization": f"Bearer {ADMIN_TOKEN}"})
        with urllib.request.urlopen(request, timeout=30, context=context) as answer:
            return parse_metrics(answer.read().decode())


@dataclass(frozen=True)
class ImageSize:
    """The image ConfigMap as stored: gzip'd JSON in binaryData."""

    version: int
    compressed: int  # what the 1 MiB limit is checked against
    base64: int  # what the object carries
    json: int  # the image uncompressed
    topics: frozenset[str]


def image_size(obj: Any) -> ImageSize | None:
    from broker.cluster.kubernetes import A_IMAGE_VERSION, IMAGE_KEY

    if obj is None or not obj.binary_data or IMAGE_KEY not in obj.binary_data:
        return None
    encoded = obj.binary_data[IMAGE_KEY]
    packed = base64.b64decode(encoded)
    doc = json.loads(gzip.decompress(packed))
    version = int((obj.metadata.annotations or {}).get(A_IMAGE_VERSION, "0"))
    return ImageSize(version, len(packed), len(encoded), len(gzip.decompress(packed)),
                     frozenset(t["name"] for t in doc.get("topics", ())))


def image_curve(totals: list[int], timeout: float, log: Callable[[str], None]) -> list[Point]:
    """Grow one kafkube cluster on the Kubernetes backend to each total in ``totals``."""
    points: list[Point] = []
    cluster_name = f"scale{uuid.uuid4().hex[:8]}"
    with ControlPlane() as plane:
        overrides = {"kafkube.coordination.backend": "kubernetes",
                     "kafkube.cluster.name": cluster_name,
                     "kafkube.kubernetes.namespace": "default",
                     "kafkube.kubernetes.kubeconfig": str(plane.plane.kubeconfig)}
        log(f"image: kube-apiserver at {plane.plane.url}; 3 kafkube brokers on it ...")
        with three_brokers("kafkube", None, overrides) as addresses:
            have = 0
            for total in totals:
                if total <= have:
                    continue
                log(f"image: +{total - have:,} partitions (total {total:,}) ...")
                try:
                    points.append(image_step(plane, cluster_name, addresses, have, total,
                                             timeout))
                except Exception as e:  # recorded as the point's figure; the curve stops
                    points.append(Point("image", "kafkube", total, None, error=_why(e)))
                    break
                have = total
                if points[-1].seconds is None:
                    break
    return points


def image_step(plane: ControlPlane, cluster: str, addresses: list[str], have: int,
               total: int, timeout: float) -> Point:
    """One CreateTopics of ``total - have`` partitions: until it is in the image object,
    until every broker serves it, and the image's size and writes meanwhile."""
    point = Point("image", "kafkube", total, None)
    topic = f"img-{total}"
    before, metrics0 = image_size(plane.image_object(cluster)), plane.metrics()
    t0 = time.monotonic()
    future = create_topic_async(",".join(addresses), topic, total - have, 3)
    future.add_done_callback(lambda _f: point.figures.setdefault(
        "create_returned_s", round(time.monotonic() - t0, 2)))

    def committed() -> ImageSize | None:
        size = image_size(plane.image_object(cluster))
        return size if size is not None and topic in size.topics else None
    with BrokerWatch(addresses, topic, total - have, t0, t0 + timeout) as watch:
        try:
            wait_for(committed, timeout, f"{topic} in the image ConfigMap")
            point.seconds = round(time.monotonic() - t0, 2)
        except TimeoutError as e:
            point.error = str(e)
            return point
        point.figures |= {k: v for k, v in watch.result().items()
                          if k in ("every_broker_s", "per_broker_s")}
    with contextlib.suppress(Exception):
        wait_future(future, 10)
    after, metrics1 = image_size(plane.image_object(cluster)), plane.metrics()
    assert after is not None
    puts = metrics1.put_count - metrics0.put_count
    point.figures |= {
        "image_bytes": after.compressed, "image_base64_bytes": after.base64,
        "image_json_bytes": after.json,
        "limit_share": round(after.compressed / CONFIGMAP_LIMIT, 3),
        "image_writes": after.version - (before.version if before else 0),
        "configmap_puts": int(puts),
        "put_ms": round(1000 * (metrics1.put_seconds - metrics0.put_seconds) / puts, 1)
        if puts else None,
        "etcd_update_ms": round(1000 * (metrics1.etcd_seconds - metrics0.etcd_seconds)
                                / (metrics1.etcd_count - metrics0.etcd_count), 1)
        if metrics1.etcd_count > metrics0.etcd_count else None,
        "bytes_per_partition": round(after.compressed / total, 1),
    }
    point.figures |= codec_ms(plane.image_object(cluster))
    point.figures["churned_bytes_per_partition"] = churned_bytes_per_partition(total)
    return point


def codec_ms(obj: Any) -> dict[str, float]:
    """What one image version costs in CPU, here in this process: the controller encodes
    and gzips the whole image for every write, and every broker decodes every version."""
    from broker.cluster.kubernetes import IMAGE_KEY, decode_image

    if obj is None or not obj.binary_data or IMAGE_KEY not in obj.binary_data:
        return {}
    started = time.perf_counter()
    image = decode_image(obj.binary_data, 0)
    decoded = time.perf_counter()
    gzip.compress(image.to_json().encode(), compresslevel=6, mtime=0)
    encoded = time.perf_counter()
    return {"decode_ms": round(1000 * (decoded - started), 1),
            "encode_ms": round(1000 * (encoded - decoded), 1)}


CHURN_BROKERS = 12


def churned_bytes_per_partition(partitions: int, seed: int = 17) -> float:
    """gzip'd bytes per partition of a synthetic image as a long-lived cluster's looks:
    ``CHURN_BROKERS`` brokers, replicas placed at random, ISRs shrunk here and there,
    leader and partition epochs moved on. A fresh image of 3 brokers repeats itself and
    compresses far better; this is the figure to hold against the 1 MiB limit."""
    import random

    from broker.cluster.image import ClusterImage, PartitionState, TopicMetadata

    rng = random.Random(seed)
    image = ClusterImage()
    brokers = list(range(CHURN_BROKERS))
    for t in range(max(1, partitions // 1000)):
        states = []
        for _ in range(1000):
            replicas = tuple(rng.sample(brokers, 3))
            isr = replicas if rng.random() < 0.8 else replicas[:2]
            states.append(PartitionState(replicas, isr, rng.choice(isr), rng.randrange(50),
                                         rng.randrange(200)))
        image = image.with_topic(TopicMetadata(f"topic-{t:05d}", str(uuid.UUID(
            int=rng.getrandbits(128))), {}, tuple(states)))
    packed = gzip.compress(image.to_json().encode(), compresslevel=6, mtime=0)
    return round(len(packed) / (max(1, partitions // 1000) * 1000), 1)


# -- the run --------------------------------------------------------------------------------

def _why(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}"[:300]


def run_point(fn: Callable[..., Point], curve: str, system: str, x: float,
              *args: Any) -> Point:
    """One point; a failure becomes the point's figure, never the run's end."""
    try:
        return fn(system, x, *args)
    except KeyboardInterrupt:
        raise
    except Exception as e:
        traceback.print_exc()
        return Point(curve, system, x, None, error=_why(e))


def run(args: argparse.Namespace, log: Callable[[str], None]) -> list[Point]:
    points: list[Point] = []
    libs = kafka.ensure_jars() if "kafka" in args.systems else None
    if "recovery" in args.curves:
        for size in args.sizes:
            for system in args.systems:
                log(f"recovery, {size:g} GB: {system}")
                points.append(run_point(recovery_point, "recovery", system, size, libs,
                                        args.timeout, log))
                log(f"  -> {describe(points[-1])}")
    if "metadata" in args.curves:
        for partitions in args.metadata_partitions:
            for system in args.systems:
                log(f"metadata, {partitions:,} partitions: {system}")
                points.append(run_point(metadata_point, "metadata", system, partitions,
                                        libs, args.timeout, log))
                log(f"  -> {describe(points[-1])}")
    if "image" in args.curves and "kafkube" in args.systems:
        try:
            for point in image_curve(args.image_partitions, args.timeout, log):
                points.append(point)
                log(f"  -> {describe(point)}")
        except Exception as e:
            traceback.print_exc()
            points.append(Point("image", "kafkube", 0, None, error=_why(e)))
    return points


def describe(point: Point) -> str:
    head = "-" if point.seconds is None else f"{point.seconds:.2f} s"
    extra = ", ".join(f"{k}={v}" for k, v in point.figures.items())
    return f"{head}; {extra}" + (f"; ERROR {point.error}" if point.error else "") + \
        "".join(f"\n     {n}" for n in point.notes)


# -- the report -----------------------------------------------------------------------------

UNITS = {"recovery": "GB", "metadata": "partitions", "image": "partitions"}


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
    return _render([head, *rows], markdown)


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
    if curve == "metadata":
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


def _render(rows: list[list[str]], markdown: bool) -> str:
    if markdown:
        out = ["| " + " | ".join(rows[0]) + " |", "|" + "---|" * len(rows[0])]
        return "\n".join(out + ["| " + " | ".join(r) + " |" for r in rows[1:]])
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True))
                     for r in rows)


MARGINAL = (("recovery", "readable_s", "recovery to readable", 1, "GB"),
            ("recovery", "metadata_s", "recovery to Metadata", 1, "GB"),
            ("metadata", "every_broker_s", "metadata propagation", 1000, "1,000 partitions"))


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
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(16, 4.8))
    colors = {"kafka": "#4c72b0", "kafkube": "#dd8452"}
    names = {"kafka": f"Apache Kafka {kafka.version()}", "kafkube": "kafkube"}
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
                         color=colors[system], label=names[system])
    axes[0].set(xlabel="GB of log at the SIGKILL", ylabel="seconds from restart",
                title="Recovery after SIGKILL, 1 broker")
    axes[1].set(xlabel="partitions in one CreateTopics (RF 3)", ylabel="seconds",
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
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)


def section(result: dict[str, Any], chart_path: Path | None) -> str:
    """The generated docs block, markers included."""
    points = [Point(**p) for p in result["points"]]
    lines = [BEGIN, "", f"{result['started']}, commit {result['commit']}: "
             f"`{result['command']}`", "", f"- machine: {result['machine']}", *result["header"],
             "", table(points, markdown=True), ""]
    findings = growth(points)
    if findings:
        lines += ["Where the costs grow apart:", ""] + [f"- {f}" for f in findings] + [""]
    notes = [f"- {p.curve} {_x(p.curve, p.x)}, {p.system}: {n}" for p in points for n in p.notes]
    if notes:
        lines += ["What each system scanned at the restart:", "", *notes, ""]
    if chart_path is not None:
        lines += [f"![scale curves: recovery, metadata propagation, cluster image]"
                  f"({chart_path.name})", ""]
    lines.append(END)
    return "\n".join(lines)


def write_docs(text: str) -> None:
    """Replace the block between the markers (re-read now: others edit other sections), or
    add it as a section at the end."""
    current = DOCS.read_text() if DOCS.exists() else "# Performance\n"
    if BEGIN in current and END in current:
        before, rest = current.split(BEGIN, 1)
        current = before + text + rest.split(END, 1)[1]
    else:
        current = (current.rstrip("\n") + "\n\n## Scale curves: recovery, metadata "
                   "propagation, the cluster image (issue 17)\n\n" + text + "\n")
    DOCS.write_text(current)


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
        chart(points, CHART, f"kafkube vs Apache Kafka {kafka.version()}, "
                             f"{result['started']}; {result['machine']}")
        write_docs(section(result, CHART))
        print(f"written: {DOCS} and {CHART}")


def command(argv: list[str]) -> str:
    """The command line that reproduces this run (under the machine's benchmark lock)."""
    python = os.path.relpath(sys.executable, Path.cwd())
    python = sys.executable if python.startswith("..") else python
    return shlex.join(["flock", "/tmp/kafkube-bench.lock", python, "-m", "bench",
                       "scale-recovery", *argv])


def _floats(text: str) -> list[float]:
    return _list(None, float)(text)


def _ints(text: str) -> list[int]:
    return _list(None, int)(text)


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench scale-recovery", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--curves", type=_list(CURVES), default=list(CURVES),
                        help="recovery,metadata,image (all)")
    parser.add_argument("--systems", type=_list(SYSTEMS), default=list(SYSTEMS),
                        help="kafka,kafkube (both; the image curve is kafkube's alone)")
    parser.add_argument("--sizes", type=_floats, default=[1.0, 10.0, 30.0],
                        help="GB of log for the recovery curve (1,10,30)")
    parser.add_argument("--metadata-partitions", type=_ints, default=[100, 1000, 5000],
                        help="partitions per CreateTopics, metadata curve (100,1000,5000; "
                             "Kafka refuses more than 10,000 in one request)")
    parser.add_argument("--image-partitions", type=_ints, default=[100, 1000, 5000, 10000],
                        help="cluster totals of the image curve (100,1000,5000,10000)")
    parser.add_argument("--timeout", type=float, default=900.0,
                        help="seconds a point may take to recover / propagate (900)")
    parser.add_argument("--json", type=Path, metavar="FILE", help="also write every point here")
    parser.add_argument("--no-docs", action="store_true",
                        help="do not write docs/performance.md and docs/scale-recovery.png")
    parser.add_argument("--render", type=Path, metavar="FILE",
                        help="run nothing: print and publish a --json FILE")
    return parser.parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse(argv)
    if args.render:
        publish(json.loads(args.render.read_text()), write=not args.no_docs)
        return 0

    def on_term(_sig: int, _frame: Any) -> None:  # unwind through every finally block
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, on_term)
    wall0 = time.monotonic()

    def log(text: str) -> None:
        print(f"[{time.monotonic() - wall0:7.1f}s] {text}", flush=True)
    started = time.strftime("%Y-%m-%d %H:%M %Z")
    header = [
        f"- recovery: 1 broker, {PARTITIONS} partitions, {RECORD_SIZE} B records produced "
        "with librdkafka (acks=1), SIGKILL at the last ack, restart on the same log dir; "
        "(a) Metadata answers every partition led, (b) ListOffsets(latest) = produced and a "
        "Fetch at the last offset returns it; seconds from the restart; the page cache is "
        "warm, as after a process crash",
        "- metadata: 3 brokers, one CreateTopics, RF 3; seconds from the call until each "
        "broker, asked over its own connection from a thread of its own every "
        f"{POLL_S:g} s, answers every partition led with a full ISR",
        "- image: 3 kafkube brokers, Kubernetes backend, kube-apiserver + etcd on loopback "
        "(tests/kube_control_plane.py); the cluster grows by one CreateTopics (RF 3) per "
        "point; seconds until the ConfigMap holds the topic; PUT ms: kube-apiserver's "
        "mean ConfigMap PUT latency over the step; encode/decode: the whole image, timed in "
        "the benchmark process. A step starts once every broker answers Metadata for the "
        "one before, when the brokers may still be creating its log files, so its times "
        "include that work",
        f"- Apache Kafka {kafka.version()}: KRaft, combined broker+controller nodes; both get "
        "bench compare's shared broker settings (1 GiB segments, no fsync)",
        "- growth is judged on marginal cost (seconds added per GB or per 1,000 partitions "
        "between the smallest and largest point), which a fixed start-up cost (a JVM, a KRaft "
        "election) does not move, unlike a ratio of totals",
    ]
    print(f"machine: {machine()}", flush=True)
    try:
        points = run(args, log)
    except KeyboardInterrupt:
        print("interrupted: every broker started has been stopped", file=sys.stderr)
        return 130
    header.append(f"- took {(time.monotonic() - wall0) / 60:.1f} min; load average at end "
                  + " ".join(f"{x:.2f}" for x in os.getloadavg()))
    result = {"started": started, "commit": _commit(), "machine": machine(),
              "command": command(argv),
              "header": header, "points": [asdict(p) for p in points]}
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
        print(f"points: {args.json}")
    publish(result, write=not args.no_docs)
    return 0 if all(p.error is None for p in points) else 1

