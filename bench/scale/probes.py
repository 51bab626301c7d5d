"""Raw wire probes of the recovery command: one connection per broker, so "this broker
answers" is exact (librdkafka picks which broker answers a metadata request), and
``BrokerWatch``, one thread per broker asking until its broker serves a topic."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import timedelta
from typing import Any

POLL_S = 0.2  # between two probes of one broker: often enough, light on 2 shared cores
OK = 0


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
        from kafkube.harness.wire import ConnectionClosed, WireClient

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
    from kafkube.harness.wire import metadata_request as request

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


def wait_registered(addresses: list[str], brokers: int, timeout: float = 60.0) -> None:
    """Until every broker's Metadata lists ``brokers`` brokers: a CreateTopics sent before
    the controller counts them all is refused (INVALID_REPLICATION_FACTOR), as Kafka's is
    right after its start."""
    from kafkube.harness.waiting import wait_until
    from kafkube.harness.wire import metadata_request as request

    probes = [Probe(a) for a in addresses]

    def listed() -> bool:
        answers = [p.request(request([], auto_create=False)) for p in probes]
        return all(a is not None and len(a.brokers) >= brokers for a in answers)
    try:
        wait_until(listed, timeout, f"{brokers} brokers in every broker's metadata",
                   interval=POLL_S)
    finally:
        for probe in probes:
            probe.close()


def all_led(response: Any, prefix: str, topics: int, rf: int) -> bool:
    """``topics`` topics named ``prefix``... in one answer, each partition led with an ISR
    of ``rf`` (a Metadata answer for every topic)."""
    if response is None:
        return False
    ours = [t for t in response.topics if t.name and t.name.startswith(prefix)]
    return len(ours) == topics and all(
        t.error_code == OK and t.partitions and all(
            p.error_code == OK and p.leader_id >= 0 and len(p.isr_nodes) >= rf
            for p in t.partitions) for t in ours)


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


# Partitions per Fetch of fetch_works: each may answer up to its 2 MiB, and a response stops
# at 64 MiB, past which the partitions after it come back empty (as Kafka's max_bytes says).
FETCH_GROUP = 32


def fetch_works(probe: Probe, topic: str, last: dict[int, int]) -> bool:
    """A Fetch at each partition's last offset returns records and no error (asked
    ``FETCH_GROUP`` partitions at a time)."""
    items = list(last.items())
    for i in range(0, len(items), FETCH_GROUP):
        group = dict(items[i:i + FETCH_GROUP])
        response = probe.request(fetch_request(topic, group))
        if response is None or response.error_code != OK or len(response.responses) != 1:
            return False
        data = response.responses[0].partitions
        if len(data) != len(group) or not all(p.error_code == OK and p.records for p in data):
            return False
    return True


class BrokerWatch:
    """One thread per broker, each asking its broker over its own connection, every
    ``POLL_S``, until it answers ``topic`` with every partition led and a full ISR (RF 3),
    or the deadline passes. Threads, because a broker busy opening thousands of partitions
    can take seconds to answer, and the others must not wait behind it."""

    def __init__(self, addresses: list[str], topic: str, partitions: int, t0: float,
                 deadline: float, request: Any = None,
                 ready: Callable[[Any], bool] | None = None) -> None:
        """``request``/``ready``: another Metadata question and its test (the topics
        curve asks for every topic); by default ``topic`` with ``partitions`` led."""
        self.addresses, self.topic, self.partitions = addresses, topic, partitions
        self.t0, self.deadline = t0, deadline
        self.request = request if request is not None else metadata_request(topic)
        self.ready = ready or (lambda answer: led(answer, topic, partitions, 3))
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
                if self.ready(probe.request(self.request)):
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

