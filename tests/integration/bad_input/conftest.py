"""The bad-input tests' healthy connection, checked in the middle and at the end."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.integration.bad_input.frames import Healthy


@pytest.fixture
def healthy(broker) -> Iterator[Healthy]:
    h = Healthy(broker.bootstrap)
    h.check()
    yield h
    h.client.close()
