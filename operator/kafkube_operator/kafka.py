"""The operator's one Kafka admin client: topics, partitions, configs and leader elections go
through the cluster's Kafka API, as `kafka-topics` and `kafka-configs` would send them, so
the brokers validate and apply every change exactly as for any other client.

kafka-python (pure Python, so the image needs no librdkafka) is the one client library that
speaks every admin API used here, AlterPartitionReassignments included. It is blocking; the
handlers run in kopf's thread pool.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from kafka.admin import (
    AlterConfigOp,
    ConfigResource,
    ConfigResourceType,
    KafkaAdminClient,
    NewPartitions,
    NewTopic,
)
from kafka.errors import KafkaError
from kafka.structs import TopicPartition

log = logging.getLogger(__name__)
REQUEST_TIMEOUT_MS = 15_000


class KafkaRefused(Exception):
    """The cluster refused a request: Kafka's error name and message, for a Warning."""

    def __init__(self, what: str, error: object) -> None:
        super().__init__(f"{what}: {error}")  # kafka-python's: "[Error 40] Name: message"


class KafkaAdmin:
    def __init__(self, bootstrap: Sequence[str]) -> None:
        self._client = KafkaAdminClient(
            bootstrap_servers=list(bootstrap), client_id="kafkube-operator",
            request_timeout_ms=REQUEST_TIMEOUT_MS)

    def close(self) -> None:
        self._client.close()

    def _call(self, what: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except KafkaError as e:
            raise KafkaRefused(what, e) from None

    def create_topic(self, name: str, replicas: Sequence[Sequence[int]],
                     configs: Mapping[str, str]) -> None:
        topic = NewTopic(name, replica_assignments={i: list(r) for i, r in enumerate(replicas)},
                         topic_configs=dict(configs))
        self._call(f"creating topic {name}", self._client.create_topics, [topic],
                   timeout_ms=REQUEST_TIMEOUT_MS)

    def add_partitions(self, name: str, total: int, replicas: Sequence[Sequence[int]]) -> None:
        new = NewPartitions(total, new_assignments=[list(r) for r in replicas])
        self._call(f"adding partitions to {name}", self._client.create_partitions, {name: new},
                   timeout_ms=REQUEST_TIMEOUT_MS)

    def alter_topic_configs(self, name: str, set_configs: Mapping[str, str],
                            delete: Iterable[str]) -> None:
        """IncrementalAlterConfigs: only the keys named change."""
        ops: dict[str, Any] = {k: (AlterConfigOp.SET, v) for k, v in set_configs.items()}
        ops.update({k: (AlterConfigOp.DELETE, None) for k in delete})
        resource = ConfigResource(ConfigResourceType.TOPIC, name, configs=ops)
        result = self._call(f"changing configs of {name}", self._client.alter_configs,
                            [resource], raise_on_unknown=False, incremental=True)
        _raise_errors(f"changing configs of {name}", result)

    def throttle(self, rate: int | None, brokers: Iterable[int],
                 topics: Mapping[str, Mapping[str, str | None]]) -> None:
        """The replication throttle, as `kafka-reassign-partitions --throttle` sets it: the
        rate on each broker (None removes it), the throttled-replica lists per topic (None
        removes a list)."""
        resources = [ConfigResource(ConfigResourceType.TOPIC, topic, configs={
            key: (AlterConfigOp.SET, value) if value is not None else (AlterConfigOp.DELETE, None)
            for key, value in lists.items()}) for topic, lists in topics.items()]
        op = (AlterConfigOp.SET, str(rate)) if rate is not None else (AlterConfigOp.DELETE, None)
        resources += [ConfigResource(ConfigResourceType.BROKER, str(broker), configs={
            "leader.replication.throttled.rate": op,
            "follower.replication.throttled.rate": op}) for broker in sorted(brokers)]
        result = self._call("setting the replication throttle", self._client.alter_configs,
                            resources, raise_on_unknown=False, incremental=True)
        _raise_errors("setting the replication throttle", result)

    def delete_topic(self, name: str) -> None:
        self._call(f"deleting topic {name}", self._client.delete_topics, [name],
                   timeout_ms=REQUEST_TIMEOUT_MS)

    def reassign(self, moves: Mapping[tuple[str, int], Sequence[int]]) -> None:
        """AlterPartitionReassignments (KIP-455): the brokers copy the new replicas, then drop
        the old ones once the new are in sync."""
        wanted = {TopicPartition(topic, index): list(replicas)
                  for (topic, index), replicas in moves.items()}
        results = self._call("reassigning partitions", self._client.alter_partition_reassignments,
                             wanted, timeout_ms=REQUEST_TIMEOUT_MS)
        refused = {f"{tp.topic}-{tp.partition}": error.__name__
                   for tp, error in results.items() if error is not None}
        if refused:
            raise KafkaRefused("reassigning partitions", refused)

    def elect_preferred(self, partitions: Iterable[tuple[str, int]]) -> None:
        wanted: dict[str, list[int]] = {}
        for topic, index in partitions:
            wanted.setdefault(topic, []).append(index)
        self._call("electing preferred leaders", self._client.elect_leaders, 0,
                   topic_partitions=wanted, timeout_ms=REQUEST_TIMEOUT_MS)


def _raise_errors(what: str, result: Any) -> None:
    """kafka-python returns per-resource results ("OK" or the error as text) instead of
    raising them."""
    for by_name in (result or {}).values():
        for outcome in by_name.values():
            if outcome != "OK":
                raise KafkaRefused(what, outcome)


class AdminClients:
    """One admin client per KafkaCluster, made on first use from its live brokers' advertised
    addresses (so the operator reaches the brokers from outside the cluster in tests just as
    from its pod), dropped when a request fails so the next one reconnects."""

    def __init__(self) -> None:
        self._clients: dict[tuple[str, str], KafkaAdmin] = {}
        self._lock = threading.Lock()

    def of(self, key: tuple[str, str], bootstrap: Callable[[], Sequence[str]]) -> KafkaAdmin:
        with self._lock:
            client = self._clients.get(key)
        if client is None:
            servers = bootstrap()
            if not servers:
                raise KafkaRefused(f"cluster {key[1]}", "no live broker to connect to")
            try:
                client = KafkaAdmin(servers)
            except KafkaError as e:
                raise KafkaRefused(f"connecting to cluster {key[1]}", e) from None
            with self._lock:
                self._clients[key] = client
        return client

    def drop(self, key: tuple[str, str]) -> None:
        with self._lock:
            client = self._clients.pop(key, None)
        if client is not None:
            client.close()

    def close(self) -> None:
        with self._lock:
            clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            client.close()
