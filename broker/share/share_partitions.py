"""The share-partitions this broker leads, for every share group that fetches from them (Kafka's
SharePartitionManager): records acquired by fetches, acknowledgements and lock expiries stored
through the persister before they take effect, and the state read back when a partition's
leadership arrives here.

A share-partition starts, the first time a group fetches from it, at the offset its
``share.auto.offset.reset`` says (latest by default, earliest, as Kafka's group config), and is
initialized in the share coordinator there; afterwards it starts from what was stored. One
state write per share-partition is in flight at a time (each stores the whole in-flight
window), so writes land in the order their changes were made.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

from broker.common.metrics import ShareGroupSample
from broker.config.broker_config import BrokerConfig
from broker.config.group_settings import GroupSettings
from broker.coordinator.share_state_log import ShareKey
from broker.protocol.file_region import FileRegion
from broker.protocol.records import HEADER_SIZE, parse_header
from broker.server.partition import Partition
from broker.server.replica_manager import ReplicaManager
from broker.share.persister import NEVER_INITIALIZED, SharePersister
from broker.share.share_partition import (
    AckBatch,
    Acquired,
    Change,
    InvalidRecordState,
    SharePartition,
)
from broker.share.share_sessions import ShareSessions
from broker.storage.log import OffsetOutOfRange
from broker.storage.txn_index import AbortedTxn

log = logging.getLogger(__name__)
EXPIRY_RETRY_SECONDS = 1.0  # a group's configs (share.auto.offset.reset)
IDLE_EXPIRY_SECONDS = 1.0  # the expiry loop's look while nothing can expire


@dataclass
class Slot:
    """One share-partition led here: the rules' state and what its writes are fenced by."""

    key: ShareKey
    partition: Partition
    share: SharePartition
    state_epoch: int
    leader_epoch: int
    writing: asyncio.Lock = field(default_factory=asyncio.Lock)
    retry_at: float = 0.0  # an expiry that could not be stored is tried again from then
    # Read again before its next use: its group may have been reset (offsets altered or
    # deleted, the group deleted) while no member of it fetched here.
    stale: bool = False
    # Replaced by another slot of the same key (a reset read, a leadership change, a fenced
    # write): nothing more is acquired or stored through it.
    retired: bool = False


@dataclass(frozen=True, slots=True)
class Fetched:
    """What one partition gives a ShareFetch: the batches read, and the runs acquired."""

    error: ErrorCode = ErrorCode.none
    # The batches read: a file region, sent by sendfile as Fetch sends it (read_committed
    # reads them into bytes, to find the transaction markers and aborted batches).
    records: bytes | FileRegion | None = None
    acquired: tuple[Acquired, ...] = ()
    message: str | None = None

    @property
    def size(self) -> int:
        """The bytes of ``records``."""
        if isinstance(self.records, FileRegion):
            return self.records.length
        return len(self.records or b"")


class SharePartitionManager:
    def __init__(self, config: BrokerConfig, replicas: ReplicaManager,
                 persister: SharePersister, settings: GroupSettings | None = None) -> None:
        self.config = config
        self.replicas = replicas
        self.persister = persister
        self.settings = settings or GroupSettings(config)
        self.slots: dict[ShareKey, Slot] = {}
        self._loading: dict[ShareKey, asyncio.Future[Slot | ErrorCode]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._work = asyncio.Event()  # a share-partition or a share session was made

    def wake(self) -> None:
        """Something that can expire exists now (a share-partition, a share session): the
        expiry loop, idle until then, looks every 100 ms again."""
        self._work.set()

    def setting(self, group_id: str, name: str) -> str:
        """A group config's effective value for ``group_id`` (kafka-configs.sh --entity-type
        groups sets them; the broker's keys bound them)."""
        return self.settings.get(group_id, name)

    def _settings(self, group_id: str) -> dict[str, float]:
        number = self.settings.number
        return {"max_delivery": number(group_id, "share.delivery.count.limit"),
                "max_in_flight": number(group_id, "share.partition.max.record.locks"),
                "lock_seconds": number(group_id, "share.record.lock.duration.ms") / 1000}

    def session_timeout(self, group_id: str) -> float:
        """Seconds a share session of ``group_id`` may stay unused: the group's session
        timeout, as its membership uses it."""
        return self.settings.number(group_id, "share.session.timeout.ms") / 1000

    def lock_ms(self, group_id: str) -> int:
        return self.settings.number(group_id, "share.record.lock.duration.ms")

    def read_committed(self, group_id: str) -> bool:
        return self.setting(group_id, "share.isolation.level") == "read_committed"

    # -- finding a share-partition -------------------------------------------------------------

    async def slot(self, group_id: str, topic_id: uuid.UUID, index: int) -> Slot | ErrorCode:
        topic = self.replicas.metadata.topic_by_id(topic_id)
        if topic is None:
            return ErrorCode.unknown_topic_id
        partition = self.replicas.get(topic.name, index)
        if partition is None:
            return ErrorCode.unknown_topic_or_partition
        if not partition.is_leader:
            return ErrorCode.not_leader_or_follower
        key = ShareKey(group_id, topic_id, index)
        known = self.slots.get(key)
        slot: Slot | ErrorCode | None = known
        if known is None or known.partition is not partition or \
                known.leader_epoch != partition.leader_epoch or known.stale:
            loading = self._loading.get(key)
            if loading is None:
                loading = self._loading[key] = asyncio.ensure_future(
                    self._load(key, partition, known))
                loading.add_done_callback(lambda _: self._loading.pop(key, None))
            slot = await asyncio.shield(loading)
        if isinstance(slot, Slot):
            for name, value in self._settings(group_id).items():  # a group config changed
                setattr(slot.share, name, value)
        assert slot is not None
        return slot

    def revalidate(self, group_id: str) -> None:
        """A member of ``group_id`` opens a share session here: the group's share-partitions
        are checked against the stored state before their next use, because an
        administrator may have reset or deleted it while the group was empty (Kafka's
        AlterShareGroupOffsets / DeleteShareGroupOffsets / DeleteGroups tell no leader)."""
        for key, slot in self.slots.items():
            if key.group_id == group_id:
                slot.stale = True

    async def _load(self, key: ShareKey, partition: Partition, known: Slot | None = None
                    ) -> Slot | ErrorCode:
        epoch = partition.leader_epoch
        error, stored = await self.persister.read(key, epoch)
        if error != ErrorCode.none:
            return client_error(error)
        if not partition.is_leader or partition.leader_epoch != epoch:
            return ErrorCode.not_leader_or_follower
        if known is not None and self.slots.get(key) is known and \
                known.partition is partition and known.leader_epoch == epoch and \
                known.state_epoch == stored.state_epoch and \
                stored.start_offset != NEVER_INITIALIZED:
            known.stale = False  # not reset: what is in memory is what is stored
            return known
        if stored.start_offset == NEVER_INITIALIZED:
            reset = self.setting(key.group_id, "share.auto.offset.reset")
            start = partition.log.log_start_offset if reset == "earliest" \
                else partition.high_watermark
            # Above any state epoch this share-partition had: a slot kept somewhere from a
            # deleted state must not match the new one.
            state_epoch = stored.state_epoch + 1
            error = await self.persister.initialize(key, state_epoch, start)
            if error not in (ErrorCode.none, ErrorCode.fenced_state_epoch):
                return client_error(error)
            if error == ErrorCode.fenced_state_epoch:  # initialized meanwhile: read it
                error, stored = await self.persister.read(key, epoch)
                if error != ErrorCode.none:
                    return client_error(error)
            else:
                stored = type(stored)(state_epoch, start)
        share = SharePartition.restored(stored.start_offset, stored.batches,
                                        **self._settings(key.group_id))
        share.archive_before(partition.log.log_start_offset)
        if known is not None and known.partition is partition:  # counters never go back
            share.redeliveries = known.share.redeliveries
            share.lock_expiries = known.share.lock_expiries
        slot = Slot(key, partition, share, stored.state_epoch, epoch)
        if not partition.is_leader or partition.leader_epoch != epoch:
            return ErrorCode.not_leader_or_follower
        replaced = self.slots.get(key)
        if replaced is not None:
            replaced.retired = True
        self.slots[key] = slot
        self.wake()
        log.info("share-partition %s:%s-%d starts at %d", key.group_id, partition.topic,
                 key.partition, share.start_offset)
        return slot

    def samples(self) -> list[ShareGroupSample]:
        """What the metrics show of each share group, over the share-partitions led here."""
        by_group: dict[str, list[int]] = {}
        for key, slot in list(self.slots.items()):
            totals = by_group.setdefault(key.group_id, [0, 0, 0, 0])
            share = slot.share
            totals[0] += share.in_flight()
            totals[1] += share.redeliveries
            totals[2] += share.lock_expiries
            totals[3] += share.backlog(slot.partition.high_watermark)
        return [ShareGroupSample(group, *totals) for group, totals in by_group.items()]

    def on_leadership(self, partition: Partition, leader: bool) -> None:
        """Leadership moved: the share-partitions of ``partition`` are read again (as stored)
        by whichever broker leads it now; their locks here are gone."""
        for key in [k for k, s in self.slots.items() if s.partition is partition]:
            self.slots.pop(key).retired = True

    # -- fetching --------------------------------------------------------------------------

    def fetch(self, slot: Slot, member_id: str, max_records: int, max_bytes: int,
              read_committed: bool = False) -> Fetched:
        """Acquire records of ``slot`` for ``member_id``: read whole batches from the next
        available offset and acquire what is available of them. The records go out as the
        log's file region (no copy through Python: profiled, the copies were about a tenth
        of the broker at 1 consumer)."""
        share, partition = slot.share, slot.partition
        if slot.retired:  # a request that found it before it was replaced
            return Fetched()
        share.archive_before(partition.log.log_start_offset)
        offset = share.next_fetch_offset()
        if offset >= share.end_offset and len(share.records) >= share.max_in_flight:
            return Fetched()  # nothing available and no room for more: nothing to read
        try:
            read = partition.read(offset, max_bytes, True, read_committed=read_committed)
        except OffsetOutOfRange:
            return Fetched()
        if read.region is None or read.next_offset <= offset:
            return Fetched()
        records: bytes | FileRegion = read.region
        if read_committed:
            records = os.pread(read.region.fd, read.region.length, read.region.position)
            for first, last in _not_committed(records, partition.log.collect_aborted_transactions(
                    read.first_offset, read.next_offset)):
                share.archive_range(first, last)
        acquired = share.acquire(member_id, offset, read.next_offset - 1, max_records,
                                 time.monotonic())
        if not acquired:
            return Fetched()
        return Fetched(records=records, acquired=tuple(acquired))

    # -- changes that are stored -------------------------------------------------------------

    async def acknowledge(self, slot: Slot, member_id: str, batches: list[AckBatch]
                          ) -> tuple[ErrorCode, str | None]:
        try:
            return await self._apply(slot, lambda: slot.share.plan_acknowledge(
                member_id, batches, time.monotonic())), None
        except InvalidRecordState as e:
            code = ErrorCode.invalid_request if e.invalid_request \
                else ErrorCode.invalid_record_state
            return code, str(e)

    async def release(self, group_id: str, member_id: str,
                      keys: Iterable[ShareKey] | None = None) -> None:
        """Give back what ``member_id`` holds (its session closed, or it left the group)."""
        for key, slot in list(self.slots.items()):
            if key.group_id == group_id and (keys is None or key in keys):
                await self._apply(slot, lambda s=slot: s.share.plan_release(member_id))

    def release_later(self, group_id: str, member_id: str) -> None:
        """``release`` in a task of its own (the group coordinator calls this as a member
        leaves, and does not wait for the partitions)."""
        task = asyncio.get_running_loop().create_task(self.release(group_id, member_id))
        self._tasks.add(task)
        task.add_done_callback(self._done)

    def connection_closed(self, sessions: ShareSessions, connection: object) -> None:
        """Share sessions opened on a connection that closed end with it, and what their
        members hold goes back to their groups (Kafka 4's rule)."""
        for session in sessions.closed_connection(connection):
            self.release_later(session.group_id, session.member_id)

    def _done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.warning("releasing a member's records failed: %s", task.exception())

    async def expire(self, now: float) -> None:
        """Release the records whose acquisition lock ran out. A share-partition whose
        state is being stored is left for the next round, and one whose last expiry could
        not be stored waits a while: one slow coordinator must not hold every lock."""
        for slot in list(self.slots.values()):
            if slot.writing.locked() or slot.retry_at > now:
                continue
            error = await self._apply(slot, lambda s=slot: s.share.plan_expiry(now))
            if error != ErrorCode.none:
                slot.retry_at = now + EXPIRY_RETRY_SECONDS

    async def _apply(self, slot: Slot, plan: Callable[[], Change]) -> ErrorCode:
        """Plan a change, store it, then apply it; one at a time per share-partition, each
        planned once the one before is applied. It runs to its end in a task of its own:
        a request cancelled meanwhile (its connection closed) must not leave offsets marked
        as being stored, nor let the next change be stored beside it."""
        task = asyncio.ensure_future(self._apply_now(slot, plan))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return await asyncio.shield(task)

    async def _apply_now(self, slot: Slot, plan: Callable[[], Change]) -> ErrorCode:
        async with slot.writing:
            if slot.retired:  # replaced meanwhile: its state is not the stored one
                return ErrorCode.not_leader_or_follower
            change = plan()
            if not change:
                return ErrorCode.none
            share = slot.share
            share.begin(change)
            try:
                error = await self.persister.write(
                    slot.key, slot.state_epoch, slot.leader_epoch, share.start_after(change),
                    share.state_batches(change), share.done_after(change))
            except BaseException:
                share.abort(change)
                raise
            if error != ErrorCode.none:
                share.abort(change)
                log.warning("share-partition %s: storing a change failed: %s", slot.key,
                            error.name)
                if error in (ErrorCode.fenced_state_epoch, ErrorCode.fenced_leader_epoch):
                    slot.retired = True  # another leader or a reset owns the state now
                    if self.slots.get(slot.key) is slot:
                        del self.slots[slot.key]
                return client_error(error)
            share.commit(change)
            slot.partition.wake_fetchers()  # released records may be what a fetch waits for
            return ErrorCode.none

    async def run_expiry(self, sessions: ShareSessions | None = None,
                         interval: float = 0.1) -> None:
        """Lock expiry, and the eviction of share sessions idle for a share session timeout
        (their consumer died or went away; what it held goes back). With no share-partition
        and no session nothing can expire, so the loop sleeps until one is made (``wake``),
        looking once a second all the same."""
        while True:
            self._work.clear()
            if self.slots or (sessions is not None and sessions.sessions):
                await asyncio.sleep(interval)
            else:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(IDLE_EXPIRY_SECONDS):
                        await self._work.wait()
            now = time.monotonic()
            try:
                await self.expire(now)
                if sessions is not None:
                    for session in sessions.evict_idle(now, self.session_timeout):
                        self.release_later(session.group_id, session.member_id)
            except Exception:
                log.exception("share-partition lock expiry failed")


def _not_committed(records: bytes, aborted: list[AbortedTxn]) -> Iterator[tuple[int, int]]:
    """The offset ranges of ``records`` a read_committed share group never gets: transaction
    markers, and the batches of aborted transactions (a producer's records from an aborted
    transaction's first offset until its marker, as Kafka's consumer filters them)."""
    pending = sorted(aborted, key=lambda a: a.first_offset)
    aborting: set[int] = set()
    pos = 0
    while pos + HEADER_SIZE <= len(records):
        header = parse_header(records, pos)
        pos += header.size
        while pending and pending[0].first_offset <= header.last_offset:
            aborting.add(pending.pop(0).producer_id)
        if header.is_control:
            aborting.discard(header.producer_id)  # its marker ends the aborted transaction
            yield header.base_offset, header.last_offset
        elif header.is_transactional and header.producer_id in aborting:
            yield header.base_offset, header.last_offset


def client_error(error: ErrorCode) -> ErrorCode:
    """What a share consumer is told when the share coordinator could not read or store the
    state (Kafka's SharePartition.fetchPersisterError): a coordinator not there yet is
    retriable, a deposed leader is NOT_LEADER_OR_FOLLOWER."""
    if error in (ErrorCode.not_coordinator, ErrorCode.coordinator_not_available,
                 ErrorCode.coordinator_load_in_progress):
        return ErrorCode.coordinator_not_available
    if error in (ErrorCode.group_id_not_found, ErrorCode.unknown_topic_or_partition):
        return ErrorCode.invalid_request
    if error == ErrorCode.fenced_leader_epoch:
        return ErrorCode.not_leader_or_follower
    if error in (ErrorCode.fenced_state_epoch, ErrorCode.not_leader_or_follower):
        return error
    return ErrorCode.unknown_server_error
