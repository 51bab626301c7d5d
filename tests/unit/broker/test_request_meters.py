"""broker/common/request_meters.py: the request counters and latency histograms and the
topics' byte and record counters, counted without prometheus_client's locks, export exactly
what prometheus_client's own Counter and Histogram export for the same requests (the
reference), under the same names; a forgotten topic's series end."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from broker.common.metrics import _LATENCY_BUCKETS, BrokerMetrics
from broker.common.request_meters import TopicMeters

OBSERVED = [("Produce", 9, 0.0001), ("Produce", 9, 0.0005), ("Produce", 9, 0.003),
            ("Produce", 10, 0.25), ("Fetch", 12, 0.5), ("Fetch", 12, 31.0), ("Fetch", 11, 0.0)]


def exported(registry: CollectorRegistry) -> list[str]:
    return sorted(line for line in generate_latest(registry).decode().splitlines()
                  if line.startswith("kafka_network_request") and not line.startswith("#"))


def test_the_same_series_as_prometheus_clients_counter_and_histogram() -> None:
    metrics = BrokerMetrics()
    reference = CollectorRegistry()
    requests = Counter("kafka_network_requests", "Requests handled", ["api", "version"],
                       registry=reference)
    latency = Histogram("kafka_network_request_latency_seconds", "latency", ["api"],
                        buckets=_LATENCY_BUCKETS, registry=reference)
    for api, version, seconds in OBSERVED:
        count, histogram = metrics.request_meters(api, version)
        count.inc()
        histogram.observe(seconds)
        requests.labels(api, str(version)).inc()
        latency.labels(api).observe(seconds)
    ours = [line for line in exported(metrics.registry) if "_created" not in line]
    theirs = [line for line in exported(reference) if "_created" not in line]
    assert ours == theirs
    assert 'kafka_network_request_latency_seconds_bucket{api="Produce",le="0.0005"} 2.0' in ours
    assert 'kafka_network_requests_total{api="Fetch",version="11"} 1.0' in ours


def test_topic_counters_as_prometheus_clients_and_a_forgotten_topic_gone() -> None:
    metrics = BrokerMetrics()
    reference = CollectorRegistry()
    families = {field: Counter(name, text, ["topic"], registry=reference)
                for name, text, field in TopicMeters.FAMILIES}
    for topic, field, amount in [("a", "bytes_in", 1024), ("a", "messages_in", 3),
                                 ("b", "bytes_out", 7), ("a", "bytes_in", 1),
                                 ("b", "messages_out", 2)]:
        getattr(metrics.topic(topic), field).inc(amount)
        families[field].labels(topic).inc(amount)
    for name in ("a", "b"):  # prometheus_client shows every family of a label it knows
        for family in families.values():
            family.labels(name)
        metrics.topic(name)

    def lines(registry: CollectorRegistry) -> list[str]:
        return sorted(line for line in generate_latest(registry).decode().splitlines()
                      if line.startswith(("kafka_server_bytes", "kafka_server_messages"))
                      and "_created" not in line)

    assert lines(metrics.registry) == lines(reference)
    assert 'kafka_server_bytes_in_total{topic="a"} 1025.0' in lines(metrics.registry)
    metrics.forget_topic("a")
    assert not [line for line in lines(metrics.registry) if 'topic="a"' in line]
