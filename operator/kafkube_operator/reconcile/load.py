"""Where a rebalance's load comes from: partition sizes and disk capacity through the Kafka
API (DescribeLogDirs, as `kafka-log-dirs` asks), and the partitions' leader bytes in and out
from the brokers' own Prometheus endpoint.

Why two sources: Kafka's API answers sizes and capacity (DescribeLogDirs v4 carries
TotalBytes and UsableBytes) but has no message for rates, and a kafkube-only API key would be
a protocol of our own that no Kafka tool speaks. The brokers already publish Prometheus
counters; each now counts, per partition it leads, the bytes produced and fetched by
consumers (``kafkube_partition_leader_bytes_in_total``/``_out_total``, two integer adds a
request), and registers its metrics port in its Lease, so the operator reads
``http://<broker host>:<port>/metrics`` the way Prometheus would. Counters, not rates: the
broker keeps no window, the operator reads them twice (``RateWindow``) and takes the
difference, as Prometheus's ``rate()`` does.
"""

from __future__ import annotations

import logging
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field

from kafkube_contract.registration import BrokerRegistration
from kafkube_operator.model.rebalance import counter_rates

log = logging.getLogger(__name__)
Partition = tuple[str, int]
Counters = dict[Partition, tuple[int, int]]
IN, OUT = "kafkube_partition_leader_bytes_in_total", "kafkube_partition_leader_bytes_out_total"
SCRAPE_TIMEOUT_S = 3.0
MIN_WINDOW_S = 10.0  # rates over at least this long
MAX_AGE_S = 300.0  # readings kept at most this long
MAX_READINGS = 64  # and at most this many


def parse_counters(text: str) -> Counters:
    """The leader byte counters of one broker's /metrics text (Prometheus exposition)."""
    found: dict[Partition, list[int]] = {}
    for line in text.splitlines():
        if not line.startswith("kafkube_partition_leader_bytes_"):
            continue
        name, _, rest = line.partition("{")
        if name not in (IN, OUT):
            continue
        labels, _, value = rest.rpartition("}")
        fields = dict(part.split("=", 1) for part in labels.split(",") if "=" in part)
        topic, partition = fields.get("topic", '""')[1:-1], fields.get("partition", '""')[1:-1]
        if not partition.isdigit():
            continue
        counts = found.setdefault((topic, int(partition)), [0, 0])
        counts[0 if name == IN else 1] = int(float(value.split()[0]))
    return {p: (c[0], c[1]) for p, c in found.items()}


def scrape(broker: BrokerRegistration) -> Counters | None:
    """The broker's counters, or None when it has no metrics port or does not answer."""
    if not broker.metrics_port:
        return None
    host = broker.host if ":" not in broker.host else f"[{broker.host}]"
    try:
        with urllib.request.urlopen(f"http://{host}:{broker.metrics_port}/metrics",
                                    timeout=SCRAPE_TIMEOUT_S) as answer:
            return parse_counters(answer.read().decode())
    except (OSError, urllib.error.URLError, ValueError) as e:
        log.info("broker %d's metrics unreadable: %s", broker.node_id, e)
        return None


@dataclass
class RateWindow:
    """A cluster's readings of its brokers' counters (time.monotonic(), broker → counters),
    kept in the operator's memory: rates come from the newest reading at least
    MIN_WINDOW_S old to now. A new operator starts a new window."""

    readings: list[tuple[float, dict[int, Counters]]] = field(default_factory=list)
    missing: tuple[int, ...] = ()  # brokers whose counters could not be read last time

    def read(self, brokers: Mapping[int, BrokerRegistration],
             now: float | None = None) -> tuple[dict[Partition, tuple[float, float]] | None,
                                                float]:
        """Read every broker now; the rates (None while the window is shorter than
        MIN_WINDOW_S) and how long the window is."""
        now = time.monotonic() if now is None else now
        reading, missing = {}, []
        for b, registration in sorted(brokers.items()):
            counters = scrape(registration)
            if counters is None:
                missing.append(b)
            else:
                reading[b] = counters
        self.missing = tuple(missing)
        return self.add(now, reading)

    def add(self, now: float, reading: dict[int, Counters]
            ) -> tuple[dict[Partition, tuple[float, float]] | None, float]:
        old = [(t, r) for t, r in self.readings if MIN_WINDOW_S <= now - t <= MAX_AGE_S]
        self.readings = [(t, r) for t, r in self.readings if now - t <= MAX_AGE_S]
        self.readings = [*self.readings, (now, reading)][-MAX_READINGS:]
        if not old:
            first = self.readings[0][0]
            return None, now - first
        then, before = old[-1]
        return counter_rates(before, reading, now - then), now - then
