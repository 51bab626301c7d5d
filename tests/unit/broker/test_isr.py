"""ISR changes as a partition leader makes them, against a real replica manager and the
embedded coordination backend; and the cancellation the replica fetcher's stop relies on."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from broker.cluster.metadata import ConcurrentUpdate, MetadataUnavailable
from broker.config.broker_config import BrokerConfig
from broker.network.client import KafkaConnection
from broker.server import isr_changes
from broker.server.partition import Partition
from kafkube_contract.image import PartitionState
from kafkube_contract.registration import BrokerRegistration
from tests.support.in_process import open_replicas
from tests.support.txn_logs import data_batch

LEADER, FOLLOWER = 0, 1
SESSION_MS = 3_600_000


@pytest.fixture
def replicas(tmp_path: Path) -> Any:
    config = BrokerConfig.from_dict({"log.dirs": str(tmp_path / "logs"), "node.id": str(LEADER)})
    _, replicas = open_replicas(config)
    yield replicas
    asyncio.run(replicas.shutdown())


def follower_epoch(replicas: Any) -> int:
    return replicas.metadata.backend.register_broker(
        BrokerRegistration(FOLLOWER, "127.0.0.1", 9093, None), SESSION_MS)


def isr_after_catch_up(replicas: Any) -> list[int]:
    """The ISR once the follower fetched at the leader's end and the leader's background
    ISR change (if any) is done and applied."""
    partition = replicas.partitions[("t", 0)]

    async def fetch() -> None:
        replicas.record_follower_fetch(partition, FOLLOWER, partition.log.log_end_offset)
        await asyncio.gather(*replicas.isr_changes.pending)

    asyncio.run(fetch())
    replicas.metadata.refresh()
    replicas.apply_image(replicas.metadata.image)
    return list(partition.isr)


def test_only_a_registered_broker_rejoins_the_isr(replicas: Any) -> None:
    epoch = follower_epoch(replicas)
    asyncio.run(replicas.create_topic("t", 1, {}, 2, [(LEADER, FOLLOWER)]))
    replicas.apply_image(replicas.metadata.image)
    partition = replicas.partitions[("t", 0)]
    assert asyncio.run(replicas.isr_changes.change(partition, remove=[FOLLOWER]))
    replicas.apply_image(replicas.metadata.image)
    assert list(partition.isr) == [LEADER]

    # Its lease gone (a controlled shutdown, or fenced by the controller) but still
    # fetching for a moment: it stays out, or leader and controller would fight.
    replicas.metadata.backend.unregister_broker(FOLLOWER, epoch)
    expands = replicas.isr_changes.expands
    assert isr_after_catch_up(replicas) == [LEADER]
    assert replicas.isr_changes.expands == expands

    follower_epoch(replicas)
    assert isr_after_catch_up(replicas) == [LEADER, FOLLOWER]
    assert replicas.isr_changes.expands == expands + 1
    # A repeated catch-up changes nothing and is not counted as an expansion again.
    assert isr_after_catch_up(replicas) == [LEADER, FOLLOWER]
    assert replicas.isr_changes.expands == expands + 1


def test_a_follower_fetching_past_the_leaders_end_is_not_taken_into_the_isr(
        replicas: Any) -> None:
    """A fetch from beyond the leader's log end comes from a follower whose log diverged (a
    tail the leader never had): Kafka answers OFFSET_OUT_OF_RANGE and records no position
    (its follower state is updated only after a read). Counted as caught up, the follower
    joined the ISR with the wrong tail, and its fetches never showed it truncating."""
    follower_epoch(replicas)
    asyncio.run(replicas.create_topic("t", 1, {}, 2, [(LEADER, FOLLOWER)]))
    replicas.apply_image(replicas.metadata.image)
    partition = replicas.partitions[("t", 0)]
    assert asyncio.run(replicas.isr_changes.change(partition, remove=[FOLLOWER]))
    replicas.apply_image(replicas.metadata.image)
    end = partition.log.log_end_offset

    async def fetch_from(offset: int) -> None:
        replicas.record_follower_fetch(partition, FOLLOWER, offset)
        await asyncio.gather(*replicas.isr_changes.pending)

    asyncio.run(fetch_from(end + 5))
    replicas.metadata.refresh()
    replicas.apply_image(replicas.metadata.image)
    assert list(partition.isr) == [LEADER]
    assert FOLLOWER not in partition.followers \
        or partition.followers[FOLLOWER].log_end_offset <= end
    asyncio.run(fetch_from(end))  # truncated to the leader's end: it joins
    replicas.metadata.refresh()
    replicas.apply_image(replicas.metadata.image)
    assert list(partition.isr) == [LEADER, FOLLOWER]


class _AnsweredOnCue(KafkaConnection):
    """A connection whose answer arrives when the test says so."""

    def __init__(self) -> None:
        super().__init__("127.0.0.1", 9, "test", timeout=30)
        self.answer: asyncio.Future[str] = asyncio.get_running_loop().create_future()

    async def _roundtrip(self, api_key: int, api_version: int, body: Any) -> Any:
        return await self.answer


def test_a_request_cancelled_as_its_answer_arrives_is_cancelled() -> None:
    """Python 3.11's asyncio.wait_for returns the answer and drops the cancel here
    (CPython gh-86296); a replica fetcher that does so never stops, and the broker's
    shutdown hangs on it."""

    async def scenario() -> None:
        connection = _AnsweredOnCue()
        request = asyncio.create_task(connection.request(1, 12, None))
        await asyncio.sleep(0)  # the request now waits for its answer
        connection.answer.set_result("answer")
        request.cancel()
        with pytest.raises(asyncio.CancelledError):
            await request

    asyncio.run(scenario())


JOINER = 2


def joining_setup(replicas: Any) -> tuple[Partition, Callable[[], int]]:
    """A partition led here with ISR [leader, follower] and a third replica out of it, and
    a way to append 3 records as leader (returning the log end)."""
    follower_epoch(replicas)
    replicas.metadata.backend.register_broker(
        BrokerRegistration(JOINER, "127.0.0.1", 9094, None), SESSION_MS)
    asyncio.run(replicas.create_topic("t", 1, {}, 3, [(LEADER, FOLLOWER, JOINER)]))
    replicas.apply_image(replicas.metadata.image)
    partition = replicas.partitions[("t", 0)]
    assert asyncio.run(replicas.isr_changes.change(partition, remove=[JOINER]))
    replicas.apply_image(replicas.metadata.image)
    assert partition.isr == [LEADER, FOLLOWER]

    def produce() -> int:
        batch = data_batch([(None, b"x")] * 3, transactional=False)
        outcome = partition.append(batch, 1 << 20)
        assert outcome.error == ErrorCode.none, outcome
        return partition.log.log_end_offset

    return partition, produce


def committed_state(replicas: Any) -> PartitionState:
    return replicas.metadata.backend.read_image().partition("t", 0)


async def ask_to_join_through(replicas: Any, partition: Partition, produce: Callable[[], int],
                              update: Any, monkeypatch: pytest.MonkeyPatch) -> int:
    """Records appended and fetched by the ISR follower, then the joiner caught up and its
    join written through ``update`` (in place of the metadata's) to its end; the log end."""
    end = produce()
    replicas.record_follower_fetch(partition, FOLLOWER, end)
    monkeypatch.setattr(replicas.metadata, "update", update)
    replicas.record_follower_fetch(partition, JOINER, end)
    await asyncio.gather(*replicas.isr_changes.pending)
    return end


def test_the_high_watermark_waits_for_a_follower_whose_isr_join_is_in_flight(
        replicas: Any) -> None:
    """The repro of a loss (tests/integration/test_operator_pools.py, 1 run in 15 under
    load): a follower caught up, the leader asked for it to join the ISR, and while that
    change was on its way the high watermark moved on without it; once committed, the
    controller made the follower leader, and the records it lacked, acknowledged to acks=all
    producers, were truncated. The high watermark must wait for a joining follower from the
    moment the leader asks (Kafka's maximal ISR)."""
    partition, produce = joining_setup(replicas)

    async def scenario() -> None:
        end = produce()
        replicas.record_follower_fetch(partition, FOLLOWER, end)
        assert partition.high_watermark == end
        replicas.record_follower_fetch(partition, JOINER, end)  # caught up: asks to join
        assert replicas.isr_changes.pending
        # Before the change is written, the leader takes more and its ISR follower has it.
        later = produce()
        replicas.record_follower_fetch(partition, FOLLOWER, later)
        assert partition.high_watermark == end, "committed without the joining follower"
        await asyncio.gather(*replicas.isr_changes.pending)
        replicas.apply_image(replicas.metadata.image)
        assert partition.isr == [LEADER, FOLLOWER, JOINER]
        assert partition.high_watermark == end
        replicas.record_follower_fetch(partition, JOINER, later)
        assert partition.high_watermark == later

    asyncio.run(scenario())


def test_a_join_whose_write_got_no_answer_counts_until_an_image_says(
        replicas: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The API server committed the join but its answer never came (a timeout): the leader
    cannot tell, and the controller may already elect the follower; it counts until an
    image past the write says whether it joined."""
    partition, produce = joining_setup(replicas)
    backend = replicas.metadata.backend

    async def committed_unanswered(change: Any) -> Any:
        assert backend.write_image(change(backend.read_image()))  # stored, never applied
        raise MetadataUnavailable("the API server did not answer in time")

    async def scenario() -> None:
        end = await ask_to_join_through(replicas, partition, produce, committed_unanswered,
                                        monkeypatch)
        assert JOINER in committed_state(replicas).isr and partition.isr == [LEADER, FOLLOWER]
        later = produce()
        replicas.record_follower_fetch(partition, FOLLOWER, later)
        assert partition.high_watermark == end, "committed without the follower that joined"
        replicas.metadata.refresh()  # the image after the write, applied
        assert partition.isr == [LEADER, FOLLOWER, JOINER]
        replicas.record_follower_fetch(partition, JOINER, later)
        assert partition.high_watermark == later

    asyncio.run(scenario())


def test_a_join_decided_in_an_earlier_leader_epoch_is_not_written(replicas: Any) -> None:
    """A new leader epoch (a preferred election back to this broker) between the decision
    and the write: the join was judged against the old epoch's high watermark and start, so
    it is dropped; the follower joins again when it qualifies in this one."""
    partition, produce = joining_setup(replicas)

    async def scenario() -> None:
        end = produce()
        replicas.record_follower_fetch(partition, FOLLOWER, end)
        replicas.record_follower_fetch(partition, JOINER, end)

        def new_epoch(image: Any) -> Any:
            state = image.partition("t", 0)
            return image.with_partition("t", 0, replace(
                state, leader_epoch=state.leader_epoch + 1,
                partition_epoch=state.partition_epoch + 1))

        await replicas.metadata.update(new_epoch)
        replicas.apply_image(replicas.metadata.image)
        later = produce()
        replicas.record_follower_fetch(partition, FOLLOWER, later)
        await asyncio.gather(*replicas.isr_changes.pending)
        assert JOINER not in committed_state(replicas).isr
        assert partition.high_watermark == later

    asyncio.run(scenario())


def test_a_join_lost_to_other_writers_is_settled_by_the_image_they_left(
        replicas: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A join's compare-and-set lost every attempt to other writers (26 joins at once in a
    drain): their images were applied while it retried, and none may come after it if the
    drain waits on this very join; the outcome is read from them, and the follower joins at
    its next fetch (the drain of test_operator_pools.py once waited on it for 60 s)."""
    partition, produce = joining_setup(replicas)
    backend, update = replicas.metadata.backend, replicas.metadata.update

    async def lost_to_others(change: Any) -> Any:
        current = backend.read_image()
        assert change(current) is not None  # the join, based on this version
        assert backend.write_image(current)  # another writer's image first, applied
        replicas.metadata.refresh()
        raise ConcurrentUpdate("cluster metadata kept changing for 50 attempts")

    async def scenario() -> None:
        end = await ask_to_join_through(replicas, partition, produce, lost_to_others, monkeypatch)
        monkeypatch.setattr(replicas.metadata, "update", update)
        replicas.record_follower_fetch(partition, JOINER, end)  # no new image since
        await asyncio.gather(*replicas.isr_changes.pending)
        assert JOINER in committed_state(replicas).isr
        assert partition.isr == [LEADER, FOLLOWER, JOINER]

    asyncio.run(scenario())


def test_a_join_whose_write_was_not_stored_is_written_again(
        replicas: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The store refused the write (a 503) and nobody else writes: no image will ever say
    what became of it, so the leader writes it again at the follower's next fetch."""
    partition, produce = joining_setup(replicas)
    monkeypatch.setattr(isr_changes, "RETRY_BACKOFF_S", 0.0, raising=False)
    backend, update = replicas.metadata.backend, replicas.metadata.update

    async def refused(change: Any) -> Any:
        assert change(backend.read_image()) is not None  # based on this version, not stored
        raise MetadataUnavailable("the API server answered 503")

    async def failing_before_writing(change: Any) -> Any:
        raise MetadataUnavailable("the API server answered 503 to the read")

    async def scenario() -> None:
        end = await ask_to_join_through(replicas, partition, produce, refused, monkeypatch)
        assert partition.isr == [LEADER, FOLLOWER]
        # A retry whose store fails before it writes learns nothing: still counted.
        monkeypatch.setattr(replicas.metadata, "update", failing_before_writing)
        replicas.record_follower_fetch(partition, JOINER, end)
        await asyncio.gather(*replicas.isr_changes.pending)
        later = produce()
        replicas.record_follower_fetch(partition, FOLLOWER, later)
        assert partition.high_watermark == end
        monkeypatch.setattr(replicas.metadata, "update", update)
        replicas.record_follower_fetch(partition, JOINER, end)
        await asyncio.gather(*replicas.isr_changes.pending)
        assert JOINER in committed_state(replicas).isr
        assert partition.isr == [LEADER, FOLLOWER, JOINER] and not replicas.isr_changes.parked

    asyncio.run(scenario())


def test_a_parked_join_settled_while_its_retry_waits_is_not_written(
        replicas: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A parked join's retry waits behind the batch in flight, and that batch's image
    settles the join (not stored: the follower no longer counts for the high watermark).
    Written then, it would put in the ISR a follower the high watermark has passed."""
    partition, produce = joining_setup(replicas)
    monkeypatch.setattr(isr_changes, "RETRY_BACKOFF_S", 0.0, raising=False)
    backend, update = replicas.metadata.backend, replicas.metadata.update

    async def refused(change: Any) -> Any:
        assert change(backend.read_image()) is not None  # based on this version, not stored
        raise MetadataUnavailable("the API server answered 503")

    async def scenario() -> None:
        end = await ask_to_join_through(replicas, partition, produce, refused, monkeypatch)
        monkeypatch.setattr(replicas.metadata, "update", update)
        assert replicas.isr_changes.parked and partition.is_joining(JOINER)
        replicas.record_follower_fetch(partition, JOINER, end)  # its retry decided ...
        assert backend.write_image(backend.read_image())  # ... then another image lands
        replicas.metadata.refresh()
        assert not partition.is_joining(JOINER)  # settled: not stored, no longer counted
        await asyncio.gather(*replicas.isr_changes.pending)
        assert JOINER not in committed_state(replicas).isr

    asyncio.run(scenario())


def led_with_follower(replicas: Any, count: int) -> list[Partition]:
    """``count`` partitions of topic "t" led here, the follower in their ISR, opened."""
    follower_epoch(replicas)
    asyncio.run(replicas.create_topic("t", count, {}, 2, [(LEADER, FOLLOWER)] * count))
    replicas.apply_image(replicas.metadata.image)
    return [replicas.opened("t", i) for i in range(count)]  # not waiting for the slices


def test_joins_and_shrinks_of_many_partitions_are_written_in_one_batch(replicas: Any) -> None:
    """As Kafka's AlterPartitionManager sends what is queued in one request: each write
    rewrites the whole image, and a write per partition made a rejoining broker's
    10,000 joins take minutes of the event loop."""
    count = 200
    partitions = led_with_follower(replicas, count)
    for partition in partitions:  # the follower fell behind long ago
        partition.followers[FOLLOWER].last_caught_up_ms = 0.0

    before = replicas.metadata.image.version
    asyncio.run(replicas.isr_changes.shrink_stale(partitions, 1_000))
    assert replicas.metadata.image.version == before + 1
    replicas.apply_image(replicas.metadata.image)
    assert {tuple(p.isr) for p in partitions} == {(LEADER,)}

    async def catch_up() -> None:
        for partition in partitions:
            replicas.record_follower_fetch(partition, FOLLOWER, partition.log.log_end_offset)
        await asyncio.gather(*replicas.isr_changes.pending)

    asyncio.run(catch_up())
    assert replicas.metadata.image.version == before + 2
    replicas.apply_image(replicas.metadata.image)
    assert {tuple(p.isr) for p in partitions} == {(LEADER, FOLLOWER)}
    assert replicas.isr_changes.shrinks == replicas.isr_changes.expands == count


@pytest.mark.parametrize("cancelled", ["writer", "caller"])
def test_a_change_cancelled_before_its_batch_ends_and_is_never_written(
        replicas: Any, cancelled: str) -> None:
    """Shutdown cancels the writer before its first step (the caller waited forever), or
    the caller is cancelled while its change is queued (it was written all the same): the
    caller ends, and the change is not written, nor by the next writer."""
    [partition] = led_with_follower(replicas, 1)
    before = replicas.metadata.backend.read_image().version

    async def scenario() -> None:
        change = asyncio.create_task(replicas.isr_changes.change(partition, remove=[FOLLOWER]))
        await asyncio.sleep(0)  # one step: queued, its writer not started yet
        if cancelled == "writer":
            replicas.isr_changes.cancel()
        else:
            change.cancel()
        with pytest.raises(asyncio.CancelledError):
            await change
        # Another change goes through a writer: the cancelled one is not in its batch.
        assert not await replicas.isr_changes.change(partition, remove=[JOINER])

    asyncio.run(scenario())
    assert replicas.metadata.backend.read_image().version == before
    assert FOLLOWER in committed_state(replicas).isr
