"""Committed offsets: OffsetCommit, TxnOffsetCommit and the markers that end them, and
OffsetFetch.

A plain commit is stored, then acknowledged (Kafka's handleCommitOffsets). A commit inside a
transaction is written at once, as a transactional batch of its producer, but counts only
when that transaction's COMMIT marker reaches the group's partition (handleTxnCommitOffsets,
GroupMetadataManager.handleTxnCompletion); until then OffsetFetch with ``require_stable``
is told the offset is unstable. Deleting and expiring offsets is group_cleanup's.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable

from kio.schema.errors import ErrorCode

from broker.coordinator import offsets_topic as ot
from broker.coordinator.alarm import Alarm
from broker.coordinator.consumer_group import ConsumerGroup
from broker.coordinator.group import Group, GroupState
from broker.coordinator.group_store import (
    CoordinatorError,
    GroupStore,
    OffsetMap,
    check_length,
    validate_group_id,
)
from broker.coordinator.offsets_writer import OffsetsTopicWriter, offset_entries
from broker.storage.producer_state import VerificationGuard


class OffsetCommits:
    """Stores commits (plain and transactional) and answers fetches of them."""

    def __init__(self, store: GroupStore, writer: OffsetsTopicWriter,
                 topic_id: Callable[[str], uuid.UUID | None] = lambda _: None,
                 alarm: Alarm | None = None) -> None:
        self.store = store
        self.alarm = alarm or Alarm()
        self.writer = writer
        self.topic_id = topic_id  # KIP-848 assignments name topics by id

    def commit_offsets(
        self, group_id: str, generation: int, member_id: str, instance_id: str | None,
        offsets: OffsetMap,
    ) -> ErrorCode:
        """Store commits; a group error applies to every partition of the request.

        The empty group id is accepted, as Kafka still does for old clients' commits.
        """
        try:
            check_length(group_id, "group id", ErrorCode.invalid_group_id)
        except CoordinatorError as e:
            return e.code
        consumer_group = self.store.consumer_groups.get(group_id)
        if consumer_group is not None:
            refused = consumer_commit_error(consumer_group, generation, member_id, offsets,
                                            self.topic_id)
            if refused is not None:
                return refused
            return self._store(group_id, offsets)
        groups = self.store.groups
        group = groups.get(group_id)
        if generation < 0 and not member_id:
            # A "simple" commit from a consumer that manages partitions itself.
            if group is not None and not group.is_(GroupState.EMPTY) and group.members:
                return ErrorCode.unknown_member_id
            if group is None:
                group = groups[group_id] = Group(group_id)
        else:
            try:
                group, member = self.store.known_member(group_id, member_id, instance_id)
            except CoordinatorError as e:
                return e.code
            if generation != group.generation:
                return ErrorCode.illegal_generation
            if group.is_(GroupState.COMPLETING_REBALANCE):
                return ErrorCode.rebalance_in_progress
            # Usually later than it was, but not always: a follower's rejoin sets its
            # deadline from the timeout it asked for, which its member keeps not.
            member.heartbeat_deadline = time.monotonic() + member.session_timeout_ms / 1000
            self.alarm.at(member.heartbeat_deadline)
        return self._store(group_id, offsets)

    def _store(self, group_id: str, offsets: OffsetMap) -> ErrorCode:
        error = self.writer.write(group_id, offset_entries(group_id, offsets))
        if error == ErrorCode.none:
            self.store.offsets.setdefault(group_id, {}).update(offsets)
        return error

    def txn_commit_offsets(
        self, group_id: str, producer_id: int, producer_epoch: int, generation: int,
        member_id: str, instance_id: str | None, offsets: OffsetMap,
        verified: VerificationGuard | None = None,
    ) -> ErrorCode:
        """TxnOffsetCommit: store offsets as part of the producer's transaction. They are
        written now, as a transactional batch of that producer, and count once its COMMIT
        marker arrives (Kafka's handleTxnCommitOffsets checks, without the rebalance one)."""
        try:
            validate_group_id(group_id)
        except CoordinatorError as e:
            return e.code
        consumer_group = self.store.consumer_groups.get(group_id)
        if consumer_group is not None:
            refused = consumer_commit_error(consumer_group, generation, member_id, offsets,
                                            self.topic_id, transactional=True)
            if refused is not None:
                return refused
        groups = self.store.groups
        group = groups.get(group_id)
        if consumer_group is not None:
            pass  # checked above: a KIP-848 group has no classic generation to compare
        elif group is None:
            if generation >= 0 or member_id:
                return ErrorCode.illegal_generation if generation >= 0 else (
                    ErrorCode.unknown_member_id)
            group = groups[group_id] = Group(group_id)
        else:
            if member_id and member_id not in group.members:
                return ErrorCode.unknown_member_id
            if instance_id is not None and member_id and group.members[member_id] \
                    .group_instance_id not in (None, instance_id):
                return ErrorCode.fenced_instance_id
            if generation >= 0 and generation != group.generation:
                return ErrorCode.illegal_generation
        error = self.writer.write(group_id, offset_entries(group_id, offsets),
                                  (producer_id, producer_epoch), verified)
        if error == ErrorCode.none:
            self.stage(producer_id, group_id, offsets)
        return error

    def stage(self, producer_id: int, group_id: str, offsets: OffsetMap) -> None:
        """Hold a transaction's offsets for ``group_id`` until its marker says what to do."""
        pending = self.store.pending_txn_offsets.setdefault(producer_id, {})
        pending.setdefault(group_id, {}).update(offsets)

    def complete_transaction(self, index: int, producer_id: int, commit: bool) -> None:
        """A transaction's marker reached partition ``index`` of the offsets topic: its
        offsets for the groups there take effect (COMMIT) or are dropped (ABORT)."""
        pending = self.store.pending_txn_offsets
        by_group = pending.get(producer_id)
        if not by_group:
            return
        for group_id in [g for g in by_group if self.store.partition_of(g) == index]:
            offsets = by_group.pop(group_id)
            if commit:
                self.store.offsets.setdefault(group_id, {}).update(offsets)
        if not by_group:
            del pending[producer_id]

    def has_pending_offsets(self, group_id: str, tp: tuple[str, int]) -> bool:
        """An open transaction holds an offset for this partition (OffsetFetch's
        require_stable answers UNSTABLE_OFFSET_COMMIT until it ends)."""
        return any(tp in by_group.get(group_id, ())
                   for by_group in self.store.pending_txn_offsets.values())

    def fetch_offsets(
        self, group_id: str, partitions: list[tuple[str, int]] | None
    ) -> dict[tuple[str, int], ot.OffsetValue | None]:
        committed = self.store.offsets.get(group_id, {})
        if partitions is None:
            return dict(committed)
        return {tp: committed.get(tp) for tp in partitions}


def consumer_commit_error(group: ConsumerGroup, epoch: int, member_id: str,
                          offsets: OffsetMap, topic_id: Callable[[str], uuid.UUID | None],
                          transactional: bool = False) -> ErrorCode | None:
    """Why a KIP-848 group refuses a commit (Kafka's ConsumerGroup.validateOffsetCommit), or
    None. A member commits at its current epoch, or, as from Kafka 4.3, at an older one for
    partitions it has held since that epoch (a commit sent before the heartbeat that moved
    it on). Kafka refuses such a partition alone; here the whole commit is refused with
    STALE_MEMBER_EPOCH and the client retries it at its new epoch."""
    if epoch < 0 and not group.members:
        return None  # a commit of a consumer outside the (empty) group
    if transactional and epoch < 0 and not member_id:
        return None
    member = group.members.get(member_id)
    if member is None:
        return ErrorCode.unknown_member_id
    if epoch == member.member_epoch:
        return None
    if member.classic is not None:  # a classic member commits at its generation
        return ErrorCode.illegal_generation
    if epoch > member.member_epoch:
        return ErrorCode.stale_member_epoch
    for topic, partition in offsets:
        tid = topic_id(topic)
        given = member.assignment_epochs.get((tid, partition)) if tid is not None else None
        if given is None or given > epoch:
            return ErrorCode.stale_member_epoch
    return None
