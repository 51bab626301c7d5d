"""One partition replica on this broker: its log, its role, its high watermark and ISR.

As leader it appends produce batches, tracks each follower's log end offset from the
offsets they fetch at, moves the high watermark to the smallest log end offset in the ISR,
and completes ``acks=all`` produces once the high watermark passes them (Kafka's Partition
and DelayedProduce). As follower it only takes what its fetcher writes. The ISR itself is
changed through the cluster metadata (by the replica manager, with compare-and-set); the
partition only says which changes it wants. Runs on the event loop; appends complete
before the first ``await``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import NamedTuple

from kio.schema.errors import ErrorCode

from broker.protocol.records import InvalidRecordError, validate_produce_payload
from broker.protocol.validation import RecordRules, validate_records
from broker.storage.log import Log, LogConfig, ReadResult
from broker.storage.log_dir_failure import KafkaStorageError, LogDirFailures, NothingWritten
from broker.storage.producer_state import VerificationGuard
from kafkube_contract.image import NO_LEADER, PartitionState

log = logging.getLogger(__name__)


class ProduceOutcome(NamedTuple):  # a tuple: one is built per partition of every Produce
    error: ErrorCode = ErrorCode.none
    base_offset: int = -1
    log_append_time: int = -1
    message: str | None = None
    records: int = 0
    bytes: int = 0
    last_offset: int = -1
    record_errors: tuple[tuple[int, str], ...] = ()


@dataclass(slots=True)
class FollowerProgress:
    """What the leader knows of one follower, from its fetches (Kafka's Replica)."""

    log_end_offset: int = -1
    log_start_offset: int = -1  # as the follower last reported it (-1: not yet)
    last_caught_up_ms: float = 0.0
    last_fetch_ms: float = 0.0
    last_fetch_leader_leo: int = -1

    def record_fetch(self, fetch_offset: int, leader_leo: int, now_ms: float) -> None:
        """A follower is caught up when it fetched at the leader's end, or at least at the
        end the leader had when it last fetched (then it was caught up at that time)."""
        if fetch_offset >= leader_leo:
            self.last_caught_up_ms = max(self.last_caught_up_ms, now_ms)
        elif fetch_offset >= self.last_fetch_leader_leo:
            self.last_caught_up_ms = max(self.last_caught_up_ms, self.last_fetch_ms)
        self.log_end_offset = fetch_offset
        self.last_fetch_leader_leo = leader_leo
        self.last_fetch_ms = now_ms


def now_ms() -> float:
    return time.monotonic() * 1000


class Partition:
    def __init__(self, topic: str, index: int, log: Log, node_id: int, high_watermark: int = 0):
        self.topic = topic
        self.index = index
        self.log = log
        self.node_id = node_id
        self.leader_id = NO_LEADER
        self.leader_epoch = -1
        self.replicas: list[int] = []
        self.isr: list[int] = []
        self.state: PartitionState | None = None
        self.high_watermark = min(high_watermark, log.log_end_offset)
        self.followers: dict[int, FollowerProgress] = {}
        # Followers on their way into the ISR: replica -> the partition epoch whose ISR holds
        # them once committed (-1 while the change is in flight). The high watermark waits
        # for them from the moment the leader asks (Kafka's maximal ISR, KIP-497): the
        # controller may elect one as soon as the change is committed, before this leader
        # has applied it, so nothing may be committed that it lacks.
        self._joining: dict[int, int] = {}
        self.epoch_start_offset = 0
        self._waiters: set[asyncio.Future[None]] = set()
        self._start_waiters: set[asyncio.Future[None]] = set()
        self._acks: list[tuple[int, int, asyncio.Future[ErrorCode]]] = []
        self._rules_for: LogConfig | None = None
        self._rules = RecordRules()
        # Bytes produced to and fetched by consumers from this partition while this broker
        # led it: two int adds a request, read at scrape time (the operator's load balancer
        # turns them into rates).
        self.leader_bytes_in = 0
        self.leader_bytes_out = 0
        self.failures: LogDirFailures | None = None  # where an I/O error of the log goes

    def _failed(self, error: OSError) -> KafkaStorageError:
        """An I/O error of this replica's files: its log dir goes offline (KIP-112), unless
        it was out of file descriptors before anything changed (refused, the dir online)."""
        if self.failures is not None:
            if isinstance(error, NothingWritten):
                return self.failures.refuse(self.log.dir.parent, error, str(self))
            self.failures.report(self.log.dir.parent, error)
        return KafkaStorageError(f"{self}: log dir {self.log.dir.parent} is offline: {error}")

    def __repr__(self) -> str:
        return f"Partition({self.topic}-{self.index})"

    @property
    def is_leader(self) -> bool:
        return self.leader_id == self.node_id

    # -- role changes, from the cluster metadata ---------------------------------------------

    def make_leader(self, state: PartitionState) -> None:
        """Lead from ``state``'s epoch: mark where the epoch starts, as Kafka's makeLeader."""
        new_term = not self.is_leader or state.leader_epoch != self.leader_epoch
        self._apply(state)
        if new_term:
            self._joining = {}
            self.epoch_start_offset = self.log.log_end_offset
            self.log.epoch_cache.assign(state.leader_epoch, self.epoch_start_offset)
            now = now_ms()
            # ISR members get the benefit of the doubt until they have had time to fetch.
            self.followers = {
                r: FollowerProgress(last_caught_up_ms=now if r in state.isr else 0.0)
                for r in state.replicas if r != self.node_id
            }
        else:
            for r in state.replicas:
                if r != self.node_id and r not in self.followers:
                    self.followers[r] = FollowerProgress()
        self.maybe_advance_high_watermark()

    def make_follower(self, state: PartitionState) -> bool:
        """Follow ``state.leader``; True if the leader or epoch changed (refetch needed)."""
        changed = self.leader_id != state.leader or self.leader_epoch != state.leader_epoch
        was_leader = self.is_leader
        self._apply(state)
        self.followers = {}
        self._joining = {}
        if was_leader:
            self._fail_acks(ErrorCode.not_leader_or_follower)
            self.wake_fetchers()
            _wake(self._start_waiters)
        return changed

    def _apply(self, state: PartitionState) -> None:
        self.state = state
        self.leader_id = state.leader
        self.leader_epoch = state.leader_epoch
        self.replicas = list(state.replicas)
        self.isr = list(state.isr)
        for replica, epoch in list(self._joining.items()):
            if 0 <= epoch <= state.partition_epoch:
                del self._joining[replica]  # its join applied (or overtaken by a later change)

    # -- ISR joins in flight (the leader's AlterPartition) -----------------------------------

    def begin_isr_join(self, replica_id: int) -> None:
        """The leader asks for ``replica_id`` to join the ISR: from now on the high watermark
        waits for it."""
        self._joining.setdefault(replica_id, -1)

    def end_isr_join(self, replica_id: int, committed: PartitionState | None) -> None:
        """The join is answered; ``committed`` is the partition as the metadata holds it
        now (None if unknown). If its ISR holds the follower in this leader epoch, the
        follower stays counted until this leader has applied that partition epoch."""
        if self._joining.get(replica_id) != -1:
            return
        applied = self.state.partition_epoch if self.state is not None else -1
        if committed is not None and replica_id in committed.isr \
                and committed.leader_epoch == self.leader_epoch \
                and committed.partition_epoch > applied:
            self._joining[replica_id] = committed.partition_epoch
        else:
            del self._joining[replica_id]
            self.maybe_advance_high_watermark()  # it may have been all it waited for

    def is_joining(self, replica_id: int) -> bool:
        """Its join asked for and not answered yet."""
        return self._joining.get(replica_id) == -1

    def maximal_isr(self) -> list[int]:
        """The ISR and the followers joining it: whom the high watermark waits for."""
        if not self._joining:  # nearly always: no new list on the produce path
            return self.isr
        return self.isr + [r for r in self._joining if r not in self.isr]

    def set_isr(self, isr: list[int]) -> None:
        self.isr = list(isr)
        self.maybe_advance_high_watermark()

    def close(self) -> None:
        self._fail_acks(ErrorCode.not_leader_or_follower)
        self.leader_id = NO_LEADER
        self.wake_fetchers()
        _wake(self._start_waiters)

    # -- produce -------------------------------------------------------------------------

    def append(self, records: bytes | None, max_message_bytes: int,
               min_insync_replicas: int = 1, acks: int = 1,
               from_coordinator: bool = False,
               verified: VerificationGuard | None = None) -> ProduceOutcome:
        """Validate and append one produce payload as leader. A coordinator's own write
        for a producer (TxnOffsetCommit's transactional batch) carries no sequence: only
        the producer's epoch is checked, as Kafka does for AppendOrigin.COORDINATOR.
        ``verified``: the transaction verification (KIP-890) the batch was checked with,
        when verification is on; a batch that would open a transaction without its guard
        still in place is refused (INVALID_TXN_STATE), as Kafka refuses it."""
        if not self.is_leader:
            return ProduceOutcome(ErrorCode.not_leader_or_follower,
                                  message=f"broker {self.node_id} is not the leader")
        if not records:
            return ProduceOutcome(ErrorCode.invalid_record, message="empty record set")
        try:
            header = validate_produce_payload(records)
            max_timestamp = validate_records(records, header, self._record_rules(),
                                             int(time.time() * 1000))
        except InvalidRecordError as e:
            log.debug("%s: produce refused: %s", self, e)
            return ProduceOutcome(ErrorCode(e.code), message=str(e),
                                  record_errors=e.record_errors)
        if header.size > max_message_bytes:
            return ProduceOutcome(
                ErrorCode.message_too_large,
                message=f"batch of {header.size} bytes exceeds max.message.bytes "
                f"{max_message_bytes}",
            )
        if acks == -1 and len(self.isr) < min_insync_replicas:
            return ProduceOutcome(
                ErrorCode.not_enough_replicas,
                message=f"the ISR {self.isr} is smaller than min.insync.replicas "
                f"{min_insync_replicas}",
            )
        if verified is not None and header.is_transactional \
                and not self.log.producer_state.verified(header, verified):
            log.info("%s: a transactional batch of producer %d epoch %d would open a "
                     "transaction its coordinator did not vouch for", self,
                     header.producer_id, header.producer_epoch)
            return ProduceOutcome(ErrorCode.invalid_txn_state,
                                  message="Partition was not added to the transaction")
        if header.producer_id >= 0 and from_coordinator:
            entry = self.log.producer_state.producers.get(header.producer_id)
            if entry is not None and header.producer_epoch < entry.epoch:
                return ProduceOutcome(ErrorCode.invalid_producer_epoch,
                                      message=f"producer {header.producer_id} epoch "
                                      f"{header.producer_epoch} is older than {entry.epoch}")
        elif header.producer_id >= 0:
            producer_state = self.log.producer_state
            duplicate = producer_state.find_duplicate(header)
            if duplicate is not None:
                return ProduceOutcome(base_offset=duplicate.first_offset,
                                      last_offset=duplicate.last_offset)
            error = producer_state.check(header)
            if error is not None:
                log.info("%s: %s for producer %d epoch %d sequence %d", self, error.name,
                         header.producer_id, header.producer_epoch, header.base_sequence)
                return ProduceOutcome(
                    error,
                    message=f"producer {header.producer_id} epoch {header.producer_epoch} "
                    f"sequence {header.base_sequence}",
                )
        try:
            result = self.log.append_as_leader(records, header, self.leader_epoch,
                                               max_timestamp)
        except OSError as e:
            return ProduceOutcome(ErrorCode.kafka_storage_error, message=str(self._failed(e)))
        self.wake_fetchers()  # followers wait for new data, consumers for a new HW
        self.maybe_advance_high_watermark()
        return ProduceOutcome(
            base_offset=result.first_offset,
            log_append_time=result.log_append_time,
            records=header.record_count,
            bytes=len(records),
            last_offset=result.last_offset,
        )

    def append_marker(self, producer_id: int, producer_epoch: int, commit: bool,
                      coordinator_epoch: int, transaction_version: int = 0) -> ProduceOutcome:
        """Write a transaction's COMMIT or ABORT marker as leader (WriteTxnMarkers), with
        acks=all's rule that the ISR holds min.insync.replicas (the coordinator retries
        NOT_ENOUGH_REPLICAS). A marker from an older producer epoch or coordinator epoch
        is refused: a newer producer or coordinator took the transaction over."""
        if not self.is_leader:
            return ProduceOutcome(ErrorCode.not_leader_or_follower,
                                  message=f"broker {self.node_id} is not the leader")
        min_isr = self.log.config.min_insync_replicas
        if len(self.isr) < min_isr:
            return ProduceOutcome(ErrorCode.not_enough_replicas,
                                  message=f"the ISR {self.isr} is smaller than "
                                  f"min.insync.replicas {min_isr}")
        error = self.log.producer_state.check_marker(producer_id, producer_epoch,
                                                     coordinator_epoch, transaction_version)
        if error is not None:
            return ProduceOutcome(error, message=f"marker of producer {producer_id} epoch "
                                  f"{producer_epoch}, coordinator epoch {coordinator_epoch}")
        try:
            result = self.log.append_control_as_leader(producer_id, producer_epoch, commit,
                                                       coordinator_epoch, self.leader_epoch)
        except OSError as e:
            return ProduceOutcome(ErrorCode.kafka_storage_error, message=str(self._failed(e)))
        self.wake_fetchers()
        self.maybe_advance_high_watermark()
        return ProduceOutcome(base_offset=result.first_offset, last_offset=result.last_offset)

    @property
    def last_stable_offset(self) -> int:
        """Where read_committed consumers stop: the high watermark, or the first offset of
        the oldest transaction still open, whichever is lower."""
        unstable = self.log.first_unstable_offset
        hw = self.high_watermark
        return hw if unstable is None or unstable >= hw else unstable

    def _record_rules(self) -> RecordRules:
        """The topic's rules for records, rebuilt only when its config changes."""
        config = self.log.config
        if self._rules_for is not config:
            self._rules = _record_rules(config)
            self._rules_for = config
        return self._rules

    async def wait_committed(self, last_offset: int, min_insync_replicas: int,
                             timeout: float) -> ErrorCode:
        """acks=all: wait until the high watermark passes ``last_offset`` (DelayedProduce)."""
        if not self.is_leader:
            return ErrorCode.not_leader_or_follower
        if self.high_watermark > last_offset:
            return self._committed_error(min_insync_replicas)
        fut: asyncio.Future[ErrorCode] = asyncio.get_running_loop().create_future()
        entry = (last_offset, min_insync_replicas, fut)
        self._acks.append(entry)
        try:
            async with asyncio.timeout(timeout):
                return await fut
        except TimeoutError:
            return ErrorCode.request_timed_out
        finally:
            if entry in self._acks:
                self._acks.remove(entry)

    def _committed_error(self, min_insync_replicas: int) -> ErrorCode:
        if len(self.isr) < min_insync_replicas:
            return ErrorCode.not_enough_replicas_after_append
        return ErrorCode.none

    def _fail_acks(self, error: ErrorCode) -> None:
        acks, self._acks = self._acks, []
        for _, _, fut in acks:
            if not fut.done():
                fut.set_result(error)

    # -- replication, as leader -----------------------------------------------------------

    def record_follower_fetch(self, replica_id: int, fetch_offset: int,
                              log_start_offset: int = -1) -> bool:
        """Note a follower's position; True if it now qualifies to join the ISR. A fetch
        from past our log end is no position we can vouch for (the follower's tail diverged;
        the read answers OFFSET_OUT_OF_RANGE and it truncates): Kafka records a follower's
        fetch only after reading it."""
        if fetch_offset > self.log.log_end_offset:
            return False
        progress = self.followers.get(replica_id)
        if progress is None:
            if replica_id not in self.replicas:
                return False
            progress = self.followers[replica_id] = FollowerProgress()
        progress.record_fetch(fetch_offset, self.log.log_end_offset, now_ms())
        if log_start_offset != progress.log_start_offset:
            progress.log_start_offset = log_start_offset
            _wake(self._start_waiters)
        if replica_id in self.isr:
            self.maybe_advance_high_watermark()
            return False
        return self.can_join_isr(replica_id)

    def can_join_isr(self, replica_id: int) -> bool:
        """Caught up to the high watermark and into this epoch (Kafka's isFollowerInSync)."""
        progress = self.followers.get(replica_id)
        if progress is None or replica_id in self.isr or replica_id in self._joining \
                or replica_id not in self.replicas:
            return False
        leo = progress.log_end_offset
        return leo >= self.high_watermark and leo >= self.epoch_start_offset

    def proven_followers(self, since_ms: float, offset: int) -> frozenset[int]:
        """ISR followers that fetched at ``offset`` or beyond after ``since_ms``: alive now
        and holding everything up to ``offset`` (a controlled shutdown's successors)."""
        return frozenset(
            r for r in self.isr
            if r != self.node_id and (progress := self.followers.get(r)) is not None
            and progress.last_fetch_ms >= since_ms and progress.log_end_offset >= offset
        )

    def out_of_sync_followers(self, lag_time_max_ms: int) -> list[int]:
        """ISR followers that have not caught up for ``replica.lag.time.max.ms``."""
        now = now_ms()
        return [
            r for r in self.isr
            if r != self.node_id
            and now - self.followers.get(r, FollowerProgress()).last_caught_up_ms > lag_time_max_ms
        ]

    def maybe_advance_high_watermark(self) -> None:
        if not self.is_leader:
            return
        ends = [self.log.log_end_offset]
        for r in self.maximal_isr():
            if r != self.node_id:
                progress = self.followers.get(r)
                ends.append(progress.log_end_offset if progress is not None else -1)
        candidate = min(ends)
        if candidate <= self.high_watermark:
            return
        self.high_watermark = candidate
        self.wake_fetchers()
        if self._acks:
            done = [a for a in self._acks if a[0] < candidate]
            self._acks = [a for a in self._acks if a[0] >= candidate]
            for _, min_isr, fut in done:
                if not fut.done():
                    fut.set_result(self._committed_error(min_isr))

    # -- deleting records, as leader (Kafka's deleteRecordsOnLeader, DelayedDeleteRecords) --

    def delete_records(self, offset: int) -> tuple[int, ErrorCode, str | None]:
        """Move the log start to ``offset`` (-1: the high watermark); (the offset, error,
        message). The records below go for readers at once; retention removes their files.
        """
        if not self.is_leader:
            return -1, ErrorCode.not_leader_or_follower, None
        if "delete" not in self.log.config.cleanup_policy:
            return -1, ErrorCode.policy_violation, (
                f"records of {self.topic}-{self.index} cannot be deleted: cleanup.policy is "
                f"{','.join(self.log.config.cleanup_policy)}")
        target = self.high_watermark if offset == -1 else offset
        if target < 0 or target > self.high_watermark:
            return -1, ErrorCode.offset_out_of_range, (
                f"offset {offset} is outside [0, {self.high_watermark}] (the high watermark)")
        self.log.maybe_increment_log_start_offset(target)
        return target, ErrorCode.none, None

    def low_watermark(self, alive: Collection[int]) -> int:
        """The smallest log start offset of the replicas on live brokers, this one included
        (Kafka's lowWatermarkIfLeader): how far a DeleteRecords has taken effect."""
        starts = [self.log.log_start_offset]
        for r, progress in self.followers.items():
            if r in alive and r in self.replicas and progress.log_start_offset >= 0:
                starts.append(progress.log_start_offset)
        return min(starts)

    async def wait_low_watermark(self, offset: int, alive: Callable[[], Collection[int]],
                                 timeout: float) -> tuple[int, ErrorCode]:
        """Wait until every live replica has moved its log start to ``offset``."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while (low := self.low_watermark(alive())) < offset:
            if not self.is_leader:
                return low, ErrorCode.not_leader_or_follower
            remaining = deadline - loop.time()
            if remaining <= 0:
                return low, ErrorCode.request_timed_out
            fut: asyncio.Future[None] = loop.create_future()
            self._start_waiters.add(fut)
            try:
                async with asyncio.timeout(remaining):
                    await fut
            except TimeoutError:
                pass
            finally:
                self._start_waiters.discard(fut)
        return low, ErrorCode.none

    # -- replication, as follower ---------------------------------------------------------

    def append_as_follower(self, records: bytes, leader_high_watermark: int) -> int:
        try:
            count = self.log.append_as_follower(records) if records else 0
        except OSError as e:
            raise self._failed(e) from e
        self.update_follower_high_watermark(leader_high_watermark)
        return count

    def update_follower_high_watermark(self, leader_high_watermark: int) -> None:
        hw = min(leader_high_watermark, self.log.log_end_offset)
        if hw > self.high_watermark:
            self.high_watermark = hw

    def follow_log_start_offset(self, leader_log_start_offset: int) -> None:
        """Records the leader deleted go here too, up to what we know is committed."""
        if leader_log_start_offset > self.log.log_start_offset:
            self.log.maybe_increment_log_start_offset(
                min(leader_log_start_offset, self.high_watermark))

    def truncate_to(self, offset: int) -> None:
        try:
            self.log.truncate_to(offset)
        except OSError as e:
            raise self._failed(e) from e
        self.high_watermark = min(self.high_watermark, self.log.log_end_offset)

    # -- fetch waiting and reads ------------------------------------------------------------

    def wake_fetchers(self) -> None:
        if self._waiters:
            waiters, self._waiters = self._waiters, set()
            _wake(waiters)

    def add_waiter(self, fut: asyncio.Future[None]) -> None:
        self._waiters.add(fut)

    def remove_waiter(self, fut: asyncio.Future[None]) -> None:
        self._waiters.discard(fut)

    def read(self, offset: int, max_bytes: int, min_one_batch: bool,
             up_to_log_end: bool = False, read_committed: bool = False) -> ReadResult:
        """Consumers read what the ISR holds (read_committed ones only to the last stable
        offset); followers (``up_to_log_end``) read it all."""
        if up_to_log_end:
            limit = self.log.log_end_offset
        elif read_committed:
            limit = self.last_stable_offset
        else:
            limit = self.high_watermark
        try:
            return self.log.read(offset, max_bytes, limit, min_one_batch)
        except OSError as e:
            raise self._failed(e) from e

    def check_leader_epoch(self, current_leader_epoch: int) -> ErrorCode:
        """Fence requests from clients with an epoch newer or older than ours (KIP-320)."""
        if current_leader_epoch < 0 or current_leader_epoch == self.leader_epoch:
            return ErrorCode.none
        if current_leader_epoch > self.leader_epoch:
            return ErrorCode.unknown_leader_epoch
        return ErrorCode.fenced_leader_epoch


def _wake(waiters: Collection[asyncio.Future[None]]) -> None:
    for fut in list(waiters):
        if not fut.done():
            fut.set_result(None)


def _record_rules(config: LogConfig) -> RecordRules:
    return RecordRules(
        compacted="compact" in config.cleanup_policy,
        log_append_time=config.message_timestamp_type == "LogAppendTime",
        timestamp_before_max_ms=config.message_timestamp_before_max_ms,
        timestamp_after_max_ms=config.message_timestamp_after_max_ms,
    )
