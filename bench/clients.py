"""The benchmark clients. Each runs in its own process, started by ``__main__``.

They use confluent-kafka (librdkafka) because it is the fastest client available from
Python: its own threads do the network and batching, so the figures reflect the broker
more than the client. They return plain dicts so results cross the process boundary.
"""

from __future__ import annotations

import multiprocessing
import os
import time
import traceback
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

MiB = 1 << 20

# Throughput settings, as in OpenMessaging Benchmark's kafka-throughput.yaml and the usual
# kafka-producer-perf-test runs: big batches, a short linger, no compression, acks=1.
PRODUCER_CONFIG: dict[str, Any] = {
    "acks": 1,
    "linger.ms": 5,
    "batch.size": MiB,
    "compression.type": "none",
    "queue.buffering.max.kbytes": 512 * 1024,
    "queue.buffering.max.messages": 500_000,
    "enable.idempotence": False,
}
CONSUMER_CONFIG: dict[str, Any] = {
    "group.id": "kafkube-bench",  # required by the client; we assign(), never join
    "enable.auto.commit": False,
    "auto.offset.reset": "earliest",
    "fetch.max.bytes": 50 * MiB,
    "max.partition.fetch.bytes": 10 * MiB,
    "queued.max.messages.kbytes": 256 * 1024,
    "fetch.wait.max.ms": 100,
    # librdkafka pauses fetching for fetch.queue.backoff.ms (1000 by default) whenever its
    # local queue is full; at these rates that idled the consumer ~40% of the run.
    "fetch.queue.backoff.ms": 10,
}


def check_topic(client: Any, topic: str, partitions: int, deadline: float) -> None:
    """Fetch metadata (auto-creating the topic) before the clock starts."""
    while True:
        meta = client.list_topics(topic, timeout=10)
        found = meta.topics.get(topic)
        if found is not None and found.error is None and len(found.partitions) == partitions:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"topic {topic} not ready with {partitions} partitions: {found}")
        time.sleep(0.2)


def produce(
    bootstrap: str, topic: str, partitions: int, records: int, record_size: int, timeout: float,
    extra: dict[str, str],
) -> dict[str, Any]:
    """Send ``records`` values of ``record_size`` bytes round-robin over the partitions.

    The clock runs from the first ``produce()`` call to the last delivery report.
    """
    from confluent_kafka import Producer

    deadline = time.monotonic() + timeout
    delivered = failed = 0
    last_report = 0.0
    first_error: str | None = None

    def on_delivery(err: Any, _msg: Any) -> None:
        nonlocal delivered, failed, last_report, first_error
        if err is None:
            delivered += 1
        else:
            failed += 1
            first_error = first_error or str(err)
        last_report = time.perf_counter()

    producer = Producer({"bootstrap.servers": bootstrap, "on_delivery": on_delivery,
                         **PRODUCER_CONFIG, **extra})
    check_topic(producer, topic, partitions, deadline)
    payload = os.urandom(record_size)
    send, poll = producer.produce, producer.poll
    cpu0, main0 = time.process_time(), time.thread_time()
    start = time.perf_counter()
    for i in range(records):
        while True:
            try:
                send(topic, payload, partition=i % partitions)
                break
            except BufferError:  # the client's queue is full: serve delivery reports
                poll(0.01)
                if time.monotonic() > deadline:
                    raise TimeoutError(f"produce: only {i} of {records} queued") from None
        if not i & 0x3FF:
            poll(0)
    left = producer.flush(max(0.0, deadline - time.monotonic()))
    if left or failed:
        raise RuntimeError(f"produce: {left} undelivered, {failed} failed ({first_error})")
    return {"records": delivered, "bytes": delivered * record_size,
            "seconds": last_report - start, "client_cpu": time.process_time() - cpu0,
            "client_main_cpu": time.thread_time() - main0}


def consume(
    bootstrap: str, topic: str, partitions: int, records: int, record_size: int, timeout: float,
    extra: dict[str, str],
) -> dict[str, Any]:
    """Read ``records`` records from offset 0 of every partition, without a group.

    The clock runs from ``assign()`` to the last record in hand, so it includes the first
    fetch round trip, as kafka-consumer-perf-test does.
    """
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    deadline = time.monotonic() + timeout
    consumer = Consumer({"bootstrap.servers": bootstrap, **CONSUMER_CONFIG, **extra})
    try:
        check_topic(consumer, topic, partitions, deadline)
        count = nbytes = 0
        cpu0, main0 = time.process_time(), time.thread_time()
        start = time.perf_counter()
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        while count < records:
            if time.monotonic() > deadline:
                raise TimeoutError(f"consume: only {count} of {records} records read")
            batch = consumer.consume(10_000, timeout=0.5)
            for msg in batch:
                if msg.error() is not None:
                    raise RuntimeError(f"consume: {msg.error()}")
            count += len(batch)
            nbytes += sum(map(len, batch))
        seconds = time.perf_counter() - start
        if count != records or nbytes != count * record_size:
            raise RuntimeError(f"consume: read {count} records, {nbytes} bytes; expected "
                               f"{records} of {record_size} bytes")
        return {"records": count, "bytes": nbytes, "seconds": seconds,
                "client_cpu": time.process_time() - cpu0,
                "client_main_cpu": time.thread_time() - main0}
    finally:
        consumer.close()


def group_member(
    bootstrap: str, topic: str, group: str, timeout: float, extra: dict[str, str],
) -> dict[str, Any]:
    """One member of a consumer group: subscribe, read until every partition it owns is at
    its end, then leave (committing its position, so nothing is read twice).

    Returns its record count and the wall-clock (perf_counter, shared by all processes on
    Linux) of its first and last record, so the caller can compute the group's rate.
    """
    from confluent_kafka import Consumer, KafkaError

    deadline = time.monotonic() + timeout
    config = {**CONSUMER_CONFIG, "group.id": group, "enable.partition.eof": True,
              "enable.auto.commit": True, **extra}
    consumer = Consumer({"bootstrap.servers": bootstrap, **config})
    count = nbytes = 0
    first = last = None
    at_end: set[int] = set()
    joined = time.perf_counter()
    try:
        consumer.subscribe([topic])
        while True:
            if time.monotonic() > deadline:
                raise TimeoutError(f"group member: {count} records, not at the end")
            for msg in consumer.consume(10_000, timeout=0.5):
                err = msg.error()
                if err is not None:
                    if err.code() != KafkaError._PARTITION_EOF:
                        raise RuntimeError(f"group member: {err}")
                    at_end.add(msg.partition())
                    continue
                at_end.discard(msg.partition())
                count += 1
                nbytes += len(msg)
                last = time.perf_counter()
                first = first or last
            owned = {tp.partition for tp in consumer.assignment()}
            if owned and owned <= at_end:
                break
    finally:
        consumer.close()
    return {"records": count, "bytes": nbytes, "first": first, "last": last,
            "joined": joined, "client_cpu": time.process_time()}


def run_in_process(
    fn: Callable[..., dict[str, Any]], args: tuple[Any, ...], timeout: float
) -> dict[str, Any]:
    """Run ``fn(*args)`` in a fresh process (its own GIL), killing it after ``timeout``.

    A bare Process, not a Pool: a Pool silently replaces a worker that dies, which would
    turn a crash into a wait for the whole timeout. The child's entry point lives here, not
    in ``__main__``, because spawn cannot import a package's ``__main__`` by name.
    """
    ctx = multiprocessing.get_context("spawn")
    receiver, sender = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_client_main, args=(sender, fn, args), daemon=True)
    proc.start()
    sender.close()
    try:
        if not receiver.poll(timeout):
            raise TimeoutError(f"{fn.__name__} client still running after {timeout:.0f}s")
        ok, value = receiver.recv()
        proc.join(10)  # a client that answered exits at once; if not, the finally kills it
    except EOFError:
        proc.join(5)
        raise RuntimeError(f"{fn.__name__} client died, exit code {proc.exitcode}") from None
    finally:
        if proc.is_alive():
            proc.kill()
        proc.join(5)
        receiver.close()
    if not ok:
        raise RuntimeError(f"{fn.__name__} client failed:\n{value}")
    return value


def _client_main(
    conn: Connection, fn: Callable[..., dict[str, Any]], args: tuple[Any, ...]
) -> None:
    try:
        conn.send((True, fn(*args)))
    except BaseException as e:
        conn.send((False, "".join(traceback.format_exception(e))))
