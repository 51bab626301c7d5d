"""How a KIP-848 member moves from its current assignment towards its target, one heartbeat
at a time (Kafka's CurrentAssignmentBuilder), and which heartbeats are fenced.

A member first gives up what the target no longer gives it: it keeps its member epoch and
stays ``UNREVOKED_PARTITIONS`` until a heartbeat's owned partitions no longer include them.
Then it moves to the target epoch and gets the target's other partitions that nobody holds;
those some other member still holds (it has not revoked them yet) come later, the member
``UNRELEASED_PARTITIONS`` meanwhile. A partition is therefore never held by two members at
once, which is what lets the others keep consuming through a rebalance.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable

from broker.coordinator.consumer_group import (
    EMPTY,
    Assignment,
    ConsumerMember,
    MemberState,
    difference,
    intersection,
    is_subset,
    pairs,
    union,
)

Owner = Callable[[uuid.UUID, int], str | None]  # who holds a partition, None: free


def reconcile(member: ConsumerMember, target_epoch: int, target: Assignment, owner: Owner,
              owned: Assignment | None) -> ConsumerMember:
    """The member after this heartbeat. ``owned``: the partitions the heartbeat says the
    member owns, or None when it did not say (unchanged since its last heartbeat)."""
    if member.state is MemberState.STABLE:
        if member.member_epoch == target_epoch:
            return member
        return _next(member, member.member_epoch, member.assigned, target_epoch, target,
                     owner, owned)
    if member.state is MemberState.UNREVOKED_PARTITIONS:
        if _still_owns(owned, member.pending_revocation):
            return member
        return _next(member, member.member_epoch, member.assigned, target_epoch, target,
                     owner, owned)
    if member.state is MemberState.UNRELEASED_PARTITIONS:
        return _next(member, member.member_epoch, member.assigned, target_epoch, target,
                     owner, owned)
    raise ValueError(f"member {member.member_id} is in state {member.state.name}")


def _still_owns(owned: Assignment | None, revoked: Assignment) -> bool:
    """Whether the member may still own some of ``revoked``: it says so, or says nothing."""
    if owned is None:
        return True
    return bool(intersection(owned, revoked))


def _next(member: ConsumerMember, epoch: int, current: Assignment, target_epoch: int,
          target: Assignment, owner: Owner, owned: Assignment | None) -> ConsumerMember:
    keep = intersection(current, target)
    revoke = difference(current, keep)
    wanted = difference(target, keep)
    free = {t: frozenset(p for p in parts if owner(t, p) in (None, member.member_id))
            for t, parts in wanted.items()}
    grant = {t: parts for t, parts in free.items() if parts}
    unreleased = difference(wanted, grant)
    if revoke and _still_owns(owned, revoke):
        # Revoke first, at the current epoch; nothing new until the member confirms.
        return _with(member, epoch, MemberState.UNREVOKED_PARTITIONS, keep, revoke)
    state = MemberState.UNRELEASED_PARTITIONS if unreleased else MemberState.STABLE
    return _with(member, target_epoch, state, union(keep, grant), EMPTY)


def _with(member: ConsumerMember, epoch: int, state: MemberState, assigned: Assignment,
          pending_revocation: Assignment) -> ConsumerMember:
    previous = member.member_epoch if epoch != member.member_epoch else \
        member.previous_member_epoch
    # Partitions kept keep the epoch they were given at; new ones are given at ``epoch``.
    epochs = {tp: member.assignment_epochs.get(tp, epoch) for tp in pairs(assigned)}
    return dataclasses.replace(member, member_epoch=epoch, previous_member_epoch=previous,
                               state=state, assigned=assigned,
                               pending_revocation=pending_revocation, assignment_epochs=epochs)


def fenced(member: ConsumerMember, epoch: int, owned: Assignment | None) -> str | None:
    """Why a heartbeat at ``epoch`` is fenced (FENCED_MEMBER_EPOCH's message), or None.

    A member one epoch behind is let through when what it owns is within its assignment:
    the response that moved it on may have been lost."""
    if epoch > member.member_epoch:
        return (f"The consumer group member has a greater member epoch ({epoch}) than the one "
                f"known by the group coordinator ({member.member_epoch}). The member must "
                f"abandon all its partitions and rejoin.")
    if epoch < member.member_epoch and (
            epoch != member.previous_member_epoch or owned is None
            or not is_subset(owned, member.assigned)):
        return (f"The consumer group member has a smaller member epoch ({epoch}) than the one "
                f"known by the group coordinator ({member.member_epoch}). The member must "
                f"abandon all its partitions and rejoin.")
    return None
