"""A ``LocalCluster`` seen through a Kafka client: topics, leaders, ISRs, and waits on them.

What tests and benchmarks ask of a cluster between faults: who leads a partition, whether a
killed broker is out of every ISR and back after its restart, a topic created and fully
replicated. The answers come from Metadata requests (confluent-kafka's AdminClient), asked
of the running brokers in turn, so a wait hears from every broker and not just one.

confluent-kafka is a test dependency, not the product's: `kafkube dev` uses
``cluster.LocalCluster`` and never imports this module.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, ClusterMetadata, NewTopic

from kafkube.harness.cluster import START_TIMEOUT_S, LocalCluster
from kafkube.harness.metrics import requests_served, scrape
from kafkube.harness.waiting import wait_until

METADATA_TIMEOUT_S = 3.0  # per request while polling; a paused broker never answers
POLL_S = 0.2


@dataclass(frozen=True, slots=True)
class PartitionState:
    """One partition as one Metadata answer describes it."""

    leader: int  # -1 when there is none
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    error: str | None = None


class Cluster(LocalCluster):
    """A ``LocalCluster`` whose ``start`` also waits until the metadata lists every broker,
    with the questions tests and benchmarks ask it."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._admin: AdminClient | None = None
        self._admins: dict[int, AdminClient] = {}
        self._next = 0

    def start(self, timeout: float = START_TIMEOUT_S) -> Cluster:
        """Start every broker at once and wait until the metadata lists them all."""
        super().start(timeout)
        self.wait_for_brokers(self.size, timeout)
        return self

    def stop(self, *args: Any, **kwargs: Any) -> dict[int, int]:
        codes = super().stop(*args, **kwargs)
        self._admin = None
        self._admins.clear()
        return codes

    # -- clients -----------------------------------------------------------------------------

    def admin_config(self, bootstrap: str) -> dict[str, object]:
        """The AdminClient settings: quick to notice a dead broker. A subclass adds e.g. a
        logger for librdkafka's own log."""
        return {
            "bootstrap.servers": bootstrap,
            "socket.connection.setup.timeout.ms": 5000,
            "socket.timeout.ms": 10000,
            "reconnect.backoff.max.ms": 1000,
        }

    @property
    def admin(self) -> AdminClient:
        """An AdminClient bootstrapped with every broker (CreateTopics and the like)."""
        if self._admin is None:
            self._admin = AdminClient(self.admin_config(self.bootstrap))
        return self._admin

    def admin_of(self, i: int) -> AdminClient:
        """An AdminClient bootstrapped with broker ``i`` alone. librdkafka connects only to
        the brokers it needs, so its metadata requests go to broker ``i``."""
        if i not in self._admins:
            self._admins[i] = AdminClient(self.admin_config(self.brokers[i].bootstrap))
        return self._admins[i]

    # -- what the metadata says --------------------------------------------------------------

    def metadata(self, timeout: float = 5.0, node: int | None = None) -> ClusterMetadata | None:
        """One Metadata answer: from broker ``node``, or else from the next running, unpaused
        broker in turn (so successive calls hear from different brokers). None if that broker
        did not answer in time; callers poll."""
        if node is None:
            candidates = self.running()
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

    def requests_served(self, api: str) -> dict[int, float]:
        """Version -> how many ``api`` requests (Kafka's name, e.g. "EndTxn") the running
        brokers answered, from their metrics: which protocol a client actually spoke."""
        served: dict[int, float] = {}
        for i in self.running():
            port = self.brokers[i].metrics_port
            if port:
                for version, count in requests_served(scrape(port), api).items():
                    served[version] = served.get(version, 0) + count
        return served

    def finalize_feature(self, name: str, level: int) -> None:
        """Set a cluster feature's finalized level (``kafka-features.sh upgrade/downgrade``
        through UpdateFeatures), then wait until every running broker advertises it: e.g.
        ``transaction.version`` 1 for a cluster whose clients speak the protocol before
        KIP-890 part 2. A refusal fails with the broker's message."""
        from kio.schema.api_versions.v4.request import ApiVersionsRequest
        from kio.schema.update_features.v1.request import (
            FeatureUpdateKey,
            UpdateFeaturesRequest,
        )

        from kafkube.harness.wire import WireClient

        running = self.running()
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

    # -- waits -------------------------------------------------------------------------------

    def wait_for_brokers(self, count: int, timeout: float = 60.0, consecutive: int = 3) -> None:
        """``count`` brokers listed in ``consecutive`` metadata answers in a row."""
        streak = [0]

        def registered() -> bool:
            metadata = self.metadata(METADATA_TIMEOUT_S)
            if metadata is not None:
                streak[0] = streak[0] + 1 if len(metadata.brokers) >= count else 0
            return streak[0] >= consecutive
        wait_until(registered, timeout, f"{count} brokers in the metadata", interval=POLL_S)

    def wait_for_partitions(
        self, topic: str, predicate: Callable[[PartitionState], bool], timeout: float,
        what: str, consecutive: int = 1,
    ) -> dict[int, PartitionState]:
        """Poll the metadata until ``predicate`` holds for every partition of ``topic`` in
        ``consecutive`` answers in a row. Each answer comes from another broker, and a broker
        just resumed from SIGSTOP may still answer from its stale view for a moment, so waits
        for a recovery ask for more than one."""
        streak: list[dict[int, PartitionState]] = []

        def check() -> dict[int, PartitionState] | None:
            states = self.partitions(topic, timeout=METADATA_TIMEOUT_S)
            if states is None:
                return None  # no answer: neither for nor against
            if all(predicate(state) for state in states.values()):
                streak.append(states)
            else:
                streak.clear()
            return states if len(streak) >= consecutive else None
        return wait_until(check, timeout, f"{topic}: {what}", interval=POLL_S)

    def leader_of(self, topic: str, partition: int, timeout: float = 30.0) -> int:
        """The current leader of one partition (waits until there is one)."""
        def leader() -> tuple[int] | None:  # a tuple: broker 0 is a leader too, yet falsy
            states = self.partitions(topic, timeout=METADATA_TIMEOUT_S)
            state = states.get(partition) if states else None
            return (state.leader,) if state is not None and state.leader >= 0 else None
        return wait_until(leader, timeout, f"a leader for {topic}-{partition}",
                          interval=POLL_S)[0]

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
        self.wait_for_isr(name, replication_factor, max(1.0, deadline - time.monotonic()),
                          consecutive=max(1, len(self.running())))
