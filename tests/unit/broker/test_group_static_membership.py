"""Static membership (KIP-345) in the classic group coordinator, driven directly:
no sockets, no broker process (tests/support/group_calls.py)."""

from __future__ import annotations

import asyncio

from kio.schema.errors import ErrorCode

from broker.coordinator.group import GroupState
from broker.coordinator.group_coordinator import GroupCoordinator
from tests.support.group_calls import join, make, settle, sync

# -- static membership (KIP-345) -----------------------------------------------------------


async def static_pair(gc: GroupCoordinator) -> tuple[str, str]:
    """Static members a (instance "ia") and b ("ib"), Stable at generation 2, assigned
    b"A2" and b"B2" by whichever of them the coordinator made the leader."""
    first = await join(gc, "g", instance="ia")
    a = first.member_id
    await sync(gc, "g", 1, a, {a: b"A1"}, instance="ia")
    b_join = asyncio.ensure_future(join(gc, "g", instance="ib"))
    await settle()
    a_joined = await join(gc, "g", a, instance="ia")
    b = (await b_join).member_id
    leader = a_joined.leader
    follower, instance = (b, "ib") if leader == a else (a, "ia")
    follower_sync = asyncio.ensure_future(sync(gc, "g", 2, follower, instance=instance))
    await settle()
    await sync(gc, "g", 2, leader, {a: b"A2", b: b"B2"}, instance="ib" if leader == b else "ia")
    await follower_sync
    assert gc.groups["g"].members[a].assignment == b"A2"
    return a, b


def test_static_members_keep_the_first_joiner_as_leader(tmp_path):
    """Rejoining during a rebalance does not change the leader (Kafka keeps leaderId; a
    static member's known id rejoins like any other member's)."""
    async def main():
        gc = make(tmp_path)
        first = await join(gc, "g", instance="ia")
        a = first.member_id
        await sync(gc, "g", 1, a, {a: b""}, instance="ia")
        b_join = asyncio.ensure_future(join(gc, "g", instance="ib"))
        await settle()
        a_joined = await join(gc, "g", a, instance="ia")
        b_joined = await b_join
        assert a_joined.leader == b_joined.leader == a
        assert [m for m, _, _ in a_joined.members] == [a, b_joined.member_id]

    asyncio.run(main())


def test_static_member_restart_keeps_generation_and_assignment(tmp_path):
    async def main():
        gc = make(tmp_path)
        a, b = await static_pair(gc)
        group = gc.groups["g"]
        back = await join(gc, "g", instance="ia")  # a new process: no member id
        assert back.error == ErrorCode.none
        assert back.generation == 2 and back.member_id != a
        assert group.state is GroupState.STABLE
        # a led the group and still does under its new id; as a returning leader it gets the
        # members but must not compute a new assignment (KIP-814 skip_assignment).
        assert back.leader == back.member_id
        assert back.skip_assignment and {m for m, _, _ in back.members} == {b, back.member_id}
        assert await sync(gc, "g", 2, back.member_id, instance="ia") == (ErrorCode.none, b"A2")
        assert gc.heartbeat("g", 2, b, "ib") == ErrorCode.none
        assert gc.heartbeat("g", 2, a, "ia") == ErrorCode.fenced_instance_id
        assert (await join(gc, "g", a, instance="ia")).error == ErrorCode.fenced_instance_id

    asyncio.run(main())


def test_static_member_restart_with_new_subscription_metadata_does_not_rebalance(tmp_path):
    """Kafka rebalances a returning static member only if the group's protocol would
    change (GroupCoordinator.updateStaticMemberAndRebalance: selectProtocol), not when its
    metadata bytes differ, as they do for a restarted Java consumer (ConsumerProtocol
    subscription v1+ carries the partitions the old process owned and its generation)."""
    async def main():
        gc = make(tmp_path)
        await static_pair(gc)
        restarted = (("range", b"range-meta, owns nothing yet"), ("roundrobin", b"rr-meta"))
        back = asyncio.ensure_future(join(gc, "g", instance="ia", protocols=restarted))
        await settle()
        assert back.done(), "held for a rebalance although the protocol names are unchanged"
        assert ((await back).error, (await back).generation) == (ErrorCode.none, 2)
        assert gc.groups["g"].state is GroupState.STABLE

    asyncio.run(main())


def test_static_leader_join_in_stable_group_starts_a_rebalance(tmp_path):
    """A leader asks for a rebalance by sending JoinGroup (e.g. once partitions were added
    to a subscribed topic): Kafka rebalances when the leader rejoins a Stable group
    (GroupCoordinator.doCurrentMemberJoinGroup), static member or not."""
    async def main():
        for instance in (None, "ia"):
            gc = make(tmp_path / f"instance-{instance}")
            first = await join(gc, "g", instance=instance)
            a = first.member_id
            await sync(gc, "g", 1, a, {a: b"A1"}, instance=instance)
            rejoin = asyncio.ensure_future(join(gc, "g", a, instance=instance))
            await settle()
            assert rejoin.done(), instance
            result = await rejoin
            assert (result.generation, result.leader) == (2, a), instance
            assert [m for m, _, _ in result.members] == [a], instance

    asyncio.run(main())
