"""The clusters of the recovery command: a fresh single broker of either system that can be
SIGKILLed and restarted on its own log dir (``Node``), a fresh 3-broker cluster, and
CreateTopics sent without waiting for it."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import kafka
from bench.cluster import BenchCluster
from bench.systems import SHARED_BROKER_CONFIG, silent_logger


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

    return AdminClient({"bootstrap.servers": bootstrap, "logger": silent_logger()})


def create_topic_async(bootstrap: str, topic: str, partitions: int, rf: int) -> Any:
    """Send a CreateTopics; returns the future (librdkafka's thread does the waiting)."""
    from confluent_kafka.admin import NewTopic

    client = admin(bootstrap)
    future = client.create_topics([NewTopic(topic, partitions, rf)], request_timeout=600)[topic]
    future.client = client  # keep the client (and its thread) alive as long as the future
    return future


# Topics per CreateTopics of the topics curve: Kafka's controller refuses an operation of
# more than 10,000 metadata records, and a topic makes two (the topic and its partition).
TOPICS_PER_REQUEST = 2_000


def create_topics_async(bootstrap: str, names: list[str], rf: int) -> list[Any]:
    """CreateTopics of one-partition topics, TOPICS_PER_REQUEST a request, all sent at once;
    the futures (the last to resolve says when every one was answered)."""
    from confluent_kafka.admin import NewTopic

    client = admin(bootstrap)
    futures = []
    for i in range(0, len(names), TOPICS_PER_REQUEST):
        batch = [NewTopic(n, 1, rf) for n in names[i:i + TOPICS_PER_REQUEST]]
        futures += client.create_topics(batch, request_timeout=600).values()
    for future in futures:
        future.client = client  # as create_topic_async: the client lives with its futures
    return futures


def wait_future(future: Any, timeout: float) -> float | None:
    """Seconds until ``future`` resolves (raising its error), None if it does not in time."""
    started = time.monotonic()
    try:
        future.result(timeout)
    except TimeoutError:
        return None
    return time.monotonic() - started

