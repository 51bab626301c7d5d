"""A share group (KIP-932): members that share their subscribed topics' partitions record by
record, and the assignment the coordinator computes for them.

A share group's assignment says which partitions a member fetches from, not which records it
owns: records are acquired one fetch at a time on each partition's leader (``broker.share``).
So an assignment is never revoked before it moves (there is nothing to hand over), a member
takes its new target at once, and with more members than partitions several members are
given the same partition, which is how a share group scales past the partition count.

The group epoch counts changes of what the assignment depends on (members, subscriptions,
the subscribed topics' partitions); the target is computed for a group epoch by the ``simple``
assignor; each member's epoch is the target epoch it last took. States as Kafka's
ShareGroupState: Empty (no members), Stable, Dead once deleted.

Pure data and rules, no I/O and no timers: ``share_membership`` drives it.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field

from broker.coordinator.consumer_group import Assignment, assignment, pairs

SIMPLE = "simple"  # the one server-side assignor of share groups


class ShareGroupState(enum.Enum):
    EMPTY = "Empty"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass(frozen=True, slots=True)
class ShareMember:
    """One member, as ShareGroupMemberMetadata and ShareGroupCurrentMemberAssignment store it."""

    member_id: str
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: tuple[str, ...] = ()
    member_epoch: int = 0
    previous_member_epoch: int = 0
    assigned: Assignment = field(default_factory=dict)


@dataclass
class ShareGroup:
    group_id: str
    group_epoch: int = 0
    metadata_hash: int = 0
    members: dict[str, ShareMember] = field(default_factory=dict)
    target_epoch: int = 0
    target: dict[str, Assignment] = field(default_factory=dict)
    deleted: bool = False
    rebalances: int = 0  # targets computed here (metrics)
    # The partitions the group has been assigned, whose share state it has (or will have
    # on the first fetch): what describing its offsets shows (record 15).
    initialized: dict[uuid.UUID, tuple[str, frozenset[int]]] = field(default_factory=dict)

    @property
    def state(self) -> ShareGroupState:
        if self.deleted:
            return ShareGroupState.DEAD
        return ShareGroupState.STABLE if self.members else ShareGroupState.EMPTY

    def subscribed_topic_names(self) -> set[str]:
        return {name for m in self.members.values() for name in m.subscribed_topic_names}


def simple_assignment(subscriptions: Mapping[str, frozenset[uuid.UUID]],
                      partitions: Mapping[uuid.UUID, int],
                      previous: Mapping[str, Assignment]) -> dict[str, Assignment]:
    """Kafka's ``simple`` share assignor: every subscribed partition goes to one member that
    subscribes to its topic, balanced by count and kept where it was while that stays
    balanced; then every member left with nothing (more members than partitions) shares the
    eligible partition with the fewest members. Deterministic for a given input."""
    members = sorted(subscriptions)
    out: dict[str, set[tuple[uuid.UUID, int]]] = {m: set() for m in members}
    every = sorted(((t, p) for t in {t for ts in subscriptions.values() for t in ts}
                    if t in partitions for p in range(partitions[t])),
                   key=lambda tp: (tp[0].bytes, tp[1]))
    if not members or not every:
        return {m: {} for m in members}
    eligible = {tp: [m for m in members if tp[0] in subscriptions[m]] for tp in every}
    quota = -(-len(every) // len(members))  # ceil: a member keeps up to this many
    placed: set[tuple[uuid.UUID, int]] = set()
    for m in members:  # stickiness: what a member had, up to its quota
        for tp in sorted(pairs(previous.get(m, {})), key=lambda tp: (tp[0].bytes, tp[1])):
            if tp in eligible and m in eligible[tp] and tp not in placed and \
                    len(out[m]) < quota:
                out[m].add(tp)
                placed.add(tp)
    for tp in every:
        if tp not in placed:
            owner = min(eligible[tp], key=lambda m: (len(out[m]), m))
            out[owner].add(tp)
            placed.add(tp)
    holders = {tp: sum(1 for m in members if tp in out[m]) for tp in every}
    for m in members:
        if not out[m]:
            choices = [tp for tp in every if m in eligible[tp]]
            if choices:
                tp = min(choices, key=lambda tp: (holders[tp], tp[0].bytes, tp[1]))
                out[m].add(tp)
                holders[tp] += 1
    return {m: assignment(tps) for m, tps in out.items()}
