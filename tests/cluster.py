"""A local multi-broker kafkube cluster for tests: N broker processes on loopback.

Every broker is a ``tests.conftest.BrokerProcess`` with its own ``node.id`` (its index) and
``log.dirs``; all share one SQLite coordination database (``kafkube.coordination.path``).
Faults are signals: ``kill`` (SIGKILL), ``pause``/``resume`` (SIGSTOP/SIGCONT), ``restart``
(clean stop if running, then start on the same port and log.dirs).

Use it through the ``cluster_factory`` fixture; import it into the test module::

    from tests.cluster import cluster_factory  # noqa: F401

    def test_x(cluster_factory):
        cluster = cluster_factory(3, {"min.insync.replicas": "2"})

The fixture builds on conftest's ``broker_factory``, so a failing test gets the last lines of
every broker's output attached by conftest's report hook; the full outputs are written next
to the brokers' log.dirs (``<tmp>/cluster-K/broker-N.out``) at teardown.
"""

from __future__ import annotations

import re
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, ClusterMetadata, NewTopic

from tests.conftest import BrokerProcess, scrape, wait_until

STOP_TIMEOUT = 30.0
METADATA_TIMEOUT = 3.0  # per request while polling; a paused broker never answers


def _admin_config(bootstrap: str) -> dict[str, object]:
    return {
        "bootstrap.servers": bootstrap,
        "socket.connection.setup.timeout.ms": 5000,
        "socket.timeout.ms": 10000,
        "reconnect.backoff.max.ms": 1000,
    }


@dataclass(frozen=True, slots=True)
class PartitionState:
    leader: int  # -1 when there is none
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    error: str | None = None


class Cluster:
    def __init__(self, root: Path, size: int = 3,
                 overrides: Mapping[str, str] | None = None) -> None:
        self.root = root
        self.coordination_path = root / "cluster.db"
        self.overrides = {k: str(v) for k, v in (overrides or {}).items()}
        root.mkdir(parents=True, exist_ok=True)
        self.brokers = [
            BrokerProcess(root / f"broker-{i}", {
                "node.id": str(i),
                "kafkube.coordination.path": str(self.coordination_path),
                **self.overrides,
            })
            for i in range(size)
        ]
        self.paused: set[int] = set()
        self._admin: AdminClient | None = None
        self._admins: dict[int, AdminClient] = {}
        self._next = 0

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self, timeout: float = 60.0) -> Cluster:
        """Start every broker at once (none waits for another) and wait until the metadata
        lists them all."""
        errors: list[BaseException] = []

        def start_one(broker: BrokerProcess) -> None:
            try:
                broker.start()
            except BaseException as exc:  # re-raised below, in the test's thread
                errors.append(exc)

        threads = [threading.Thread(target=start_one, args=(b,)) for b in self.brokers]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        if errors:
            raise errors[0]
        self.wait_for_brokers(len(self.brokers), timeout)
        return self

    @property
    def size(self) -> int:
        return len(self.brokers)

    @property
    def bootstrap(self) -> str:
        """Every broker's address (ports are fixed once started, so this stays valid)."""
        return ",".join(b.bootstrap for b in self.brokers if b.port)

    def requests_served(self, api: str) -> dict[int, float]:
        """Version -> how many ``api`` requests (Kafka's name, e.g. "EndTxn") the running
        brokers answered, from their metrics: which protocol a client actually spoke."""
        served: dict[int, float] = {}
        pattern = re.compile(rf'^kafka_network_requests_total\{{api="{api}",version="(\d+)"\}}$')
        for i, broker in enumerate(self.brokers):
            if not self.alive(i) or i in self.paused or not broker.metrics_port:
                continue
            for name, value in scrape(broker.metrics_port).items():
                if match := pattern.match(name):
                    served[int(match[1])] = served.get(int(match[1]), 0) + value
        return served

    def finalize_feature(self, name: str, level: int) -> None:
        """Set a cluster feature's finalized level (``kafka-features.sh upgrade/downgrade``
        through UpdateFeatures), then wait until every running broker advertises it: e.g.
        ``transaction.version`` 1 for a cluster whose clients speak the protocol before
        KIP-890 part 2. A refusal fails the test with the broker's message."""
        from kio.schema.api_versions.v4.request import ApiVersionsRequest
        from kio.schema.update_features.v1.request import (
            FeatureUpdateKey,
            UpdateFeaturesRequest,
        )

        from tests.wire import WireClient

        running = [i for i in range(self.size) if self.alive(i) and i not in self.paused]
        with WireClient.connect(self.brokers[running[0]].bootstrap) as c:
            answer = c.request(UpdateFeaturesRequest(feature_updates=(FeatureUpdateKey(
                feature=name, max_version_level=level, upgrade_type=3),)))
            assert answer.error_code == 0, answer.error_message

        def advertised(i: int) -> bool:
            with WireClient.connect(self.brokers[i].bootstrap) as c:
                features = c.request(ApiVersionsRequest(
                    client_software_name="tests", client_software_version="1"))
            levels = {f.name: f.max_version_level for f in features.finalized_features}
            return levels.get(name, 0) == level

        for i in running:
            wait_until(lambda i=i: advertised(i), 30, f"broker {i} advertising {name}={level}")

    def alive(self, i: int) -> bool:
        return self.brokers[i].alive()

    def kill(self, i: int) -> None:
        """SIGKILL broker ``i`` (also when paused)."""
        self.brokers[i].kill()
        self.paused.discard(i)

    def pause(self, i: int) -> None:
        """SIGSTOP broker ``i``: its sockets stay open, it just stops answering."""
        broker = self.brokers[i]
        assert broker.alive() and broker.proc is not None, f"broker {i} is not running"
        broker.proc.send_signal(signal.SIGSTOP)
        self.paused.add(i)

    def resume(self, i: int) -> None:
        broker = self.brokers[i]
        if broker.alive() and broker.proc is not None:
            broker.proc.send_signal(signal.SIGCONT)
        self.paused.discard(i)

    def restart(self, i: int) -> None:
        """Start broker ``i`` again on its port and log.dirs; a running one is stopped cleanly
        (SIGTERM) first, a paused one resumed first."""
        if i in self.paused:
            self.resume(i)
        self.brokers[i].restart()

    def stop(self, timeout: float = STOP_TIMEOUT) -> dict[int, int]:
        """Resume paused brokers, SIGTERM all running ones together, SIGKILL whatever is still
        running at the deadline. Returns the exit code of each broker that was running."""
        for i in list(self.paused):
            self.resume(i)
        running = {i: b.proc for i, b in enumerate(self.brokers) if b.alive() and b.proc}
        for proc in running.values():
            proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        codes: dict[int, int] = {}
        for i, proc in running.items():
            try:
                codes[i] = proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
                codes[i] = proc.returncode
                self.brokers[i].output.append(
                    f"[tests.cluster] no exit {timeout}s after SIGTERM; SIGKILLed\n")
        self._admin = None
        self._admins.clear()
        return codes

    def save_logs(self) -> list[Path]:
        """Write each broker's whole output (across restarts) next to its log.dirs."""
        paths = []
        for i, broker in enumerate(self.brokers):
            path = self.root / f"broker-{i}.out"
            path.write_text("".join(broker.output))
            paths.append(path)
        return paths

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- metadata ----------------------------------------------------------------------------

    @property
    def admin(self) -> AdminClient:
        """An AdminClient bootstrapped with every broker (CreateTopics and the like)."""
        if self._admin is None:
            self._admin = AdminClient(_admin_config(self.bootstrap))
        return self._admin

    def admin_of(self, i: int) -> AdminClient:
        """An AdminClient bootstrapped with broker ``i`` alone. librdkafka connects only to
        the brokers it needs, so its metadata requests go to broker ``i``."""
        if i not in self._admins:
            self._admins[i] = AdminClient(_admin_config(self.brokers[i].bootstrap))
        return self._admins[i]

    def metadata(self, timeout: float = 5.0, node: int | None = None) -> ClusterMetadata | None:
        """One Metadata answer: from broker ``node``, or else from the next running, unpaused
        broker in turn (so successive calls hear from different brokers). None if that broker
        did not answer in time; callers poll."""
        if node is None:
            candidates = [i for i in range(self.size) if self.alive(i) and i not in self.paused]
            if not candidates:
                return None
            self._next = (self._next + 1) % self.size
            node = min(candidates, key=lambda i: (i - self._next) % self.size)
        try:
            # All topics, not list_topics(topic): a named Metadata request from a producer-type
            # handle would ask the broker to auto-create a missing topic.
            return self.admin_of(node).list_topics(timeout=timeout)
        except KafkaException:
            return None

    def partitions(self, topic: str, timeout: float = 5.0) -> dict[int, PartitionState] | None:
        """Leader, replicas and ISR of every partition of ``topic``; None if unknown."""
        metadata = self.metadata(timeout)
        if metadata is None or topic not in metadata.topics:
            return None
        described = metadata.topics[topic]
        if described.error is not None or not described.partitions:
            return None
        return {
            p.id: PartitionState(
                p.leader, tuple(p.replicas), tuple(p.isrs),
                None if p.error is None else p.error.name(),
            )
            for p in described.partitions.values()
        }

    def controller_id(self, timeout: float = 5.0) -> int:
        """The controller named by the metadata, -1 if unknown."""
        metadata = self.metadata(timeout)
        return -1 if metadata is None else metadata.controller_id

    def wait_for_brokers(self, count: int, timeout: float = 60.0, consecutive: int = 3) -> None:
        """``count`` brokers listed in ``consecutive`` metadata answers in a row."""
        streak = [0]

        def registered() -> bool:
            metadata = self.metadata(METADATA_TIMEOUT)
            if metadata is not None:
                streak[0] = streak[0] + 1 if len(metadata.brokers) >= count else 0
            return streak[0] >= consecutive
        wait_until(registered, timeout, f"{count} brokers in the metadata", interval=0.2)

    def wait_for_partitions(
        self, topic: str, predicate: Callable[[PartitionState], bool], timeout: float,
        what: str, consecutive: int = 1,
    ) -> dict[int, PartitionState]:
        """Poll the metadata until ``predicate`` holds for every partition of ``topic`` in
        ``consecutive`` answers in a row. Each answer comes from a broker librdkafka picks, and a
        broker just resumed from SIGSTOP may still answer from its stale view for a moment, so
        waits for a recovery ask for more than one."""
        streak: list[dict[int, PartitionState]] = []

        def check() -> dict[int, PartitionState] | None:
            states = self.partitions(topic, timeout=METADATA_TIMEOUT)
            if states is None:
                return None  # no answer: neither for nor against
            if all(predicate(state) for state in states.values()):
                streak.append(states)
            else:
                streak.clear()
            return states if len(streak) >= consecutive else None
        return wait_until(check, timeout, f"{topic}: {what}", interval=0.2)

    def leader_of(self, topic: str, partition: int, timeout: float = 30.0) -> int:
        """The current leader of one partition (waits until there is one)."""
        def leader() -> tuple[int] | None:  # a tuple: broker 0 is a leader too, yet falsy
            states = self.partitions(topic, timeout=METADATA_TIMEOUT)
            state = states.get(partition) if states else None
            return (state.leader,) if state is not None and state.leader >= 0 else None
        return wait_until(leader, timeout, f"a leader for {topic}-{partition}", interval=0.2)[0]

    def wait_for_isr(self, topic: str, size: int, timeout: float = 60.0,
                     consecutive: int = 1) -> dict[int, PartitionState]:
        """Every partition has a leader and exactly ``size`` in-sync replicas."""
        return self.wait_for_partitions(
            topic, lambda s: s.leader >= 0 and len(s.isr) == size, timeout,
            f"every partition led, with an ISR of {size}", consecutive,
        )

    def wait_for_isr_without(self, topic: str, node: int, timeout: float = 30.0,
                             ) -> dict[int, PartitionState]:
        """``node`` leads nothing and is in no ISR; every partition still has a leader."""
        return self.wait_for_partitions(
            topic, lambda s: 0 <= s.leader != node and node not in s.isr, timeout,
            f"broker {node} out of every ISR and leadership",
        )

    def wait_for_isr_with(self, topic: str, node: int, timeout: float = 60.0,
                          consecutive: int = 1) -> dict[int, PartitionState]:
        """``node`` is back in the ISR of every partition it replicates."""
        return self.wait_for_partitions(
            topic, lambda s: s.leader >= 0 and (node in s.isr or node not in s.replicas),
            timeout, f"broker {node} back in every ISR", consecutive,
        )

    def create_topic(self, name: str, partitions: int, replication_factor: int,
                     config: Mapping[str, str] | None = None, timeout: float = 30.0) -> None:
        """CreateTopics through the AdminClient, then wait until every partition is led with
        a full ISR in the metadata of every running broker."""
        new = NewTopic(name, num_partitions=partitions, replication_factor=replication_factor,
                       config={k: str(v) for k, v in (config or {}).items()})
        deadline = time.monotonic() + timeout
        while True:
            futures = self.admin.create_topics([new], operation_timeout=timeout,
                                               request_timeout=timeout)
            try:
                futures[name].result(timeout)
                break
            except KafkaException as exc:
                # Right after start the controller may not have seen every registration yet,
                # though some broker's metadata already lists them: retry until the deadline.
                code = exc.args[0].code()
                if code != KafkaError.INVALID_REPLICATION_FACTOR or time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        # Answers from every running broker in turn: each has taken up the new topic, so
        # the next metadata question, whichever broker gets it, knows it too.
        running = sum(1 for i in range(self.size) if self.alive(i) and i not in self.paused)
        self.wait_for_isr(name, replication_factor, max(1.0, deadline - time.monotonic()),
                          consecutive=max(1, running))


@pytest.fixture
def cluster_factory(request: pytest.FixtureRequest, tmp_path: Path,
                    broker_factory) -> Iterator[Callable[..., Cluster]]:
    """``cluster_factory(size=3, overrides=None, start=True, **more) -> Cluster``.

    ``overrides`` are broker config keys (dotted, as in server.properties) given to every
    broker; ``more`` is the same with ``_`` for ``.`` like ``broker_factory``. Teardown resumes
    paused brokers, SIGTERMs everything, writes the outputs to files and fails the test if a
    broker that was running did not exit 0.
    """
    clusters: list[Cluster] = []
    # broker_factory's list: conftest's report hook attaches these brokers' logs on failure.
    attached: list[BrokerProcess] = request.node._kafkube_brokers

    def make(size: int = 3, overrides: Mapping[str, str] | None = None, start: bool = True,
             **more: object) -> Cluster:
        config = {**(overrides or {}), **{k.replace("_", "."): str(v) for k, v in more.items()}}
        cluster = Cluster(tmp_path / f"cluster-{len(clusters)}", size, config)
        clusters.append(cluster)
        attached.extend(cluster.brokers)
        return cluster.start() if start else cluster

    yield make
    unclean = []
    for k, cluster in enumerate(clusters):
        codes = cluster.stop()
        paths = cluster.save_logs()
        unclean += [
            f"cluster {k} broker {i} exited {code} (output: {paths[i]}):\n"
            + "".join(cluster.brokers[i].output[-40:])
            for i, code in codes.items() if code != 0
        ]
    assert not unclean, "\n".join(unclean)
