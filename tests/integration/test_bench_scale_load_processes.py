"""The parts of ``python -m bench scale-load`` that need processes: its memory sampling of a
process tree, and its points measured against a real broker (the many-producers client and a
partitions point)."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

from bench.scale import connections, sampling
from bench.scale import partitions as partitions_module
from bench.scale.load_points import Point
from bench.scale.sampling import process_tree, rss_bytes, tree_rss
from bench.systems import Running


def test_rss_includes_children(monkeypatch):
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"],
                             stdin=subprocess.PIPE)
    try:
        assert child.pid in process_tree(os.getpid())
        assert rss_bytes(os.getpid()) > 0
        # Each process counts once (constant sizes: real ones move between two readings).
        monkeypatch.setattr(sampling, "rss_bytes", lambda pid: 1 << 20)
        assert tree_rss([os.getpid()]) == len(process_tree(os.getpid())) << 20 >= 2 << 20
    finally:
        assert child.stdin is not None
        child.stdin.close()
        child.wait(10)
    assert rss_bytes(child.pid) == 0  # gone: no figure, no error


def test_connections_point_against_a_broker(broker_factory):
    """Four producers over two processes, flat out then at a rate, on a real broker."""
    broker = broker_factory()
    env = Running("kafkube", 1, broker.bootstrap, lambda: [broker.proc.pid], broker.alive,
                  "test")
    args = argparse.Namespace(records=2000, record_size=1024, rate=1.0, rate_seconds=1.0,
                              processes=2, timeout=60.0, create_timeout=60.0, profile=None)
    point = Point("connections", 4, "kafkube")
    connections.measure_connections(env, point, args, lambda _: None)
    assert point.failed == {}
    assert point.raw["produce"]["records"] == 2000
    assert point.values["produce_mbps"] > 0 and point.values["rate_p99"] > 0
    assert point.values["connections"] >= 4  # at least one per producer
    assert point.values["rss_peak"] >= point.values["rss_idle"] * 0.5 > 0


def test_partitions_point_against_a_broker(broker_factory):
    """A 10-partition point on a real broker: created, a write to each partition, produced
    and consumed (the consumer reads the ten extra records too), memory sampled."""
    broker = broker_factory()
    env = Running("kafkube", 1, broker.bootstrap, lambda: [broker.proc.pid], broker.alive,
                  "test")
    args = argparse.Namespace(records=3000, record_size=1024, timeout=60.0,
                              create_timeout=60.0, profile=None)
    point = Point("partitions", 10, "kafkube")
    partitions_module.measure_partitions(env, point, args, lambda _: None)
    assert point.failed == {}
    assert 0 < point.values["create_s"] <= point.values["writable_s"]
    assert point.raw["consume"]["records"] == 3010
    assert point.values["produce_mbps"] > 0 and point.values["consume_cpu"] >= 0
    assert point.values["rss_peak"] > 0
