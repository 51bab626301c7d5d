"""The group coordinator's timers: its tick task sleeps until the earliest session,
rebalance or retention deadline instead of waking every 50 ms, so whatever sets a sooner
deadline must wake it (``broker/coordinator/alarm.py``). These tests pin the deadlines it
computes and show a running coordinator expiring a session no request looked at."""

from __future__ import annotations

import asyncio
import time

import pytest
from kio.schema.errors import ErrorCode

from broker.coordinator.alarm import Alarm, Deadlines
from broker.coordinator.consumer_membership import Heartbeat
from broker.coordinator.group import GroupState
from broker.coordinator.group_coordinator import MAX_SLEEP_SECONDS
from kafkube.harness.waiting import wait_until
from tests.support.group_calls import join, make, offset, settle, sync

RETENTION_CHECK_S = 600  # offsets.retention.check.interval.ms's default


def test_a_sooner_deadline_wakes_the_sleeper_and_a_later_one_does_not() -> None:
    async def main() -> None:
        alarm = Alarm()
        sleeper = asyncio.ensure_future(alarm.sleep_until(time.monotonic() + 60))
        await settle()
        alarm.at(time.monotonic() + 120)
        await settle()
        assert not sleeper.done(), "a later deadline must not wake it"
        alarm.at(time.monotonic() + 1)
        assert await asyncio.wait_for(sleeper, 5) is True
        # Awake, nothing rings: it looks at every table before it sleeps again.
        alarm.at(time.monotonic())
        assert await alarm.sleep_until(time.monotonic() + 0.01) is False

    asyncio.run(main())


def test_a_deadlines_table_tells_the_alarm_of_each_deadline_set() -> None:
    async def main() -> None:
        alarm = Alarm()
        table = Deadlines(alarm)
        sleeper = asyncio.ensure_future(alarm.sleep_until(time.monotonic() + 60))
        await settle()
        table.setdefault(("g", "m"), time.monotonic() + 1)
        assert await asyncio.wait_for(sleeper, 5) is True
        with pytest.raises(TypeError):
            table.update({("g", "n"): 0.0})

    asyncio.run(main())


def test_the_next_deadline_is_a_members_session_then_the_retention_check(tmp_path) -> None:
    async def main() -> None:
        gc = make(tmp_path)
        before = time.monotonic()
        gc.tick(before)  # the first retention pass: the next is an interval on
        assert gc.next_deadline(before) == pytest.approx(before + RETENTION_CHECK_S)
        a = (await join(gc, "g", session=10_000)).member_id
        assert await sync(gc, "g", 1, a, {a: b"A"}) == (ErrorCode.none, b"A")
        after = time.monotonic()
        assert before + 10 <= gc.next_deadline(after) <= after + 10
        assert gc.heartbeat("g", 1, a, None) == ErrorCode.none
        assert gc.next_deadline(time.monotonic()) >= after + 10

    asyncio.run(main())


def test_an_initial_rebalance_delay_is_a_deadline_until_it_passes(tmp_path) -> None:
    async def main() -> None:
        gc = make(tmp_path, **{"group.initial.rebalance.delay.ms": "3000"})
        before = time.monotonic()
        gc.tick(before)
        joining = asyncio.ensure_future(join(gc, "g", rebalance=60_000))
        await settle()
        assert gc.groups["g"].state is GroupState.PREPARING_REBALANCE
        after = time.monotonic()
        assert before + 3 <= gc.next_deadline(after) <= after + 3
        gc.tick(after + 3)
        assert (await joining).error == ErrorCode.none

    asyncio.run(main())


def test_a_consumer_groups_sessions_are_deadlines(tmp_path) -> None:
    gc = make(tmp_path)
    now = time.monotonic()
    gc.tick(now)
    joined = gc.consumer_heartbeat(
        Heartbeat("g", "m", 0, rebalance_timeout_ms=30_000, subscribed_topic_names=("t",),
                  owned=()), "c", "/h", now, 1)
    assert joined.error == ErrorCode.none
    assert gc.next_deadline(now) == pytest.approx(now + 45)  # consumer.session.timeout.ms


def test_a_running_coordinator_expires_a_session_no_request_looks_at(tmp_path) -> None:
    """The tick task sleeps towards the retention check (minutes away) when the member
    joins; only the alarm can make it expire a 0.3 s session within seconds."""
    timeout = MAX_SLEEP_SECONDS - 1

    async def main() -> None:
        gc = make(tmp_path, **{"group.min.session.timeout.ms": "100"})
        gc.start()
        try:
            await settle()
            a = (await join(gc, "g", session=300)).member_id
            assert await sync(gc, "g", 1, a, {a: b"A"}) == (ErrorCode.none, b"A")
            group = gc.groups["g"]
            await asyncio.to_thread(wait_until, lambda: group.is_(GroupState.EMPTY),
                                    timeout, "the silent member's session to expire")
        finally:
            await gc.stop()

    asyncio.run(main())


# -- what must ring the alarm ---------------------------------------------------------------
# Each test puts a sleeper on the coordinator's alarm towards a moment after the deadline the
# step sets (and before the members' sessions), as the tick task would sleep, and checks the
# step woke it: without the ring the deadline would be acted on only at the sleep's end.


async def sleeper(gc, seconds: float) -> asyncio.Future[bool]:
    task = asyncio.ensure_future(gc.alarm.sleep_until(time.monotonic() + seconds))
    await settle()
    assert not task.done()
    return task


def test_an_initial_delay_extended_after_it_passed_rings(tmp_path) -> None:
    """KIP-394: a pending member's join extends the delay the tick already let go of."""
    async def main() -> None:
        gc = make(tmp_path, **{"group.initial.rebalance.delay.ms": "1000"})
        a = asyncio.ensure_future(join(gc, "g", rebalance=60_000))
        await settle()
        pending = await join(gc, "g", v4=True, rebalance=60_000)
        assert pending.error == ErrorCode.member_id_required
        gc.tick(time.monotonic() + 1.5)  # the delay is over; the pending member holds it
        assert not a.done()
        woken = await sleeper(gc, 5)  # sessions are 10 s: their deadlines do not ring it
        joined = asyncio.ensure_future(join(gc, "g", pending.member_id, v4=True,
                                            rebalance=60_000))
        await settle()
        assert woken.done() and woken.result() is True
        gc.tick(time.monotonic() + 1.5)
        assert (await a).error == (await joined).error == ErrorCode.none

    asyncio.run(main())


def test_a_pending_member_leaving_completes_the_join_it_held(tmp_path) -> None:
    async def main() -> None:
        gc = make(tmp_path, **{"group.initial.rebalance.delay.ms": "50"})
        started = time.monotonic()
        a = asyncio.ensure_future(join(gc, "g", rebalance=60_000))
        await settle()
        pending = await join(gc, "g", v4=True, rebalance=60_000)
        # No tick runs here: the delay passes with the pending member holding the join.
        await asyncio.to_thread(wait_until, lambda: time.monotonic() > started + 0.1, 5,
                                "the initial delay to pass")
        assert not a.done()
        assert gc.leave_group("g", [(pending.member_id, None)])[0] == ErrorCode.none
        await settle()
        assert a.done(), "the join waited only for the member that left"
        assert (a.result().error, a.result().generation) == (ErrorCode.none, 1)

    asyncio.run(main())


def test_a_cancelled_join_rings(tmp_path) -> None:
    """A member whose JoinGroup was cancelled (its connection went) no longer waits to join:
    its session counts again, and the rebalance may complete without it."""
    async def main() -> None:
        gc = make(tmp_path, **{"group.min.session.timeout.ms": "100"})
        a = (await join(gc, "g", session=30_000)).member_id
        assert (await sync(gc, "g", 1, a, {a: b"A"}))[0] == ErrorCode.none
        b_join = asyncio.ensure_future(join(gc, "g", session=500, rebalance=60_000))
        await settle()
        assert gc.groups["g"].state is GroupState.PREPARING_REBALANCE
        woken = await sleeper(gc, 20)
        b_join.cancel()
        await settle()
        assert woken.done() and woken.result() is True

    asyncio.run(main())


def test_a_commit_that_shortens_a_session_rings(tmp_path) -> None:
    """A follower rejoining a Stable group with the same protocols keeps its generation; its
    deadline comes from the session timeout it asked for, its commits' from the one it
    joined with: the shorter one must wake the tick."""
    async def main() -> None:
        gc = make(tmp_path, **{"group.min.session.timeout.ms": "100"})
        a = (await join(gc, "g", session=30_000)).member_id
        assert (await sync(gc, "g", 1, a, {a: b"A"}))[0] == ErrorCode.none
        b_join = asyncio.ensure_future(join(gc, "g", session=1_000))
        await settle()
        assert (await join(gc, "g", a, session=30_000)).generation == 2
        b = (await b_join).member_id
        b_sync = asyncio.ensure_future(sync(gc, "g", 2, b))
        await settle()
        assert (await sync(gc, "g", 2, a, {a: b"A", b: b"B"}))[0] == ErrorCode.none
        assert (await b_sync)[0] == ErrorCode.none
        assert (await join(gc, "g", b, session=4_000)).generation == 2  # no rebalance
        woken = await sleeper(gc, 3)
        assert gc.commit_offsets("g", 2, b, None, {("t", 0): offset(1)}) == ErrorCode.none
        await settle()
        assert woken.done() and woken.result() is True

    asyncio.run(main())


def test_the_watchdog_ticks_no_faster_than_every_10_ms() -> None:
    from prometheus_client import CollectorRegistry

    from broker.common.watchdog import EventLoopWatchdog

    assert EventLoopWatchdog(0.001, CollectorRegistry()).interval == 0.01
    assert EventLoopWatchdog(1.0, CollectorRegistry()).interval == 0.25
    assert EventLoopWatchdog(0.2, CollectorRegistry()).interval == 0.05
