"""Writing a transaction's outcome into its partitions: WriteTxnMarkers to their leaders.

Kafka's TransactionMarkerChannelManager: once a transaction is PrepareCommit or
PrepareAbort, its coordinator asks the leader of every partition in it to append a COMMIT or
ABORT marker, and retries, following leadership, until each partition has it. Only then may
the transaction complete. A deleted topic needs no marker. The sender gives up when the
coordinator loses its partition of ``__transaction_state`` (the next coordinator resumes
from the log) or when a leader reports the producer or coordinator fenced.

The leaders are asked over the Kafka protocol, this broker included, as Kafka does: the
partition leader's handler is the one place markers are written.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass

from kio.schema.errors import ErrorCode
from kio.schema.write_txn_markers import v1, v2

from broker.cluster.metadata import ClusterMetadata
from broker.coordinator.transaction_log import TopicPartition
from broker.network.client import BrokerConnectionError
from broker.network.peers import PeerChannels

log = logging.getLogger(__name__)
API_KEY = 27
API_VERSION = 2  # v2 carries the transaction version, sent to leaders that serve it
FIRST_BACKOFF = 0.05
MAX_BACKOFF = 1.0
# A leader that answers these already saw a newer producer epoch or coordinator: the
# transaction was taken over, and this coordinator must not complete it.
_FENCED = (ErrorCode.invalid_producer_epoch, ErrorCode.producer_fenced,
           ErrorCode.transaction_coordinator_fenced)


@dataclass(frozen=True, slots=True)
class MarkerJob:
    producer_id: int
    producer_epoch: int
    commit: bool
    coordinator_epoch: int
    partitions: frozenset[TopicPartition]
    # 2 when the prepare bumped the epoch (transaction.version 2, KIP-890): the markers'
    # epoch is above the one the transaction's batches were written under, so the leader
    # can tell a stale marker of the previous transaction from this one's (KAFKA-19446).
    transaction_version: int = 0


class MarkerSender:
    def __init__(self, store: ClusterMetadata, peers: PeerChannels) -> None:
        self.store = store
        self.peers = peers

    async def send(self, job: MarkerJob, still_coordinator: Callable[[], bool]) -> bool:
        """True once every partition has the marker; False if this coordinator should stop
        (it lost the transaction's partition, or the transaction was fenced)."""
        remaining = set(job.partitions)
        backoff = FIRST_BACKOFF
        while remaining:
            if not still_coordinator():
                return False
            by_leader: dict[int, list[TopicPartition]] = {}
            for tp in sorted(remaining):
                state = self.store.partition(*tp)
                if state is None:  # its topic was deleted (or recreated smaller)
                    log.info("marker for producer %d: %s-%d no longer exists; none needed",
                             job.producer_id, *tp)
                    remaining.discard(tp)
                    continue
                if state.leader >= 0:
                    by_leader.setdefault(state.leader, []).append(tp)
            answers = await asyncio.gather(
                *(self._send_to(node, job, tps) for node, tps in by_leader.items()))
            for results in answers:
                for tp, error in results:
                    if error == ErrorCode.none:
                        remaining.discard(tp)
                    elif error in _FENCED:
                        log.warning("marker for producer %d epoch %d on %s-%d: %s; the "
                                    "transaction was taken over", job.producer_id,
                                    job.producer_epoch, *tp, error.name)
                        return False
            if remaining:  # no leader yet, or a leader that could not take it now
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, MAX_BACKOFF)
        return True

    async def _send_to(self, node: int, job: MarkerJob,
                       partitions: list[TopicPartition]) -> list[tuple[TopicPartition, ErrorCode]]:
        by_topic: dict[str, list[int]] = {}
        for topic, index in partitions:
            by_topic.setdefault(topic, []).append(index)
        try:
            version = await self.peers.version(node, API_KEY, API_VERSION)
            schema = v2 if version >= 2 else v1
            extra = {"transaction_version": job.transaction_version} if version >= 2 else {}
            request = schema.request.WriteTxnMarkersRequest(markers=(
                schema.request.WritableTxnMarker(
                    producer_id=job.producer_id, producer_epoch=job.producer_epoch,
                    transaction_result=job.commit, coordinator_epoch=job.coordinator_epoch,
                    topics=tuple(schema.request.WritableTxnMarkerTopic(
                        name=t, partition_indexes=tuple(ix)) for t, ix in by_topic.items()),
                    **extra),))
            response = await self.peers.request(node, API_KEY, max(version, 1), request)
        except BrokerConnectionError as e:
            log.info("markers to broker %d: %s; retrying", node, e)
            return [(tp, ErrorCode.network_exception) for tp in partitions]
        answered = {
            (topic.name, p.partition_index): p.error_code
            for marker in response.markers for topic in marker.topics
            for p in topic.partitions
        }
        return [(tp, answered.get(tp, ErrorCode.unknown_server_error)) for tp in partitions]
