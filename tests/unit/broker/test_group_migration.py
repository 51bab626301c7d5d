"""Online and offline migration between the classic group protocol and KIP-848's, through the
real coordinator: a classic group upgraded when a consumer-protocol member joins, its classic
members served from the consumer group until they move, the group downgraded when the last
consumer-protocol member leaves, the policy obeyed, and every step stored so that a new
coordinator loads the group as it was."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from broker.coordinator import consumer_protocol as cp
from broker.coordinator.group import GroupState
from broker.handlers import consumer_groups  # noqa: F401 (registers)
from broker.handlers.context import BrokerServices
from tests.support.group_calls import finish_now, settle
from tests.support.handlers import create, make_services, new_topic
from tests.unit.broker.test_consumer_group_heartbeat import (
    GROUP,
    beat,
    commit,
    offsets_end,
    partitions,
)

ALL = [0, 1, 2, 3]


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def protocols(owned: list[int], name: str = "cooperative-sticky") -> list[tuple[str, bytes]]:
    subscription = cp.Subscription(1, ("orders",), (("orders", tuple(owned)),) if owned else ())
    return [(name, cp.encode_subscription(subscription))]


def partitions_of(assignment: bytes) -> list[int]:
    return sorted(p for _, parts in cp.decode_assignment(assignment) for p in parts)


@dataclass
class Classic:
    """A classic consumer with the cooperative protocol, as the Java client behaves: it
    rejoins when its heartbeat says so, names what it owns, and rejoins again at once when
    its SyncGroup took partitions away."""

    services: BrokerServices
    member_id: str = ""
    generation: int = -1
    owned: list[int] = field(default_factory=list)

    def join(self, protocol_type: str = "consumer",
             offered: list[tuple[str, bytes]] | None = None) -> Any:
        joined = run(self.services.groups.join_group(
            GROUP, self.member_id, None, "classic", "127.0.0.1", 10_000, 10_000, protocol_type,
            offered or protocols(self.owned), False))
        if joined.error == ErrorCode.none:
            self.member_id, self.generation = joined.member_id, joined.generation
        return joined

    def sync(self) -> tuple[ErrorCode, bool]:
        result = run(self.services.groups.sync_group(
            GROUP, self.generation, self.member_id, None, "consumer", None, {}))
        if result.error != ErrorCode.none:
            return result.error, False
        given = partitions_of(result.assignment)
        revoked = bool(set(self.owned) - set(given))
        self.owned = given
        return result.error, revoked

    def heartbeat(self) -> ErrorCode:
        return self.services.groups.heartbeat(GROUP, self.generation, self.member_id, None)

    def step(self) -> None:
        """One poll: heartbeat, and rejoin (as often as the coordinator asks) if told to."""
        if self.heartbeat() != ErrorCode.rebalance_in_progress:
            return
        for _ in range(3):
            assert self.join().error == ErrorCode.none
            error, revoked = self.sync()
            assert error == ErrorCode.none
            if not revoked:
                return


@pytest.fixture
def services(tmp_path: Path) -> BrokerServices:
    services = make_services(tmp_path, **{"offsets.topic.num.partitions": "3",
                                          "group.initial.rebalance.delay.ms": "0"})
    create(services, 7, new_topic("orders", 4))
    finish_now(services.groups.ensure_offsets_topic())
    services.groups.load()
    return services


def classic_group(services: BrokerServices) -> tuple[Classic, Classic]:
    """Two classic members, Stable, holding 0-1 and 2-3."""
    a, b = Classic(services), Classic(services)

    async def form() -> None:
        gc = services.groups

        async def join(member: Classic) -> Any:
            return await gc.join_group(GROUP, member.member_id, None, "c", "h", 10_000,
                                       10_000, "consumer", protocols([]), False)
        first = await join(a)  # alone at generation 1, then b joins and a rejoins
        a.member_id = first.member_id
        assert (await gc.sync_group(GROUP, 1, a.member_id, None, "consumer", None,
                                    {})).error == ErrorCode.none
        b_joined = asyncio.ensure_future(join(b))
        await settle()
        again = await join(a)
        b.member_id = (await b_joined).member_id
        a.generation = b.generation = again.generation
        plan = {a.member_id: cp.encode_assignment(1, [("orders", [0, 1])]),
                b.member_id: cp.encode_assignment(1, [("orders", [2, 3])])}
        results = await asyncio.gather(*(
            gc.sync_group(GROUP, again.generation, m, None, "consumer", None,
                          plan if m == again.leader else {}) for m in (b.member_id, a.member_id)))
        b.owned, a.owned = (partitions_of(r.assignment) for r in results)

    run(form())
    assert (a.owned, b.owned) == ([0, 1], [2, 3])
    assert services.groups.groups[GROUP].state is GroupState.STABLE
    return a, b


def test_a_consumer_member_upgrades_a_classic_group_and_the_partitions_move_once(
        services: BrokerServices) -> None:
    a, b = classic_group(services)
    generation = a.generation
    joined = beat(services, "k", 0, join=True)
    assert joined.error_code == ErrorCode.none
    assert GROUP not in services.groups.groups
    group = services.groups.describe_consumer_group(GROUP)
    # The classic members are members of the consumer group at their generation, holding
    # what they held; the newcomer waits for what they must give up.
    assert group.members[a.member_id].member_epoch == generation
    assert group.members[a.member_id].classic is not None
    assert partitions(joined) == []
    assert group.group_epoch == generation + 1
    assert a.heartbeat() == ErrorCode.rebalance_in_progress

    a, b, k = settled(services, a, b, joined)
    assert sorted(a.owned + b.owned + k) == ALL
    assert all(1 <= len(owned) <= 2 for owned in (a.owned, b.owned, k))
    assert a.heartbeat() == b.heartbeat() == ErrorCode.none
    # A classic member commits at its generation (its member epoch), not at another.
    assert commit(services, a.member_id, a.generation) == ErrorCode.none
    assert commit(services, a.member_id, a.generation - 1) == ErrorCode.illegal_generation


def settled(services: BrokerServices, a: Classic, b: Classic, joined: Any
           ) -> tuple[Classic, Classic, list[int]]:
    k_epoch, k_owned = joined.member_epoch, partitions(joined) or []
    for _ in range(6):
        a.step()
        b.step()
        answer = beat(services, "k", k_epoch, owned=k_owned)
        k_epoch = answer.member_epoch
        if answer.assignment is not None:
            k_owned = partitions(answer)
        if services.groups.describe_consumer_group(GROUP).state.value == "Stable":
            break
    assert services.groups.describe_consumer_group(GROUP).state.value == "Stable"
    return a, b, k_owned


def test_the_upgraded_group_is_loaded_as_it_was_by_a_new_coordinator(
        services: BrokerServices) -> None:
    a, b = classic_group(services)
    a_b = settled(services, a, b, beat(services, "k", 0, join=True))
    before = services.groups.describe_consumer_group(GROUP)
    offsets = services.replicas.get("__consumer_offsets", services.groups.partition_of(GROUP))
    services.groups.on_leadership(offsets, False)
    services.groups.on_leadership(offsets, True)
    after = services.groups.describe_consumer_group(GROUP)
    assert GROUP not in services.groups.groups  # the classic record was tombstoned
    assert after.members == before.members and after.target == before.target
    assert after.group_epoch == before.group_epoch
    assert a_b[0].heartbeat() == ErrorCode.none


def test_the_last_consumer_member_leaving_downgrades_the_group(services: BrokerServices
                                                               ) -> None:
    a, b = classic_group(services)
    a, b, _ = settled(services, a, b, beat(services, "k", 0, join=True))
    epoch = services.groups.describe_consumer_group(GROUP).group_epoch
    left = beat(services, "k", -1)
    assert left.error_code == ErrorCode.none
    assert services.groups.describe_consumer_group(GROUP) is None
    classic = services.groups.groups[GROUP]
    assert classic.state is GroupState.PREPARING_REBALANCE
    assert classic.generation == epoch and set(classic.members) == {a.member_id, b.member_id}
    # Each holds its target assignment until the classic rebalance gives a new one.
    assert partitions_of(classic.members[a.member_id].assignment) == a.owned
    assert a.heartbeat() == ErrorCode.rebalance_in_progress

    async def rejoin() -> list[Any]:
        gc = services.groups
        return await asyncio.gather(*(
            gc.join_group(GROUP, m.member_id, None, "c", "h", 10_000, 10_000, "consumer",
                          protocols(m.owned), False) for m in (a, b)))
    first, second = run(rejoin())
    assert first.error == second.error == ErrorCode.none
    assert first.generation == epoch + 1
    # Stored: a new coordinator loads a classic group, no consumer group.
    offsets = services.replicas.get("__consumer_offsets", services.groups.partition_of(GROUP))
    services.groups.on_leadership(offsets, False)
    services.groups.on_leadership(offsets, True)
    assert services.groups.describe_consumer_group(GROUP) is None
    assert set(services.groups.groups[GROUP].members) == {a.member_id, b.member_id}


def test_with_the_policy_disabled_a_classic_group_refuses_consumer_members(
        tmp_path: Path) -> None:
    services = make_services(tmp_path, **{"offsets.topic.num.partitions": "3",
                                          "group.initial.rebalance.delay.ms": "0",
                                          "group.consumer.migration.policy": "disabled"})
    create(services, 7, new_topic("orders", 4))
    finish_now(services.groups.ensure_offsets_topic())
    services.groups.load()
    classic_group(services)
    end = offsets_end(services)
    refused = beat(services, "k", 0, join=True)
    assert refused.error_code == ErrorCode.group_id_not_found
    assert "online upgrade is disabled" in refused.error_message
    assert services.groups.groups[GROUP].state is GroupState.STABLE
    assert offsets_end(services) == end  # nothing stored


def test_classic_members_of_a_consumer_group_are_checked_as_kafka_checks_them(
        services: BrokerServices) -> None:
    beat(services, "k", 0, join=True)
    end = offsets_end(services)
    stranger = Classic(services)
    assert stranger.join(protocol_type="connect").error == \
        ErrorCode.inconsistent_group_protocol
    assert stranger.join(offered=[("range", b"\x00\x01\x7f")]).error == \
        ErrorCode.inconsistent_group_protocol  # not a consumer subscription
    assert offsets_end(services) == end
    ghost = Classic(services, member_id="ghost", generation=1)
    assert ghost.heartbeat() == ErrorCode.unknown_member_id
    assert ghost.sync()[0] == ErrorCode.unknown_member_id
    too_short = run(services.groups.join_group(GROUP, "", None, "c", "h", 1, 10_000, "consumer",
                                               protocols([]), False))
    assert too_short.error == ErrorCode.invalid_session_timeout
    assert offsets_end(services) == end
    # A KIP-848 member cannot speak the classic protocol under its id.
    assert Classic(services, member_id="k", generation=1).heartbeat() == \
        ErrorCode.unknown_member_id
    member = Classic(services)
    assert member.join().error == ErrorCode.none
    assert Classic(services, member.member_id, member.generation + 5).heartbeat() == \
        ErrorCode.illegal_generation
    assert member.join(offered=protocols([], name="range")).error == ErrorCode.none
    other = Classic(services)
    assert other.join(offered=protocols([], name="roundrobin")).error == \
        ErrorCode.inconsistent_group_protocol  # no protocol in common with the classic one


def test_an_empty_group_changes_protocol_offline_keeping_its_offsets(
        services: BrokerServices) -> None:
    joined = beat(services, "k", 0, join=True)
    assert commit(services, "k", joined.member_epoch, offset=4) == ErrorCode.none
    beat(services, "k", -1)
    classic = Classic(services)
    assert classic.join().error == ErrorCode.none  # a classic group now
    assert services.groups.describe_consumer_group(GROUP) is None
    assert services.groups.fetch_offsets(GROUP, [("orders", 0)])[("orders", 0)].offset == 4


def test_a_new_classic_consumer_joins_with_the_member_id_it_was_handed(
        services: BrokerServices) -> None:
    """JoinGroup v4+: MEMBER_ID_REQUIRED hands out an id; the join with it is accepted (a
    classic consumer started, or fenced and rejoining, while the group is mixed)."""
    beat(services, "k", 0, join=True)

    def join(member_id: str) -> Any:
        return run(services.groups.join_group(GROUP, member_id, None, "c", "h", 10_000, 10_000,
                                              "consumer", protocols([]), True))
    first = join("")
    assert first.error == ErrorCode.member_id_required
    second = join(first.member_id)
    assert (second.error, second.member_id) == (ErrorCode.none, first.member_id)
    assert services.groups.describe_consumer_group(GROUP).members[first.member_id].classic


def test_a_static_classic_member_is_replaced_by_a_consumer_protocol_process(
        services: BrokerServices) -> None:
    """A rolling upgrade of static members: the new process of instance "i0" speaks KIP-848
    and takes the classic member's place at once (a classic member never says it left)."""
    old = run(services.groups.join_group(GROUP, "", "i0", "c", "h", 10_000, 10_000, "consumer",
                                         protocols([]), False))
    assert old.error == ErrorCode.none
    joined = beat(services, "new-i0", 0, join=True, instance_id="i0")
    assert joined.error_code == ErrorCode.none
    group = services.groups.describe_consumer_group(GROUP)
    assert set(group.members) == {"new-i0"} and group.static_members == {"i0": "new-i0"}
    member = group.members["new-i0"]
    assert member.classic is None  # a consumer-protocol member now: it commits as one
    assert commit(services, "new-i0", member.member_epoch + 1) == ErrorCode.stale_member_epoch


def test_a_new_coordinator_rebalances_a_group_downgraded_before_it_took_over(
        services: BrokerServices) -> None:
    """The downgrade is stored with each classic member holding its target, which leaves out
    the partitions of the member that left: the coordinator that loads it rebalances it, so
    no partition stays without a consumer."""
    a, b = classic_group(services)
    a, b, _ = settled(services, a, b, beat(services, "k", 0, join=True))
    assert beat(services, "k", -1).error_code == ErrorCode.none
    offsets = services.replicas.get("__consumer_offsets", services.groups.partition_of(GROUP))
    services.groups.on_leadership(offsets, False)
    services.groups.on_leadership(offsets, True)
    assert services.groups.groups[GROUP].state is GroupState.PREPARING_REBALANCE
    assert a.heartbeat() == ErrorCode.rebalance_in_progress
