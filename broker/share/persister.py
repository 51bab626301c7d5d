"""Where a share-partition's leader reads and writes the share-partition's state: its share
coordinator (Kafka's DefaultStatePersister), on this broker or on the one leading the
share-partition's partition of ``__share_group_state``, reached with the share-state APIs
(InitializeShareGroupState 83, ReadShareGroupState 84, WriteShareGroupState 85,
DeleteShareGroupState 86, ReadShareGroupStateSummary 87) as Kafka's brokers reach each other."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from kio.schema.delete_share_group_state.v0.request import (
    DeleteShareGroupStateRequest,
    DeleteStateData,
)
from kio.schema.delete_share_group_state.v0.request import (
    PartitionData as DeletePartition,
)
from kio.schema.errors import ErrorCode
from kio.schema.initialize_share_group_state.v0.request import (
    InitializeShareGroupStateRequest,
    InitializeStateData,
)
from kio.schema.initialize_share_group_state.v0.request import (
    PartitionData as InitializePartition,
)
from kio.schema.read_share_group_state.v0.request import (
    PartitionData as ReadPartition,
)
from kio.schema.read_share_group_state.v0.request import (
    ReadShareGroupStateRequest,
    ReadStateData,
)
from kio.schema.read_share_group_state_summary.v1.request import (
    PartitionData as SummaryPartition,
)
from kio.schema.read_share_group_state_summary.v1.request import (
    ReadShareGroupStateSummaryRequest as SummaryRequest,
)
from kio.schema.read_share_group_state_summary.v1.request import (
    ReadStateSummaryData as SummaryTopic,
)
from kio.schema.write_share_group_state.v1.request import (
    PartitionData as WritePartition,
)
from kio.schema.write_share_group_state.v1.request import (
    StateBatch as WireBatch,
)
from kio.schema.write_share_group_state.v1.request import (
    WriteShareGroupStateRequest,
    WriteStateData,
)

from broker.cluster.metadata import ClusterMetadata
from broker.coordinator import share_state_log as ssl
from broker.coordinator.share_coordinator import ShareCoordinator
from broker.coordinator.share_state_log import RecordState, ShareKey, StateBatch
from broker.network.client import BrokerConnectionError
from broker.network.peers import PeerChannels

log = logging.getLogger(__name__)
NEVER_INITIALIZED = -1  # the start offset a read answers for a share-partition with no state


@dataclass(frozen=True, slots=True)
class StoredState:
    state_epoch: int  # with no state: that of the state deleted last, if known (else 0)
    start_offset: int  # NEVER_INITIALIZED: no state yet
    batches: tuple[StateBatch, ...] = ()


class SharePersister:
    def __init__(self, coordinator: ShareCoordinator, metadata: ClusterMetadata,
                 peers: PeerChannels | None) -> None:
        self.coordinator = coordinator
        self.metadata = metadata
        self.peers = peers

    def _node(self, key: ShareKey) -> int | None:
        """The broker coordinating ``key``: the leader of its partition of the state topic."""
        topic = self.metadata.topics.get(ssl.TOPIC)
        index = self.coordinator.partition_of(key)
        if topic is None or index >= topic.partitions:
            return None
        leader = topic.assignments[index].leader
        return leader if leader is not None and leader >= 0 else None

    async def read(self, key: ShareKey, leader_epoch: int) -> tuple[ErrorCode, StoredState]:
        await self.coordinator.ensure_topic()
        if self.coordinator.owns(key):
            result = await self.coordinator.read(key, leader_epoch)
            state = result.state
            if state is None:  # the epoch to initialize above
                return result.error, StoredState(result.deleted_epoch, NEVER_INITIALIZED)
            return result.error, StoredState(state.state_epoch, state.start_offset,
                                             state.batches)
        body = ReadShareGroupStateRequest(group_id=key.group_id, topics=(ReadStateData(
            topic_id=key.topic_id, partitions=(ReadPartition(
                partition=key.partition, leader_epoch=leader_epoch),)),))
        answer = await self._send(key, 84, 0, body)
        if isinstance(answer, ErrorCode):
            return answer, StoredState(0, NEVER_INITIALIZED)
        p = answer.results[0].partitions[0]
        batches = tuple(StateBatch(b.first_offset, b.last_offset, RecordState(b.delivery_state),
                                   b.delivery_count) for b in p.state_batches)
        return ErrorCode(p.error_code), StoredState(p.state_epoch, p.start_offset, batches)

    async def initialize(self, key: ShareKey, state_epoch: int, start_offset: int
                         ) -> ErrorCode:
        await self.coordinator.ensure_topic()
        if self.coordinator.owns(key):
            return (await self.coordinator.initialize(key, state_epoch, start_offset))[0]
        body = InitializeShareGroupStateRequest(group_id=key.group_id, topics=(
            InitializeStateData(topic_id=key.topic_id, partitions=(InitializePartition(
                partition=key.partition, state_epoch=state_epoch,
                start_offset=start_offset),)),))
        return self._error(await self._send(key, 83, 0, body))

    async def write(self, key: ShareKey, state_epoch: int, leader_epoch: int,
                    start_offset: int, batches: list[StateBatch],
                    delivery_complete_count: int = -1) -> ErrorCode:
        if self.coordinator.owns(key):
            return (await self.coordinator.write(key, state_epoch, leader_epoch, start_offset,
                                                 tuple(batches), delivery_complete_count))[0]
        body = WriteShareGroupStateRequest(group_id=key.group_id, topics=(WriteStateData(
            topic_id=key.topic_id, partitions=(WritePartition(
                partition=key.partition, state_epoch=state_epoch, leader_epoch=leader_epoch,
                start_offset=start_offset, delivery_complete_count=delivery_complete_count,
                state_batches=tuple(WireBatch(
                    first_offset=b.first_offset, last_offset=b.last_offset,
                    delivery_state=int(b.state), delivery_count=b.delivery_count)
                    for b in batches)),)),))
        return self._error(await self._send(key, 85, 1, body))

    async def delete(self, key: ShareKey) -> ErrorCode:
        """Remove a share-partition's state (its group deleted, or its offsets for the
        topic): the next leader to serve the group starts it again."""
        await self.coordinator.ensure_topic()
        if self.coordinator.owns(key):
            return await self.coordinator.delete(key)
        body = DeleteShareGroupStateRequest(group_id=key.group_id, topics=(DeleteStateData(
            topic_id=key.topic_id, partitions=(DeletePartition(partition=key.partition),)),))
        return self._error(await self._send(key, 86, 0, body))

    async def summary(self, key: ShareKey) -> tuple[ErrorCode, int, int, int]:
        """(error, start offset, leader epoch, records done past it; -1 when not known) of a
        share-partition, for DescribeShareGroupOffsets."""
        await self.coordinator.ensure_topic()
        if self.coordinator.owns(key):
            result = await self.coordinator.read(key)
            s = result.state
            if s is None:
                return result.error, NEVER_INITIALIZED, -1, -1
            return result.error, s.start_offset, s.leader_epoch, s.delivery_complete_count
        body = SummaryRequest(group_id=key.group_id, topics=(SummaryTopic(
            topic_id=key.topic_id, partitions=(SummaryPartition(
                partition=key.partition, leader_epoch=-1),)),))
        answer = await self._send(key, 87, 1, body)
        if isinstance(answer, ErrorCode):
            return answer, NEVER_INITIALIZED, -1, -1
        p = answer.results[0].partitions[0]
        return ErrorCode(p.error_code), p.start_offset, p.leader_epoch, \
            p.delivery_complete_count

    @staticmethod
    def _error(answer: Any) -> ErrorCode:
        if isinstance(answer, ErrorCode):
            return answer
        return ErrorCode(answer.results[0].partitions[0].error_code)

    async def _send(self, key: ShareKey, api_key: int, version: int, body: Any
                    ) -> Any:
        node = self._node(key)
        if node is None or self.peers is None:
            return ErrorCode.coordinator_not_available
        try:
            return await self.peers.request(node, api_key, version, body)
        except (BrokerConnectionError, TimeoutError, OSError) as e:
            log.info("share state of %s: coordinator %d unreachable: %s", key, node, e)
            return ErrorCode.coordinator_not_available
