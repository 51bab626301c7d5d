"""The one way tests, benchmarks and `kafkube dev`'s helpers wait for a cluster: poll."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

DEFAULT_INTERVAL_S = 0.05


class WaitTimedOut(AssertionError, TimeoutError):
    """A wait that ran out of time. A test's failed wait is a failed assertion (pytest
    reports it as one); a benchmark's is a timeout it may catch and record: it is both."""


def wait_until(predicate: Callable[[], T], timeout: float, what: str,
               interval: float = DEFAULT_INTERVAL_S) -> T:
    """Call ``predicate`` until it returns a truthy value, and return that value; raise
    ``WaitTimedOut`` naming ``what`` once ``timeout`` seconds have passed.

    A value that is legitimately falsy (broker 0, offset 0) must be wrapped, e.g. in a
    one-element tuple."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise WaitTimedOut(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)
