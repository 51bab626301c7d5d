"""ShareFetch (78) and ShareAcknowledge (79): share consumers acquire records and acknowledge
them (KIP-932). The rules are ``broker.share``; these check ACLs (READ on the group and on each
topic, as Kafka does), keep the member's share session, acknowledge before fetching (so a
released record can be fetched again at once), and wait up to MaxWaitMs for records to acquire.
"""

from __future__ import annotations

import asyncio
import struct
import time
import uuid
from datetime import timedelta
from typing import Any

from kio.schema.errors import ErrorCode

from broker.coordinator.group_store import MAX_NAME_BYTES
from broker.coordinator.share_state_log import ShareKey
from broker.handlers import handles
from broker.handlers.context import RequestContext
from broker.handlers.groups import may
from broker.protocol.fetch import EncodedResponse
from broker.protocol.file_region import FileRegion
from broker.protocol.messages import build_response
from broker.protocol.primitives import I16, I32, write_uvarint
from broker.security.acl import Operation, ResourceType
from broker.share.share_partition import AckBatch
from broker.share.share_partitions import Fetched, Slot
from broker.share.share_sessions import CLOSE, OPEN, SessionError

NO_TIME = timedelta(0)
Tp = tuple[uuid.UUID, int]
_LEADER = struct.Struct(">iib")  # leader id, epoch, no tagged fields
_ACQUIRED = struct.Struct(">qqhb")  # first offset, last offset, delivery count, no tags
_HEAD = struct.Struct(">iibih")  # size, correlation id, no header tags, throttle, error


def _acks(topics: Any) -> dict[Tp, list[AckBatch]]:
    """Each partition's acknowledgements; a partition named twice has all of them (and
    overlapping ranges among them are refused as such)."""
    out: dict[Tp, list[AckBatch]] = {}
    for t in topics:
        for p in t.partitions:
            for b in p.acknowledgement_batches:
                out.setdefault((t.topic_id, p.partition_index), []).append(
                    AckBatch(b.first_offset, b.last_offset, tuple(b.acknowledge_types)))
    return out


def _denied_topics(ctx: RequestContext, tps: list[Tp]) -> set[uuid.UUID]:
    """Topics (by id) the principal may not READ, or that do not exist."""
    store = ctx.services.store
    names = {tp[0]: store.topic_by_id(tp[0]) for tp in tps}
    known = {tid: t.name for tid, t in names.items() if t is not None}
    allowed = ctx.authorized_names(Operation.READ, ResourceType.TOPIC, list(known.values()))
    return {tid for tid, name in known.items() if name not in allowed}


def _leader(ctx: RequestContext, topic_id: uuid.UUID, index: int) -> dict[str, int]:
    topic = ctx.services.store.topic_by_id(topic_id)
    if topic is None or index >= topic.partitions:
        return {"leader_id": -1, "leader_epoch": -1}
    state = topic.assignments[index]
    return {"leader_id": state.leader, "leader_epoch": state.leader_epoch}


def _endpoints(ctx: RequestContext, leaders: set[int]) -> list[dict[str, Any]]:
    out = []
    for node in sorted(n for n in leaders if n >= 0):
        endpoint = ctx.broker_endpoint(node)
        if endpoint is not None:
            out.append({"node_id": node, "host": endpoint.host, "port": endpoint.port,
                        "rack": endpoint.rack})
    return out


class _Answer:
    """Per-partition results, built into ShareFetch's or ShareAcknowledge's response."""

    def __init__(self, ctx: RequestContext) -> None:
        self.ctx = ctx
        self.partitions: dict[Tp, dict[str, Any]] = {}
        self.moved: set[int] = set()
        self.found = False  # records acquired or a fetch error: the fetch answers now

    def entry(self, tp: Tp) -> dict[str, Any]:
        return self.partitions.setdefault(tp, {
            "partition_index": tp[1], "error_code": ErrorCode.none, "error_message": None,
            "acknowledge_error_code": ErrorCode.none, "acknowledge_error_message": None,
            "current_leader": {"leader_id": -1, "leader_epoch": -1}, "records": b"",
            "acquired_records": []})

    def error(self, tp: Tp, code: ErrorCode, message: str | None = None,
              acknowledging: bool = False) -> None:
        entry = self.entry(tp)
        self.found = self.found or not acknowledging
        entry["acknowledge_error_code" if acknowledging else "error_code"] = code
        entry["acknowledge_error_message" if acknowledging else "error_message"] = message
        if code in (ErrorCode.not_leader_or_follower, ErrorCode.fenced_leader_epoch):
            leader = _leader(self.ctx, *tp)
            entry["current_leader"] = leader
            self.moved.add(leader["leader_id"])

    def fetched(self, tp: Tp, got: Fetched) -> None:
        self.found = True
        entry = self.entry(tp)
        entry["records"] = got.records if got.records is not None else b""
        entry["acquired_records"] = [
            {"first_offset": a.first_offset, "last_offset": a.last_offset,
             "delivery_count": a.delivery_count} for a in got.acquired]

    def topics(self, keys: tuple[str, ...]) -> list[dict[str, Any]]:
        by_topic: dict[uuid.UUID, list[dict[str, Any]]] = {}
        for (topic_id, _), entry in self.partitions.items():
            by_topic.setdefault(topic_id, []).append({k: entry[k] for k in keys})
        return [{"topic_id": tid, "partitions": parts} for tid, parts in by_topic.items()]


async def _acknowledge(ctx: RequestContext, answer: _Answer, group_id: str, member_id: str,
                       acks: dict[Tp, list[AckBatch]]) -> None:
    shares = ctx.services.shares
    for tp, batches in acks.items():
        slot = await shares.slot(group_id, *tp)
        if isinstance(slot, ErrorCode):
            answer.error(tp, slot, acknowledging=True)
            continue
        code, message = await shares.acknowledge(slot, member_id, batches)
        if code != ErrorCode.none:
            answer.error(tp, code, message, acknowledging=True)
        else:
            answer.entry(tp)


def _refused(request: Any, lock_ms: timedelta, code: ErrorCode, message: str | None) -> Any:
    """A ShareFetch or ShareAcknowledge answered with a top-level error."""
    return build_response(request, {
        "throttle_time": NO_TIME, "error_code": code, "error_message": message,
        "acquisition_lock_timeout": lock_ms, "responses": [], "node_endpoints": []})


def _check(ctx: RequestContext, group_id: str | None, member_id: str | None
           ) -> tuple[ErrorCode, str | None] | None:
    """What both share APIs refuse first: no group or member, a group id no record key
    holds, no READ on the group."""
    if not group_id or not member_id:
        return ErrorCode.invalid_request, "GroupId and MemberId must be set."
    if len(group_id.encode()) > MAX_NAME_BYTES:
        return ErrorCode.invalid_request, "GroupId is too long to be stored."
    if not may(ctx, Operation.READ, group_id):
        return ErrorCode.group_authorization_failed, None
    return None


@handles(78, 1, 2)
async def handle_share_fetch(ctx: RequestContext, request: Any) -> Any:
    services = ctx.services
    group_id, member_id = request.group_id, request.member_id
    lock_ms = timedelta(milliseconds=services.shares.lock_ms(group_id or ""))

    def refuse(code: ErrorCode, message: str | None = None) -> Any:
        return _refused(request, lock_ms, code, message)

    refused = _check(ctx, group_id, member_id)
    if refused is not None:
        return refuse(*refused)
    named = [(t.topic_id, p.partition_index) for t in request.topics for p in t.partitions]
    forgotten = [(f.topic_id, p) for f in request.forgotten_topics_data for p in f.partitions]
    epoch = request.share_session_epoch
    acks = _acks(request.topics)
    if acks and epoch == OPEN:
        return refuse(ErrorCode.invalid_request,
                      "Acknowledge data present on initial fetch for a share session.")
    if epoch == OPEN:
        services.shares.revalidate(group_id)  # its offsets may have been reset meanwhile
    try:
        session, _ = services.share_sessions.open_or_continue(
            group_id, member_id, epoch, named, forgotten, connection=ctx.head_of_line)
    except SessionError as e:
        return refuse(e.code, str(e))
    if epoch == OPEN:
        services.shares.wake()  # the session expires when idle: the expiry loop must look
    answer = _Answer(ctx)
    if acks:
        await _acknowledge(ctx, answer, group_id, member_id, acks)
    if epoch == CLOSE:
        services.share_sessions.close(group_id, member_id)
        await services.shares.release(group_id, member_id, {
            ShareKey(group_id, *tp) for tp in session.partitions})
    else:
        await _fetch(ctx, answer, request, group_id, member_id, list(session.partitions))
    return _encode(ctx.header.correlation_id, lock_ms, answer.partitions,
                   _endpoints(ctx, answer.moved))


def _string(value: str | None) -> bytes:
    """A compact nullable string."""
    if value is None:
        return b"\0"
    raw = value.encode()
    return write_uvarint(len(raw) + 1) + raw


def _encode(correlation_id: int, lock_ms: timedelta, partitions: dict[Tp, dict[str, Any]],
            endpoints: list[dict[str, Any]]) -> EncodedResponse:
    """A successful ShareFetchResponse (v1 and v2 are one layout) with each partition's
    records as their file region, sent by sendfile as Fetch sends them: building it through
    kio copied every record into the frame (profiled: the copies, pread included, were
    about a tenth of the broker at 1 consumer). The test checks it against kio's bytes."""
    by_topic: dict[uuid.UUID, list[dict[str, Any]]] = {}
    for (topic_id, _), entry in partitions.items():
        by_topic.setdefault(topic_id, []).append(entry)
    chunks: list[bytes | FileRegion] = []
    # After the header's fixed fields (_HEAD): no error message, the lock duration.
    buf = bytearray(b"\0" + I32.pack(int(lock_ms.total_seconds() * 1000)))
    buf += write_uvarint(len(by_topic) + 1)
    for topic_id, entries in by_topic.items():
        buf += topic_id.bytes + write_uvarint(len(entries) + 1)
        for e in entries:
            buf += I32.pack(e["partition_index"]) + I16.pack(e["error_code"])
            buf += _string(e["error_message"])
            buf += I16.pack(e["acknowledge_error_code"])
            buf += _string(e["acknowledge_error_message"])
            leader = e["current_leader"]
            buf += _LEADER.pack(leader["leader_id"], leader["leader_epoch"], 0)
            records = e["records"]
            if isinstance(records, FileRegion):
                buf += write_uvarint(records.length + 1)
                chunks.append(bytes(buf))
                chunks.append(records)
                buf = bytearray()
            else:
                buf += write_uvarint(len(records) + 1) + records
            acquired = e["acquired_records"]
            buf += write_uvarint(len(acquired) + 1)
            for a in acquired:
                buf += _ACQUIRED.pack(a["first_offset"], a["last_offset"],
                                      a["delivery_count"], 0)
            buf += b"\0"  # partition tagged fields
        buf += b"\0"  # topic tagged fields
    buf += write_uvarint(len(endpoints) + 1)
    for node in endpoints:
        buf += I32.pack(node["node_id"]) + _string(node["host"]) + I32.pack(node["port"])
        buf += _string(node["rack"]) + b"\0"
    buf += b"\0"  # response tagged fields
    chunks.append(bytes(buf))
    size = sum(len(c) if isinstance(c, bytes) else c.length for c in chunks)
    first = chunks[0]
    assert isinstance(first, bytes)
    chunks[0] = _HEAD.pack(size + 4 + 1 + 4 + 2, correlation_id, 0, 0, 0) + first
    return EncodedResponse(chunks, size + 4 + 4 + 1 + 4 + 2)


async def _fetch(ctx: RequestContext, answer: _Answer, request: Any, group_id: str,
                 member_id: str, partitions: list[Tp]) -> None:
    """Acquire from the session's partitions, waiting up to MaxWaitMs for something to
    acquire (or an error to report)."""
    shares = ctx.services.shares
    denied = _denied_topics(ctx, partitions)
    slots: list[tuple[Tp, Slot]] = []
    for tp in partitions:
        if tp[0] in denied:
            answer.error(tp, ErrorCode.topic_authorization_failed)
            continue
        slot = await shares.slot(group_id, *tp)
        if slot == ErrorCode.coordinator_not_available:
            continue  # its state cannot be read yet: nothing to acquire this time
        if isinstance(slot, ErrorCode):
            answer.error(tp, slot)
        else:
            slots.append((tp, slot))
    deadline = time.monotonic() + max(0, request.max_wait.total_seconds())
    max_records = max(1, getattr(request, "max_records", 500))
    arrivals = ctx.head_of_line.arrivals
    while True:
        budget, records = max(1, request.max_bytes), max_records
        for tp, slot in slots:
            if records <= 0 or budget <= 0:
                break
            got = shares.fetch(slot, member_id, records, budget,
                               read_committed=shares.read_committed(group_id))
            if got.acquired:
                answer.fetched(tp, got)
                records -= sum(a.last_offset - a.first_offset + 1 for a in got.acquired)
                budget -= got.size
        left = deadline - time.monotonic()
        behind = ctx.head_of_line.arrivals != arrivals  # a request came after this one
        if answer.found or not slots or left <= 0 or behind:
            return
        # Waiting for records (new ones, or released ones), or for the client's next request.
        waited: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        ctx.head_of_line.park(waited)
        try:
            await ctx.services.replicas.wait_for_data([s.partition for _, s in slots], left,
                                                      waited)
        finally:
            ctx.head_of_line.unpark(waited)


@handles(79, 1, 2)
async def handle_share_acknowledge(ctx: RequestContext, request: Any) -> Any:
    services = ctx.services
    group_id, member_id = request.group_id, request.member_id
    lock_ms = timedelta(milliseconds=services.shares.lock_ms(group_id or ""))

    def refuse(code: ErrorCode, message: str | None = None) -> Any:
        return _refused(request, lock_ms, code, message)

    refused = _check(ctx, group_id, member_id)
    if refused is not None:
        return refuse(*refused)
    epoch = request.share_session_epoch
    if epoch == OPEN:
        return refuse(ErrorCode.invalid_share_session_epoch,
                      "A share session is opened by ShareFetch, not ShareAcknowledge.")
    try:
        session = services.share_sessions.current(group_id, member_id, epoch)
    except SessionError as e:
        return refuse(e.code, str(e))
    if epoch != CLOSE:  # the next request may be sent before this one is answered
        services.share_sessions.advance(session)
    answer = _Answer(ctx)
    await _acknowledge(ctx, answer, group_id, member_id, _acks(request.topics))
    if epoch == CLOSE:
        services.share_sessions.close(group_id, member_id)
        await services.shares.release(group_id, member_id, {
            ShareKey(group_id, *tp) for tp in session.partitions})
    for entry in answer.partitions.values():  # ShareAcknowledge has one error per partition
        entry["error_code"] = entry["acknowledge_error_code"]
        entry["error_message"] = entry["acknowledge_error_message"]
    return build_response(request, {
        "throttle_time": NO_TIME, "error_code": ErrorCode.none, "error_message": None,
        "acquisition_lock_timeout": lock_ms,
        "responses": answer.topics(("partition_index", "error_code", "error_message",
                                    "current_leader")),
        "node_endpoints": _endpoints(ctx, answer.moved)})
