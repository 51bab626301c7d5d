"""Logging for loops that retry: a failure once with its stack, then quietly until it ends.

The metadata loop and the controller retry every heartbeat or round; while the coordination
store is down each attempt fails the same way, and a stack per attempt would bury the log.
"""

from __future__ import annotations

import logging


class RepeatedFailure:
    def __init__(self, log: logging.Logger, what: str) -> None:
        self._log = log
        self._what = what
        self._failing = False

    def failed(self, error: Exception) -> None:
        """Call from an ``except`` block."""
        if self._failing:
            self._log.debug("%s failed again: %s", self._what, error)
        else:
            self._log.exception("%s failed", self._what)
        self._failing = True

    def succeeded(self) -> None:
        if self._failing:
            self._log.info("%s works again", self._what)
        self._failing = False
