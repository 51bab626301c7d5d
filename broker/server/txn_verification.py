"""A partition leader's check that a transactional write belongs to an open transaction.

KIP-890's server-side defence (Kafka's AddPartitionsToTxnManager and VerificationGuard):
before a producer's first transactional batch in a partition, where it has no transaction
open yet, the leader asks the transaction coordinator (AddPartitionsToTxn v4, verify only)
whether the partition was added to the producer's ongoing transaction. A batch sent late,
after its transaction ended, or by a producer that never added the partition, would
otherwise open a transaction that no marker will ever close, and hold every
read_committed reader of the partition at its last stable offset forever ("hanging
transactions"). Later batches of the same transaction need no check: the partition's
producer state shows it open.

A producer of transaction.version 2 (KIP-890 part 2: Produce v12, TxnOffsetCommit v5) no
longer adds its partitions itself: the same question, with verify_only false, asks the
coordinator to add the partition, starting the transaction if none is open.

Checks of one producer's partition share one question in flight. The order of a connection's
pipelined writes around a question is kept above, in ``broker.handlers.append_order``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable

from kio.schema.add_partitions_to_txn.v4.request import (
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnTopic,
    AddPartitionsToTxnTransaction,
)
from kio.schema.errors import ErrorCode

from broker.cluster.internal_topics import TRANSACTION_STATE, partition_for
from broker.cluster.metadata import ClusterMetadata
from broker.network.client import BrokerConnectionError
from broker.network.peers import PeerChannels
from broker.server.partition import Partition

log = logging.getLogger(__name__)
API_KEY = 24
API_VERSION = 4
TopicPartition = tuple[str, int]
# The coordinator's answers that a retry may cure. Kafka gives them to the producer as
# NOT_ENOUGH_REPLICAS, which every client retries without refreshing its metadata.
_RETRIABLE = (ErrorCode.concurrent_transactions, ErrorCode.network_exception,
              ErrorCode.coordinator_load_in_progress, ErrorCode.coordinator_not_available,
              ErrorCode.not_coordinator)
LocalCheck = Callable[[str, int, int, list[TopicPartition]], dict[TopicPartition, ErrorCode]]
LocalAdd = Callable[[str, int, int, list[TopicPartition]], Awaitable[ErrorCode]]


def needs_verification(partition: Partition | None, producer_id: int,
                       producer_epoch: int) -> bool:
    """A transactional write here by this producer must be checked first: this broker leads
    the partition and the producer has no transaction open in it at this epoch."""
    if partition is None or not partition.is_leader or producer_id < 0:
        return False
    entry = partition.log.producer_state.producers.get(producer_id)
    return entry is None or entry.epoch != producer_epoch or entry.current_txn_first_offset < 0


def as_produce_error(error: ErrorCode, version: int = 0) -> tuple[ErrorCode, str | None]:
    """The coordinator's answer as the producer gets it, with Kafka's message (a producer
    expects INVALID_PRODUCER_EPOCH where the coordinator says PRODUCER_FENCED). From
    Produce v12 CONCURRENT_TRANSACTIONS stays itself (KAFKA-18662): a transaction.version 2
    producer retries it after its short retry backoff, where NOT_ENOUGH_REPLICAS has some
    clients (franz-go) wait for their next metadata refresh, seconds later."""
    if error == ErrorCode.concurrent_transactions and version >= 12:
        return error, None
    if error == ErrorCode.invalid_txn_state:
        return error, "Partition was not added to the transaction"
    if error == ErrorCode.producer_fenced:
        return ErrorCode.invalid_producer_epoch, "The producer was fenced by a newer epoch"
    if error in _RETRIABLE:
        return ErrorCode.not_enough_replicas, (
            f"Unable to verify the partition has been added to the transaction. "
            f"Underlying error: {error.name.upper()}")
    return error, None


def as_offset_commit_error(error: ErrorCode) -> ErrorCode:
    """The coordinator's answer as TxnOffsetCommit gives it, in Kafka's group coordinator
    mapping: errors older clients would not retry become ones they do (a network error
    COORDINATOR_LOAD_IN_PROGRESS, retried without a new coordinator lookup)."""
    if error == ErrorCode.network_exception:
        return ErrorCode.coordinator_load_in_progress
    if error in (ErrorCode.unknown_topic_or_partition, ErrorCode.not_enough_replicas,
                 ErrorCode.request_timed_out):
        return ErrorCode.coordinator_not_available
    return error


class TransactionVerifier:
    def __init__(self, store: ClusterMetadata, node_id: int, partitions: int,
                 peers: PeerChannels, local: LocalCheck, local_add: LocalAdd,
                 retry_backoff_ms: int = 20, retry_max_ms: int = 100) -> None:
        """``partitions``: of ``__transaction_state``; ``local`` and ``local_add``: the
        coordinator's own check and add, used when this broker coordinates the id;
        ``retry_*``: add.partitions.to.txn.retry.backoff(.max).ms."""
        self.retry_backoff_ms = retry_backoff_ms
        self.retry_max_ms = retry_max_ms
        self.store = store
        self.node_id = node_id
        self.partitions = partitions
        self.peers = peers
        self.local = local
        self.local_add = local_add
        self._inflight: dict[tuple[TopicPartition, int, int, bool],
                             asyncio.Future[ErrorCode]] = {}

    async def verify(self, transactional_id: str, producer_id: int, producer_epoch: int,
                     partitions: Iterable[TopicPartition], add: bool = False
                     ) -> dict[TopicPartition, ErrorCode]:
        """Each partition's answer; ``add``: have the coordinator add them (TV2)."""
        waiting: dict[TopicPartition, asyncio.Future[ErrorCode]] = {}
        ask: list[TopicPartition] = []
        loop = asyncio.get_running_loop()
        for tp in partitions:
            key = (tp, producer_id, producer_epoch, add)
            fut = self._inflight.get(key)
            if fut is None:
                fut = self._inflight[key] = loop.create_future()
                ask.append(tp)
            waiting[tp] = fut
        if ask:
            answers: dict[TopicPartition, ErrorCode] = {}
            try:
                answers = await self._ask(transactional_id, producer_id, producer_epoch, ask,
                                          add)
                if add:
                    answers = await self._retry_adds(transactional_id, producer_id,
                                                     producer_epoch, answers)
            finally:  # cancelled too: whoever shares the question gets a retriable answer
                for tp in ask:
                    fut = self._inflight.pop((tp, producer_id, producer_epoch, add))
                    if not fut.done():
                        fut.set_result(answers.get(tp, ErrorCode.network_exception))
        return {tp: await fut for tp, fut in waiting.items()}

    async def _retry_adds(self, transactional_id: str, producer_id: int, producer_epoch: int,
                          answers: dict[TopicPartition, ErrorCode]
                          ) -> dict[TopicPartition, ErrorCode]:
        """Ask again, for up to add.partitions.to.txn.retry.backoff.max.ms, for the
        partitions the coordinator could not add because another change of the same
        transaction was being written (CONCURRENT_TRANSACTIONS): the leaders of a
        transaction's partitions all add theirs at its start, and a producer told to retry
        would wait its whole retry backoff (Kafka retries these on the broker too)."""
        backoff = self.retry_backoff_ms / 1000
        deadline = asyncio.get_running_loop().time() + self.retry_max_ms / 1000
        while True:
            again = [tp for tp, e in answers.items() if e == ErrorCode.concurrent_transactions]
            if not again or asyncio.get_running_loop().time() + backoff > deadline:
                return answers
            await asyncio.sleep(backoff)
            answers = {**answers, **await self._ask(transactional_id, producer_id,
                                                    producer_epoch, again, True)}

    async def _ask(self, transactional_id: str, producer_id: int, producer_epoch: int,
                   partitions: list[TopicPartition], add: bool
                   ) -> dict[TopicPartition, ErrorCode]:
        state = self.store.partition(TRANSACTION_STATE,
                                     partition_for(transactional_id, self.partitions))
        if state is None or state.leader < 0:
            return dict.fromkeys(partitions, ErrorCode.coordinator_not_available)
        if state.leader == self.node_id:
            if add:
                return dict.fromkeys(partitions, await self.local_add(
                    transactional_id, producer_id, producer_epoch, partitions))
            return self.local(transactional_id, producer_id, producer_epoch, partitions)
        by_topic: dict[str, list[int]] = {}
        for topic, index in partitions:
            by_topic.setdefault(topic, []).append(index)
        request = AddPartitionsToTxnRequest(transactions=(AddPartitionsToTxnTransaction(
            transactional_id=transactional_id, producer_id=producer_id,
            producer_epoch=producer_epoch, verify_only=not add,
            topics=tuple(AddPartitionsToTxnTopic(name=t, partitions=tuple(ix))
                         for t, ix in by_topic.items()),
        ),))
        try:
            response = await self.peers.request(state.leader, API_KEY, API_VERSION, request)
        except BrokerConnectionError as e:
            log.info("verifying %s's partitions with broker %d: %s", transactional_id,
                     state.leader, e)
            return dict.fromkeys(partitions, ErrorCode.network_exception)
        if response.error_code != ErrorCode.none:
            return dict.fromkeys(partitions, response.error_code)
        answered = {
            (topic.name, p.partition_index): p.partition_error_code
            for txn in response.results_by_transaction for topic in txn.topic_results
            for p in topic.results_by_partition
        }
        return {tp: answered.get(tp, ErrorCode.unknown_server_error) for tp in partitions}
