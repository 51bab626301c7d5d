"""Errors a broker process logged, read from its output: a handler or the network
layer that crashed instead of refusing bad input. Shared by the bad-input, fuzz and
group tests."""

from __future__ import annotations

import re
import struct

import pytest

from kafkube.harness.waiting import wait_until
from kafkube.harness.wire import WireClient

INT32 = struct.Struct(">i")
CLOSE_TIMEOUT = 10.0


def frame(body: bytes) -> bytes:
    return INT32.pack(len(body)) + body


_LOG_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ ")


def broker_errors(broker) -> list[str]:
    """ERROR log records, each with its traceback: a handler or the network layer crashed
    instead of refusing the input."""
    records: list[str] = []
    in_error = False
    for line in list(broker.output):
        if _LOG_LINE.match(line):
            in_error = " ERROR " in line or " CRITICAL " in line
            if in_error:
                records.append(line)
        elif in_error:
            records[-1] += line  # the traceback of the record above
        elif line.startswith("Traceback"):
            records.append(line)  # an uncaught exception outside logging
            in_error = True
    return records


def log_barrier(broker) -> None:
    """Wait until the broker's log has caught up with everything done so far.

    Log lines reach ``broker.output`` through a pipe and a reader thread, so a connection
    can be closed before the error logged just ahead of the close is visible. A refused
    connection from a known local port logs a line of its own; once that line is there,
    every earlier one is too.
    """
    with WireClient.connect(broker.bootstrap, timeout=CLOSE_TIMEOUT) as client:
        tag = f"127.0.0.1:{client.sock.getsockname()[1]}: closing connection"
        client.send_raw(frame(struct.pack(">hhih", 1000, 0, 1, -1)))
        assert client.closed_by_peer(CLOSE_TIMEOUT)
    wait_until(lambda: any(tag in line for line in list(broker.output)), 10, "the log barrier")


def assert_no_broker_errors(broker) -> None:
    log_barrier(broker)
    errors = broker_errors(broker)
    if errors:
        pytest.fail("the broker logged errors:\n" + "".join(errors), pytrace=False)
