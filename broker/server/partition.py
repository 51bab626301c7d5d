"""One partition replica on this broker: its log, its leader epoch and its high watermark.

The replica manager asks a partition to append or read; the partition applies the
idempotent-producer rules, advances the high watermark and wakes fetchers waiting for data.
On a single broker the replica is leader with itself as the only ISR member, so the high
watermark follows the log end offset; replication (a later layer) moves it by follower
progress instead. Runs on the event loop; appends complete before the first ``await``.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from broker.protocol.records import InvalidRecordError, validate_produce_payload
from broker.storage.log import Log, ReadResult


@dataclass(frozen=True, slots=True)
class ProduceOutcome:
    error: ErrorCode = ErrorCode.none
    base_offset: int = -1
    log_append_time: int = -1
    message: str | None = None
    records: int = 0
    bytes: int = 0


class Partition:
    def __init__(self, topic: str, index: int, log: Log, node_id: int, leader_epoch: int = 0):
        self.topic = topic
        self.index = index
        self.log = log
        self.leader_id = node_id
        self.leader_epoch = leader_epoch
        self.replicas = [node_id]
        self.isr = [node_id]
        self.high_watermark = log.log_end_offset
        self._waiters: set[asyncio.Future[None]] = set()

    def __repr__(self) -> str:
        return f"Partition({self.topic}-{self.index})"

    def append(self, records: bytes | None, max_message_bytes: int) -> ProduceOutcome:
        """Validate and append one produce payload as leader."""
        if not records:
            return ProduceOutcome(ErrorCode.invalid_record, message="empty record set")
        try:
            header = validate_produce_payload(records)
        except InvalidRecordError as e:
            return ProduceOutcome(ErrorCode(e.code), message=str(e))
        if header.size > max_message_bytes:
            return ProduceOutcome(
                ErrorCode.message_too_large,
                message=f"batch of {header.size} bytes exceeds max.message.bytes "
                f"{max_message_bytes}",
            )
        if header.producer_id >= 0:
            producer_state = self.log.producer_state
            duplicate = producer_state.find_duplicate(header)
            if duplicate is not None:
                return ProduceOutcome(base_offset=duplicate.first_offset)
            error = producer_state.check(header)
            if error is not None:
                return ProduceOutcome(
                    error,
                    message=f"producer {header.producer_id} epoch {header.producer_epoch} "
                    f"sequence {header.base_sequence}",
                )
        result = self.log.append_as_leader(records, header, self.leader_epoch)
        self._advance_high_watermark()
        return ProduceOutcome(
            base_offset=result.first_offset,
            log_append_time=result.log_append_time,
            records=header.record_count,
            bytes=len(records),
        )

    def _advance_high_watermark(self) -> None:
        # Single replica: everything appended is committed.
        self.high_watermark = self.log.log_end_offset
        self.wake_fetchers()

    def wake_fetchers(self) -> None:
        waiters, self._waiters = self._waiters, set()
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)

    def add_waiter(self, fut: asyncio.Future[None]) -> None:
        self._waiters.add(fut)

    def remove_waiter(self, fut: asyncio.Future[None]) -> None:
        self._waiters.discard(fut)

    def read(self, offset: int, max_bytes: int, min_one_batch: bool) -> ReadResult:
        return self.log.read(offset, max_bytes, self.high_watermark, min_one_batch)

    def check_leader_epoch(self, current_leader_epoch: int) -> ErrorCode:
        """Fence requests from clients with an epoch newer or older than ours (KIP-320)."""
        if current_leader_epoch < 0 or current_leader_epoch == self.leader_epoch:
            return ErrorCode.none
        if current_leader_epoch > self.leader_epoch:
            return ErrorCode.unknown_leader_epoch
        return ErrorCode.fenced_leader_epoch
