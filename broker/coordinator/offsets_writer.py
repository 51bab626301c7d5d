"""Writing the coordinator's records to ``__consumer_offsets``, and creating that topic.

Kafka acknowledges a group change or an offset commit only once it is in the group's
partition of the offsets topic (GroupMetadataManager.storeGroup, storeOffsets), and for a
commit only once the ISR holds it; this is the one place that appends there, so every
part of the coordinator writes the same way and the replication wait knows the last write.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable

from kio.schema.errors import ErrorCode

from broker.cluster.metadata import ConcurrentUpdate
from broker.config.broker_config import BrokerConfig
from broker.coordinator import offsets_topic as ot
from broker.coordinator.group import Group
from broker.coordinator.group_store import GroupStore
from broker.protocol.batch_codec import Record, encode_batch
from broker.protocol.records import ATTR_TRANSACTIONAL
from broker.server.partition import Partition
from broker.server.replica_manager import ReplicaManager
from broker.server.topic_writes import TopicExists
from broker.storage.producer_state import VerificationGuard

log = logging.getLogger(__name__)

Entry = tuple[bytes, bytes | None]  # a record's key and value; a None value is a tombstone


def group_record(group: Group) -> Entry:
    """The GroupMetadata record of ``group``: its generation, protocol, leader, members and
    their assignments, which a coordinator taking the partition over loads back."""
    members = tuple(
        ot.MemberValue(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                       m.rebalance_timeout_ms, m.session_timeout_ms,
                       m.metadata_for(group.protocol), m.assignment)
        for m in group.members.values()
    )
    value = ot.GroupValue(group.protocol_type or "", group.generation, group.protocol,
                          group.leader_id if group.members else None,
                          group.state_timestamp, members)
    return ot.encode_key(ot.GroupKey(group.group_id)), ot.encode_group(value)


def offset_entries(group_id: str, offsets: dict[tuple[str, int], ot.OffsetValue]
                   ) -> list[Entry]:
    """OffsetCommit records of ``group_id`` for ``offsets``."""
    return [
        (ot.encode_key(ot.OffsetKey(group_id, topic, partition)), ot.encode_offset(value))
        for (topic, partition), value in offsets.items()
    ]


def offset_tombstones(group_id: str, partitions: Iterable[tuple[str, int]]) -> list[Entry]:
    """Tombstones deleting ``group_id``'s offsets of ``partitions``."""
    return [(ot.encode_key(ot.OffsetKey(group_id, t, p)), None) for t, p in partitions]


def group_tombstone(group_id: str) -> Entry:
    return ot.encode_key(ot.GroupKey(group_id)), None


class OffsetsTopicWriter:
    """Appends to the group's partition of ``__consumer_offsets`` and awaits replication."""

    def __init__(self, config: BrokerConfig, replicas: ReplicaManager, store: GroupStore
                 ) -> None:
        self.config = config
        self.replicas = replicas
        self.store = store
        # Each group's last append, so an offset commit can wait for that one to replicate.
        self._last_write: dict[str, tuple[Partition, int]] = {}

    async def ensure_offsets_topic(self) -> None:
        """Create ``__consumer_offsets`` on first use (FindCoordinator, JoinGroup), compacted,
        as Kafka does."""
        if ot.TOPIC in self.replicas.metadata.topics:
            return
        live = max(1, len(self.replicas.metadata.brokers))
        replication_factor = min(self.config["offsets.topic.replication.factor"], live)
        try:
            await self.replicas.create_topic(ot.TOPIC, self.store.partitions, {
                "cleanup.policy": "compact",
                "segment.bytes": str(self.config["offsets.topic.segment.bytes"]),
            }, replication_factor)
        except TopicExists:  # another broker created it first
            pass
        except ConcurrentUpdate as e:  # callers find no coordinator yet, which clients retry
            log.warning("cannot create %s now: %s", ot.TOPIC, e)

    def write(self, group_id: str, entries: list[Entry],
              producer: tuple[int, int] | None = None,
              verified: VerificationGuard | None = None) -> ErrorCode:
        """Append records for ``group_id`` to its offsets partition; NONE once stored.
        With ``producer`` (id, epoch) they are a transactional batch of that producer,
        checked against the transaction verification ``verified`` if there was one."""
        if not entries:
            return ErrorCode.none
        partition = self.replicas.get(ot.TOPIC, self.store.partition_of(group_id))
        now = int(time.time() * 1000)
        records = [Record(i, now, key, value) for i, (key, value) in enumerate(entries)]
        if producer is None:
            batch = encode_batch(records, 0)
        else:
            # Sequence 0 always, as Kafka writes them: a coordinator's append is not
            # sequence-checked, only fenced by the producer's epoch.
            batch = encode_batch(records, 0, producer_id=producer[0], producer_epoch=producer[1],
                                 base_sequence=0, attributes=ATTR_TRANSACTIONAL)
        if partition is None or not partition.is_leader:
            return ErrorCode.not_coordinator
        outcome = partition.append(batch, 2**31 - 1, from_coordinator=producer is not None,
                                   verified=verified)
        if outcome.error in (ErrorCode.invalid_producer_epoch, ErrorCode.producer_fenced):
            return ErrorCode.producer_fenced
        if outcome.error == ErrorCode.invalid_txn_state:
            return outcome.error
        if outcome.error != ErrorCode.none:
            log.error("writing group %s to %s failed: %s", group_id, ot.TOPIC, outcome.message)
            return ErrorCode.coordinator_not_available
        self._last_write[group_id] = (partition, outcome.last_offset)
        return ErrorCode.none

    async def await_replication(self, group_id: str, timeout: float) -> ErrorCode:
        """Wait until the group's last write is committed (in the whole ISR), so an offset
        commit is acknowledged only once a leader change cannot lose it (KAFKA-20634)."""
        written = self._last_write.pop(group_id, None)
        if written is None:
            return ErrorCode.none
        partition, last_offset = written
        error = await partition.wait_committed(last_offset, 1, timeout)
        if error == ErrorCode.not_leader_or_follower:
            return ErrorCode.not_coordinator
        if error != ErrorCode.none:
            return ErrorCode.coordinator_not_available
        return ErrorCode.none
