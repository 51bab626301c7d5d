"""A classic consumer group: its members, generation, chosen protocol and state.

The states and their allowed transitions are Kafka's (GroupMetadata.scala):

    Empty ──join──▶ PreparingRebalance ──all joined──▶ CompletingRebalance ──leader syncs──▶ Stable
      ▲                    ▲   │ no members left                                             │
      └────────────────────┼───┘                                                             │
                           └──────────── join, leave, session expiry ────────────────────────┘
    any ──DeleteGroups──▶ Dead

Pure data and rules, no I/O and no timers: the coordinator drives it.
"""

from __future__ import annotations

import asyncio
import enum
from collections import Counter
from dataclasses import dataclass, field

from broker.coordinator.offsets_topic import subscribed_topics

VALID_PREVIOUS = {
    "Empty": {"PreparingRebalance"},
    "PreparingRebalance": {"Empty", "Stable", "CompletingRebalance"},
    "CompletingRebalance": {"PreparingRebalance"},
    "Stable": {"CompletingRebalance"},
    "Dead": {"Empty", "PreparingRebalance", "CompletingRebalance", "Stable", "Dead"},
}


class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]  # (name, metadata) in the member's preference order
    assignment: bytes = b""
    join_future: asyncio.Future | None = None
    sync_future: asyncio.Future | None = None
    heartbeat_deadline: float = 0.0  # loop time after which the session expires

    def metadata_for(self, protocol: str | None) -> bytes:
        return next((meta for name, meta in self.protocols if name == protocol), b"")

    @property
    def awaiting_join(self) -> bool:
        return self.join_future is not None and not self.join_future.done()


@dataclass
class Group:
    group_id: str
    state: GroupState = GroupState.EMPTY
    generation: int = 0
    protocol_type: str | None = None
    protocol: str | None = None
    leader_id: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)  # instance id -> member id
    pending_members: set[str] = field(default_factory=set)  # ids handed out, not joined yet
    state_timestamp: int = -1
    rebalance_deadline: float = 0.0

    def transition(self, state: GroupState) -> None:
        if self.state.value not in VALID_PREVIOUS[state.value]:
            raise AssertionError(f"group {self.group_id}: {self.state.value} -> {state.value}")
        self.state = state

    def is_(self, state: GroupState) -> bool:
        return self.state is state

    @property
    def all_protocols(self) -> set[str]:
        """Protocols every member supports: the candidates for the group's protocol."""
        if not self.members:
            return set()
        sets = [{name for name, _ in m.protocols} for m in self.members.values()]
        return set.intersection(*sets)

    def supports(self, protocol_type: str, protocols: list[tuple[str, bytes]]) -> bool:
        """Whether a (re)joining member can be in this group (INCONSISTENT_GROUP_PROTOCOL)."""
        names = {name for name, _ in protocols}
        if not names:
            return False
        if not self.members:
            return True
        return protocol_type == self.protocol_type and bool(names & self.all_protocols)

    def select_protocol(self) -> str:
        """Each member votes for its most preferred candidate; the most votes wins."""
        candidates = self.all_protocols
        votes: Counter[str] = Counter()
        for member in self.members.values():
            votes[next(name for name, _ in member.protocols if name in candidates)] += 1
        best = max(votes.values())
        # Ties go to the first in the leader's preference, for a deterministic choice.
        ranked = [name for name, _ in self.members[self.leader_id].protocols] if (
            self.leader_id in self.members) else sorted(votes)
        return next(name for name in ranked if votes.get(name) == best)

    def add(self, member: Member) -> None:
        if not self.members:
            self.protocol_type = member.protocol_type
        self.members[member.member_id] = member
        if member.group_instance_id:
            self.static_members[member.group_instance_id] = member.member_id
        if self.leader_id is None:
            self.leader_id = member.member_id

    def remove(self, member_id: str) -> Member | None:
        member = self.members.pop(member_id, None)
        if member is None:
            return None
        if member.group_instance_id:
            self.static_members.pop(member.group_instance_id, None)
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)
        return member

    @property
    def has_all_members_joined(self) -> bool:
        return all(m.awaiting_join for m in self.members.values()) and not self.pending_members

    def subscribed_topics(self) -> set[str] | None:
        """Topics the members subscribe to (consumer protocol), or None if unknown."""
        if self.protocol_type != "consumer" or self.protocol is None:
            return None
        topics: set[str] = set()
        for member in self.members.values():
            topics |= subscribed_topics(member.metadata_for(self.protocol))
        return topics
