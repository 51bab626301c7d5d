"""The two systems ``python -m bench compare`` and its kin run side by side, Apache Kafka
and kafkube, as the workloads see them: the broker settings both get, a fresh cluster of
either (``running``), a topic created and fully replicated on it, and a meter of the brokers'
CPU over a span.

Shared by compare, spark, transactions, tls and the scale benchmarks, which measure the two
systems the same way compare does."""

from __future__ import annotations

import argparse
import contextlib
import logging
import sys
import time
import traceback
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from bench import kafka
from bench.cluster import BenchCluster
from kafkube.harness.procstat import cpu_seconds, machine_busy_seconds
from kafkube.harness.waiting import wait_until

LONG_MAX = 2**63 - 1
F = TypeVar("F")
PARTITIONS = 16
SYSTEMS = ("kafka", "kafkube")

# Given to both systems (Kafka: appended to server.properties; kafkube: --override). These
# are Kafka's defaults, spelled out: 1 GiB segments, no fsync per message or per interval
# (the page cache and replication carry durability), a week's retention, no size limit.
SHARED_BROKER_CONFIG: dict[str, str] = {
    "num.partitions": str(PARTITIONS),
    "log.segment.bytes": "1073741824",
    "log.flush.interval.messages": str(LONG_MAX),
    "log.flush.interval.ms": str(LONG_MAX),
    "log.retention.hours": "168",
    "log.retention.bytes": "-1",
    "log.index.interval.bytes": "4096",
    "log.message.timestamp.type": "CreateTime",
    "message.max.bytes": "1048588",
    "compression.type": "producer",
    "unclean.leader.election.enable": "false",
    "replica.fetch.max.bytes": "1048576",
    "replica.fetch.wait.max.ms": "500",
    "replica.lag.time.max.ms": "30000",
    "group.initial.rebalance.delay.ms": "3000",
    # Reviewed for loopback (docs/performance.md, "Socket buffers"): Kafka's 100 KiB send
    # buffer, and the kernel's autotuned receive buffer in place of Kafka's 100 KiB, which
    # cost kafkube 7-10% of its produce rate and Kafka nothing.
    "socket.send.buffer.bytes": "102400",
    "socket.receive.buffer.bytes": "-1",
}

@dataclass
class Running:
    """A running cluster of either system, as the workloads see it."""

    system: str
    brokers: int
    bootstrap: str
    pids: Callable[[], list[int]]
    alive: Callable[[], bool]
    where: str  # data dir / logs, for error messages


@contextlib.contextmanager
def running(system: str, brokers: int, args: argparse.Namespace,
            libs: Path | None) -> Iterator[Running]:
    """A fresh cluster of ``system`` with ``brokers`` nodes; stopped (killed if need be) on
    the way out, whatever happens inside."""
    # --kafka-config / --kafkube-config: settings for one system alone, over the shared ones.
    config = {**SHARED_BROKER_CONFIG, **dict(getattr(args, f"{system}_config", None) or ())}
    if system == "kafka":
        assert libs is not None
        with kafka.KafkaCluster(libs, brokers, config, args.kafka_heap,
                                keep=args.keep) as cluster:
            yield Running(system, brokers, cluster.bootstrap, cluster.pids, cluster.alive,
                          str(cluster.data_dir))
    else:
        overrides = [f"{k}={v}" for k, v in config.items()]
        with BenchCluster(brokers, overrides, keep=args.keep) as cluster:
            def alive() -> bool:
                return all(b.alive() for b in cluster.brokers)
            yield Running(system, brokers, cluster.bootstrap, cluster.pids, alive,
                          str(cluster.log_path))


def silent_logger() -> logging.Logger:
    """A logger that drops librdkafka's own log (``"logger"`` in a client's config)."""
    logger = logging.getLogger("bench.compare.librdkafka")
    logger.propagate = False
    if not logger.handlers:
        logger.addHandler(logging.NullHandler())
    return logger


def create_topic(env: Running, topic: str, rf: int, config: dict[str, str],
                 timeout: float = 60.0, partitions: int = PARTITIONS) -> None:
    """Create ``topic`` (``PARTITIONS`` partitions unless told) and wait until every
    partition has a leader and a full ISR in three metadata answers in a row."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": env.bootstrap, "logger": silent_logger()})
    futures = admin.create_topics([NewTopic(topic, partitions, rf, config=config)],
                                  request_timeout=30)
    futures[topic].result(timeout)
    streak = [0]

    def ready() -> bool:
        try:
            meta = admin.list_topics(timeout=5)
        except KafkaException:
            return False
        found = meta.topics.get(topic)
        ok = (found is not None and found.error is None and len(found.partitions) == partitions
              and all(p.leader >= 0 and len(p.isrs) == rf for p in found.partitions.values()))
        streak[0] = streak[0] + 1 if ok else 0
        return streak[0] >= 3
    wait_until(ready, timeout, f"{topic}: {partitions} partitions led, ISR of {rf}",
               interval=0.1)


class Meter:
    """Broker CPU seconds (all broker processes) and machine busy share over a span."""

    def __init__(self, env: Running) -> None:
        self.env = env
        self.pids = env.pids()
        self.cpu0 = [cpu_seconds(p) for p in self.pids]
        self.busy0, self.wall0 = machine_busy_seconds(), time.monotonic()

    def done(self, raw: dict[str, Any]) -> dict[str, Any]:
        raw["broker_cpu_s"] = round(sum(cpu_seconds(p) - c
                                        for p, c in zip(self.pids, self.cpu0, strict=True)), 3)
        wall = time.monotonic() - self.wall0
        raw["machine_busy"] = round((machine_busy_seconds() - self.busy0) / wall, 3)
        if not self.env.alive():
            raise RuntimeError(f"a {self.env.system} broker died; see {self.env.where}")
        return raw


def measure_each(systems: Iterable[str], measure: Callable[[str], list[F]]
                 ) -> tuple[list[F], BaseException | None] | None:
    """The figures of ``measure`` on each system in turn, and the error that stopped it (the
    figures measured before it are still printed); None on Ctrl-C or SIGTERM, after every
    broker started has been stopped (``running`` stops them on the way out)."""
    figures: list[F] = []
    try:
        for system in systems:
            figures += measure(system)
    except KeyboardInterrupt:
        print("interrupted: every broker started has been stopped", file=sys.stderr)
        return None
    except Exception as e:  # still print what was measured before it
        traceback.print_exc()
        return figures, e
    return figures, None
