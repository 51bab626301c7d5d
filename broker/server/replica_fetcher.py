"""Follower side of replication: one fetcher per leader broker, as Kafka's ReplicaFetcherThread.

A partition joins a fetcher when this broker becomes its follower, first in the truncating
state: the fetcher asks the leader where our latest leader epoch ends (OffsetForLeaderEpoch,
KIP-101/279) and cuts the local log back to that point, so a follower that was leader
during a failover drops the tail the new leader never had. Then it fetches from its log end
offset with ``replica_id`` set; the leader learns our position from those fetch offsets,
which is how the high watermark and ``acks=all`` move on. The response's high watermark
becomes ours, bounded by what we hold.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from kio.schema.errors import ErrorCode
from kio.schema.fetch.v12.request import FetchRequest
from kio.schema.offset_for_leader_epoch.v4.request import OffsetForLeaderEpochRequest

from broker.network.client import BrokerConnectionError, KafkaConnection
from broker.protocol.messages import build
from broker.protocol.records import InvalidRecordError, split_batches
from broker.security.client import ClientSecurity
from broker.server.partition import Partition, now_ms
from broker.server.throttle import Throttle
from broker.storage.log_dir_failure import KafkaStorageError
from kafkube_contract.registration import BrokerRegistration

log = logging.getLogger(__name__)

FETCH_KEY, FETCH_VERSION = 1, 12
EPOCH_KEY, EPOCH_VERSION = 23, 4
UNDEFINED = -1
# Every partition we follow is throttled and the throttle is spent: look again this soon.
THROTTLED_RETRY_S = 0.1
# The leader has not taken up the new epoch yet (it polls the image every 100 ms): ask again
# soon rather than after replica.fetch.backoff.ms, which is for a broken leader.
EPOCH_RETRY_S = 0.1
EPOCH_ERRORS = frozenset({
    ErrorCode.not_leader_or_follower, ErrorCode.unknown_leader_epoch,
    ErrorCode.fenced_leader_epoch, ErrorCode.unknown_topic_or_partition,
})


@dataclass(frozen=True, slots=True)
class FetcherConfig:
    node_id: int
    wait_max_ms: int  # replica.fetch.wait.max.ms
    min_bytes: int  # replica.fetch.min.bytes
    max_bytes: int  # replica.fetch.max.bytes, per partition
    response_max_bytes: int  # replica.fetch.response.max.bytes
    backoff_ms: int  # replica.fetch.backoff.ms
    socket_timeout_ms: int  # replica.socket.timeout.ms
    rack: str | None = None
    security: ClientSecurity = field(default_factory=ClientSecurity)  # the listener's


@dataclass(slots=True)
class FetchState:
    partition: Partition
    leader_epoch: int
    truncating: bool = True


class ReplicaFetcher:
    def __init__(
        self,
        leader_id: int,
        config: FetcherConfig,
        endpoint: Callable[[int], BrokerRegistration | None],
        throttle_for: Callable[[Partition], Throttle | None] = lambda _: None,
    ) -> None:
        self.leader_id = leader_id
        self.config = config
        self._endpoint = endpoint
        self._throttle_for = throttle_for  # follower.replication.throttled.*, see throttle.py
        self.partitions: dict[tuple[str, int], FetchState] = {}
        self._connection: KafkaConnection | None = None
        self._changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._unknown_endpoint = False  # logged once, until the leader is known again
        self.last_answer_ms = 0.0  # when the leader last answered (monotonic), see heard_since

    def add(self, partition: Partition) -> None:
        self.partitions[(partition.topic, partition.index)] = FetchState(
            partition, partition.leader_epoch
        )
        self._changed.set()

    def remove(self, topic: str, index: int) -> None:
        self.partitions.pop((topic, index), None)

    def heard_since(self, since_ms: float) -> bool:
        """The leader answered us after ``since_ms``: it was alive then."""
        return self.last_answer_ms >= since_ms

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=f"fetcher-{self.leader_id}")

    async def stop(self) -> None:
        # Every wait in the loop is asyncio.timeout, never asyncio.wait_for: Python 3.11's
        # wait_for drops a cancellation that arrives with the answer (CPython gh-86296), and
        # a fetcher that outlives its cancel hangs here, and with it the broker's shutdown.
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._connection is not None:
            self._connection.close()

    # -- the loop ---------------------------------------------------------------------------

    async def _run(self) -> None:
        backoff = self.config.backoff_ms / 1000
        while True:
            if not self.partitions:
                self._changed.clear()
                await self._changed.wait()
                continue
            self._changed.clear()
            try:
                connection = self._connect()
                if connection is None:
                    if not self._unknown_endpoint:
                        log.info("broker %d is not registered or does not advertise this "
                                 "broker's inter-broker listener; waiting for it before "
                                 "fetching %d partitions", self.leader_id, len(self.partitions))
                    self._unknown_endpoint = True
                    delay = backoff
                elif any(s.truncating for s in self.partitions.values()):
                    delay = await self._truncate(connection)
                else:
                    delay = await self._fetch(connection)
            except BrokerConnectionError as e:
                log.info("fetching from broker %d: %s", self.leader_id, e)
                self._connection = None
                delay = backoff
            except Exception:
                log.exception("replica fetcher for broker %d failed", self.leader_id)
                delay = backoff
            if delay:
                # A partition joining (a new leader epoch) ends the pause early.
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(delay):
                        await self._changed.wait()

    def _connect(self) -> KafkaConnection | None:
        endpoint = self._endpoint(self.leader_id)
        if endpoint is None:
            return None
        self._unknown_endpoint = False
        conn = self._connection
        if conn is None or (conn.host, conn.port) != (endpoint.host, endpoint.port):
            if conn is not None:
                conn.close()
            conn = self._connection = KafkaConnection(
                endpoint.host, endpoint.port, f"replica-fetcher-{self.config.node_id}",
                (self.config.socket_timeout_ms + self.config.wait_max_ms) / 1000,
                self.config.security,
            )
        return conn

    def _current(self, key: tuple[str, int], sent_epoch: int) -> FetchState | None:
        """The fetch state, if the partition still follows the same leader term."""
        state = self.partitions.get(key)
        if state is None or state.leader_epoch != sent_epoch:
            return None
        partition = state.partition
        if partition.is_leader or partition.leader_epoch != sent_epoch:
            return None
        return state

    # -- truncation (KIP-101/279) ---------------------------------------------------------------

    async def _truncate(self, connection: KafkaConnection) -> float:
        asked: dict[tuple[str, int], tuple[int, int]] = {}  # key -> (leader epoch, our epoch)
        topics: dict[str, list[dict[str, Any]]] = {}
        for key, state in self.partitions.items():
            if not state.truncating:
                continue
            entries = state.partition.log.epoch_cache.entries
            latest = entries[-1][0] if entries else UNDEFINED
            asked[key] = (state.leader_epoch, latest)
            topics.setdefault(key[0], []).append({
                "partition": key[1], "current_leader_epoch": state.leader_epoch,
                "leader_epoch": latest,
            })
        request = build(OffsetForLeaderEpochRequest, {
            "replica_id": self.config.node_id,
            "topics": [{"topic": t, "partitions": ps} for t, ps in topics.items()],
        })
        response = await connection.request(EPOCH_KEY, EPOCH_VERSION, request)
        self.last_answer_ms = now_ms()
        delay = 0.0
        pairs = ((t.topic, p.partition, p) for t in response.topics for p in t.partitions)
        for state, our_epoch, p in self._still_wanted(pairs, asked):
            if p.error_code != ErrorCode.none:
                delay = max(delay, self._error_delay(p.error_code))
                continue
            self._apply_truncation(state, our_epoch, p.leader_epoch, p.end_offset)
        return delay

    def _still_wanted(
        self, answers: Iterable[tuple[str, int, Any]], sent: dict[tuple[str, int], tuple[int, int]]
    ) -> Iterator[tuple[FetchState, int, Any]]:
        """The answers for partitions we asked about that still follow the same leader term,
        with the second value recorded when asking."""
        for topic, index, answer in answers:
            asked = sent.get((topic, index))
            if asked is None:
                continue
            state = self._current((topic, index), asked[0])
            if state is not None:
                yield state, asked[1], answer

    def _error_delay(self, error: ErrorCode) -> float:
        return EPOCH_RETRY_S if error in EPOCH_ERRORS else self.config.backoff_ms / 1000

    @staticmethod
    def _apply_truncation(state: FetchState, our_epoch: int, leader_epoch: int,
                          leader_end: int) -> None:
        partition = state.partition
        log_ = partition.log
        if our_epoch == UNDEFINED or leader_epoch == UNDEFINED:
            # Nothing to compare by epoch: keep what is known committed, as Kafka does.
            target = partition.high_watermark
        elif leader_epoch == our_epoch:
            target = leader_end
        else:
            _, our_end = log_.epoch_cache.end_offset_for(leader_epoch, log_.log_end_offset)
            target = min(leader_end, our_end) if our_end >= 0 else leader_end
        target = min(target, log_.log_end_offset)
        if target < log_.log_end_offset:
            log.info("%s: truncating from %d to %d (leader epoch %d ends at %d)",
                     partition, log_.log_end_offset, target, leader_epoch, leader_end)
            partition.truncate_to(target)
        state.truncating = False

    # -- fetching ------------------------------------------------------------------------------

    async def _fetch(self, connection: KafkaConnection) -> float:
        sent: dict[tuple[str, int], tuple[int, int]] = {}  # key -> (leader epoch, offset)
        topics: dict[str, list[dict[str, Any]]] = {}
        throttled: dict[tuple[str, int], Throttle] = {}
        for key, state in self.partitions.items():
            log_ = state.partition.log
            max_bytes = self.config.max_bytes
            throttle = self._throttle_for(state.partition)
            if throttle is not None:
                max_bytes = min(max_bytes, throttle.allowance())
                if max_bytes <= 0:
                    continue  # as Kafka's follower: left out of this fetch
                throttled[key] = throttle
            sent[key] = (state.leader_epoch, log_.log_end_offset)
            topics.setdefault(key[0], []).append({
                "partition": key[1], "current_leader_epoch": state.leader_epoch,
                "fetch_offset": log_.log_end_offset, "last_fetched_epoch": UNDEFINED,
                "log_start_offset": log_.log_start_offset,
                "partition_max_bytes": max_bytes,
            })
        if not sent:
            return THROTTLED_RETRY_S
        cfg = self.config
        request = build(FetchRequest, {
            "replica_id": cfg.node_id,
            "max_wait": timedelta(milliseconds=cfg.wait_max_ms),
            "min_bytes": cfg.min_bytes,
            "max_bytes": cfg.response_max_bytes,
            "isolation_level": 0,
            "session_id": 0,
            "session_epoch": -1,
            "topics": [{"topic": t, "partitions": ps} for t, ps in topics.items()],
            "forgotten_topics_data": [],
            "rack_id": cfg.rack or "",
        })
        response = await connection.request(FETCH_KEY, FETCH_VERSION, request)
        self.last_answer_ms = now_ms()
        delay = 0.0
        pairs = ((t.topic, p.partition_index, p) for t in response.responses for p in t.partitions)
        for state, offset, p in self._still_wanted(pairs, sent):
            throttle = throttled.get((state.partition.topic, state.partition.index))
            if throttle is not None and p.records:
                throttle.record(len(p.records))
            if p.error_code not in (ErrorCode.none, ErrorCode.offset_out_of_range):
                log.debug("%s: fetch from broker %d: %s", state.partition, self.leader_id,
                          p.error_code)
                delay = max(delay, self._error_delay(p.error_code))
                continue
            self._apply_fetch(state, offset, p)
        return delay

    def _apply_fetch(self, state: FetchState, offset: int, p: Any) -> None:
        partition = state.partition
        if p.error_code == ErrorCode.offset_out_of_range:
            if offset < p.log_start_offset:
                log.warning("%s: behind the leader's log start %d, starting over there",
                            partition, p.log_start_offset)
                partition.log.reset_to(p.log_start_offset)
                partition.high_watermark = p.log_start_offset
            else:
                state.truncating = True  # ahead of the leader: find where we diverged
            return
        if partition.log.log_end_offset != offset:
            return  # truncated meanwhile; the next round asks again
        records = bytes(p.records or b"")
        try:
            partition.append_as_follower(records, p.high_watermark)
        except InvalidRecordError as e:
            start = _first_offset(records)
            if start is not None and start < offset == partition.log.log_start_offset:
                # Our log is empty and starts inside the leader's first batch (its log
                # start moved into a batch: DeleteRecords): start at the batch, as Kafka's
                # follower does (truncateFullyAndStartAt), else the same fetch comes back.
                partition.log.reset_to(start)
                partition.high_watermark = start
                return
            if start is not None and partition.log.log_start_offset <= start < offset:
                # The leader's batch holding our log end starts before it: our tail was
                # written in other batches, so it is not the leader's. Truncation by epoch
                # finds nothing to cut while the epochs agree; the leader's boundary is
                # where our logs are known to meet, and we fetch from there.
                log.warning("%s: the leader's batch at offset %d overlaps our log end %d "
                            "(high watermark %d); truncating to it", partition, start, offset,
                            partition.high_watermark)
                partition.truncate_to(start)
                return
            log.warning("%s: fetched data does not continue our log (%s); truncating",
                        partition, e)
            state.truncating = True
            return
        except KafkaStorageError as e:
            log.warning("%s", e)  # the replica manager stops fetching it
            return
        partition.follow_log_start_offset(p.log_start_offset)


def _first_offset(records: bytes) -> int | None:
    """The base offset of the first batch of a fetched record set whose every batch is
    whole and intact (a damaged one says nothing about where our logs meet), else None."""
    try:
        headers = split_batches(records, allow_empty=True)
    except InvalidRecordError:
        return None
    return headers[0].base_offset if headers else None
