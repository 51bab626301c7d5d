"""Removing groups and offsets: DeleteGroups, OffsetDelete, a deleted topic's offsets, and
offset retention.

Each removal is a tombstone in ``__consumer_offsets`` first and a change in memory only once
it is stored, so a coordinator that loads the partition later does not bring back what was
removed (and compaction eventually drops the records). Retention is Kafka's KIP-211: the
offsets of an Empty group expire ``offsets.retention.minutes`` after its last commit or
after it became empty, and a group left with no offsets goes with them
(GroupMetadataManager.cleanupGroupMetadata).
"""

from __future__ import annotations

import math
import time

from kio.schema.errors import ErrorCode

from broker.config.broker_config import BrokerConfig
from broker.coordinator import consumer_records as cr
from broker.coordinator import share_records as sr
from broker.coordinator.consumer_group import ConsumerGroup
from broker.coordinator.consumer_membership import matches
from broker.coordinator.group import GroupState
from broker.coordinator.group_store import GroupStore
from broker.coordinator.offsets_writer import (
    OffsetsTopicWriter,
    group_tombstone,
    offset_tombstones,
)
from broker.coordinator.share_group import ShareGroup


class GroupCleanup:
    """Deletes groups and offsets on request, and expires old offsets of empty groups."""

    def __init__(self, config: BrokerConfig, store: GroupStore, writer: OffsetsTopicWriter
                 ) -> None:
        self.config = config
        self.store = store
        self.writer = writer
        # Loop time of the last retention pass; the first tick makes one.
        self._last_expiry_check = -math.inf

    def delete_groups(self, group_ids: list[str]) -> dict[str, ErrorCode]:
        groups, offsets = self.store.groups, self.store.offsets
        results = {}
        for group_id in group_ids:
            consumer_group = self.store.consumer_groups.get(group_id)
            if consumer_group is not None:
                results[group_id] = self._delete_consumer_group(consumer_group)
                continue
            share_group = self.store.share_groups.get(group_id)
            if share_group is not None:
                results[group_id] = self._delete_share_group(share_group)
                continue
            group = groups.get(group_id)
            if group is None and group_id not in offsets:
                results[group_id] = ErrorCode.group_id_not_found
                continue
            if group is not None and not (group.is_(GroupState.EMPTY) or group.is_(
                    GroupState.DEAD)):
                results[group_id] = ErrorCode.non_empty_group
                continue
            entries = offset_tombstones(group_id, offsets.get(group_id, {}))
            entries.append(group_tombstone(group_id))
            results[group_id] = self.writer.write(group_id, entries)
            if results[group_id] == ErrorCode.none:
                offsets.pop(group_id, None)
                if group is not None:
                    group.transition(GroupState.DEAD)
                    del groups[group_id]
        return results

    def _delete_consumer_group(self, group: ConsumerGroup) -> ErrorCode:
        """A KIP-848 group goes once it has no members: its offsets, its target assignment
        and its epoch tombstoned (Kafka's ConsumerGroup.createGroupTombstoneRecords)."""
        if group.members:
            return ErrorCode.non_empty_group
        group_id = group.group_id
        entries = offset_tombstones(group_id, self.store.offsets.get(group_id, {}))
        entries += [(cr.encode_key(cr.ConsumerKey(kind, group_id)), None)
                    for kind in (cr.TARGET_METADATA, cr.GROUP_METADATA)]
        error = self.writer.write(group_id, entries)
        if error == ErrorCode.none:
            self.store.offsets.pop(group_id, None)
            group.deleted = True
            del self.store.consumer_groups[group_id]
        return error

    def delete_offsets(
        self, group_id: str, partitions: list[tuple[str, int]]
    ) -> tuple[ErrorCode, dict[tuple[str, int], ErrorCode]]:
        """OffsetDelete: refused for the topics an active group subscribes to, as Kafka's
        handleDeleteOffsets refuses them (the members would commit them again)."""
        group = self.store.groups.get(group_id)
        offsets = self.store.offsets
        consumer_group = self.store.consumer_groups.get(group_id)
        if group is None and consumer_group is None and group_id not in offsets:
            return ErrorCode.group_id_not_found, {}
        subscribed = set()
        if consumer_group is not None:  # its members' subscriptions by name (and regex)
            subscribed = {t for m in consumer_group.members.values()
                          for t in m.subscribed_topic_names}
            regexes = [m.subscribed_topic_regex for m in consumer_group.members.values()
                       if m.subscribed_topic_regex]
            subscribed |= {t for t, _ in partitions for r in regexes if matches(r, t)}
        elif group is not None and not group.is_(GroupState.EMPTY):
            topics = group.subscribed_topics()
            if topics is None:
                return ErrorCode.non_empty_group, {}
            subscribed = topics
        results = {}
        gone = []
        for topic, partition in partitions:
            if topic in subscribed:
                results[(topic, partition)] = ErrorCode.group_subscribed_to_topic
                continue
            results[(topic, partition)] = ErrorCode.none
            if (topic, partition) in offsets.get(group_id, {}):
                gone.append((topic, partition))
        error = self.writer.write(group_id, offset_tombstones(group_id, gone))
        if error != ErrorCode.none:
            return error, {}
        for tp, code in results.items():
            if code == ErrorCode.none:
                offsets.get(group_id, {}).pop(tp, None)
        return ErrorCode.none, results

    def delete_topic_offsets(self, topic: str) -> None:
        """Forget every group's offsets of a deleted topic (Kafka's onPartitionsDeleted), so
        a topic created again under the same name is read from its start."""
        for group_id, offsets in list(self.store.offsets.items()):
            gone = [tp for tp in offsets if tp[0] == topic]
            entries = offset_tombstones(group_id, gone)
            if entries and self.writer.write(group_id, entries) == ErrorCode.none:
                for tp in gone:
                    offsets.pop(tp)

    def next_check(self) -> float:
        """When the next retention pass is due (loop time)."""
        return self._last_expiry_check + self.config["offsets.retention.check.interval.ms"] / 1000

    def maybe_expire(self, now: float) -> None:
        """Run retention once per offsets.retention.check.interval.ms (``now``: loop time)."""
        interval = self.config["offsets.retention.check.interval.ms"] / 1000
        if now - self._last_expiry_check >= interval:
            self._last_expiry_check = now
            self.expire_offsets()

    def expire_offsets(self, now_ms: int | None = None) -> int:
        """Drop offsets of empty groups older than offsets.retention.minutes (KIP-211)."""
        now_ms = int(time.time() * 1000) if now_ms is None else now_ms
        horizon = now_ms - self.config["offsets.retention.minutes"] * 60_000
        groups, all_offsets = self.store.groups, self.store.offsets
        expired = 0
        for group_id, offsets in list(all_offsets.items()):
            group = groups.get(group_id)
            if group is not None and not group.is_(GroupState.EMPTY):
                continue
            consumer_group = self.store.consumer_groups.get(group_id)
            if consumer_group is not None and consumer_group.members:
                continue  # a live KIP-848 group keeps its offsets, however old
            base = group.state_timestamp if group is not None and group.state_timestamp > 0 else 0
            old = [tp for tp, v in offsets.items() if max(v.commit_timestamp, base) < horizon]
            if not old:
                continue
            entries = offset_tombstones(group_id, old)
            if len(old) == len(offsets):
                # An empty group with no offsets left is gone (cleanupGroupMetadata).
                entries.append(group_tombstone(group_id))
            if self.writer.write(group_id, entries) == ErrorCode.none:
                for tp in old:
                    offsets.pop(tp)
                expired += len(old)
                if not offsets:
                    del all_offsets[group_id]
                    groups.pop(group_id, None)
        return expired

    def _delete_share_group(self, group: ShareGroup) -> ErrorCode:
        """A share group goes once it has no members: its records tombstoned."""
        if group.members:
            return ErrorCode.non_empty_group
        error = self.writer.write(group.group_id, sr.group_tombstones(group))
        if error == ErrorCode.none:
            group.deleted = True
            del self.store.share_groups[group.group_id]
        return error
