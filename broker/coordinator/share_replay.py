"""Rebuilding share groups from their records when this broker takes over a partition of
``__consumer_offsets`` (the share-group half of ``group_loader``): the group epoch (11), the
members' subscriptions (10), the target (12, 13) and each member's epochs and partitions (14),
in the order they were written; tombstones remove a member or the group."""

from __future__ import annotations

import dataclasses

from broker.coordinator import share_records as sr
from broker.coordinator.group_store import GroupStore
from broker.coordinator.share_group import ShareGroup


def replay(store: GroupStore, key: sr.ShareKey, value: bytes | None) -> None:
    groups = store.share_groups
    if key.type == sr.GROUP_METADATA:
        if value is None:
            groups.pop(key.group, None)
            return
        group = groups.setdefault(key.group, ShareGroup(key.group))
        group.group_epoch, group.metadata_hash = sr.decode_group_metadata(value)
        return
    group = groups.get(key.group)
    if group is None:
        if value is None:
            return
        group = groups[key.group] = ShareGroup(key.group)
    if key.type == sr.STATE_PARTITIONS:
        group.initialized = sr.decode_state_partitions(value) if value is not None else {}
    elif key.type == sr.TARGET_METADATA and value is not None:
        group.target_epoch = sr.decode_target_metadata(value)
    elif key.type == sr.TARGET_MEMBER:
        if value is None:
            group.target.pop(key.member_id, None)
        else:
            group.target[key.member_id] = sr.decode_target_member(value)
    elif key.type == sr.MEMBER_METADATA:
        if value is None:
            group.members.pop(key.member_id, None)
            return
        facts = sr.decode_member_metadata(key.member_id, value)
        known = group.members.get(key.member_id)
        group.members[key.member_id] = facts if known is None else dataclasses.replace(
            facts, member_epoch=known.member_epoch,
            previous_member_epoch=known.previous_member_epoch, assigned=known.assigned)
    elif key.type == sr.CURRENT_ASSIGNMENT and value is not None:
        epoch, previous, assigned = sr.decode_current_assignment(value)
        known = group.members.get(key.member_id)
        if known is not None:
            group.members[key.member_id] = dataclasses.replace(
                known, member_epoch=epoch, previous_member_epoch=previous, assigned=assigned)


def settle(store: GroupStore, index: int) -> list[ShareGroup]:
    """After the replay: the share groups of partition ``index``; those left with nothing are
    dropped, and a group id is one kind of group only."""
    loaded = []
    for group_id in [g for g in store.share_groups if store.partition_of(g) == index]:
        group = store.share_groups[group_id]
        if not group.members and not group.group_epoch:
            del store.share_groups[group_id]
            continue
        store.groups.pop(group_id, None)
        loaded.append(group)
    return loaded
