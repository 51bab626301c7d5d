"""The transaction coordinator: transactional ids, their producer epochs and their outcomes.

Kafka's rules (KIP-98, TransactionCoordinator.scala, transaction.version 1): a transactional
id maps to one partition of ``__transaction_state`` and is coordinated by that partition's
leader, whose leader epoch is the coordinator epoch. InitProducerId bumps the id's producer
epoch, which fences any older producer with the same id (a zombie), and aborts a transaction
it left open. AddPartitionsToTxn and AddOffsetsToTxn record the partitions a transaction
writes to; EndTxn writes PrepareCommit or PrepareAbort, answers, then has the markers
written to every partition (``txn_markers``) and writes CompleteCommit or CompleteAbort.
Every state change is written to the log and replicated to ``transaction.state.log.min.isr``
replicas before it takes effect, so a new coordinator, reading the log on election,
finishes what the old one prepared. A transaction open longer than its timeout is aborted
with a bumped epoch (the producer is fenced), as Kafka does.

Runs on the event loop. A transactional id with a state change being written is
"pending": requests meanwhile get CONCURRENT_TRANSACTIONS and the client retries.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace

from kio.schema.errors import ErrorCode

from broker.cluster.internal_topics import partition_for
from broker.cluster.metadata import ClusterMetadata, ConcurrentUpdate
from broker.config.broker_config import BrokerConfig
from broker.coordinator import offsets_topic as ot
from broker.coordinator import transaction_log as tl
from broker.coordinator.transaction_log import NO_PRODUCER_ID, TopicPartition, TxnRecord, TxnState
from broker.coordinator.txn_end import (
    MAX_EPOCH,
    NO_EPOCH,
    TV2,
    EndDecision,
    completed,
    decide_end,
    epoch_exhausted,
)
from broker.coordinator.txn_markers import MarkerJob, MarkerSender
from broker.protocol.batch_codec import Record, encode_batch, read_records
from broker.server.partition import Partition
from broker.server.replica_manager import ReplicaManager
from broker.server.topic_writes import TopicExists

log = logging.getLogger(__name__)

# The log's key holds the id with an int16 length, so a longer one could not be stored.
MAX_ID_BYTES = 32767
WRITE_RETRY_SECONDS = 0.2

_COMPLETE = (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)
_PREPARED = (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)


def valid_id(transactional_id: str | None) -> bool:
    """Not empty (Kafka's INVALID_REQUEST) and short enough to be written to the log."""
    return bool(transactional_id) and len(transactional_id.encode()) <= MAX_ID_BYTES


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(slots=True)
class TxnMetadata:
    """One transactional id as its coordinator holds it."""

    transactional_id: str
    record: TxnRecord
    coordinator_epoch: int
    partition: int  # of __transaction_state
    pending: TxnRecord | None = None  # a state change being written
    previous_producer_id: int = NO_PRODUCER_ID  # before an exhausted id was replaced
    last_producer_epoch: int = NO_EPOCH  # before the last bump, to answer its retry

    @property
    def state(self) -> TxnState:
        return self.record.state


@dataclass(frozen=True, slots=True)
class InitResult:
    error: ErrorCode
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_EPOCH


class TransactionCoordinator:
    def __init__(self, config: BrokerConfig, replicas: ReplicaManager,
                 store: ClusterMetadata, markers: MarkerSender) -> None:
        self.config = config
        self.replicas = replicas
        self.store = store
        self.markers = markers
        self.partitions = config["transaction.state.log.num.partitions"]
        self.max_timeout_ms = config["transaction.max.timeout.ms"]
        self.txns: dict[str, TxnMetadata] = {}
        self.owned: dict[int, int] = {}  # partition of __transaction_state -> coordinator epoch
        self._tasks: set[asyncio.Task[None]] = set()
        self._loop_task: asyncio.Task[None] | None = None

    # -- ownership -----------------------------------------------------------------------

    def partition_of(self, transactional_id: str) -> int:
        return partition_for(transactional_id, self.partitions)

    def owns(self, transactional_id: str) -> bool:
        return self.partition_of(transactional_id) in self.owned

    def on_leadership(self, partition: Partition, leader: bool) -> None:
        """Load a partition's transactional ids on election, and resume the markers of
        transactions it left prepared; forget them on resignation."""
        if partition.topic != tl.TOPIC:
            return
        index = partition.index
        for txn_id in [t for t, m in self.txns.items() if m.partition == index]:
            del self.txns[txn_id]
        self.owned.pop(index, None)
        if not leader:
            return
        epoch = partition.leader_epoch
        records: dict[str, TxnRecord | None] = {}
        for segment in list(partition.log.segments):
            for batch in segment.batches_from(0):
                if batch.header.is_control:
                    continue
                raw = segment.read_bytes(batch.position, batch.header.size)
                for record in read_records(raw):
                    txn_id = tl.decode_key(record.key) if record.key else None
                    if txn_id is None:
                        continue
                    records[txn_id] = (tl.decode_value(record.value)
                                       if record.value is not None else None)
        # The epoch before the last bump is not in the log (Kafka does not keep it either):
        # a KIP-360 retry across a failover is fenced, never a fenced producer let back in.
        loaded = [TxnMetadata(txn_id, value, epoch, index, None, value.previous_producer_id)
                  for txn_id, value in records.items() if value is not None]
        self.txns.update((meta.transactional_id, meta) for meta in loaded)
        self.owned[index] = epoch
        resumed = 0
        for meta in loaded:
            if meta.state in _PREPARED:
                self._spawn(self._complete(meta.transactional_id, meta.record, epoch))
                resumed += 1
        log.info("coordinating %s-%d at epoch %d: %d transactional ids, %d prepared "
                 "transactions resumed", tl.TOPIC, index, epoch, len(loaded), resumed)

    def _still_coordinator(self, partition: int, epoch: int) -> bool:
        return self.owned.get(partition) == epoch

    async def ensure_topic(self) -> None:
        """Create ``__transaction_state`` on first use, compacted, as Kafka does; its
        min.insync.replicas is the broker's transaction.state.log.min.isr, capped at the
        replication factor so a one-broker cluster can run transactions."""
        if tl.TOPIC in self.store.topics:
            return
        live = max(1, len(self.store.brokers))
        replication_factor = min(self.config["transaction.state.log.replication.factor"], live)
        min_isr = min(self.config["transaction.state.log.min.isr"], replication_factor)
        try:
            await self.replicas.create_topic(tl.TOPIC, self.partitions, {
                "cleanup.policy": "compact",
                "segment.bytes": str(self.config["transaction.state.log.segment.bytes"]),
                "min.insync.replicas": str(min_isr),
                "unclean.leader.election.enable": "false",
            }, replication_factor)
        except TopicExists:
            pass
        except ConcurrentUpdate as e:  # callers find no coordinator yet, which clients retry
            log.warning("cannot create %s now: %s", tl.TOPIC, e)

    # -- lifecycle -----------------------------------------------------------------------

    def start(self) -> None:
        self._loop_task = asyncio.create_task(self._expiry_loop())

    async def stop(self) -> None:
        tasks = [t for t in (self._loop_task, *self._tasks) if t is not None]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def _spawn(self, coro: object) -> None:
        task = asyncio.create_task(coro)  # type: ignore[arg-type]
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- writing state -------------------------------------------------------------------

    async def _write(self, meta: TxnMetadata, record: TxnRecord | None) -> ErrorCode:
        """Append ``record`` (None: a tombstone) and wait until the ISR holds it; only then
        does it become the id's state. Errors are Kafka's mapping of append errors."""
        txn_id = meta.transactional_id
        epoch = meta.coordinator_epoch
        if meta.pending is not None or self.txns.get(txn_id) is not meta:
            return ErrorCode.concurrent_transactions  # another change went first
        partition = self.replicas.get(tl.TOPIC, meta.partition)
        if partition is None or not partition.is_leader or not self._still_coordinator(
                meta.partition, epoch):
            return ErrorCode.not_coordinator
        value = tl.encode_value(record) if record is not None else None
        batch = encode_batch([Record(0, now_ms(), tl.encode_key(txn_id), value)], 0)
        min_isr = partition.log.config.min_insync_replicas
        meta.pending = record if record is not None else meta.record
        try:
            outcome = partition.append(batch, 2**31 - 1, min_isr, acks=-1)
            error = outcome.error
            if error == ErrorCode.none:
                error = await partition.wait_committed(
                    outcome.last_offset, min_isr,
                    self.config["request.timeout.ms"] / 1000)
        finally:
            meta.pending = None
        if error in (ErrorCode.not_leader_or_follower, ErrorCode.kafka_storage_error):
            return ErrorCode.not_coordinator
        if error != ErrorCode.none:
            log.warning("writing %s's state to %s: %s", txn_id, tl.TOPIC, error.name)
            return ErrorCode.coordinator_not_available
        if not self._still_coordinator(meta.partition, epoch):
            return ErrorCode.not_coordinator
        if record is None:
            self.txns.pop(txn_id, None)
        else:
            meta.record = record
        return ErrorCode.none

    def _lookup(self, transactional_id: str | None) -> TxnMetadata | ErrorCode:
        if not valid_id(transactional_id):
            return ErrorCode.invalid_request
        if not self.owns(transactional_id):
            return ErrorCode.not_coordinator
        meta = self.txns.get(transactional_id)
        return meta if meta is not None else ErrorCode.invalid_producer_id_mapping

    # -- InitProducerId --------------------------------------------------------------------

    async def init_producer_id(self, transactional_id: str, timeout_ms: int,
                               expected: tuple[int, int] | None = None) -> InitResult:
        """A producer (re)starting with this transactional id: a bumped epoch for it, the
        older producers fenced. ``expected`` is the (id, epoch) a KIP-360 client names
        when it recovers from an error, so its retry is not taken for a zombie."""
        if not valid_id(transactional_id):
            return InitResult(ErrorCode.invalid_request)
        if not 0 < timeout_ms <= self.max_timeout_ms:
            return InitResult(ErrorCode.invalid_transaction_timeout)
        if not self.owns(transactional_id):
            return InitResult(ErrorCode.not_coordinator)
        meta = self.txns.get(transactional_id)
        if meta is None:
            epoch = self.owned[self.partition_of(transactional_id)]
            fresh = TxnRecord(await self.store.next_producer_id(), NO_EPOCH, timeout_ms,
                              TxnState.EMPTY, frozenset(), now_ms(), -1)
            meta = self.txns.setdefault(transactional_id, TxnMetadata(
                transactional_id, fresh, epoch, self.partition_of(transactional_id)))
        if meta.pending is not None or meta.state in _PREPARED:
            return InitResult(ErrorCode.concurrent_transactions)
        current = meta.record
        if expected is not None and not (
                current.producer_epoch == NO_EPOCH or expected[0] == current.producer_id
                or (expected[0] == meta.previous_producer_id and epoch_exhausted(expected[1]))):
            return InitResult(ErrorCode.producer_fenced)
        if current.state == TxnState.ONGOING:
            # Abort the open transaction under a bumped epoch (fencing its producer), and
            # have the client retry: its retry then bumps again (Kafka's PrepareEpochFence).
            error = await self._abort_fenced(meta)
            return InitResult(error if error != ErrorCode.none
                              else ErrorCode.concurrent_transactions)
        if expected is not None and expected[0] == current.producer_id \
                and expected[1] not in (current.producer_epoch, NO_EPOCH):
            if expected[1] == meta.last_producer_epoch:  # a retry of the last bump
                return InitResult(ErrorCode.none, current.producer_id, current.producer_epoch)
            return InitResult(ErrorCode.producer_fenced)
        now = now_ms()
        if epoch_exhausted(current.producer_epoch):
            new_id = await self.store.next_producer_id()
            if meta.record is not current or meta.pending is not None:
                return InitResult(ErrorCode.concurrent_transactions)  # changed meanwhile
            bumped = replace(current, producer_id=new_id, producer_epoch=0,
                             timeout_ms=timeout_ms, state=TxnState.EMPTY,
                             partitions=frozenset(), last_update_ms=now, start_ms=-1,
                             previous_producer_id=current.producer_id)
        else:
            bumped = replace(current, producer_epoch=current.producer_epoch + 1,
                             timeout_ms=timeout_ms, state=TxnState.EMPTY,
                             partitions=frozenset(), last_update_ms=now, start_ms=-1)
        error = await self._write(meta, bumped)
        if error != ErrorCode.none:
            if current.producer_epoch == NO_EPOCH and meta.record is current:
                self.txns.pop(transactional_id, None)  # never written: forget it
            return InitResult(error)
        if bumped.producer_id != current.producer_id:
            meta.previous_producer_id = current.producer_id
        # Only a KIP-360 client's bump may be retried as such: a blind InitProducerId is a
        # new instance, and the one it replaced must stay fenced (Kafka's rule).
        meta.last_producer_epoch = current.producer_epoch if expected is not None else NO_EPOCH
        log.info("transactional id %s: producer %d epoch %d", transactional_id,
                 bumped.producer_id, bumped.producer_epoch)
        return InitResult(ErrorCode.none, bumped.producer_id, bumped.producer_epoch)

    # -- the transaction's partitions --------------------------------------------------------

    def _check_producer(self, meta: TxnMetadata, producer_id: int,
                        producer_epoch: int) -> ErrorCode | None:
        if meta.record.producer_id != producer_id:
            return ErrorCode.invalid_producer_id_mapping
        if meta.record.producer_epoch != producer_epoch:
            return ErrorCode.producer_fenced
        if meta.pending is not None or meta.state in _PREPARED:
            return ErrorCode.concurrent_transactions
        return None

    async def add_partitions(self, transactional_id: str | None, producer_id: int,
                             producer_epoch: int, partitions: Iterable[TopicPartition],
                             client_version: int = 0) -> ErrorCode:
        """Add partitions to the transaction (starting it); one answer for all of them.
        ``client_version`` 2: added by a partition leader for a transaction.version 2
        producer's Produce or TxnOffsetCommit (KIP-890 part 2), not by AddPartitionsToTxn."""
        found = self._lookup(transactional_id)
        if isinstance(found, ErrorCode):
            return found
        meta = found
        error = self._check_producer(meta, producer_id, producer_epoch)
        if error is not None:
            return error
        wanted = frozenset(partitions)
        current = meta.record
        if current.state == TxnState.ONGOING and wanted <= current.partitions:
            return ErrorCode.none
        now = now_ms()
        started = current.state != TxnState.ONGOING
        ongoing = replace(
            current, state=TxnState.ONGOING,
            partitions=wanted if started else current.partitions | wanted, last_update_ms=now,
            start_ms=now if started else current.start_ms,
            client_version=client_version if started else max(client_version,
                                                               current.client_version))
        return await self._write(meta, ongoing)

    def verify_partitions(self, transactional_id: str | None, producer_id: int,
                          producer_epoch: int,
                          partitions: Iterable[TopicPartition]) -> dict[TopicPartition, ErrorCode]:
        """AddPartitionsToTxn's verify-only form (KIP-890): which of ``partitions`` the
        ongoing transaction holds, asked by a partition leader before it takes a
        transaction's first batch, so a late write cannot open a transaction that nobody
        will ever end."""
        found = self._lookup(transactional_id)
        wanted = list(partitions)
        if isinstance(found, ErrorCode):
            return dict.fromkeys(wanted, found)
        meta = found
        error = self._check_producer(meta, producer_id, producer_epoch)
        if error is not None:
            return dict.fromkeys(wanted, error)
        ongoing = meta.state == TxnState.ONGOING
        return {tp: ErrorCode.none if ongoing and tp in meta.record.partitions
                else ErrorCode.invalid_txn_state for tp in wanted}

    async def add_offsets(self, transactional_id: str | None, producer_id: int,
                          producer_epoch: int, group_id: str,
                          offsets_partitions: int) -> ErrorCode:
        """The group's partition of ``__consumer_offsets`` joins the transaction, so the
        markers reach the group coordinator, which then commits or drops the offsets."""
        if not group_id:
            return ErrorCode.invalid_group_id
        return await self.add_partitions(
            transactional_id, producer_id, producer_epoch,
            [(ot.TOPIC, partition_for(group_id, offsets_partitions))])

    # -- ending ----------------------------------------------------------------------------

    async def end_transaction(self, transactional_id: str | None, producer_id: int,
                              producer_epoch: int, commit: bool,
                              bump: bool = False) -> EndDecision:
        """EndTxn (``txn_end`` has the rules); ``bump``: transaction.version 2 (v5)."""
        found = self._lookup(transactional_id)
        if isinstance(found, ErrorCode):
            return EndDecision(found)
        meta = found
        if meta.pending is not None:
            return EndDecision(ErrorCode.concurrent_transactions)
        current = meta.record
        next_id = NO_PRODUCER_ID
        if bump and epoch_exhausted(current.producer_epoch) \
                and current.producer_id == producer_id \
                and current.producer_epoch == producer_epoch:
            next_id = await self.store.next_producer_id()
            if meta.record is not current or meta.pending is not None:
                return EndDecision(ErrorCode.concurrent_transactions)  # changed meanwhile
        decision = decide_end(current, producer_id, producer_epoch, commit, bump, now_ms(),
                              next_id)
        if decision.prepared is None:
            if decision.error == ErrorCode.invalid_txn_state:
                log.info("EndTxn(%s) for %s in state %s", "commit" if commit else "abort",
                         transactional_id, current.state.label)
            return decision
        error = await self._prepare(meta, decision.prepared)
        if error != ErrorCode.none:
            return EndDecision(error)
        if bump:
            meta.last_producer_epoch = current.producer_epoch
        return decision

    async def _prepare(self, meta: TxnMetadata, prepared: TxnRecord) -> ErrorCode:
        error = await self._write(meta, prepared)
        if error == ErrorCode.none:
            self._spawn(self._complete(meta.transactional_id, prepared,
                                       meta.coordinator_epoch))
        return error

    async def _abort_fenced(self, meta: TxnMetadata) -> ErrorCode:
        """Abort an open transaction under the next epoch: a timed-out transaction, or one
        whose producer was replaced by InitProducerId. Markers with the new epoch fence the
        old producer at every partition it wrote to."""
        current = meta.record
        next_id = NO_PRODUCER_ID
        if epoch_exhausted(current.producer_epoch):
            # The last epochs: abort under MAX (no higher epoch exists, and markers of an
            # equal one are taken) and complete under a new producer id, as Kafka does
            # (KAFKA-20090); refusing would leave the transaction open for good.
            next_id = await self.store.next_producer_id()
            if meta.record is not current or meta.pending is not None \
                    or current.state != TxnState.ONGOING:
                return ErrorCode.concurrent_transactions  # changed meanwhile
        meta.last_producer_epoch = NO_EPOCH
        bumped = current.producer_epoch < MAX_EPOCH
        # Markers above the batches' epoch are transaction.version 2's (see MarkerJob).
        fenced = replace(current, producer_epoch=min(current.producer_epoch + 1, MAX_EPOCH),
                         next_producer_id=next_id,
                         client_version=TV2 if bumped else current.client_version)
        meta.record = fenced  # the bumped epoch is written with PrepareAbort, or not at all
        error = await self._prepare(meta, replace(fenced, state=TxnState.PREPARE_ABORT,
                                                  last_update_ms=now_ms()))
        if error != ErrorCode.none and meta.record is fenced:
            meta.record = current
        return error

    async def _complete(self, transactional_id: str, prepared: TxnRecord,
                        coordinator_epoch: int) -> None:
        """Write the markers, then CompleteCommit or CompleteAbort. Stops quietly when this
        broker is no longer the coordinator: the next one resumes from PrepareX. Anything
        unexpected is logged and the step retried, so the id never stays prepared (its
        producer would get CONCURRENT_TRANSACTIONS for ever)."""
        partition = self.partition_of(transactional_id)
        commit = prepared.state == TxnState.PREPARE_COMMIT
        job = MarkerJob(prepared.producer_id, prepared.producer_epoch, commit,
                        coordinator_epoch, prepared.partitions, prepared.client_version)
        done = completed(prepared, now_ms())
        markers_written = False
        while self._still_coordinator(partition, coordinator_epoch):
            meta = self.txns.get(transactional_id)
            if meta is None or meta.record != prepared:
                return
            try:
                if not markers_written:
                    if not await self.markers.send(job, lambda: self._still_coordinator(
                            partition, coordinator_epoch)):
                        return
                    markers_written = True
                    continue
                if meta.pending is None:
                    error = await self._write(meta, done)
                    if error == ErrorCode.none and done.producer_id != prepared.producer_id:
                        meta.previous_producer_id = prepared.producer_id
                    if error in (ErrorCode.none, ErrorCode.not_coordinator):
                        return
            except Exception:
                log.exception("completing %s's transaction (producer %d epoch %d); retrying",
                              transactional_id, prepared.producer_id, prepared.producer_epoch)
            await asyncio.sleep(WRITE_RETRY_SECONDS)

    # -- timeouts and expiry ------------------------------------------------------------------

    async def _expiry_loop(self) -> None:
        abort_every = self.config[
            "transaction.abort.timed.out.transaction.cleanup.interval.ms"] / 1000
        expire_every = self.config[
            "transaction.remove.expired.transaction.cleanup.interval.ms"] / 1000
        last_expiry = time.monotonic()
        while True:
            await asyncio.sleep(abort_every)
            try:
                await self.abort_timed_out()
                if time.monotonic() - last_expiry >= expire_every:
                    last_expiry = time.monotonic()
                    await self.expire_ids()
            except Exception:
                log.exception("transaction timeout check failed")

    async def abort_timed_out(self, now: int | None = None) -> int:
        """Abort every transaction open past its transaction.timeout.ms; how many."""
        now = now_ms() if now is None else now
        def late(meta: TxnMetadata) -> bool:
            return meta.state == TxnState.ONGOING and meta.pending is None \
                and meta.record.start_ms + meta.record.timeout_ms < now

        candidates = [(m, m.record) for m in self.txns.values() if late(m)]
        aborted = 0
        for meta, seen in candidates:
            # An earlier abort's await let requests in: this one may have ended, been
            # fenced by InitProducerId, or forgotten since it was seen.
            if meta.record is not seen or not late(meta) \
                    or self.txns.get(meta.transactional_id) is not meta:
                continue
            log.info("transactional id %s: transaction open %d ms, past its timeout of %d "
                     "ms; aborting it", meta.transactional_id, now - meta.record.start_ms,
                     meta.record.timeout_ms)
            if await self._abort_fenced(meta) == ErrorCode.none:
                aborted += 1
        return aborted

    async def expire_ids(self, now: int | None = None) -> int:
        """Forget ids idle past transactional.id.expiration.ms (a tombstone in the log)."""
        now = now_ms() if now is None else now
        horizon = self.config["transactional.id.expiration.ms"]
        def idle(meta: TxnMetadata) -> bool:
            return meta.state in _COMPLETE and meta.pending is None \
                and now - meta.record.last_update_ms >= horizon

        candidates = [(m, m.record) for m in self.txns.values() if idle(m)]
        expired = 0
        for meta, seen in candidates:
            # A producer may have come back while an earlier tombstone was written.
            if meta.record is not seen or not idle(meta) \
                    or self.txns.get(meta.transactional_id) is not meta:
                continue
            if await self._write(meta, None) == ErrorCode.none:
                expired += 1
        if expired:
            log.info("expired %d transactional ids idle over %d ms", expired, horizon)
        return expired

    # -- describing ---------------------------------------------------------------------------

    def describe(self, transactional_id: str) -> TxnMetadata | ErrorCode:
        if not valid_id(transactional_id):
            return ErrorCode.transactional_id_not_found
        if not self.owns(transactional_id):
            return ErrorCode.not_coordinator
        meta = self.txns.get(transactional_id)
        if meta is None or meta.record.producer_epoch == NO_EPOCH:
            return ErrorCode.transactional_id_not_found
        return meta

    def list(self, states: set[str], producer_ids: set[int], min_duration_ms: int,
             matches: Callable[[str], bool]) -> list[TxnMetadata]:
        """Ids of the owned partitions passing every filter given (empty: no filter;
        a duration: open longer than that, as Kafka measures it from the start time)."""
        now = now_ms()
        found = []
        for txn_id, meta in self.txns.items():
            record = meta.record
            if record.producer_epoch == NO_EPOCH:
                continue
            if states and meta.state.label not in states:
                continue
            if producer_ids and record.producer_id not in producer_ids:
                continue
            if min_duration_ms >= 0 and now - record.start_ms <= min_duration_ms:
                continue
            if not matches(txn_id):
                continue
            found.append(meta)
        return found
