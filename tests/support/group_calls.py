"""The classic group coordinator driven directly, as the unit tier's group tests drive
it: a coordinator on a temp dir's replica manager, and JoinGroup and SyncGroup calls
made as a member would make them."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from kio.schema.errors import ErrorCode

from broker.coordinator import offsets_topic as ot
from broker.coordinator.group import GroupState
from broker.coordinator.group_coordinator import GroupCoordinator, JoinResult
from tests.support.handlers import make_services
from tests.support.in_process import finish_now

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
    result = await gc.sync_group(group, generation, member_id, instance, "consumer", None,
                                 assignments or {})
    return result.error, result.assignment


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
