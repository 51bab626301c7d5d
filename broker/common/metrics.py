"""Prometheus metrics of one broker, named after Kafka's JMX metrics where one exists.

Counters on the hot path are bound once, per topic (``TopicCounters``) and per API version
(``request_meters``), so a request never pays a label lookup. Per-partition log size and end
offset are read at scrape time by a collector instead of being updated on every append.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from broker.common.request_meters import (
    CountMeter,
    LatencyMeter,
    RequestMeters,
    TopicCounters,
    TopicMeters,
)

_LATENCY_BUCKETS = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
)


class HoldsBytes(Protocol):
    """A request memory pool, as the metrics see it."""

    @property
    def reserved(self) -> int: ...


@dataclass(frozen=True, slots=True)
class PartitionSample:
    topic: str
    partition: int
    size_bytes: int
    log_start_offset: int
    log_end_offset: int
    high_watermark: int
    segments: int
    leader_bytes_in: int = 0  # produced while this broker led it
    leader_bytes_out: int = 0  # fetched by consumers while this broker led it


class _LogCollector(Collector):
    def __init__(self, sample: Callable[[], Iterable[PartitionSample]]) -> None:
        self._sample = sample

    def collect(self):
        labels = ["topic", "partition"]
        def gauge(name: str, doc: str) -> GaugeMetricFamily:
            return GaugeMetricFamily(name, doc, labels=labels)

        families = {
            "size": gauge("kafka_log_size_bytes", "Bytes of a partition's log"),
            "start": gauge("kafka_log_start_offset", "Log start offset"),
            "end": gauge("kafka_log_end_offset", "Log end offset"),
            "hw": gauge("kafka_partition_high_watermark", "High watermark"),
            "segments": gauge("kafka_log_segments", "Segments in the log"),
        }
        leader_in = CounterMetricFamily(
            "kafkube_partition_leader_bytes_in", "Bytes produced to the partition while this "
            "broker led it (a rate per partition for load balancing)", labels=labels)
        leader_out = CounterMetricFamily(
            "kafkube_partition_leader_bytes_out", "Bytes consumers fetched from the partition "
            "while this broker led it (followers' fetches not counted)", labels=labels)
        for s in self._sample():
            values = [s.topic, str(s.partition)]
            leader_in.add_metric(values, s.leader_bytes_in)
            leader_out.add_metric(values, s.leader_bytes_out)
            families["size"].add_metric(values, s.size_bytes)
            families["start"].add_metric(values, s.log_start_offset)
            families["end"].add_metric(values, s.log_end_offset)
            families["hw"].add_metric(values, s.high_watermark)
            families["segments"].add_metric(values, s.segments)
        yield from families.values()
        yield leader_in
        yield leader_out


class _CountCollector(Collector):
    """One counter read from a running total kept elsewhere (a plain int, no lock)."""

    def __init__(self, name: str, doc: str, read: Callable[[], int]) -> None:
        self._name, self._doc, self._read = name, doc, read

    def collect(self):
        yield CounterMetricFamily(self._name, self._doc, value=self._read())


class _GroupCollector(Collector):
    """Consumer lag per group and partition: log end (high watermark) minus committed."""

    def __init__(self, sample: Callable[[], Iterable[tuple[str, str, int, int, int]]]) -> None:
        self._sample = sample

    def collect(self):
        labels = ["group", "topic", "partition"]
        lag = GaugeMetricFamily("kafka_consumergroup_lag", "Records not yet committed by the "
                                "group: high watermark minus committed offset", labels=labels)
        current = GaugeMetricFamily("kafka_consumergroup_current_offset",
                                    "Committed offset of the group", labels=labels)
        for group, topic, partition, committed, end in self._sample():
            values = [group, topic, str(partition)]
            lag.add_metric(values, max(0, end - committed))
            current.add_metric(values, committed)
        yield lag
        yield current


@dataclass(frozen=True, slots=True)
class ConsumerGroupSample:
    """A KIP-848 group, read at scrape time."""

    group: str
    group_epoch: int
    lowest_member_epoch: int  # of its members (the group epoch when it has none)
    consumer_members: int  # speaking KIP-848
    classic_members: int  # speaking the classic protocol inside it
    rebalances: int  # target assignments computed since this broker took the group


class _ConsumerGroupCollector(Collector):
    def __init__(self, sample: Callable[[], Iterable[ConsumerGroupSample]]) -> None:
        self._sample = sample

    def collect(self):
        members = GaugeMetricFamily("kafkube_consumer_group_members", "Members of a consumer "
                                    "group (KIP-848) by protocol", labels=["group", "protocol"])
        epoch = GaugeMetricFamily("kafkube_consumer_group_epoch", "The group epoch",
                                  labels=["group"])
        lag = GaugeMetricFamily("kafkube_consumer_group_assignment_epoch_lag",
                                "Group epoch minus the lowest member epoch: members still "
                                "moving to the latest assignment", labels=["group"])
        rebalances = CounterMetricFamily("kafkube_consumer_group_rebalances", "Target "
                                         "assignments computed for the group", labels=["group"])
        for g in self._sample():
            members.add_metric([g.group, "consumer"], g.consumer_members)
            members.add_metric([g.group, "classic"], g.classic_members)
            epoch.add_metric([g.group], g.group_epoch)
            lag.add_metric([g.group], g.group_epoch - g.lowest_member_epoch)
            rebalances.add_metric([g.group], g.rebalances)
        yield from (members, epoch, lag, rebalances)


@dataclass(frozen=True, slots=True)
class ShareGroupSample:
    """A share group's share-partitions led by this broker, read at scrape time."""

    group: str
    in_flight: int  # records acquired, not acknowledged yet
    redeliveries: int  # records delivered again (released, lock ran out, leader moved)
    lock_expiries: int  # records whose acquisition lock ran out
    backlog: int  # records not done yet: what an autoscaler scales the consumers by


class _ShareGroupCollector(Collector):
    def __init__(self, sample: Callable[[], Iterable[ShareGroupSample]]) -> None:
        self._sample = sample

    def collect(self):
        in_flight = GaugeMetricFamily("kafkube_share_group_in_flight_records", "Records of "
                                      "the share group acquired and not acknowledged, on the "
                                      "partitions led here", labels=["group"])
        redeliveries = CounterMetricFamily("kafkube_share_group_redeliveries", "Records "
                                           "delivered again", labels=["group"])
        expiries = CounterMetricFamily("kafkube_share_group_lock_expiries", "Records whose "
                                       "acquisition lock ran out", labels=["group"])
        backlog = GaugeMetricFamily("kafkube_share_group_backlog_records", "Records not done "
                                    "yet (to deliver or to acknowledge), on the partitions "
                                    "led here", labels=["group"])
        for g in self._sample():
            in_flight.add_metric([g.group], g.in_flight)
            redeliveries.add_metric([g.group], g.redeliveries)
            expiries.add_metric([g.group], g.lock_expiries)
            backlog.add_metric([g.group], g.backlog)
        yield from (in_flight, redeliveries, expiries, backlog)


@dataclass(frozen=True, slots=True)
class ReplicationSample:
    """Kafka's ReplicaManager and KafkaController gauges, read at scrape time."""

    partitions: int
    leaders: int
    under_replicated: int  # led here with an ISR smaller than the replica set
    under_min_isr: int
    offline: int  # reported by the active controller only, as in Kafka
    active_controller: bool
    isr_shrinks: int
    isr_expands: int
    leader_elections: int
    producer_ids: int = 0  # known in all logs here, followers' included


class _ReplicationCollector(Collector):
    def __init__(self, sample: Callable[[], ReplicationSample]) -> None:
        self._sample = sample

    def collect(self):
        s = self._sample()
        for name, doc, value in (
            ("kafka_server_replicamanager_partitioncount", "Partitions hosted here",
             s.partitions),
            ("kafka_server_replicamanager_leadercount", "Partitions led here", s.leaders),
            ("kafka_server_replicamanager_underreplicatedpartitions",
             "Partitions led here whose ISR is smaller than their replicas", s.under_replicated),
            ("kafka_server_replicamanager_underminisrpartitioncount",
             "Partitions led here whose ISR is below min.insync.replicas", s.under_min_isr),
            ("kafka_controller_kafkacontroller_offlinepartitionscount",
             "Partitions without a live leader (active controller only)", s.offline),
            ("kafka_controller_kafkacontroller_activecontrollercount",
             "1 on the active controller", int(s.active_controller)),
            ("kafka_server_replicamanager_produceridcount",
             "Producer ids remembered in this broker's logs (producer.id.expiration.ms "
             "bounds them)", s.producer_ids),
        ):
            yield GaugeMetricFamily(name, doc, value=value)
        for name, doc, value in (
            ("kafka_server_replicamanager_isrshrinks", "ISR shrinks by this leader",
             s.isr_shrinks),
            ("kafka_server_replicamanager_isrexpands", "ISR expansions by this leader",
             s.isr_expands),
            ("kafka_controller_controllerstats_leaderelections",
             "Leader elections made by this broker as controller", s.leader_elections),
        ):
            yield CounterMetricFamily(name, doc, value=value)


class QuotaSensor(Protocol):
    """One client-quota sensor as the metrics read it (broker/server/client_quotas.py)."""

    @property
    def quota_type(self) -> str: ...
    @property
    def user(self) -> str: ...
    @property
    def client_id(self) -> str: ...
    @property
    def rate(self) -> float: ...
    @property
    def bound(self) -> float: ...


class _QuotaCollector(Collector):
    """Each client-quota sensor's measured rate and its quota (Kafka's per user/client-id
    ``byte-rate`` and ``request-time`` metrics)."""

    def __init__(self, sample: Callable[[], Iterable[QuotaSensor]]) -> None:
        self._sample = sample

    def collect(self):
        labels = ["quota_type", "user", "client_id"]
        rate = GaugeMetricFamily(
            "kafka_server_quota_rate", "A client's measured rate against its quota (bytes/s; "
            "Request: percent of the event loop; ControllerMutation: tokens left)",
            labels=labels)
        bound = GaugeMetricFamily("kafka_server_quota_bound", "The quota that applies",
                                  labels=labels)
        for s in self._sample():
            values = [s.quota_type, s.user, s.client_id]
            rate.add_metric(values, s.rate)
            bound.add_metric(values, s.bound)
        yield rate
        yield bound


class BrokerMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        # Counted without prometheus_client's locks: every request passes here.
        self.topic_meters = TopicMeters()
        r.register(self.topic_meters)
        # Kafka's ReplicationBytesOutPerSec: what followers fetched, kept out of bytes_out.
        self.replication_bytes_out = Counter(
            "kafka_server_replication_bytes_out", "Bytes fetched by follower replicas",
            registry=r,
        )
        self.request_meters_collector = RequestMeters(_LATENCY_BUCKETS)
        r.register(self.request_meters_collector)
        self.request_errors = Counter(
            "kafka_network_request_errors", "Requests refused or connections closed for bad input",
            ["reason"], registry=r,
        )
        self.connections = Gauge(
            "kafka_network_connections", "Open client connections", registry=r
        )
        self.memory_waiting = Gauge(
            "kafka_network_socketserver_connectionswaitingformemory",
            "Connections that stopped reading until the request memory pool has room",
            registry=r,
        )
        self.memory_pool_used = Gauge(
            "kafka_network_socketserver_memorypoolused",
            "Request bytes reserved by connections (queued.max.request.bytes bounds them)",
            registry=r,
        )
        self._memory_pools: list[HoldsBytes] = []
        self.memory_pool_used.set_function(
            lambda: sum(pool.reserved for pool in self._memory_pools))
        # Kafka's per user/client-id throttle-time metrics, as a running total.
        self.quota_throttle_time = Counter(
            "kafka_server_quota_throttle_time_seconds",
            "Time clients were throttled for exceeding a quota", ["quota_type", "user",
                                                                   "client_id"], registry=r)

    def track_memory_pool(self, pool: HoldsBytes) -> None:
        """Count ``pool``'s reserved bytes in the memory pool gauge (read when scraped)."""
        self._memory_pools.append(pool)

    def request_meters(self, api: str, version: int) -> tuple[CountMeter, LatencyMeter]:
        """(request counter, latency histogram) of one API version."""
        return self.request_meters_collector.meters(api, version)

    def topic(self, name: str) -> TopicCounters:
        return self.topic_meters.topic(name)

    def forget_topic(self, name: str) -> None:
        self.topic_meters.forget(name)

    def throttled(self, quota_type: str, user: str, client_id: str, seconds: float) -> None:
        self.quota_throttle_time.labels(quota_type, user, client_id).inc(seconds)

    def forget_quota_sensor(self, quota_type: str, user: str, client_id: str) -> None:
        """Remove the throttle-time series of a quota sensor dropped after its idle hour: a
        client with a new client-id per connection would otherwise add series for ever."""
        self.quota_throttle_time.remove(quota_type, user, client_id)

    def watch_quotas(self, sample: Callable[[], Iterable[QuotaSensor]]) -> None:
        self.registry.register(_QuotaCollector(sample))

    def watch_fetch_sessions(self, count: Callable[[], int]) -> None:
        gauge = Gauge("kafka_server_fetchsessioncache_numincrementalfetchsessions",
                      "Incremental fetch sessions held (KIP-227)", registry=self.registry)
        gauge.set_function(count)

    def watch_logs(self, sample: Callable[[], Iterable[PartitionSample]]) -> None:
        self.registry.register(_LogCollector(sample))

    def watch_log_dirs(self, offline: Callable[[], int], refused_for_files: Callable[[], int]
                       ) -> None:
        """Kafka's OfflineLogDirectoryCount, and the operations on replicas refused because
        the process was out of file descriptors (which leave the dirs online)."""
        gauge = Gauge("kafka_log_logmanager_offlinelogdirectorycount",
                      "Log dirs offline after an I/O error", registry=self.registry)
        gauge.set_function(offline)
        self.registry.register(_CountCollector(
            "kafkube_open_files_exhausted", "Operations on replicas (open, roll, append) "
            "refused with KAFKA_STORAGE_ERROR because the process was out of file "
            "descriptors (RLIMIT_NOFILE)", refused_for_files))

    def watch_replication(self, sample: Callable[[], ReplicationSample]) -> None:
        self.registry.register(_ReplicationCollector(sample))

    def watch_groups(
        self, sample: Callable[[], Iterable[tuple[str, str, int, int, int]]]
    ) -> None:
        self.registry.register(_GroupCollector(sample))

    def watch_consumer_groups(self, sample: Callable[[], Iterable[ConsumerGroupSample]]) -> None:
        self.registry.register(_ConsumerGroupCollector(sample))

    def watch_share_groups(self, sample: Callable[[], Iterable[ShareGroupSample]]) -> None:
        self.registry.register(_ShareGroupCollector(sample))
