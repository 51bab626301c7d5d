"""The fixtures of every tier, registered once here rather than imported by each test module:
brokers and clusters on loopback (kafkube/harness, through tests/support/brokers.py and
clusters.py), the integration tier's kube-apiserver (kube.py), Kafka's own command-line tools
(kafka_tools.py) and the operator tests' API helpers (operator_api.py)."""

from __future__ import annotations

pytest_plugins = [
    "tests.support.brokers",
    "tests.support.clusters",
    "tests.support.kube",
    "tests.support.kafka_tools",
    "tests.support.operator_api",
]
