"""The classic group coordinator, driven directly: no sockets, no broker process.

Each test builds a GroupCoordinator on a temporary log dir as the broker does (through
test_admin_handlers.make_services) and runs its coroutines with asyncio.run. JoinGroup and
SyncGroup calls that must wait for other members run as tasks; ``settle()`` lets every
runnable task reach its next wait. Session and rebalance deadlines are driven with
``coordinator.tick(now=...)``, a moment in the future, instead of waiting for them.

Unless a test says otherwise, group.initial.rebalance.delay.ms is 0: the first rebalance of
an Empty group completes as soon as everyone known has joined.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode

from broker.cluster.internal_topics import java_string_hash, partition_for
from broker.coordinator import offsets_topic as ot
from broker.coordinator.group import Group, GroupState
from broker.coordinator.group_coordinator import GroupCoordinator, JoinResult
from tests.support.in_process import finish_now
from tests.test_admin_handlers import make_services

PROTOCOLS = (("range", b"range-meta"), ("roundrobin", b"rr-meta"))
SESSION_MS = 10_000


def make(tmp_path: Path, **settings: str) -> GroupCoordinator:
    """A coordinator whose offsets topic exists, as after a client's FindCoordinator."""
    defaults = {"group.initial.rebalance.delay.ms": "0", "offsets.topic.num.partitions": "5"}
    coordinator = make_services(tmp_path, **{**defaults, **settings}).groups
    finish_now(coordinator.ensure_offsets_topic())
    return coordinator


async def join(gc: GroupCoordinator, group: str, member_id: str = "", *,
               instance: str | None = None, protocols=PROTOCOLS, session: int = SESSION_MS,
               rebalance: int = SESSION_MS, v4: bool = False, client: str = "client",
               protocol_type: str = "consumer") -> JoinResult:
    return await gc.join_group(group, member_id, instance, client, "127.0.0.1", session,
                               rebalance, protocol_type, list(protocols), require_known_member=v4)


async def sync(gc: GroupCoordinator, group: str, generation: int, member_id: str,
               assignments: dict[str, bytes] | None = None,
               instance: str | None = None) -> tuple[ErrorCode, bytes]:
    error, assignment, _ = await gc.sync_group(group, generation, member_id, instance,
                                               "consumer", None, assignments or {})
    return error, assignment


async def settle() -> None:
    """Let every task that can run reach its next wait."""
    for _ in range(10):
        await asyncio.sleep(0)


def offset(value: int, timestamp: int | None = None) -> ot.OffsetValue:
    now_ms = int(time.time() * 1000)
    return ot.OffsetValue(value, -1, "", now_ms if timestamp is None else timestamp)


async def stable_pair(gc: GroupCoordinator, group: str = "g", **b_options) -> tuple[str, str]:
    """Members a (the leader) and b in a Stable group at generation 2."""
    first = await join(gc, group)
    a = first.member_id
    assert (await sync(gc, group, 1, a, {a: b"A1"})) == (ErrorCode.none, b"A1")
    b_join = asyncio.ensure_future(join(gc, group, **b_options))
    await settle()
    again = await join(gc, group, a)
    b = (await b_join).member_id
    assert again.generation == 2 and again.leader == a
    b_sync = asyncio.ensure_future(sync(gc, group, 2, b))
    await settle()
    assert await sync(gc, group, 2, a, {a: b"A2", b: b"B2"}) == (ErrorCode.none, b"A2")
    assert await b_sync == (ErrorCode.none, b"B2")
    assert gc.groups[group].state is GroupState.STABLE
    return a, b


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


# -- offsets: persistence, reload, expiry --------------------------------------------------


@pytest.mark.parametrize("shutdown", ["clean", "abandoned"])
def test_offsets_and_groups_reload_from_consumer_offsets(tmp_path, shutdown):
    services = make_services(tmp_path, **{"group.initial.rebalance.delay.ms": "0",
                                          "offsets.topic.num.partitions": "5"})
    gc = services.groups

    async def first_life():
        joined = await join(gc, "g")
        a = joined.member_id
        await sync(gc, "g", 1, a, {a: b"assignment"})
        assert gc.commit_offsets("g", 1, a, None, {("t", 0): offset(5), ("t", 1): offset(7)}) == (
            ErrorCode.none)
        assert gc.commit_offsets("g", 1, a, None, {("t", 0): offset(6)}) == ErrorCode.none
        # Simple commits (no membership), a deleted offset, a deleted group.
        simple = {("t", 0): offset(3), ("u", 2): offset(4)}
        assert gc.commit_offsets("simple", -1, "", None, simple) == ErrorCode.none
        assert gc.delete_offsets("simple", [("u", 2)])[0] == ErrorCode.none
        assert gc.commit_offsets("doomed", -1, "", None, {("t", 0): offset(1)}) == ErrorCode.none
        assert gc.delete_groups(["doomed"]) == {"doomed": ErrorCode.none}
        if shutdown == "clean":
            await services.replicas.shutdown()
        return a

    a = asyncio.run(first_life())
    before = {g: dict(o) for g, o in gc.offsets.items()}
    assert set(before) == {"g", "simple"}

    fresh = make_services(tmp_path).groups  # same log dir, a new broker process
    fresh.load()
    assert {g: dict(o) for g, o in fresh.offsets.items() if o} == before
    assert fresh.fetch_offsets("g", [("t", 0), ("t", 1)]) == before["g"]
    assert fresh.fetch_offsets("simple", None) == {("t", 0): before["simple"][("t", 0)]}
    assert "doomed" not in fresh.groups and fresh.fetch_offsets("doomed", None) == {}
    group = fresh.groups["g"]
    assert (group.state, group.generation, group.protocol, group.leader_id) == (
        GroupState.STABLE, 1, "range", a)
    assert group.members[a].assignment == b"assignment"
    # The member carries on with the new coordinator, as after a coordinator failover.
    assert fresh.heartbeat("g", 1, a, None) == ErrorCode.none


def test_expire_offsets_of_empty_groups_only(tmp_path):
    now_ms = int(time.time() * 1000)
    minute = 60_000

    async def main():
        gc = make(tmp_path, **{"offsets.retention.minutes": "1"})
        gc.commit_offsets("old", -1, "", None, {("t", 0): offset(1, now_ms - 2 * minute),
                                                 ("t", 1): offset(2, now_ms - 10_000)})
        gc.commit_offsets("fresh", -1, "", None, {("t", 0): offset(3, now_ms - 10_000)})
        # An active group keeps its offsets however old they are.
        joined = await join(gc, "active")
        a = joined.member_id
        await sync(gc, "active", 1, a, {})
        gc.commit_offsets("active", 1, a, None, {("t", 0): offset(4, now_ms - 5 * minute)})
        # A group that has just become empty: retention counts from then (KIP-211).
        joined = await join(gc, "left")
        b = joined.member_id
        await sync(gc, "left", 1, b, {})
        gc.commit_offsets("left", 1, b, None, {("t", 0): offset(5, now_ms - 5 * minute)})
        gc.leave_group("left", [(b, None)])
        assert gc.groups["left"].state is GroupState.EMPTY

        assert gc.expire_offsets(now_ms) == 1
        assert gc.fetch_offsets("old", None) == {("t", 1): gc.offsets["old"][("t", 1)]}
        assert gc.fetch_offsets("fresh", None) != {}
        assert gc.fetch_offsets("active", None) != {}
        assert gc.fetch_offsets("left", None) != {}

        later = now_ms + 2 * minute
        assert gc.expire_offsets(later) == 3  # old t-1, fresh t-0, left t-0
        assert gc.fetch_offsets("old", None) == {} and gc.fetch_offsets("fresh", None) == {}
        assert gc.fetch_offsets("left", None) == {}
        assert gc.fetch_offsets("active", None) != {}
        # An Empty group left without offsets is gone (Kafka: Dead, and a tombstone for its
        # metadata; GroupMetadataManager.cleanupGroupMetadata), so ListGroups does not keep
        # every console consumer's group forever.
        assert {g.group_id for g in gc.list_groups()} == {"active"}

    asyncio.run(main())
    # Expiry wrote tombstones: a reloaded coordinator does not bring the offsets back.
    fresh = make(tmp_path)
    fresh.load()
    assert {g for g, o in fresh.offsets.items() if o} == {"active"}
    assert {g.group_id for g in fresh.list_groups()} == {"active"}


def test_delete_groups(tmp_path):
    async def main():
        gc = make(tmp_path)
        joined = await join(gc, "busy")
        await sync(gc, "busy", 1, joined.member_id, {})
        gc.commit_offsets("idle", -1, "", None, {("t", 0): offset(1)})
        assert gc.delete_groups(["busy", "idle", "nobody"]) == {
            "busy": ErrorCode.non_empty_group, "idle": ErrorCode.none,
            "nobody": ErrorCode.group_id_not_found,
        }
        assert "idle" not in gc.groups and gc.fetch_offsets("idle", None) == {}
        assert [g.group_id for g in gc.list_groups()] == ["busy"]

    asyncio.run(main())


# -- which __consumer_offsets partition a group lives in -----------------------------------

# String.hashCode() and Kafka's partitionFor, Utils.abs(hashCode) % 50 (Utils.abs maps
# Integer.MIN_VALUE to 0), computed with a JDK 17.
JAVA = [
    ("", 0, 0),
    ("hello", 99162322, 22),
    ("Aa", 2112, 12),
    ("BB", 2112, 12),
    ("polygenelubricants", -2147483648, 0),  # hashCode() == Integer.MIN_VALUE
    ("my-group", -1906497762, 12),
    ("consumer-group", -1738392088, 38),
    ("console-consumer-12345", 158455506, 6),
    ("g\u00e9", 3426, 26),
    ("\U0001f600", 1772899, 49),  # one code point, two UTF-16 code units
]


@pytest.mark.parametrize(("group", "hash_code", "partition"), JAVA)
def test_java_string_hash(group, hash_code, partition):
    assert java_string_hash(group) == hash_code


@pytest.mark.parametrize(("group", "hash_code", "partition"), JAVA)
def test_partition_for_is_kafkas_rule(group, hash_code, partition):
    assert partition_for(group, 50) == partition
