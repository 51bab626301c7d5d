"""Taking up and giving up partitions of ``__consumer_offsets`` as their leadership moves.

On becoming a partition's leader the coordinator replays its log: the last GroupMetadata
record of each group, the offsets committed (a tombstone removes one), and transactional
offsets, which take effect or are dropped as the replay meets their transaction's marker.
On losing it, it forgets those groups and fails their members' waiting requests with
NOT_COORDINATOR, so the clients look for the new coordinator. This is Kafka's
GroupMetadataManager.loadGroupsAndOffsets and removeGroupsForPartition.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from kio.schema.errors import ErrorCode

from broker.coordinator import consumer_records as cr
from broker.coordinator import consumer_replay, share_replay
from broker.coordinator import offsets_topic as ot
from broker.coordinator import share_records as sr
from broker.coordinator.consumer_membership import ConsumerMembership
from broker.coordinator.group import Group, GroupState, Member
from broker.coordinator.group_store import GroupStore, fail_waits
from broker.coordinator.offset_commits import OffsetCommits
from broker.coordinator.share_membership import ShareMembership
from broker.protocol.batch_codec import Record, read_records
from broker.protocol.records import BatchHeader
from broker.server.partition import Partition

log = logging.getLogger(__name__)


def is_commit_marker(batch: bytes) -> bool | None:
    """A control batch's marker: True for COMMIT, False for ABORT, None for any other
    control record (its key: int16 version, int16 type; 0 is ABORT, 1 COMMIT)."""
    records = read_records(batch)
    if not records or records[0].key is None or len(records[0].key) < 4:
        return None
    kind = int.from_bytes(records[0].key[2:4], "big", signed=True)
    return {0: False, 1: True}.get(kind)


class GroupLoader:
    """Loads a partition's groups and offsets into the store, or unloads them."""

    def __init__(self, store: GroupStore, commits: OffsetCommits,
                 consumers: ConsumerMembership, shares: ShareMembership,
                 rebalance: Callable[[Group, float], None] = lambda group, now: None) -> None:
        self.store = store
        self.commits = commits  # transactional offsets, completed by the markers replayed
        self.consumers = consumers  # KIP-848 groups' session timers
        self.shares = shares  # share groups' session timers
        # Starts a classic rebalance of a loaded group (ClassicMembership.adopt).
        self.rebalance = rebalance
        # During a load: groups that had KIP-848 records, and the generation of the classic
        # group each was downgraded to (its members hold their targets, not everything).
        self._had_consumer_records: set[str] = set()
        self._downgraded: dict[str, int] = {}

    def on_leadership(self, partition: Partition, leader: bool) -> None:
        """Load a partition's groups on becoming its leader, drop them on losing it, as
        Kafka's GroupMetadataManager does on election and resignation."""
        if partition.topic != ot.TOPIC:
            return
        if leader:
            self._load(partition)
        else:
            self._unload(partition.index)

    def _unload(self, index: int) -> None:
        store = self.store
        store.owned.discard(index)
        for group_id in [g for g in store.groups if store.partition_of(g) == index]:
            for member in store.groups.pop(group_id).members.values():
                fail_waits(member, ErrorCode.not_coordinator)
        for group_id in [g for g in store.consumer_groups if store.partition_of(g) == index]:
            del store.consumer_groups[group_id]
            self.consumers.drop(group_id)
        for group_id in [g for g in store.share_groups if store.partition_of(g) == index]:
            del store.share_groups[group_id]
            self.shares.drop(group_id)
        for group_id in [g for g in store.offsets if store.partition_of(g) == index]:
            del store.offsets[group_id]
        for by_group in store.pending_txn_offsets.values():
            for group_id in [g for g in by_group if store.partition_of(g) == index]:
                del by_group[group_id]

    def _load(self, partition: Partition) -> None:
        store = self.store
        self._had_consumer_records.clear()
        self._downgraded.clear()
        for segment in list(partition.log.segments):
            for batch in segment.batches_from(0):
                raw = segment.read_bytes(batch.position, batch.header.size)
                self._replay_batch(partition.index, batch.header, raw)
        now = time.monotonic()
        for group_id, group in store.groups.items():
            if store.partition_of(group_id) != partition.index or not group.members:
                continue
            # Members keep their assignment; they are expired unless they heartbeat.
            group.state = GroupState.STABLE
            for member in group.members.values():
                member.heartbeat_deadline = now + member.session_timeout_ms / 1000
        for group_id, generation in self._downgraded.items():
            group = store.groups.get(group_id)
            if group is not None and group.members and group.generation == generation:
                # No classic rebalance completed since the downgrade: finish it.
                self.rebalance(group, now)
        for consumer_group in consumer_replay.settle(store, partition.index):
            self.consumers.resume(consumer_group, now)
        for share_group in share_replay.settle(store, partition.index):
            self.shares.resume(share_group, now)
        store.owned.add(partition.index)
        log.info("coordinating %s-%d: %d groups known", ot.TOPIC, partition.index,
                 sum(1 for g in (*store.groups, *store.consumer_groups, *store.share_groups)
                     if store.partition_of(g) == partition.index))

    def _replay_batch(self, index: int, header: BatchHeader, raw: bytes) -> None:
        if header.is_control:
            commit = is_commit_marker(raw)
            if commit is not None:
                self.commits.complete_transaction(index, header.producer_id, commit)
            return
        for record in read_records(raw):
            if header.is_transactional:
                self._replay_txn_offset(header.producer_id, record)
            else:
                self._replay(record)

    def _replay_txn_offset(self, producer_id: int, record: Record) -> None:
        key = ot.decode_key(record.key) if record.key is not None else None
        if isinstance(key, ot.OffsetKey) and record.value is not None:
            self.commits.stage(producer_id, key.group,
                               {(key.topic, key.partition): ot.decode_offset(record.value)})

    def _replay(self, record: Record) -> None:
        if record.key is None:
            return
        key = ot.decode_key(record.key)
        if key is None:
            consumer_key = cr.decode_key(record.key)
            if consumer_key is not None:
                self._had_consumer_records.add(consumer_key.group)
                self._downgraded.pop(consumer_key.group, None)
                consumer_replay.replay(self.store, consumer_key, record.value)
            share_key = sr.decode_key(record.key) if consumer_key is None else None
            if share_key is not None:
                share_replay.replay(self.store, share_key, record.value)
            return
        if isinstance(key, ot.OffsetKey):
            if record.value is None:
                offsets = self.store.offsets.get(key.group, {})
                offsets.pop((key.topic, key.partition), None)
                if not offsets:  # the group's last offset gone: it has none, as never had
                    self.store.offsets.pop(key.group, None)
            else:
                self.store.offsets.setdefault(key.group, {})[(key.topic, key.partition)] = \
                    ot.decode_offset(record.value)
        elif isinstance(key, ot.GroupKey):
            if record.value is None:
                self.store.groups.pop(key.group, None)
                return
            group = self.store.groups[key.group] = _group_from(key.group,
                                                               ot.decode_group(record.value))
            if key.group in self._had_consumer_records:  # the downgrade's own record
                self._had_consumer_records.discard(key.group)
                self._downgraded[key.group] = group.generation


def _group_from(group_id: str, value: ot.GroupValue) -> Group:
    """A group as its GroupMetadata record left it (Empty; Stable once loaded if it has
    members)."""
    group = Group(group_id, generation=value.generation,
                  protocol_type=value.protocol_type or None, protocol=value.protocol,
                  state_timestamp=value.current_state_timestamp)
    for m in value.members:
        group.add(Member(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                         m.session_timeout, m.rebalance_timeout, value.protocol_type,
                         [(value.protocol or "", m.subscription)], m.assignment))
    group.leader_id = value.leader if value.leader in group.members else group.leader_id
    return group
