"""A consumer group of Kafka 4's consumer group protocol (KIP-848): members, epochs and the
target assignment the coordinator computes.

In the classic protocol the members rebalance together: every member rejoins, the group
stops, a leader member assigns, everyone resumes. KIP-848 moves the assignment to the
coordinator and lets each member move towards it on its own heartbeats:

- the **group epoch** counts changes of what the assignment depends on (members joining or
  leaving, subscriptions, the subscribed topics' partitions);
- the **target assignment** is what the server-side assignor computed for a group epoch
  (its ``target_epoch``), one partition set per member;
- each member has a **member epoch** and a current assignment. A member that must give up
  partitions keeps its epoch and is told to revoke them (``UNREVOKED_PARTITIONS``); once its
  heartbeat no longer reports them it moves to the target epoch and gets the partitions no
  other member still holds (``UNRELEASED_PARTITIONS`` while some are held). So a partition is
  never owned by two members, and members whose partitions do not move never stop.

The group's state, as ``kafka-consumer-groups.sh`` shows it (Kafka's ConsumerGroupState):
Empty (no members), Assigning (the group epoch is ahead of the target's), Reconciling (some
member not yet at the target), Stable, and Dead once deleted.

Pure data and rules, no I/O and no timers: ``consumer_membership`` drives it.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field

# A member's partitions: topic id -> partition numbers. Treated as immutable once built.
Assignment = Mapping[uuid.UUID, frozenset[int]]
EMPTY: Assignment = {}


def assignment(pairs: Iterable[tuple[uuid.UUID, int]]) -> Assignment:
    """An assignment from (topic id, partition) pairs."""
    out: dict[uuid.UUID, set[int]] = {}
    for topic_id, partition in pairs:
        out.setdefault(topic_id, set()).add(partition)
    return {topic_id: frozenset(parts) for topic_id, parts in out.items()}


def pairs(a: Assignment) -> Iterator[tuple[uuid.UUID, int]]:
    for topic_id, parts in a.items():
        for partition in parts:
            yield topic_id, partition


def size(a: Assignment) -> int:
    return sum(len(parts) for parts in a.values())


def union(a: Assignment, b: Assignment) -> Assignment:
    return _clean({t: a.get(t, frozenset()) | b.get(t, frozenset()) for t in {*a, *b}})


def difference(a: Assignment, b: Assignment) -> Assignment:
    return _clean({t: parts - b.get(t, frozenset()) for t, parts in a.items()})


def intersection(a: Assignment, b: Assignment) -> Assignment:
    return _clean({t: parts & b[t] for t, parts in a.items() if t in b})


def is_subset(a: Assignment, b: Assignment) -> bool:
    return all(parts <= b.get(t, frozenset()) for t, parts in a.items())


def _clean(a: dict[uuid.UUID, frozenset[int]]) -> Assignment:
    return {t: frozenset(parts) for t, parts in a.items() if parts}


class MemberState(enum.IntEnum):
    """Kafka's MemberState; the values are stored in ConsumerGroupCurrentMemberAssignment."""

    STABLE = 0
    UNREVOKED_PARTITIONS = 1
    UNRELEASED_PARTITIONS = 2
    UNKNOWN = 127


class ConsumerGroupState(enum.Enum):
    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass(frozen=True, slots=True)
class ClassicProtocols:
    """What a member using the classic protocol in a consumer group (online migration)
    joined with: its session timeout and its (protocol name, metadata) pairs."""

    session_timeout_ms: int
    protocols: tuple[tuple[str, bytes], ...]


@dataclass(frozen=True, slots=True)
class ConsumerMember:
    """One member, as ConsumerGroupMemberMetadata and ConsumerGroupCurrentMemberAssignment
    store it. Frozen: a heartbeat builds the next version (``dataclasses.replace``)."""

    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: tuple[str, ...] = ()
    subscribed_topic_regex: str | None = None
    rebalance_timeout_ms: int = -1
    server_assignor: str | None = None
    classic: ClassicProtocols | None = None  # None: the member speaks KIP-848
    member_epoch: int = 0
    previous_member_epoch: int = 0
    state: MemberState = MemberState.STABLE
    assigned: Assignment = field(default_factory=dict)
    pending_revocation: Assignment = field(default_factory=dict)
    # The member epoch at which each assigned partition was given (Kafka 4.3+): a commit
    # at an older epoch is good for the partitions held since then.
    assignment_epochs: Mapping[tuple[uuid.UUID, int], int] = field(default_factory=dict)

    @property
    def is_static(self) -> bool:
        return self.instance_id is not None

    def holds(self) -> Iterator[tuple[uuid.UUID, int]]:
        """The partitions no other member may get yet: assigned or being revoked."""
        yield from pairs(self.assigned)
        yield from pairs(self.pending_revocation)


@dataclass
class ConsumerGroup:
    group_id: str
    group_epoch: int = 0
    members: dict[str, ConsumerMember] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)  # instance id -> member id
    target_epoch: int = 0  # the group epoch the target assignment was computed for
    target: dict[str, Assignment] = field(default_factory=dict)  # member id -> partitions
    metadata_hash: int = 0  # of the subscribed topics' partitions (KIP-1101)
    # Who holds each partition (assigned, or pending revocation): "free" is absent.
    owners: dict[tuple[uuid.UUID, int], str] = field(default_factory=dict)
    deleted: bool = False
    rebalances: int = 0  # target assignments computed here (metrics)

    @property
    def state(self) -> ConsumerGroupState:
        if self.deleted:
            return ConsumerGroupState.DEAD
        if not self.members:
            return ConsumerGroupState.EMPTY
        if self.group_epoch > self.target_epoch:
            return ConsumerGroupState.ASSIGNING
        if any(m.member_epoch != self.target_epoch or m.state is not MemberState.STABLE
               for m in self.members.values()):
            return ConsumerGroupState.RECONCILING
        return ConsumerGroupState.STABLE

    def owner(self, topic_id: uuid.UUID, partition: int) -> str | None:
        return self.owners.get((topic_id, partition))

    def put(self, member: ConsumerMember) -> None:
        """Add or replace a member, keeping ``owners`` and the static index in step."""
        old = self.members.get(member.member_id)
        if old is not None:
            self._release(old)
            if old.instance_id is not None and old.instance_id != member.instance_id and \
                    self.static_members.get(old.instance_id) == member.member_id:
                del self.static_members[old.instance_id]
        self.members[member.member_id] = member
        for tp in member.holds():
            self.owners[tp] = member.member_id
        if member.instance_id is not None:
            self.static_members[member.instance_id] = member.member_id

    def remove(self, member_id: str) -> ConsumerMember | None:
        member = self.members.pop(member_id, None)
        if member is None:
            return None
        self._release(member)
        if member.instance_id is not None and \
                self.static_members.get(member.instance_id) == member_id:
            del self.static_members[member.instance_id]
        self.target.pop(member_id, None)
        return member

    def _release(self, member: ConsumerMember) -> None:
        for tp in member.holds():
            if self.owners.get(tp) == member.member_id:
                del self.owners[tp]

    def subscribed_topic_names(self) -> set[str]:
        """Every topic some member subscribes to by name (regexes resolve elsewhere)."""
        return {name for m in self.members.values() for name in m.subscribed_topic_names}

    def preferred_assignor(self, default: str) -> str:
        """The assignor the most members ask for (ties: by name), else ``default``: Kafka
        picks the most common ServerAssignor of the members."""
        counts: dict[str, int] = {}
        for m in self.members.values():
            if m.server_assignor is not None:
                counts[m.server_assignor] = counts.get(m.server_assignor, 0) + 1
        if not counts:
            return default
        return min(counts, key=lambda name: (-counts[name], name))
