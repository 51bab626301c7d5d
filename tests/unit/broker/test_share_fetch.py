"""ShareFetch and ShareAcknowledge through the handlers, the share-partition manager and the
share coordinator of one broker: records acquired by one member at a time, acknowledged by
their holder only, released ones redelivered with their delivery count, a closed session's
records given back, bad session epochs and foreign acknowledgements refused with Kafka's codes,
and the acknowledged state surviving the partition's leadership moving away and back."""

from __future__ import annotations

import asyncio
import contextlib
import os
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from broker.coordinator import share_state_log as ssl
from broker.handlers import (
    share_fetch,  # registers; its encoder is tested here
    share_groups,  # noqa: F401 (registers ShareGroupHeartbeat)
)
from broker.handlers.context import BrokerServices
from broker.protocol.codec import encode_response
from broker.protocol.file_region import FileRegion
from broker.protocol.messages import build_response
from broker.share.share_partition import AckBatch
from kafkube.harness.wire import build_batch
from tests.support.group_calls import finish_now
from tests.support.handlers import call, inline, make_services, request

TOPIC = "orders"
GROUP = "queue"
ACCEPT, RELEASE, REJECT = 1, 2, 3


@pytest.fixture
def services(tmp_path: Path) -> BrokerServices:
    services = make_services(tmp_path, **{"share.coordinator.state.topic.num.partitions": "2"})
    asyncio.run(services.replicas.create_topic(TOPIC, 1, {}))
    services.shares.settings.own = lambda group: {"share.auto.offset.reset": "earliest"}
    return services


def topic_id(services: BrokerServices) -> Any:
    return services.store.topics[TOPIC].uuid


def produce(services: BrokerServices, count: int) -> None:
    batch = build_batch([(None, f"v{i}".encode(), (), 0) for i in range(count)],
                        1_700_000_000_000)
    assert services.replicas.get(TOPIC, 0).append(batch, 1 << 20).error == ErrorCode.none


def acks(services: BrokerServices, batches: list[tuple[int, int, list[int]]]) -> list[dict]:
    return [{"topic_id": topic_id(services), "partitions": [
        {"partition_index": 0, "acknowledgement_batches": [
            {"first_offset": f, "last_offset": last, "acknowledge_types": types}
            for f, last, types in batches]}]}]


def fetch(services: BrokerServices, member: str, epoch: int,
          ack: list[tuple[int, int, list[int]]] | None = None) -> Any:
    topics = acks(services, ack) if ack else [
        {"topic_id": topic_id(services), "partitions": [
            {"partition_index": 0, "acknowledgement_batches": []}]}]
    return call(services, request(78, 2, {
        "group_id": GROUP, "member_id": member, "share_session_epoch": epoch,
        "max_wait": timedelta(0), "min_bytes": 1, "max_bytes": 1 << 20, "max_records": 100,
        "batch_size": 100, "share_acquire_mode": 0, "is_renew_ack": False,
        "topics": topics, "forgotten_topics_data": []}))


def acknowledge(services: BrokerServices, member: str, epoch: int,
                batches: list[tuple[int, int, list[int]]]) -> Any:
    return call(services, request(79, 2, {
        "group_id": GROUP, "member_id": member, "share_session_epoch": epoch,
        "is_renew_ack": False, "topics": acks(services, batches)}))


def acquired(response: Any) -> list[tuple[int, int, int]]:
    assert response.error_code == ErrorCode.none, response
    return [(a.first_offset, a.last_offset, a.delivery_count)
            for t in response.responses for p in t.partitions for a in p.acquired_records]


def partition_of(response: Any) -> Any:
    (topic,) = response.responses
    (partition,) = topic.partitions
    return partition


def test_records_are_shared_acknowledged_and_redelivered(services: BrokerServices) -> None:
    produce(services, 5)
    a = fetch(services, "a", 0)
    assert acquired(a) == [(0, 4, 1)] and partition_of(a).records
    assert a.acquisition_lock_timeout == timedelta(seconds=30)
    assert acquired(fetch(services, "b", 0)) == []  # all five are a's for now
    done = acknowledge(services, "a", 1, [(0, 1, [ACCEPT]), (2, 2, [RELEASE])])
    assert partition_of(done).error_code == ErrorCode.none
    assert acquired(fetch(services, "b", 1)) == [(2, 2, 2)]  # redelivered: its second time
    # b may not acknowledge what a holds; nothing changes.
    foreign = acknowledge(services, "b", 2, [(3, 3, [ACCEPT])])
    assert partition_of(foreign).error_code == ErrorCode.invalid_record_state
    # a closes its session: what it still holds (3, 4) goes back, and b gets it.
    closed = fetch(services, "a", -1)
    assert closed.error_code == ErrorCode.none
    assert acquired(fetch(services, "b", 3)) == [(3, 4, 2)]
    share = services.shares.slots[next(iter(services.shares.slots))].share
    assert share.start_offset == 2  # 0 and 1 are done


def test_session_epochs_are_checked(services: BrokerServices) -> None:
    assert fetch(services, "a", 5).error_code == ErrorCode.share_session_not_found
    assert fetch(services, "a", 0).error_code == ErrorCode.none
    assert fetch(services, "a", 3).error_code == ErrorCode.invalid_share_session_epoch
    assert acknowledge(services, "a", 0, []).error_code == \
        ErrorCode.invalid_share_session_epoch
    assert fetch(services, "a", 1).error_code == ErrorCode.none
    opened_with_acks = fetch(services, "c", 0, ack=[(0, 0, [ACCEPT])])
    assert opened_with_acks.error_code == ErrorCode.invalid_request


def test_the_stored_state_survives_a_leadership_change(services: BrokerServices) -> None:
    produce(services, 4)
    assert acquired(fetch(services, "a", 0)) == [(0, 3, 1)]
    acknowledge(services, "a", 1, [(0, 0, [ACCEPT]), (1, 1, [REJECT]), (2, 2, [RELEASE])])
    # The partition's leadership moves away and back: the locks are gone, the state stays.
    partition = services.replicas.get(TOPIC, 0)
    services.shares.on_leadership(partition, False)
    state = services.replicas.get(ssl.TOPIC, services.share_coordinator.partition_of(
        next(iter(services.share_coordinator.states))))
    services.share_coordinator.on_leadership(state, False)
    services.share_coordinator.on_leadership(state, True)
    # 0 accepted and 1 rejected are never delivered again; 2 (released) and 3 (held when
    # the leadership moved) are, 3 with its delivery counted.
    assert acquired(fetch(services, "b", 0)) == [(2, 3, 2)]


def test_a_new_session_keeps_the_records_the_member_holds(services: BrokerServices) -> None:
    """A client opens a new session after a failed request while still holding records
    (Kafka keeps them too): they are not redelivered, and it acknowledges them."""
    produce(services, 3)
    assert acquired(fetch(services, "a", 0)) == [(0, 2, 1)]
    assert acquired(fetch(services, "a", 0)) == []  # a new session: still a's, not again
    done = acknowledge(services, "a", 1, [(0, 2, [ACCEPT])])
    assert partition_of(done).error_code == ErrorCode.none


def test_idle_sessions_are_evicted_and_their_records_released(
        services: BrokerServices) -> None:
    produce(services, 2)
    assert acquired(fetch(services, "a", 0)) == [(0, 1, 1)]
    sessions = services.share_sessions
    assert [s.member_id for s in sessions.evict_idle(10**9, lambda group: 45)] == ["a"]

    async def release() -> None:
        await services.shares.release(GROUP, "a")
    asyncio.run(release())
    assert acquired(fetch(services, "b", 0)) == [(0, 1, 2)]
    assert fetch(services, "a", 1).error_code == ErrorCode.share_session_not_found


def test_an_acknowledgement_whose_request_is_cancelled_is_still_stored_once(
        services: BrokerServices) -> None:
    """The client's connection closes while its acknowledgement is being stored: the change
    is stored and applied all the same, nothing is left half done, and a later request
    sees it."""
    produce(services, 2)
    assert acquired(fetch(services, "a", 0)) == [(0, 1, 1)]
    shares = services.shares
    slot = next(iter(shares.slots.values()))
    real_write = shares.persister.write

    async def scenario() -> None:
        gate = asyncio.Event()

        async def slow_write(*args: Any) -> ErrorCode:
            await gate.wait()
            return await real_write(*args)
        shares.persister.write = slow_write  # type: ignore[method-assign]
        ack = asyncio.ensure_future(shares.acknowledge(
            slot, "a", [AckBatch(0, 1, (ACCEPT,))]))
        await asyncio.sleep(0)
        ack.cancel()
        gate.set()
        for _ in range(20):
            await asyncio.sleep(0)
        shares.persister.write = real_write  # type: ignore[method-assign]
        assert not slot.share.pending and slot.share.start_offset == 2

    asyncio.run(scenario())
    state = asyncio.run(services.share_coordinator.read(slot.key)).state
    assert state.start_offset == 2  # stored, once


def test_the_metrics_count_redeliveries_expiries_and_the_backlog(
        services: BrokerServices) -> None:
    produce(services, 4)
    assert acquired(fetch(services, "a", 0)) == [(0, 3, 1)]
    acknowledge(services, "a", 1, [(0, 0, [ACCEPT])])
    asyncio.run(services.shares.expire(now=10**9))  # the other three's locks run out
    assert acquired(fetch(services, "b", 0)) == [(1, 3, 2)]
    (sample,) = services.shares.samples()
    assert (sample.group, sample.in_flight, sample.redeliveries, sample.lock_expiries,
            sample.backlog) == (GROUP, 3, 3, 3, 3)


def test_a_closed_connection_ends_its_sessions(services: BrokerServices) -> None:
    sessions = services.share_sessions
    first, other = object(), object()
    sessions.open_or_continue(GROUP, "a", 0, [], [], connection=first)
    sessions.open_or_continue(GROUP, "b", 0, [], [], connection=other)
    assert [s.member_id for s in sessions.closed_connection(first)] == ["a"]
    assert list(sessions.sessions) == [(GROUP, "b")]


@pytest.mark.parametrize("version", [1, 2])
def test_the_hand_encoded_response_is_kio_s_bytes_with_records_sent_from_the_file(
        tmp_path: Path, version: int) -> None:
    """ShareFetch's response carries file regions (sent by sendfile); read back, the frame
    is byte for byte what kio encodes, errors, leaders, runs and endpoints included."""
    log = tmp_path / "segment"
    log.write_bytes(b"x" * 10 + b"records-from-the-log" + b"y" * 10)
    t1, t2 = uuid.UUID(int=1), uuid.UUID(int=2)
    entry = {"error_code": ErrorCode.none, "error_message": None,
             "acknowledge_error_code": ErrorCode.none, "acknowledge_error_message": None,
             "current_leader": {"leader_id": -1, "leader_epoch": -1}, "records": b"",
             "acquired_records": []}
    with log.open("rb") as f:
        parts: dict[Any, dict[str, Any]] = {
            (t1, 0): {**entry, "partition_index": 0,
                      "records": FileRegion(f.fileno(), 10, 20),
                      "acquired_records": [
                          {"first_offset": 5, "last_offset": 9, "delivery_count": 1},
                          {"first_offset": 10, "last_offset": 300, "delivery_count": 2}]},
            (t2, 3): {**entry, "partition_index": 3, "records": b"\x01" * 200},
            (t1, 1): {**entry, "partition_index": 1,
                      "error_code": ErrorCode.not_leader_or_follower,
                      "error_message": "moved", "acknowledge_error_message": "é",
                      "acknowledge_error_code": ErrorCode.invalid_record_state,
                      "current_leader": {"leader_id": 2, "leader_epoch": 7}}}
        nodes = [{"node_id": 2, "host": "b2", "port": 9092, "rack": None},
                 {"node_id": 3, "host": "b3", "port": 9093, "rack": "r1"}]
        lock = timedelta(milliseconds=15_000)
        frame = inline(share_fetch._encode(42, lock, parts, nodes))
        by_topic: dict[Any, list[dict[str, Any]]] = {}
        for (tid, _), e in parts.items():
            records = e["records"]
            if isinstance(records, FileRegion):
                records = os.pread(records.fd, records.length, records.position)
            by_topic.setdefault(tid, []).append({**e, "records": records})
        req = request(78, version, {
            "group_id": GROUP, "member_id": "m", "share_session_epoch": 0,
            "max_wait": timedelta(0), "min_bytes": 1, "max_bytes": 1, "max_records": 1,
            "batch_size": 1, "share_acquire_mode": 0, "is_renew_ack": False, "topics": [],
            "forgotten_topics_data": []})
        expected = encode_response(42, build_response(req, {
            "throttle_time": timedelta(0), "error_code": ErrorCode.none,
            "error_message": None, "acquisition_lock_timeout": lock,
            "responses": [{"topic_id": tid, "partitions": ps} for tid, ps in by_topic.items()],
            "node_endpoints": nodes}))
    assert frame == expected


def window(services: BrokerServices) -> tuple[Any, ...]:
    """What the share-partition knows and what its coordinator stored: a refused
    acknowledgement must change neither."""
    slot = next(iter(services.shares.slots.values()))
    share = slot.share
    stored = asyncio.run(services.share_coordinator.read(slot.key)).state
    return (share.start_offset,
            [(r.state, r.delivery_count, r.member_id) for r in share.records],
            stored.start_offset, stored.batches)


def test_bad_acknowledgements_get_kafkas_codes_and_change_nothing(
        services: BrokerServices) -> None:
    """Overlapping ranges and offsets never acquired are INVALID_REQUEST; records whose lock
    ran out, held by another member, or held by a member the group fenced (its session
    expired: the coordinator gives back what it held, as the broker wires it) are
    INVALID_RECORD_STATE. None of them changes the share-partition or its stored state,
    the valid ranges of the same request included."""
    finish_now(services.groups.ensure_offsets_topic())
    services.groups.load()
    produce(services, 6)

    def heartbeat(member: str, epoch: int) -> Any:
        return call(services, request(76, 1, {
            "group_id": GROUP, "member_id": member, "member_epoch": epoch, "rack_id": None,
            "subscribed_topic_names": [TOPIC] if epoch == 0 else None}))

    assert heartbeat("a", 0).error_code == ErrorCode.none
    assert acquired(fetch(services, "a", 0)) == [(0, 5, 1)]
    before = window(services)
    refused = [
        ([(0, 2, [ACCEPT]), (2, 3, [ACCEPT])], ErrorCode.invalid_request),  # overlapping
        ([(0, 0, [ACCEPT]), (6, 6, [ACCEPT])], ErrorCode.invalid_request),  # never acquired
        ([(0, 1, [ACCEPT, 9])], ErrorCode.invalid_request),  # no such acknowledge type
    ]
    for epoch, (batches, code) in enumerate(refused, start=1):
        answer = acknowledge(services, "a", epoch, batches)
        assert partition_of(answer).error_code == code, (batches, answer)
        assert window(services) == before, batches
    # The locks run out: a's records are available again, and a may not acknowledge them.
    asyncio.run(services.shares.expire(now=10**9))
    expired = window(services)
    answer = acknowledge(services, "a", 4, [(0, 1, [ACCEPT])])
    assert partition_of(answer).error_code == ErrorCode.invalid_record_state
    assert window(services) == expired
    # b takes them; a's acknowledgement of b's records is refused the same way.
    assert heartbeat("b", 0).error_code == ErrorCode.none
    assert acquired(fetch(services, "b", 0)) == [(0, 5, 2)]
    taken = window(services)
    answer = acknowledge(services, "a", 5, [(2, 2, [REJECT])])
    assert partition_of(answer).error_code == ErrorCode.invalid_record_state
    assert window(services) == taken

    async def fence_b() -> None:
        # b stops heartbeating: the coordinator fences it at the next tick, and what it holds
        # goes back at once (the broker's wiring), not when its locks run out.
        services.groups.shares.on_member_left = services.shares.release_later
        services.groups.shares.sessions[(GROUP, "b")] = 0.0
        services.groups.tick(now=1.0)
        await asyncio.gather(*(asyncio.all_tasks() - {asyncio.current_task()}))

    asyncio.run(fence_b())
    assert heartbeat("b", 1).error_code == ErrorCode.unknown_member_id
    fenced = window(services)
    assert [r[0] for r in fenced[1]] == [ssl.RecordState.AVAILABLE] * 6
    answer = acknowledge(services, "b", 1, [(0, 5, [ACCEPT])])
    assert partition_of(answer).error_code == ErrorCode.invalid_record_state
    assert window(services) == fenced
    # a, still a member, gets them for the third time and acknowledges them.
    assert acquired(fetch(services, "a", 6)) == [(0, 5, 3)]
    assert partition_of(acknowledge(services, "a", 7, [(0, 5, [ACCEPT])])).error_code == \
        ErrorCode.none
    assert window(services)[::2] == (6, 6)


def test_the_expiry_loop_rests_until_a_share_partition_or_session_exists(
        services: BrokerServices) -> None:
    """An idle broker's expiry loop does not wake every 100 ms for nothing; a share-partition
    made wakes it at once, and it looks every ``interval`` from then on."""
    shares = services.shares
    rounds: list[float] = []
    real_expire = shares.expire

    async def counted(now: float) -> None:
        rounds.append(now)
        await real_expire(now)

    async def scenario() -> tuple[int, int]:
        shares.expire = counted  # type: ignore[method-assign]
        task = asyncio.create_task(shares.run_expiry(services.share_sessions, interval=0.01))
        await asyncio.sleep(0.3)  # an idle spell, shorter than the idle look (1 s)
        idle = len(rounds)
        produce(services, 1)
        slot = await shares.slot(GROUP, topic_id(services), 0)
        assert not isinstance(slot, ErrorCode), slot
        for _ in range(500):  # bounded: woken, it looks every 10 ms
            if len(rounds) >= idle + 3:
                break
            await asyncio.sleep(0.01)
        busy = len(rounds) - idle
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        return idle, busy

    idle, busy = asyncio.run(scenario())
    assert idle == 0, idle
    assert busy >= 3, busy
