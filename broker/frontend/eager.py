"""Run a request handler's first step at once, and make a task only if it must wait.

Most requests (Produce with acks=1, a Fetch with data ready, Metadata) complete without ever
suspending. Creating an ``asyncio.Task`` for each costs a loop iteration, done-callbacks and
a wake-up of the writer, which at a thousand requests a second was a visible share of the
broker's CPU. Python 3.12's ``eager_task_factory`` does the same thing; this broker runs on
3.11, so the first step is taken by hand and a suspended coroutine is handed to a task that
resumes it where it stopped.

The first step runs inside the caller's task (the connection's reader): a handler must not
use ``asyncio.current_task()`` before its first ``await`` (nor ``asyncio.timeout`` or a
``TaskGroup``, which rely on it) or it would act on the reader.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Generator
from typing import Any, NamedTuple, TypeVar

T = TypeVar("T")


class Started(NamedTuple):
    """The outcome of ``start``: either ``done`` with ``result``, or a ``task`` to await."""

    done: bool
    result: Any = None
    task: asyncio.Task[Any] | None = None


def start(coro: Coroutine[Any, Any, T]) -> Started:
    """Run ``coro`` until it first suspends. Exceptions it raises in that step propagate."""
    try:
        waiting = coro.send(None)
    except StopIteration as finished:
        return Started(True, finished.value)
    task = asyncio.ensure_future(_finish(coro, waiting))
    # A task cancelled before its first step never reaches ``coro``: close it then, so its
    # ``finally`` blocks (waiter and timer clean-up) run now, not at garbage collection.
    task.add_done_callback(lambda done: coro.close() if done.cancelled() else None)
    return Started(False, task=task)


async def _finish(coro: Coroutine[Any, Any, T], waiting: Any) -> T:
    return await _Resume(coro, waiting)


class _Resume:
    """Awaiting this drives ``coro`` on from where ``start`` left it, suspended on
    ``waiting`` (a future, or None for a bare yield): what the coroutine yields goes to the
    task running us, which resumes us when it is done, exactly as if the task had driven
    ``coro`` from its start. Cancellation is thrown into ``coro`` in the same way."""

    __slots__ = ("coro", "waiting")

    def __init__(self, coro: Coroutine[Any, Any, Any], waiting: Any) -> None:
        self.coro = coro
        self.waiting = waiting

    def __await__(self) -> Generator[Any, None, Any]:
        coro, waiting = self.coro, self.waiting
        while True:
            try:
                yield waiting
            except BaseException as error:  # CancelledError included: forwarded to coro
                step = coro.throw
                arg: Any = error
            else:
                step = coro.send
                arg = None
            try:
                waiting = step(arg)
            except StopIteration as finished:
                return finished.value
