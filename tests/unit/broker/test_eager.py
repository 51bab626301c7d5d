"""``broker.frontend.eager``: the first step runs at once; a waiting handler resumes as a task."""

from __future__ import annotations

import asyncio

import pytest

from broker.frontend import eager


async def _immediate(log: list[str]) -> str:
    log.append("ran")
    return "done"


async def _waits(log: list[str], fut: asyncio.Future[int]) -> int:
    log.append("before")
    value = await fut
    log.append("after")
    await asyncio.sleep(0)  # a bare yield is resumed too
    return value + 1


def test_a_handler_that_never_waits_runs_to_the_end_at_once():
    async def main() -> None:
        log: list[str] = []
        step = eager.start(_immediate(log))
        assert log == ["ran"]  # before start() returned, with no task and no loop iteration
        assert (step.done, step.result, step.task) == (True, "done", None)

    asyncio.run(main())


def test_a_waiting_handler_runs_its_first_step_now_and_resumes_as_a_task():
    async def main() -> None:
        log: list[str] = []
        fut = asyncio.get_running_loop().create_future()
        step = eager.start(_waits(log, fut))
        assert log == ["before"] and not step.done
        assert not step.task.done()
        fut.set_result(41)
        assert await asyncio.wait_for(step.task, 5) == 42
        assert log == ["before", "after"]

    asyncio.run(main())


def test_cancelling_the_task_cancels_what_the_handler_waits_on():
    async def main() -> None:
        seen: list[str] = []
        inner = asyncio.get_running_loop().create_future()

        async def handler() -> None:
            try:
                await inner
            except asyncio.CancelledError:
                seen.append("cancelled")
                raise

        step = eager.start(handler())
        await asyncio.sleep(0)  # let the task take over the wait
        step.task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await step.task
        assert seen == ["cancelled"] and inner.cancelled()

    asyncio.run(main())


def test_an_error_in_the_first_step_propagates_and_a_later_one_fails_the_task():
    async def fails_at_once() -> None:
        raise ValueError("first")

    async def fails_later(fut: asyncio.Future[None]) -> None:
        await fut
        raise KeyError("later")

    async def main() -> None:
        with pytest.raises(ValueError, match="first"):
            eager.start(fails_at_once())
        fut = asyncio.get_running_loop().create_future()
        step = eager.start(fails_later(fut))
        fut.set_result(None)
        with pytest.raises(KeyError, match="later"):
            await step.task

    asyncio.run(main())


def test_a_task_cancelled_before_it_runs_still_closes_the_handler():
    async def main() -> None:
        seen: list[str] = []
        inner = asyncio.get_running_loop().create_future()

        async def handler() -> None:
            try:
                await inner
            finally:
                seen.append("cleaned up")

        coro = handler()  # held here too, so garbage collection cannot be what closes it
        step = eager.start(coro)
        step.task.cancel()  # before the task's first step: it never reaches the handler
        with pytest.raises(asyncio.CancelledError):
            await step.task
        await asyncio.sleep(0)  # done-callbacks run in the next loop iteration
        assert seen == ["cleaned up"]
        assert coro.cr_frame is None  # closed

    asyncio.run(main())
