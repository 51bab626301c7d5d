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
from tests.support.group_calls import join, make, settle, sync

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
