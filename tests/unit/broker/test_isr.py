"""ISR changes as a partition leader makes them, against a real replica manager and the
embedded coordination backend; and the cancellation the replica fetcher's stop relies on."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from broker.config.broker_config import BrokerConfig
from broker.network.client import KafkaConnection
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
        await asyncio.gather(*replicas.pending_isr_changes)

    asyncio.run(fetch())
    replicas.metadata.refresh()
    replicas.apply_image(replicas.metadata.image)
    return list(partition.isr)


def test_only_a_registered_broker_rejoins_the_isr(replicas: Any) -> None:
    epoch = follower_epoch(replicas)
    asyncio.run(replicas.create_topic("t", 1, {}, 2, [(LEADER, FOLLOWER)]))
    replicas.apply_image(replicas.metadata.image)
    partition = replicas.partitions[("t", 0)]
    assert asyncio.run(replicas._change_isr(partition, remove=[FOLLOWER]))
    replicas.apply_image(replicas.metadata.image)
    assert list(partition.isr) == [LEADER]

    # Its lease gone (a controlled shutdown, or fenced by the controller) but still
    # fetching for a moment: it stays out, or leader and controller would fight.
    replicas.metadata.backend.unregister_broker(FOLLOWER, epoch)
    expands = replicas.isr_expands
    assert isr_after_catch_up(replicas) == [LEADER]
    assert replicas.isr_expands == expands

    follower_epoch(replicas)
    assert isr_after_catch_up(replicas) == [LEADER, FOLLOWER]
    assert replicas.isr_expands == expands + 1
    # A repeated catch-up changes nothing and is not counted as an expansion again.
    assert isr_after_catch_up(replicas) == [LEADER, FOLLOWER]
    assert replicas.isr_expands == expands + 1


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


def test_the_high_watermark_waits_for_a_follower_whose_isr_join_is_in_flight(
        replicas: Any) -> None:
    """The repro of a loss (tests/integration/test_operator_pools.py, 1 run in 15 under
    load): a follower caught up, the leader asked for it to join the ISR, and while that
    change was on its way the high watermark moved on without it; once committed, the
    controller made the follower leader, and the records it lacked, acknowledged to acks=all
    producers, were truncated. The high watermark must wait for a joining follower from the
    moment the leader asks (Kafka's maximal ISR)."""
    joiner = 2
    follower_epoch(replicas)
    replicas.metadata.backend.register_broker(
        BrokerRegistration(joiner, "127.0.0.1", 9094, None), SESSION_MS)
    asyncio.run(replicas.create_topic("t", 1, {}, 3, [(LEADER, FOLLOWER, joiner)]))
    replicas.apply_image(replicas.metadata.image)
    partition = replicas.partitions[("t", 0)]
    assert asyncio.run(replicas._change_isr(partition, remove=[joiner]))
    replicas.apply_image(replicas.metadata.image)
    assert partition.isr == [LEADER, FOLLOWER]

    def produce() -> int:
        batch = data_batch([(None, b"x")] * 3, transactional=False)
        outcome = partition.append(batch, 1 << 20)
        assert outcome.error == ErrorCode.none, outcome
        return partition.log.log_end_offset

    async def scenario() -> None:
        end = produce()
        replicas.record_follower_fetch(partition, FOLLOWER, end)
        assert partition.high_watermark == end
        replicas.record_follower_fetch(partition, joiner, end)  # caught up: asks to join
        assert replicas.pending_isr_changes
        # Before the change is written, the leader takes more and its ISR follower has it.
        later = produce()
        replicas.record_follower_fetch(partition, FOLLOWER, later)
        assert partition.high_watermark == end, "committed without the joining follower"
        await asyncio.gather(*replicas.pending_isr_changes)
        replicas.apply_image(replicas.metadata.image)
        assert partition.isr == [LEADER, FOLLOWER, joiner]
        assert partition.high_watermark == end
        replicas.record_follower_fetch(partition, joiner, later)
        assert partition.high_watermark == later

    asyncio.run(scenario())
