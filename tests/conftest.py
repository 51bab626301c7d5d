"""Every tier's fixtures, registered once here rather than imported by each test module:
brokers and clusters on loopback (kafkube/harness, through tests/support/brokers.py and
clusters.py), the integration tier's kube-apiserver (kube.py), Kafka's own command-line tools
(kafka_tools.py) and the operator tests' API helpers (operator_api.py).

And the order of a run over several tiers: the unit tier first (seconds, and the first to
say what a change broke), then the integration tier, then tests/e2e, whose kind cluster is
brought up in its first test and torn down after its last, so it never loads the machine
while the other tiers run (docs/platform.md says what running them side by side did)."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest_plugins = [
    "tests.support.brokers",
    "tests.support.clusters",
    "tests.support.kube",
    "tests.support.kafka_tools",
    "tests.support.operator_api",
]

TIERS = ("unit", "integration", "e2e")  # in the order a full run takes them
HERE = Path(__file__).resolve().parent


def tier_of(item: pytest.Item) -> int:
    """The place of ``item``'s tier in ``TIERS``; anything elsewhere under tests/ before
    them all."""
    try:
        parts = Path(str(item.path)).resolve().relative_to(HERE).parts
    except ValueError:
        return -1
    return TIERS.index(parts[0]) if parts and parts[0] in TIERS else -1


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Unit, then integration, then e2e; each tier's tests in their collected order (a
    stable sort, so module- and package-scoped fixtures still set up once)."""
    items.sort(key=tier_of)
