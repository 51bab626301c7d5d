"""Fixtures that run real broker processes on loopback (``kafkube.harness.process``), and the
report hook that attaches their output, and the operators', to a failing test."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from kafkube.harness.process import BrokerProcess

OUTPUT_LINES = 80  # of each broker's and operator's output in a failure report


@pytest.fixture
def broker_factory(request: pytest.FixtureRequest,
                   tmp_path: Path) -> Iterator[Callable[..., BrokerProcess]]:
    """``broker_factory(**overrides) -> BrokerProcess``, started: broker config keys with
    ``_`` for ``.``. Teardown SIGTERMs every broker still running and fails the test if one
    does not exit 0."""
    started: list[BrokerProcess] = []
    request.node._kafkube_brokers = started

    def make(**overrides: object) -> BrokerProcess:
        log_dir = tmp_path / f"broker-{len(started)}"
        broker = BrokerProcess(log_dir, {k.replace("_", "."): str(v)
                                         for k, v in overrides.items()})
        started.append(broker)
        return broker.start()

    yield make
    for broker in started:
        if broker.alive():
            code = broker.stop()
            assert code == 0, "broker exited uncleanly:\n" + broker.tail(40)


@pytest.fixture
def broker(broker_factory: Callable[..., BrokerProcess]) -> BrokerProcess:
    return broker_factory()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[Any]) -> Iterator:
    """Attach the brokers' and operators' own logs to a failing test's report."""
    outcome = yield
    report = outcome.get_result()
    if not report.failed:
        return
    if "broker_factory" in getattr(item, "fixturenames", ()):
        for i, broker in enumerate(getattr(item, "_kafkube_brokers", [])):
            report.sections.append((f"broker {i} log", broker.tail(OUTPUT_LINES)))
    for i, operator in enumerate(getattr(item, "_kafkube_operators", [])):
        report.sections.append((f"operator {i} log", operator.tail(OUTPUT_LINES)))
