"""The group tests' consumer processes, killed before the brokers stop."""

from __future__ import annotations

import pytest

from tests.integration.groups.group_clients import Consumers


@pytest.fixture
def consumers(broker_factory):
    """Depends on broker_factory so that consumers are killed before the brokers stop."""
    started = Consumers()
    yield started
    for proc in started.started:
        proc.kill()
