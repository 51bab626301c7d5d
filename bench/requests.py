"""``python -m bench requests``: the broker's CPU cost of one small request, per API.

Throughput benchmarks send large batches, so they measure the per-byte cost. A client
producing at a fixed rate with ``linger.ms=1`` (the latency workload of ``bench compare``)
instead sends about a thousand small requests a second, each carrying one short batch for
each of many partitions, and a tailing consumer fetches as often as data arrives. There the
broker's per-request and per-partition costs decide whether it keeps up. This benchmark
isolates them: a client in this process sends pre-encoded requests with a fixed number in
flight, and the broker's own CPU time (from /proc) is divided by the number of requests.

- **produce**: Produce v9, acks=1, one batch of one ``--record-size`` record for each of
  ``--partitions`` partitions per request;
- **tail**: what a producer and a tailing consumer do together. Each Produce is followed on
  the same connection by a Fetch v12 (no wait) of every partition at the offset that
  Produce wrote, so every Fetch answer carries the one batch per partition just appended.
  Its figure is per request, the mean of a produce and a fetch.

The client checks each answer's correlation id, and decodes one answer in a hundred to
check its error codes, so the client stays cheaper than the broker.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import time
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from kio.schema.create_topics.v5.request import CreatableTopic, CreateTopicsRequest
from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData

from bench.broker import BenchBroker
from bench.profile import PySpy, summarise
from broker.protocol.batch_codec import Record, encode_batch
from broker.protocol.codec import RequestHeader, decode_response, encode_request
from kafkube.harness.procstat import cpu_times

TOPIC = "kafkube-requests"
PRODUCE, FETCH, CREATE_TOPICS = (0, 9), (1, 12), (19, 5)
_SIZE = struct.Struct(">i")


@dataclass(frozen=True, slots=True)
class PhaseResult:
    name: str
    requests: int
    seconds: float
    broker_cpu_s: float
    broker_system_s: float  # of which in the kernel

    @property
    def broker_us_per_request(self) -> float:
        return 1e6 * self.broker_cpu_s / self.requests

    def row(self, partitions: int) -> str:
        per_request = self.broker_us_per_request
        return (f"{self.name:<8} {self.requests:>9,} {self.requests / self.seconds:>11,.0f} "
                f"{per_request:>12.0f} {per_request / partitions:>14.1f} "
                f"{100 * self.broker_system_s / self.broker_cpu_s:>10.0f}%")


@dataclass(frozen=True, slots=True)
class Frame:
    """One pre-encoded request and how to check its answer."""

    correlation_id: int
    api: tuple[int, int]  # key, version
    data: bytes


class PipelinedClient:
    """A blocking socket with up to ``window`` requests in flight; frames pre-encoded."""

    def __init__(self, bootstrap: str, window: int, timeout: float) -> None:
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.window = window
        self.buffer = bytearray()

    def close(self) -> None:
        self.sock.close()

    def _read_frame(self) -> bytes:
        while True:
            if len(self.buffer) >= 4:
                (size,) = _SIZE.unpack_from(self.buffer)
                if len(self.buffer) >= 4 + size:
                    frame = bytes(self.buffer[4 : 4 + size])
                    del self.buffer[: 4 + size]
                    return frame
            chunk = self.sock.recv(1 << 20)
            if not chunk:
                raise ConnectionError("broker closed the connection")
            self.buffer += chunk

    def run(self, frames: list[Frame], check_every: int = 100) -> None:
        """Send every frame, keeping ``window`` in flight; check every answer's correlation
        id, and the error codes of one answer in ``check_every``."""
        sent = received = 0
        while received < len(frames):
            while sent < len(frames) and sent - received < self.window:
                self.sock.sendall(frames[sent].data)
                sent += 1
            answer = self._read_frame()
            (correlation_id,) = _SIZE.unpack_from(answer)
            request = frames[received]
            if correlation_id != request.correlation_id:
                raise RuntimeError(f"answer {correlation_id}, expected {request.correlation_id}")
            if received % check_every == 0:
                CHECKS[request.api[0]](decode_response(answer, *request.api)[1])
            received += 1


def _produce_frame(correlation_id: int, partitions: int, value: bytes) -> Frame:
    batch = encode_batch([Record(0, int(time.time() * 1000), None, value, ())], 0)
    body = ProduceRequest(
        transactional_id=None, acks=1, timeout=timedelta(seconds=30),
        topic_data=(TopicProduceData(name=TOPIC, partition_data=tuple(
            PartitionProduceData(index=p, records=batch) for p in range(partitions))),),
    )
    header = RequestHeader(*PRODUCE, correlation_id, "bench-requests")
    return Frame(correlation_id, PRODUCE, encode_request(header, body))


def _fetch_frame(correlation_id: int, partitions: int, offset: int, batch_size: int) -> Frame:
    body = FetchRequest(
        cluster_id=None, replica_id=-1, max_wait=timedelta(0), min_bytes=1,
        max_bytes=1 << 30, isolation_level=0, session_id=0, session_epoch=-1,
        topics=(FetchTopic(topic=TOPIC, partitions=tuple(
            FetchPartition(partition=p, current_leader_epoch=-1, fetch_offset=offset,
                           last_fetched_epoch=-1, log_start_offset=-1,
                           partition_max_bytes=batch_size)
            for p in range(partitions))),),
        forgotten_topics_data=(), rack_id="",
    )
    header = RequestHeader(*FETCH, correlation_id, "bench-requests")
    return Frame(correlation_id, FETCH, encode_request(header, body))


def _create_topic_frame(partitions: int) -> Frame:
    body = CreateTopicsRequest(topics=(CreatableTopic(
        name=TOPIC, num_partitions=partitions, replication_factor=1, assignments=(),
        configs=()),), timeout=timedelta(seconds=30), validate_only=False)
    header = RequestHeader(*CREATE_TOPICS, 0, "bench-requests")
    return Frame(0, CREATE_TOPICS, encode_request(header, body))


def _check_created(response: Any) -> None:
    if response.topics[0].error_code != 0:
        raise RuntimeError(f"CreateTopics: error {response.topics[0].error_code}")


def _check_produce(response: Any) -> None:
    for topic in response.responses:
        for p in topic.partition_responses:
            if p.error_code != 0:
                raise RuntimeError(f"produce to partition {p.index}: error {p.error_code}")


def _check_fetch(response: Any) -> None:
    for topic in response.responses:
        for p in topic.partitions:
            if p.error_code != 0 or not p.records:
                raise RuntimeError(f"fetch from partition {p.partition_index}: error "
                                   f"{p.error_code}, {len(p.records or b'')} bytes")


CHECKS = {PRODUCE[0]: _check_produce, FETCH[0]: _check_fetch, CREATE_TOPICS[0]: _check_created}


def _timed(broker: BenchBroker, name: str, client: PipelinedClient, frames: list[Frame],
           profile: Path | None) -> PhaseResult:
    with PySpy(broker.pid, profile) if profile else contextlib.nullcontext():
        user0, system0 = cpu_times(broker.pid)
        t0 = time.perf_counter()
        client.run(frames)
        seconds = time.perf_counter() - t0
        user, system = cpu_times(broker.pid)
    return PhaseResult(name, len(frames), seconds, user + system - user0 - system0,
                       system - system0)


def run(requests: int, partitions: int, record_size: int, window: int, repeat: int,
        timeout: float, profile: Path | None = None) -> list[str]:
    """Print-ready result lines; with ``profile`` (a directory), py-spy samples each phase."""
    value = b"x" * record_size
    batch_size = len(encode_batch([Record(0, 0, None, value, ())], 0))
    phases = {
        "produce": [_produce_frame(i, partitions, value) for i in range(1, requests + 1)],
        # After the produce phase every partition holds ``requests`` one-record batches.
        "tail": [frame for i in range(requests) for frame in (
            _produce_frame(requests + 1 + 2 * i, partitions, value),
            _fetch_frame(requests + 2 + 2 * i, partitions, requests + i, batch_size))],
    }
    profiles: list[Path] = []
    lines = ["phase    requests   requests/s  broker µs/req  broker µs/part  in kernel",
             "-" * 71]
    for run_no in range(1, repeat + 1):
        with BenchBroker(partitions) as broker:
            client = PipelinedClient(broker.bootstrap, window, timeout)
            try:
                client.run([_create_topic_frame(partitions)], check_every=1)
                for name, frames in phases.items():
                    raw = profile / f"broker-{name}-{run_no}.txt" if profile else None
                    result = _timed(broker, name, client, frames, raw)
                    lines.append(result.row(partitions) + f"   (run {run_no})")
                    profiles += [raw] if raw else []
            finally:
                client.close()
    for path in profiles:
        lines.append(f"\nbroker profile, {path.stem} (py-spy; raw stacks: {path}):")
        lines.append(summarise(path, top=25))
    return lines
