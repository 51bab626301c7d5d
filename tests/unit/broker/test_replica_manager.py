"""The replica manager following the cluster image, with a real log dir: large changes are
taken in slices so that the event loop keeps serving between them."""

from __future__ import annotations

import asyncio
from pathlib import Path

from broker.config.broker_config import BrokerConfig
from broker.server.log_manager import RECOVERY_CHECKPOINT, REPLICATION_CHECKPOINT
from broker.server.replica_dirs import read_offset_checkpoint
from kafkube.harness.wire import build_batch
from tests.support.in_process import open_replicas

PARTITIONS = 1000


def test_a_large_topic_is_opened_in_slices_and_deleted_in_one_pass(tmp_path: Path) -> None:
    config = BrokerConfig.from_dict({"log.dirs": str(tmp_path / "logs"), "node.id": "0"})
    _, replicas = open_replicas(config)

    async def scenario() -> int:
        loop = asyncio.get_running_loop()
        turns = 0

        async def other_work() -> None:  # stands for produce and fetch on other partitions
            nonlocal turns
            while True:
                turns += 1
                await asyncio.sleep(0)

        worker = asyncio.create_task(other_work())
        await asyncio.sleep(0)
        await replicas.create_topic("big", PARTITIONS, {}, 1, [(0,)] * PARTITIONS)
        assert 0 < len(replicas.partitions) < PARTITIONS  # the rest after the loop's turn
        deadline = loop.time() + 60
        while len(replicas.partitions) < PARTITIONS:
            assert loop.time() < deadline, f"only {len(replicas.partitions)} opened"
            await asyncio.sleep(0)
        assert all(p.is_leader for p in replicas.partitions.values())
        opened_after = turns
        await replicas.delete_topic("big")
        worker.cancel()
        return opened_after

    turns = asyncio.run(scenario())
    # Other work ran between every two slices (of OPEN_SLICE_S each).
    assert replicas.open_slices > 1 and turns >= replicas.open_slices - 1
    assert replicas.partitions == {}
    checkpoint = Path(config.log_dirs[0]) / REPLICATION_CHECKPOINT
    assert read_offset_checkpoint(checkpoint) == {}
    asyncio.run(replicas.shutdown())


def test_rolled_segments_are_synced_off_the_loop_before_the_recovery_point_passes_them(
        tmp_path: Path) -> None:
    config = BrokerConfig.from_dict({"log.dirs": str(tmp_path / "logs"), "node.id": "0"})
    _, replicas = open_replicas(config)

    async def scenario() -> tuple[int, int, int]:
        await replicas.create_topic("rolled", 1, {"segment.bytes": "4096"}, 1, [(0,)])
        partition = replicas.get("rolled", 0)
        assert partition is not None and partition.is_leader
        for i in range(40):
            batch = build_batch([(None, b"v" * 200, (), 0)], 1_700_000_000_000 + i)
            assert partition.append(batch, 1 << 20).error == 0
        log = partition.log
        before = log.recovery_point
        await replicas.logs.sync_sealed_segments()
        return before, log.recovery_point, log.active_segment.base_offset

    before, after, active_base = asyncio.run(scenario())
    assert before == 0 and after == active_base > 0
    replicas.logs.write_checkpoints()
    checkpoint = Path(config.log_dirs[0]) / RECOVERY_CHECKPOINT
    assert read_offset_checkpoint(checkpoint)[("rolled", 0)] == active_base
    asyncio.run(replicas.shutdown())


def test_partitions_added_mid_reassignment_keep_the_topic_s_replication_factor(
        tmp_path: Path) -> None:
    # Broker 0, the only one registered, takes over partition 0 from broker 1: mid-move its
    # replicas are (0, 1) but the topic's replication factor is 1 (KIP-455's target).
    import dataclasses

    from kafkube_contract.image import PartitionState
    config = BrokerConfig.from_dict({"log.dirs": str(tmp_path / "logs"), "node.id": "0"})
    store, replicas = open_replicas(config)

    async def scenario() -> list[tuple[int, ...]]:
        await replicas.create_topic("moving", 1, {}, 1, [(1,)])

        def reassign(image):  # type: ignore[no-untyped-def]
            topic = image.topics["moving"]
            moving = PartitionState((0, 1), (1,), 1, adding=(0,), removing=(1,))
            return image.with_topic(dataclasses.replace(topic, assignments=(moving,)))

        await store.update(reassign)
        await replicas.create_partitions("moving", 3)
        return [p.replicas for p in store.image.topics["moving"].assignments[1:]]

    added = asyncio.run(scenario())
    assert added == [(0,), (0,)]
    asyncio.run(replicas.shutdown())
