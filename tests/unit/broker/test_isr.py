"""ISR changes as a partition leader makes them, against a real replica manager and the
embedded coordination backend; and the cancellation the replica fetcher's stop relies on."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from broker.config.broker_config import BrokerConfig
from broker.network.client import KafkaConnection
from kafkube_contract.registration import BrokerRegistration
from tests.support.in_process import open_replicas

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
