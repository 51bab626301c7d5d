"""KIP-848's pure parts: the server-side assignors, a member's reconciliation towards its
target (revoke first, then take what is free) and the fencing of stale member epochs."""

from __future__ import annotations

import dataclasses
import uuid

import pytest

from broker.coordinator.assignors import GroupSpec, range_assign, uniform
from broker.coordinator.consumer_group import (
    ConsumerGroup,
    ConsumerGroupState,
    ConsumerMember,
    MemberState,
    assignment,
    pairs,
    size,
)
from broker.coordinator.reconciliation import fenced, reconcile

ORDERS, CLICKS, OTHER = uuid.UUID(int=1), uuid.UUID(int=2), uuid.UUID(int=3)


def owners_of(result: dict) -> dict:
    out: dict = {}
    for member, a in result.items():
        for tp in pairs(a):
            assert tp not in out, f"{tp} assigned to {out.get(tp)} and {member}"
            out[tp] = member
    return out


@pytest.mark.parametrize("members,partitions", [(1, 6), (3, 6), (4, 10), (7, 5), (50, 500)])
def test_uniform_assigns_every_partition_once_and_evenly(members: int, partitions: int) -> None:
    spec = GroupSpec({f"m{i}": frozenset({ORDERS}) for i in range(members)},
                     {ORDERS: partitions}, {})
    result = uniform(spec)
    assert len(owners_of(result)) == partitions
    sizes = [size(a) for a in result.values()]
    assert max(sizes) - min(sizes) <= 1


def test_uniform_moves_only_what_balance_needs_when_a_member_joins() -> None:
    before = uniform(GroupSpec({"a": frozenset({ORDERS}), "b": frozenset({ORDERS})},
                               {ORDERS: 10}, {}))
    after = uniform(GroupSpec({m: frozenset({ORDERS}) for m in "abc"}, {ORDERS: 10}, before))
    moved = sum(1 for tp, m in owners_of(after).items() if owners_of(before).get(tp) != m)
    assert moved == 3  # c needs 3 (4+3+3): nothing else moves
    assert sorted(size(a) for a in after.values()) == [3, 3, 4]
    for member in "ab":  # what a and b keep, they had
        assert set(pairs(after[member])) <= set(pairs(before[member]))


def test_uniform_gives_a_partition_only_to_its_subscribers() -> None:
    spec = GroupSpec({"a": frozenset({ORDERS}), "b": frozenset({ORDERS, CLICKS}),
                      "c": frozenset({CLICKS})}, {ORDERS: 4, CLICKS: 4, OTHER: 9}, {})
    result = uniform(spec)
    owners = owners_of(result)
    assert len(owners) == 8  # OTHER: nobody subscribes
    for (topic_id, _), member in owners.items():
        assert topic_id in spec.subscriptions[member]
    assert sorted(size(a) for a in result.values()) == [2, 3, 3]  # as even as eligibility allows


def test_range_assigns_each_topic_in_quotas_and_keeps_partitions() -> None:
    spec = GroupSpec({m: frozenset({ORDERS, CLICKS}) for m in "abc"},
                     {ORDERS: 7, CLICKS: 7}, {})
    result = range_assign(spec)
    assert [size(result[m]) for m in "abc"] == [6, 4, 4]  # 3+3, 2+2, 2+2
    assert result["a"][ORDERS] == result["a"][CLICKS]  # co-partitioned topics line up
    later = range_assign(dataclasses.replace(spec, subscriptions={
        m: frozenset({ORDERS, CLICKS}) for m in "ab"}, previous=result))
    assert later["a"][ORDERS] >= result["a"][ORDERS]  # a keeps its partitions
    assert len(owners_of(later)) == 14


# -- reconciliation ------------------------------------------------------------------------


def free(_t: uuid.UUID, _p: int) -> str | None:
    return None


def test_a_new_member_takes_its_free_target_at_once() -> None:
    member = ConsumerMember("m", member_epoch=0)
    target = assignment([(ORDERS, 0), (ORDERS, 1)])
    after = reconcile(member, 3, target, free, owned=assignment([]))
    assert (after.member_epoch, after.previous_member_epoch, after.state) == (
        3, 0, MemberState.STABLE)
    assert after.assigned == target


def test_partitions_move_by_revoking_first_then_assigning() -> None:
    group = ConsumerGroup("g", group_epoch=2, target_epoch=2)
    a = ConsumerMember("a", member_epoch=1, assigned=assignment([(ORDERS, 0), (ORDERS, 1)]))
    group.put(a)
    group.put(ConsumerMember("b", member_epoch=1))
    # Epoch 2 moves partition 1 from a to b.
    a_target, b_target = assignment([(ORDERS, 0)]), assignment([(ORDERS, 1)])

    a = reconcile(group.members["a"], 2, a_target, group.owner, owned=None)
    group.put(a)
    assert (a.state, a.member_epoch) == (MemberState.UNREVOKED_PARTITIONS, 1)
    assert (a.assigned, a.pending_revocation) == (a_target, b_target)

    b = reconcile(group.members["b"], 2, b_target, group.owner, owned=assignment([]))
    group.put(b)  # partition 1 is still a's: b moves on, without it
    assert (b.state, b.member_epoch, b.assigned) == (MemberState.UNRELEASED_PARTITIONS, 2, {})
    assert group.state is ConsumerGroupState.RECONCILING

    # a's heartbeat still owns partition 1: nothing changes; once it no longer does, a moves on.
    still = assignment([(ORDERS, 0), (ORDERS, 1)])
    assert reconcile(a, 2, a_target, group.owner, owned=still) == a
    a = reconcile(a, 2, a_target, group.owner, owned=a_target)
    group.put(a)
    assert (a.state, a.member_epoch, a.previous_member_epoch) == (MemberState.STABLE, 2, 1)
    assert group.owner(ORDERS, 1) is None

    b = reconcile(group.members["b"], 2, b_target, group.owner, owned=assignment([]))
    group.put(b)
    assert (b.state, b.assigned) == (MemberState.STABLE, b_target)
    assert group.state is ConsumerGroupState.STABLE


def test_a_member_that_already_dropped_the_revoked_partitions_moves_on_at_once() -> None:
    a = ConsumerMember("a", member_epoch=1, assigned=assignment([(ORDERS, 0), (ORDERS, 1)]))
    after = reconcile(a, 2, assignment([(ORDERS, 0)]), free, owned=assignment([(ORDERS, 0)]))
    assert (after.state, after.member_epoch, after.pending_revocation) == (
        MemberState.STABLE, 2, {})


def test_the_group_state_follows_the_epochs() -> None:
    group = ConsumerGroup("g")
    assert group.state is ConsumerGroupState.EMPTY
    group.put(ConsumerMember("a"))
    group.group_epoch = 1
    assert group.state is ConsumerGroupState.ASSIGNING
    group.target_epoch = 1
    assert group.state is ConsumerGroupState.RECONCILING
    group.put(dataclasses.replace(group.members["a"], member_epoch=1))
    assert group.state is ConsumerGroupState.STABLE
    group.remove("a")
    assert group.state is ConsumerGroupState.EMPTY


@pytest.mark.parametrize("epoch,owned,why", [
    (6, None, "greater member epoch (6)"),
    (4, None, "smaller member epoch (4)"),  # the previous epoch, owned not said
    (3, assignment([]), "smaller member epoch (3)"),  # not even the previous one
    (4, assignment([(ORDERS, 0), (ORDERS, 9)]), "smaller member epoch (4)"),  # owns more
    (4, assignment([(ORDERS, 0)]), None),  # the response that moved it on was lost
    (5, None, None),
])
def test_stale_member_epochs_are_fenced(epoch: int, owned, why: str | None) -> None:
    member = ConsumerMember("m", member_epoch=5, previous_member_epoch=4,
                            assigned=assignment([(ORDERS, 0), (ORDERS, 1)]))
    message = fenced(member, epoch, owned)
    if why is None:
        assert message is None
    else:
        assert why in message and "must abandon all its partitions" in message


def test_owners_follow_members_in_and_out() -> None:
    group = ConsumerGroup("g")
    group.put(ConsumerMember("a", instance_id="i-1", assigned=assignment([(ORDERS, 0)]),
                             pending_revocation=assignment([(ORDERS, 1)])))
    assert (group.owner(ORDERS, 0), group.owner(ORDERS, 1)) == ("a", "a")
    group.put(dataclasses.replace(group.members["a"], pending_revocation={}))
    assert group.owner(ORDERS, 1) is None and group.static_members == {"i-1": "a"}
    group.remove("a")
    assert (group.owners, group.static_members, group.members) == ({}, {}, {})
