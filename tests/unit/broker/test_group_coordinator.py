"""The classic group coordinator, driven directly: no sockets, no broker process.

Each test builds a GroupCoordinator on a temporary log dir as the broker does (through
tests/support/handlers.py's make_services; the calls are tests/support/group_calls.py's) and
runs its coroutines with asyncio.run. JoinGroup and SyncGroup calls that must wait for other
members run as tasks; ``settle()`` lets every runnable task reach its next wait. Session and
rebalance deadlines are driven with ``coordinator.tick(now=...)``, a moment in the future,
instead of waiting for them.

Unless a test says otherwise, group.initial.rebalance.delay.ms is 0: the first rebalance of
an Empty group completes as soon as everyone known has joined.
"""

from __future__ import annotations

import asyncio
import time

import pytest
from kio.schema.errors import ErrorCode

from broker.coordinator.group import Group, GroupState
from broker.coordinator.group_coordinator import GroupCoordinator, JoinResult
from tests.support.group_calls import join, make, offset, settle, stable_pair, sync

# -- states, generations, leader -----------------------------------------------------------


def test_first_member_empty_to_stable(tmp_path):
    async def main():
        gc = make(tmp_path)
        result = await join(gc, "g")
        group = gc.groups["g"]
        a = result.member_id
        assert result.error == ErrorCode.none
        assert (result.generation, result.leader, result.protocol) == (1, a, "range")
        assert result.protocol_type == "consumer"
        assert result.members == ((a, None, b"range-meta"),)
        assert group.state is GroupState.COMPLETING_REBALANCE
        assert gc.heartbeat("g", 1, a, None) == ErrorCode.none  # between join and sync

        assert await sync(gc, "g", 1, a, {a: b"assignment"}) == (ErrorCode.none, b"assignment")
        assert group.state is GroupState.STABLE
        assert gc.heartbeat("g", 1, a, None) == ErrorCode.none
        assert gc.heartbeat("g", 0, a, None) == ErrorCode.illegal_generation
        assert gc.heartbeat("g", 1, "stranger", None) == ErrorCode.unknown_member_id

    asyncio.run(main())


def test_second_member_rebalances_and_the_first_joiner_leads(tmp_path):
    async def main():
        gc = make(tmp_path)
        first = await join(gc, "g")
        a = first.member_id
        await sync(gc, "g", 1, a, {a: b"A1"})
        group = gc.groups["g"]

        b_join = asyncio.ensure_future(join(gc, "g", client="b"))
        await settle()
        assert group.state is GroupState.PREPARING_REBALANCE
        assert not b_join.done(), "the rebalance must wait for a to rejoin"
        assert gc.heartbeat("g", 1, a, None) == ErrorCode.rebalance_in_progress
        # A commit of the current generation is still fine while the group prepares.
        assert gc.commit_offsets("g", 1, a, None, {("t", 0): offset(3)}) == ErrorCode.none

        a_again = await join(gc, "g", a)
        b_joined = await b_join
        b = b_joined.member_id
        for result in (a_again, b_joined):
            assert (result.error, result.generation, result.leader) == (ErrorCode.none, 2, a)
        assert [m for m, _, _ in a_again.members] == [a, b], "the leader gets every member"
        assert b_joined.members == (), "followers get no member list"
        assert group.state is GroupState.COMPLETING_REBALANCE
        assert gc.commit_offsets("g", 2, a, None, {("t", 0): offset(4)}) == (
            ErrorCode.rebalance_in_progress)

        b_sync = asyncio.ensure_future(sync(gc, "g", 2, b))
        await settle()
        assert not b_sync.done(), "a follower's SyncGroup waits for the leader's"
        assert await sync(gc, "g", 2, a, {a: b"A2", b: b"B2"}) == (ErrorCode.none, b"A2")
        assert await b_sync == (ErrorCode.none, b"B2")
        assert group.state is GroupState.STABLE
        assert gc.commit_offsets("g", 2, b, None, {("t", 1): offset(9)}) == ErrorCode.none
        assert gc.commit_offsets("g", 1, b, None, {("t", 1): offset(9)}) == (
            ErrorCode.illegal_generation)
        assert gc.fetch_offsets("g", [("t", 0), ("t", 1), ("t", 2)]) == {
            ("t", 0): gc.offsets["g"][("t", 0)], ("t", 1): gc.offsets["g"][("t", 1)],
            ("t", 2): None,
        }
        assert gc.offsets["g"][("t", 0)].offset == 3 and gc.offsets["g"][("t", 1)].offset == 9

    asyncio.run(main())


def test_leaving_members_pass_on_leadership_then_empty_the_group(tmp_path):
    async def main():
        gc = make(tmp_path)
        a, b = await stable_pair(gc)
        group = gc.groups["g"]
        assert gc.leave_group("g", [(a, None)]) == (ErrorCode.none, [(a, None, ErrorCode.none)])
        assert group.state is GroupState.PREPARING_REBALANCE
        rejoined = await join(gc, "g", b)
        assert (rejoined.generation, rejoined.leader) == (3, b)
        assert [m for m, _, _ in rejoined.members] == [b]
        await sync(gc, "g", 3, b, {b: b"all"})

        gc.leave_group("g", [(b, None)])
        assert group.state is GroupState.EMPTY
        assert (group.generation, group.protocol, group.members) == (4, None, {})
        assert gc.leave_group("g", [(b, None)])[1] == [(b, None, ErrorCode.unknown_member_id)]

    asyncio.run(main())


def test_group_state_transitions_are_kafkas():
    group = Group("g")
    with pytest.raises(AssertionError):
        group.transition(GroupState.STABLE)
    with pytest.raises(AssertionError):
        group.transition(GroupState.COMPLETING_REBALANCE)
    for state in (GroupState.PREPARING_REBALANCE, GroupState.COMPLETING_REBALANCE,
                  GroupState.STABLE, GroupState.PREPARING_REBALANCE, GroupState.EMPTY,
                  GroupState.DEAD):
        group.transition(state)
        assert group.state is state
    stable = Group("s", state=GroupState.STABLE)
    with pytest.raises(AssertionError):
        stable.transition(GroupState.COMPLETING_REBALANCE)


def test_initial_rebalance_delay_gathers_members_into_one_generation(tmp_path):
    async def main():
        gc = make(tmp_path, **{"group.initial.rebalance.delay.ms": "200"})
        gc.start()  # the tick task ends the delay
        try:
            a_join = asyncio.ensure_future(join(gc, "g"))
            await settle()
            assert gc.groups["g"].state is GroupState.PREPARING_REBALANCE
            assert not a_join.done(), "the first member waits for the initial delay"
            b_join = asyncio.ensure_future(join(gc, "g"))
            a, b = await asyncio.wait_for(asyncio.gather(a_join, b_join), 10)
            assert a.generation == b.generation == 1, "one generation for both"
            assert len(a.members) == 2 and a.leader == a.member_id
        finally:
            await gc.stop()

    asyncio.run(main())


# -- protocol selection --------------------------------------------------------------------


async def three_members(gc: GroupCoordinator, group: str, protocols: list) -> list[JoinResult]:
    """Members joining with ``protocols`` (one tuple each); the first one leads."""
    first = await join(gc, group, protocols=protocols[0])
    others = [asyncio.ensure_future(join(gc, group, protocols=p)) for p in protocols[1:]]
    await settle()
    results = [await join(gc, group, first.member_id, protocols=protocols[0])]
    return results + [await t for t in others]


def test_protocol_is_chosen_by_votes(tmp_path):
    async def main():
        gc = make(tmp_path)
        results = await three_members(gc, "votes", [
            (("range", b"a-range"), ("roundrobin", b"a-rr")),
            (("roundrobin", b"b-rr"), ("range", b"b-range")),
            (("roundrobin", b"c-rr"), ("range", b"c-range")),
        ])
        assert {r.protocol for r in results} == {"roundrobin"}
        leader = results[0]
        assert [meta for _, _, meta in leader.members] == [b"a-rr", b"b-rr", b"c-rr"], (
            "the leader gets each member's metadata for the chosen protocol"
        )

        # Only protocols every member supports are candidates: "sticky" is a's first
        # choice, but b cannot do it, so a votes for its next one.
        results = await three_members(gc, "common", [
            (("sticky", b""), ("range", b"")),
            (("range", b""), ("roundrobin", b"")),
            (("roundrobin", b""), ("range", b"")),
        ])
        assert {r.protocol for r in results} == {"range"}

        # A tie goes to the leader's preference.
        results = await three_members(gc, "tie", [
            (("x", b""), ("y", b"")), (("y", b""), ("x", b"")),
        ])
        assert {r.protocol for r in results} == {"x"}

        # Nothing in common with the group, or another protocol type: refused at once.
        refused = await join(gc, "tie", protocols=(("z", b""),))
        assert refused.error == ErrorCode.inconsistent_group_protocol
        refused = await join(gc, "tie", protocols=(("x", b""),), protocol_type="connect")
        assert refused.error == ErrorCode.inconsistent_group_protocol
        refused = await join(gc, "fresh", protocols=())
        assert refused.error == ErrorCode.inconsistent_group_protocol

    asyncio.run(main())


# -- join validation -----------------------------------------------------------------------


def test_member_id_required_for_v4_joins(tmp_path):
    async def main():
        gc = make(tmp_path)
        first = await join(gc, "g", v4=True)
        assert first.error == ErrorCode.member_id_required and first.member_id
        assert gc.groups["g"].members == {}, "no member until it joins with its id"
        unknown = await join(gc, "g", "made-up-id", v4=True)
        assert unknown.error == ErrorCode.unknown_member_id
        joined = await join(gc, "g", first.member_id, v4=True)
        assert (joined.error, joined.member_id, joined.generation) == (
            ErrorCode.none, first.member_id, 1)
        # A static member is known by its instance id: no round trip for a member id.
        await sync(gc, "g", 1, first.member_id, {})
        static = asyncio.ensure_future(join(gc, "g", instance="i-1", v4=True))
        await settle()
        await join(gc, "g", first.member_id, v4=True)
        assert (await static).error == ErrorCode.none

    asyncio.run(main())


def test_join_refuses_bad_group_ids_and_session_timeouts(tmp_path):
    async def main():
        gc = make(tmp_path, **{"group.min.session.timeout.ms": "6000",
                               "group.max.session.timeout.ms": "300000"})
        assert (await join(gc, "")).error == ErrorCode.invalid_group_id
        for session in (5999, 300_001):
            assert (await join(gc, "g", session=session)).error == (
                ErrorCode.invalid_session_timeout)
        for session in (6000, 300_000):
            result = await join(gc, f"ok-{session}", session=session)
            assert result.error == ErrorCode.none
        assert (await join(gc, "never-seen", "some-member")).error == ErrorCode.unknown_member_id
        assert "never-seen" not in gc.groups

    asyncio.run(main())


# -- sessions and rebalance timeouts -------------------------------------------------------


def test_session_expiry_removes_the_member_and_rebalances(tmp_path):
    async def main():
        gc = make(tmp_path)
        now = time.monotonic()
        a, b = await stable_pair(gc, session=6_000)  # a keeps the 10 s default
        group = gc.groups["g"]
        gc.tick(now=now + 3)
        assert set(group.members) == {a, b} and group.state is GroupState.STABLE
        gc.tick(now=now + 7)  # past b's 6 s, not a's 10 s
        assert set(group.members) == {a}
        assert group.state is GroupState.PREPARING_REBALANCE
        assert gc.heartbeat("g", 2, b, None) == ErrorCode.unknown_member_id
        assert gc.heartbeat("g", 2, a, None) == ErrorCode.rebalance_in_progress
        rejoined = await join(gc, "g", a)
        assert (rejoined.generation, [m for m, _, _ in rejoined.members]) == (3, [a])

    asyncio.run(main())


def test_expired_leader_is_replaced_and_pending_syncs_fail(tmp_path):
    async def main():
        gc = make(tmp_path)
        now = time.monotonic()
        first = await join(gc, "g", session=6_000)
        a = first.member_id
        await sync(gc, "g", 1, a, {a: b""})
        b_join = asyncio.ensure_future(join(gc, "g", session=30_000))
        await settle()
        await join(gc, "g", a, session=6_000)
        b = (await b_join).member_id
        # b syncs, the leader a never does and stops heartbeating.
        b_sync = asyncio.ensure_future(sync(gc, "g", 2, b))
        await settle()
        gc.tick(now=now + 7)
        assert await asyncio.wait_for(b_sync, 5) == (ErrorCode.rebalance_in_progress, b"")
        rejoined = await join(gc, "g", b, session=30_000)
        assert (rejoined.generation, rejoined.leader) == (3, b)

    asyncio.run(main())


def test_rebalance_timeout_drops_members_that_do_not_rejoin(tmp_path):
    async def main():
        gc = make(tmp_path)
        now = time.monotonic()
        long = {"session": 60_000}
        first = await join(gc, "g", rebalance=20_000, **long)
        a = first.member_id
        await sync(gc, "g", 1, a, {})
        b_join = asyncio.ensure_future(join(gc, "g", rebalance=5_000, **long))
        await settle()
        await join(gc, "g", a, rebalance=20_000, **long)
        b = (await b_join).member_id
        await sync(gc, "g", 2, a, {})
        group = gc.groups["g"]

        c_join = asyncio.ensure_future(join(gc, "g", rebalance=5_000, **long))
        await settle()
        a_join = asyncio.ensure_future(join(gc, "g", a, rebalance=20_000, **long))
        await settle()
        # b does not rejoin. The rebalance waits up to the largest rebalance timeout (20 s).
        gc.tick(now=now + 10)
        assert group.state is GroupState.PREPARING_REBALANCE and not c_join.done()
        gc.tick(now=now + 21)
        a_result, c_result = await a_join, await c_join
        assert a_result.generation == c_result.generation == 3
        assert [m for m, _, _ in a_result.members] == [a, c_result.member_id]
        assert b not in group.members
        assert gc.heartbeat("g", 3, b, None) == ErrorCode.unknown_member_id

    asyncio.run(main())
