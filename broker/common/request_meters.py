"""What every request counts (requests and their latency, a topic's bytes and records in
and out), counted in plain Python and exported when scraped.

Why not prometheus_client's Counter and Histogram: every ``inc`` and ``observe`` takes a
lock (and ``observe`` walks the buckets in a Python loop), 3-5 us a request, 5% of the event
loop's time with 10,000 small produce requests a second (py-spy, docs/performance.md). The
event loop is the only writer here, so no lock is needed; a scrape, on the metrics server's
thread, copies each meter's numbers in one C-level list copy (atomic under the GIL), so a
histogram's buckets, count and sum always agree.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString


class LatencyMeter:
    """One label set's histogram: ``counts[i]`` observations in bucket i (not cumulative;
    the last is +Inf), then the sum of all of them."""

    __slots__ = ("_bounds", "_cells")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self._bounds = bounds
        self._cells: list[float] = [0] * (len(bounds) + 2)

    def observe(self, seconds: float) -> None:
        cells = self._cells
        cells[bisect_left(self._bounds, seconds)] += 1  # le: a value on a bound is in it
        cells[-1] += seconds

    def snapshot(self) -> tuple[list[float], float]:
        """(cumulative bucket counts, the last being the count; sum)."""
        cells = list(self._cells)
        cumulative, total = [], 0.0
        for count in cells[:-1]:
            total += count
            cumulative.append(total)
        return cumulative, cells[-1]


class CountMeter:
    __slots__ = ("count",)

    def __init__(self) -> None:
        self.count: float = 0

    def inc(self, amount: float = 1) -> None:
        self.count += amount


class TopicCounters:
    """One topic's counters, as Kafka's BrokerTopicMetrics has them."""

    __slots__ = ("bytes_in", "bytes_out", "messages_in", "messages_out")

    def __init__(self) -> None:
        self.bytes_in = CountMeter()
        self.bytes_out = CountMeter()
        self.messages_in = CountMeter()
        self.messages_out = CountMeter()


class TopicMeters(Collector):
    """``kafka_server_{bytes,messages}_{in,out}_total{topic}``."""

    FAMILIES = (("kafka_server_bytes_in", "Bytes produced to a topic", "bytes_in"),
                ("kafka_server_bytes_out", "Bytes fetched from a topic", "bytes_out"),
                ("kafka_server_messages_in", "Records produced to a topic", "messages_in"),
                ("kafka_server_messages_out", "Records fetched from a topic", "messages_out"))

    def __init__(self) -> None:
        self._topics: dict[str, TopicCounters] = {}

    def topic(self, name: str) -> TopicCounters:
        counters = self._topics.get(name)
        if counters is None:
            counters = self._topics[name] = TopicCounters()
        return counters

    def forget(self, name: str) -> None:
        """A deleted topic's series end (Kafka removes its topic metrics too)."""
        self._topics.pop(name, None)

    def collect(self) -> Iterator[CounterMetricFamily]:
        topics = list(self._topics.items())
        for family, text, field in self.FAMILIES:
            counter = CounterMetricFamily(family, text, labels=["topic"])
            for name, counters in topics:
                counter.add_metric([name], getattr(counters, field).count)
            yield counter


class RequestMeters(Collector):
    """``kafka_network_requests_total{api,version}`` and
    ``kafka_network_request_latency_seconds{api}``, the names the prometheus_client
    families had, so dashboards and tests read the same series."""

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self._bounds = bounds
        self._counts: dict[tuple[str, str], CountMeter] = {}
        self._latencies: dict[str, LatencyMeter] = {}
        self._pairs: dict[tuple[str, int], tuple[CountMeter, LatencyMeter]] = {}

    def meters(self, api: str, version: int) -> tuple[CountMeter, LatencyMeter]:
        """(counter, histogram) of one API version, made on first use."""
        pair = self._pairs.get((api, version))
        if pair is None:
            count = self._counts.setdefault((api, str(version)), CountMeter())
            latency = self._latencies.setdefault(api, LatencyMeter(self._bounds))
            pair = self._pairs[(api, version)] = (count, latency)
        return pair

    def collect(self) -> Iterator[CounterMetricFamily | HistogramMetricFamily]:
        requests = CounterMetricFamily("kafka_network_requests", "Requests handled",
                                       labels=["api", "version"])
        for labels, meter in list(self._counts.items()):
            requests.add_metric(list(labels), meter.count)
        yield requests
        latency = HistogramMetricFamily(
            "kafka_network_request_latency_seconds",
            "Time from request decoded to response ready", labels=["api"])
        names = [floatToGoString(bound) for bound in self._bounds] + ["+Inf"]
        for api, meter in list(self._latencies.items()):
            cumulative, total = meter.snapshot()
            latency.add_metric([api], list(zip(names, cumulative, strict=True)), total)
        yield latency
