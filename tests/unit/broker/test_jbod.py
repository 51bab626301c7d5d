"""JBOD: a broker with two log dirs, one of which fails for real (KIP-112, KIP-858).

The fault is the integration test's: the dir is renamed away and a plain file put at its
path, so the next file opened under it fails with ENOTDIR (a disk whose mount vanished).
Checked here in-process: the dir goes offline at its first I/O error (a checkpoint, a
segment roll in a produce), its replicas stop being served with KAFKA_STORAGE_ERROR, new
replicas go to the other dir, the registration carries the offline replicas and the
controller treats them as dead; restarted with the dir still failing, the broker skips it
and never recreates its replicas empty elsewhere; with every dir failing it cannot start."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode

from broker.cluster.metadata import ClusterMetadata
from broker.cluster.sqlite import SqliteBackend
from broker.config.broker_config import BrokerConfig
from broker.controller.controller import Controller
from broker.controller.elections import fence_and_elect, live_for, offline_replicas
from broker.storage.log_dir_failure import KafkaStorageError
from kafkube.harness.wire import build_batch
from kafkube_contract.image import NO_LEADER, PartitionState
from kafkube_contract.registration import BrokerRegistration, replica_key
from tests.support.in_process import open_replicas


def _config(tmp_path: Path, **more: str) -> BrokerConfig:
    dirs = f"{tmp_path / 'a'},{tmp_path / 'b'}"
    return BrokerConfig.from_dict({"log.dirs": dirs, "node.id": "0", **more})


def _fail(log_dir: Path) -> None:
    log_dir.rename(log_dir.with_name(log_dir.name + ".gone"))
    log_dir.write_text("failed disk\n")


def _batch(i: int) -> bytes:
    return build_batch([(None, b"x" * 200, (), 0)], 1_700_000_000_000 + i)


def _two_partitions(tmp_path: Path, configs: dict[str, str] | None = None):
    config = _config(tmp_path)
    store, replicas = open_replicas(config)
    asyncio.run(replicas.create_topic("t", 2, configs or {}, 1, [(0,), (0,)]))
    where = {p: replicas.get("t", p).log.dir.parent.name for p in (0, 1)}
    assert where == {0: "a", 1: "b"}  # the fewest partitions first: one in each
    return config, store, replicas


def test_a_failed_checkpoint_takes_the_dir_offline_and_only_its_replicas(tmp_path: Path):
    _, store, replicas = _two_partitions(tmp_path)
    _fail(tmp_path / "b")
    replicas.logs.write_checkpoints()  # ENOTDIR on b's checkpoint file
    assert list(replicas.logs.failures.offline) == [tmp_path / "b"]
    assert replicas.get("t", 1) is None
    assert replicas.leader_for("t", 1)[1] == ErrorCode.kafka_storage_error
    topic_id = store.image.topics["t"].topic_id
    assert replicas.offline_replicas() == {replica_key(topic_id, 1)}
    assert replicas.get("t", 0).append(_batch(0), 1 << 20).error == ErrorCode.none
    asyncio.run(replicas.create_topic("u", 2, {}, 1, [(0,), (0,)]))
    assert {replicas.get("u", p).log.dir.parent.name for p in (0, 1)} == {"a"}
    asyncio.run(replicas.shutdown())


def test_a_roll_failing_in_a_produce_answers_kafka_storage_error(tmp_path: Path):
    _, _, replicas = _two_partitions(tmp_path, {"segment.bytes": "300"})
    partition = replicas.get("t", 1)
    _fail(tmp_path / "b")
    outcomes = [partition.append(_batch(i), 1 << 20).error for i in range(5)]
    assert ErrorCode.kafka_storage_error in outcomes  # the roll opened a file under b
    assert replicas.get("t", 1) is None and replicas.logs.failures.is_offline(tmp_path / "b")
    assert replicas.get("t", 0).is_leader
    asyncio.run(replicas.shutdown())


def test_restarted_with_the_dir_still_failing_its_replicas_stay_offline(tmp_path: Path):
    config, store, replicas = _two_partitions(tmp_path)
    for p in (0, 1):
        assert replicas.get("t", p).append(_batch(p), 1 << 20).error == ErrorCode.none
    asyncio.run(replicas.shutdown())
    store.close()
    _fail(tmp_path / "b")
    _, replicas = open_replicas(config)
    assert replicas.logs.failures.is_offline(tmp_path / "b")
    assert replicas.get("t", 0).log.log_end_offset == 1
    assert replicas.get("t", 1) is None and ("t", 1) in replicas.offline
    assert not (tmp_path / "a" / "t-1").exists()  # not recreated empty on the good dir
    asyncio.run(replicas.shutdown())


def test_a_broker_whose_every_dir_fails_does_not_start(tmp_path: Path):
    config = _config(tmp_path)
    for name in ("a", "b"):
        (tmp_path / name).write_text("failed disk\n")
    with pytest.raises(KafkaStorageError, match="every log dir is offline"):
        ClusterMetadata(SqliteBackend(tmp_path / "c.db"), [Path(d) for d in config.log_dirs], 0)


def test_the_controller_treats_an_offline_replica_as_dead(tmp_path: Path):
    config, store, replicas = _two_partitions(tmp_path)
    _fail(tmp_path / "b")
    replicas.logs.write_checkpoints()
    backend = store.backend
    registration = backend.live_brokers()[0]
    assert backend.update_registration(dataclasses.replace(
        registration, offline_log_dirs=(str(tmp_path / "b"),),
        offline_replicas=replicas.offline_replicas()), registration.broker_epoch)
    assert backend.live_brokers()[0].offline_log_dirs == (str(tmp_path / "b"),)
    controller = Controller(config, store, lambda: registration.broker_epoch)
    asyncio.run(controller.round())
    image = backend.read_image()
    # The only replica is offline: the partition is offline, its last ISR member on record.
    assert image.partition("t", 1).leader == NO_LEADER
    assert image.partition("t", 0).leader == 0
    asyncio.run(replicas.shutdown())


def test_an_offline_replica_leaves_the_isr_and_leadership_of_its_partition_only():
    state = PartitionState((0, 1, 2), (0, 1, 2), 0)
    brokers = {0: BrokerRegistration(0, "h", 1, offline_replicas=frozenset({"T:3"})),
                1: BrokerRegistration(1, "h", 2), 2: BrokerRegistration(2, "h", 3)}
    offline = offline_replicas(brokers)
    live = frozenset(brokers)
    moved = fence_and_elect(state, live_for(live, offline, "T", 3), unclean=False)
    assert (moved.leader, moved.isr, moved.leader_epoch) == (1, (1, 2), state.leader_epoch + 1)
    assert fence_and_elect(state, live_for(live, offline, "T", 4), False) is state


def test_the_sqlite_registration_keeps_the_offline_facts_across_renewals(tmp_path: Path):
    backend = SqliteBackend(tmp_path / "c.db")
    epoch = backend.register_broker(BrokerRegistration(
        3, "h", 1, offline_log_dirs=("/d1",), offline_replicas=frozenset({"x:0", "y:1"})),
        60_000)
    assert backend.renew_broker(3, epoch, 60_000)
    got = backend.live_brokers()[3]
    assert (got.offline_log_dirs, got.offline_replicas) == (("/d1",), {"x:0", "y:1"})
    assert not backend.update_registration(BrokerRegistration(3, "h", 1), epoch + 1)
