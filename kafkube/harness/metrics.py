"""A broker's Prometheus samples, read as a test or a benchmark reads them."""

from __future__ import annotations

import re
import urllib.request

SAMPLE = re.compile(r"^([^#\s]+)\s+(\S+)$")


def parse_samples(text: str) -> dict[str, float]:
    """Prometheus text format -> value by sample name with its labels, e.g.
    ``kafka_network_requests_total{api="Produce",version="9"}``."""
    samples = {}
    for line in text.splitlines():
        match = SAMPLE.match(line)
        if match:
            samples[match.group(1)] = float(match.group(2))
    return samples


def scrape(port: int, timeout: float = 10.0) -> dict[str, float]:
    """A broker's Prometheus samples from its metrics port on loopback."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=timeout) as answer:
        return parse_samples(answer.read().decode())


def requests_served(samples: dict[str, float], api: str) -> dict[int, float]:
    """Version -> how many ``api`` requests (Kafka's name, e.g. "EndTxn") these samples
    count: which protocol version a client actually spoke."""
    pattern = re.compile(rf'^kafka_network_requests_total\{{api="{api}",version="(\d+)"\}}$')
    served: dict[int, float] = {}
    for name, value in samples.items():
        if match := pattern.match(name):
            served[int(match[1])] = served.get(int(match[1]), 0) + value
    return served
