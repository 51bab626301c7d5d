"""The broker's memory and connections under clients that declare large requests and do not
send them, send them slowly, or never stop connecting: Kafka's queued.max.request.bytes,
connections.max.idle.ms and max.connections.per.ip, against a real broker process."""

from __future__ import annotations

import contextlib
import socket
import struct
import time
from pathlib import Path

from confluent_kafka import Consumer, Producer

from kafkube.harness.metrics import scrape
from kafkube.harness.process import BrokerProcess
from kafkube.harness.waiting import wait_until
from kafkube.harness.wire import WireClient, api_versions_request

MiB = 1 << 20
POOL_USED = "kafka_network_socketserver_memorypoolused"
WAITING = "kafka_network_socketserver_connectionswaitingformemory"


def rss_bytes(broker: BrokerProcess) -> int:
    status = Path(f"/proc/{broker.proc.pid}/status").read_text()
    (kib,) = [int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS")]
    return kib * 1024


def connect(broker: BrokerProcess) -> socket.socket:
    host, port = broker.bootstrap.rsplit(":", 1)
    return socket.create_connection((host, int(port)), timeout=10)


def still_serves(broker: BrokerProcess, topic: str) -> None:
    producer = Producer({"bootstrap.servers": broker.bootstrap, "message.timeout.ms": 20000})
    producer.produce(topic, b"still here")
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "limits",
                         "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    try:
        msg = wait_until(lambda: consumer.poll(1), 30, "the record back")
        assert msg.error() is None and msg.value() == b"still here"
    finally:
        consumer.close()


def test_declared_frames_cost_no_memory(broker_factory):
    """50 connections each declare a frame of socket.request.max.bytes (100 MB) and send
    a few bytes of it: the broker reserves their turn, not 5 GB."""
    broker = broker_factory()
    still_serves(broker, "warm-up")  # the broker's own working set, before measuring
    before = rss_bytes(broker)
    size = 104857600
    sockets = [connect(broker) for _ in range(50)]
    try:
        for sock in sockets:
            sock.sendall(struct.pack(">i", size) + bytes(100))
        wait_until(lambda: scrape(broker.metrics_port).get(POOL_USED) == 50 * size, 30,
                   "the broker to have read every declared size")
        grown = rss_bytes(broker) - before
        assert grown < 40 * MiB, f"RSS grew by {grown / MiB:.0f} MiB"
        still_serves(broker, "beside-idle-frames")
    finally:
        for sock in sockets:
            sock.close()
    wait_until(lambda: scrape(broker.metrics_port).get(POOL_USED) == 0, 30,
               "the reservations returned")


def test_request_memory_is_bounded_across_connections(broker_factory):
    """queued.max.request.bytes 20 MiB, frames of 10 MiB, 20 clients sending 8 MiB each:
    two read on, the others wait after their first read; without the pool the broker would
    hold 160 MiB."""
    broker = broker_factory(socket_request_max_bytes=10 * MiB,
                            queued_max_request_bytes=20 * MiB)
    still_serves(broker, "warm-up")
    before = rss_bytes(broker)
    sockets = [connect(broker) for _ in range(20)]
    sent = [0] * len(sockets)
    chunk = bytes(256 << 10)
    for sock in sockets:
        sock.setblocking(False)
        sock.send(struct.pack(">i", 10 * MiB))

    def push() -> None:
        for i, sock in enumerate(sockets):
            while sent[i] < 8 * MiB:
                try:
                    sent[i] += sock.send(chunk[: 8 * MiB - sent[i]])
                except BlockingIOError:
                    break

    def settled() -> bool:
        push()
        metrics = scrape(broker.metrics_port)
        return (metrics.get(POOL_USED) == 20 * MiB and metrics.get(WAITING) == 18
                and sum(n == 8 * MiB for n in sent) >= 2)

    try:
        # The two reading connections take all 8 MiB; the eighteen others stall once the
        # socket buffers are full (about 5 MiB in).
        wait_until(settled, 60, "two connections reading to the end, eighteen waiting")
        grown = rss_bytes(broker) - before
        assert grown < 70 * MiB, f"RSS grew by {grown / MiB:.0f} MiB"
        still_serves(broker, "beside-waiting-frames")  # small requests: within one read
        # One reading client finishes its frame (junk: the broker closes it): the memory
        # goes to a waiting one.
        reading = [i for i in range(len(sockets)) if sent[i] == 8 * MiB]
        assert len(reading) >= 2, sent
        finisher = sockets[reading[0]]
        finisher.setblocking(True)
        finisher.sendall(bytes(2 * MiB))
        wait_until(lambda: scrape(broker.metrics_port).get(WAITING) == 17, 30,
                   "a waiting connection to get the freed memory")
    finally:
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.close()
    wait_until(lambda: scrape(broker.metrics_port).get(POOL_USED) == 0, 30,
               "the reservations returned")


def test_idle_connections_are_closed(broker_factory):
    broker = broker_factory(connections_max_idle_ms=1000)
    idle = connect(broker)
    idle.sendall(struct.pack(">i", 1000) + bytes(10))  # half a request, then nothing
    idle.settimeout(30)
    with WireClient.connect(broker.bootstrap) as busy:
        # One that keeps asking stays open well past the idle time...
        for _ in range(4):
            assert busy.request(api_versions_request()).error_code == 0
            time.sleep(0.6)  # the gap under test, shorter than the idle time (no condition
            # to wait for: time passing is the point)
        assert busy.request(api_versions_request()).error_code == 0
    # ...and the one that went quiet is closed.
    assert idle.recv(1) == b"", "the broker closes an idle connection"


def test_connections_per_ip_are_capped(broker_factory):
    broker = broker_factory(max_connections_per_ip=3)
    kept = [connect(broker) for _ in range(3)]
    extra = connect(broker)
    extra.settimeout(30)
    assert extra.recv(1) == b"", "a fourth connection from 127.0.0.1 is closed"
    kept[0].close()
    wait_until(lambda: scrape(broker.metrics_port).get("kafka_network_connections") == 2, 30,
               "the closed connection counted out")
    with WireClient.connect(broker.bootstrap) as again:  # a free slot again: served
        assert again.request(api_versions_request()).error_code == 0
    for sock in [*kept[1:], extra]:
        sock.close()
