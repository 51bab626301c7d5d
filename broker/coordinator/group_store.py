"""What the group coordinator knows, in memory: groups, committed offsets, open transactions'
offsets, and which partitions of ``__consumer_offsets`` this broker leads.

Every part of the coordinator (membership, offset commits, clean-up, loading) reads and
changes this one store, as Kafka's classic coordinator shares its GroupMetadataManager's
cache; keeping it apart from them is what lets those parts depend on it and not on each
other. It also holds the checks they share: the error they raise, the longest name a
group keeps, and the lookup of a group's member.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

from broker.cluster.internal_topics import partition_for
from broker.coordinator import offsets_topic as ot
from broker.coordinator.consumer_group import ConsumerGroup
from broker.coordinator.group import Group, GroupState, Member
from broker.coordinator.share_group import ShareGroup

OffsetMap = dict[tuple[str, int], ot.OffsetValue]

# The longest name a group keeps: the offsets topic's keys and the legacy (non-flexible)
# responses that list groups and members write strings with a 16-bit length, so a longer
# name sent in a flexible request would be stored and then break every later reader.
MAX_NAME_BYTES = 32767


class CoordinatorError(Exception):
    """A request the coordinator refuses, with the error code its response carries; also
    what a waiting JoinGroup or SyncGroup is failed with."""

    def __init__(self, code: ErrorCode, message: str = "") -> None:
        super().__init__(message or code.name)
        self.code = code


def check_length(name: str | None, what: str, error: ErrorCode) -> None:
    if name is not None and len(name.encode()) > MAX_NAME_BYTES:
        raise CoordinatorError(error, f"the {what} is longer than {MAX_NAME_BYTES} bytes")


def validate_group_id(group_id: str | None) -> None:
    """Kafka refuses an empty or unstorable group id with INVALID_GROUP_ID before anything
    else (OffsetCommit alone still takes the empty one, for old clients)."""
    if not group_id:
        raise CoordinatorError(ErrorCode.invalid_group_id, "the group id is empty")
    check_length(group_id, "group id", ErrorCode.invalid_group_id)


def fail_waits(member: Member, code: ErrorCode) -> None:
    """Answer the JoinGroup or SyncGroup ``member`` is waiting on with ``code`` (it was
    removed, fenced, or its group moved away), so no request hangs until its timeout."""
    for fut in (member.join_future, member.sync_future):
        if fut is not None and not fut.done():
            fut.set_exception(CoordinatorError(code))


@dataclass
class GroupStore:
    """The coordinator's state, for the groups of the offsets partitions led here."""

    partitions: int  # of __consumer_offsets (offsets.topic.num.partitions)
    groups: dict[str, Group] = field(default_factory=dict)  # classic groups
    # KIP-848 consumer groups; a group id is in one of the three maps at most.
    consumer_groups: dict[str, ConsumerGroup] = field(default_factory=dict)
    share_groups: dict[str, ShareGroup] = field(default_factory=dict)  # KIP-932
    offsets: dict[str, OffsetMap] = field(default_factory=dict)
    # Offsets committed inside a transaction, by producer id, then group: they take
    # effect when the transaction's COMMIT marker reaches the group's partition.
    pending_txn_offsets: dict[int, dict[str, OffsetMap]] = field(default_factory=dict)
    owned: set[int] = field(default_factory=set)  # partitions of __consumer_offsets led here

    def partition_of(self, group_id: str) -> int:
        return partition_for(group_id, self.partitions)

    def owns(self, group_id: str) -> bool:
        """Whether this broker coordinates ``group_id``: it leads the group's partition."""
        return self.partition_of(group_id) in self.owned

    def known_member(self, group_id: str, member_id: str, instance_id: str | None
                     ) -> tuple[Group, Member]:
        """The live group and its member a request names, or the error Kafka answers: an
        unknown group or member, or a static instance now held by another member id."""
        group = self.groups.get(group_id)
        if group is None or group.is_(GroupState.DEAD):
            raise CoordinatorError(ErrorCode.unknown_member_id)
        if instance_id and instance_id in group.static_members and (
            group.static_members[instance_id] != member_id
        ):
            raise CoordinatorError(ErrorCode.fenced_instance_id)
        member = group.members.get(member_id)
        if member is None:
            raise CoordinatorError(ErrorCode.unknown_member_id)
        return group, member
