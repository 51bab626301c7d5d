"""Rebuilding KIP-848 consumer groups from their records when this broker takes over a
partition of ``__consumer_offsets`` (the consumer-group half of ``group_loader``).

The records of one group arrive in the order they were written, a heartbeat's as one batch:
the group epoch (3), members' subscriptions (5), the target assignment (6, 7) and each
member's epochs and partitions (8); tombstones remove a member's records or the group. A
member's record 5 and record 8 are merged as they come; who holds which partition is
recomputed once the whole log is read. Members then have one session timeout to heartbeat
to the new coordinator, as after Kafka's failover.
"""

from __future__ import annotations

import dataclasses

from broker.coordinator import consumer_records as cr
from broker.coordinator.consumer_group import ConsumerGroup, ConsumerMember
from broker.coordinator.group_store import GroupStore


def replay(store: GroupStore, key: cr.ConsumerKey, value: bytes | None) -> None:
    groups = store.consumer_groups
    if key.type == cr.GROUP_METADATA:
        if value is None:
            groups.pop(key.group, None)
            return
        group = groups.setdefault(key.group, ConsumerGroup(key.group))
        group.group_epoch, group.metadata_hash = cr.decode_group_metadata(value)
        return
    if key.type == cr.REGULAR_EXPRESSION:
        return  # regexes are resolved against the topics on each heartbeat
    group = groups.get(key.group)
    if group is None:
        if value is None:
            return
        group = groups[key.group] = ConsumerGroup(key.group)
    if key.type == cr.TARGET_METADATA and value is not None:
        group.target_epoch = cr.decode_target_metadata(value)
    elif key.type == cr.TARGET_MEMBER:
        if value is None:
            group.target.pop(key.name, None)
        else:
            group.target[key.name] = cr.decode_target_member(value)
    elif key.type == cr.MEMBER_METADATA:
        if value is None:
            group.members.pop(key.name, None)
            return
        facts = cr.decode_member_metadata(key.name, value)
        known = group.members.get(key.name)
        group.members[key.name] = facts if known is None else dataclasses.replace(
            facts, member_epoch=known.member_epoch,
            previous_member_epoch=known.previous_member_epoch, state=known.state,
            assigned=known.assigned, pending_revocation=known.pending_revocation,
            assignment_epochs=known.assignment_epochs)
    elif key.type == cr.CURRENT_ASSIGNMENT and value is not None:
        current = cr.decode_current_assignment(value)
        known = group.members.get(key.name) or ConsumerMember(key.name)
        group.members[key.name] = dataclasses.replace(
            known, member_epoch=current.member_epoch,
            previous_member_epoch=current.previous_member_epoch, state=current.state,
            assigned=current.assigned, pending_revocation=current.pending_revocation,
            assignment_epochs=current.assignment_epochs)


def settle(store: GroupStore, index: int) -> list[ConsumerGroup]:
    """After the replay: each loaded group of partition ``index`` with its owners and static
    members rebuilt; the groups left with nothing are dropped."""
    loaded = []
    for group_id in [g for g in store.consumer_groups if store.partition_of(g) == index]:
        group = store.consumer_groups[group_id]
        if not group.members and not group.group_epoch:
            del store.consumer_groups[group_id]
            continue
        members = list(group.members.values())
        group.members.clear()
        group.owners.clear()
        group.static_members.clear()
        for member in members:
            group.put(member)
        store.groups.pop(group_id, None)  # a group id is one kind of group or the other
        loaded.append(group)
    return loaded
