"""A partition the image gives this broker is opened by the first request for it, when the
background slices have not reached it yet (``ReplicaManager.opened``): the produce is served
rather than answered NOT_LEADER_OR_FOLLOWER, which librdkafka retries after a metadata
refresh and a backoff. Never for an index a client made up, before the broker has joined,
nor, while out of descriptors, at each request."""

from __future__ import annotations

import asyncio
from pathlib import Path

from kio.schema.errors import ErrorCode

from broker.cluster.metadata import ClusterMetadata
from broker.cluster.sqlite import SqliteBackend
from broker.config.broker_config import BrokerConfig
from broker.server import replica_manager
from broker.server.replica_manager import ReplicaManager
from tests.support.in_process import open_replicas
from tests.unit.broker.test_open_files import _batch, fail_opens


def _config(tmp_path: Path) -> BrokerConfig:
    return BrokerConfig.from_dict({"log.dirs": str(tmp_path / "a"), "node.id": "0"})


def test_a_partition_the_slices_have_not_reached_is_opened_by_its_first_produce(
        tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(replica_manager, "OPEN_SLICE_S", 0.0)  # one partition a slice
    _, replicas = open_replicas(_config(tmp_path))
    replicas.logs.schedule = lambda delay, fn: None  # the slices after the first never run
    asyncio.run(replicas.create_topic("t", 50, {}, 1, [(0,)] * 50))
    assert replicas.get("t", 49) is None  # queued, not open yet
    partition = replicas.opened("t", 49)
    assert partition is not None and partition.is_leader
    assert partition.append(_batch(0), 1 << 20).error == ErrorCode.none
    asyncio.run(replicas.shutdown())


def test_an_index_no_topic_has_opens_nothing(tmp_path: Path) -> None:
    """-1 must not index the assignments from their end (a replica "t--1" led with t-0's
    state, its write acknowledged, its files deleted at the next image)."""
    config = _config(tmp_path)
    _, replicas = open_replicas(config)
    asyncio.run(replicas.create_topic("t", 1, {}, 1, [(0,)]))
    assert replicas.opened("t", -1) is None and replicas.leader_for("t", -5)[0] is None
    assert replicas.opened("t", 1) is None
    assert sorted(p.name for p in Path(config.log_dirs[0]).iterdir() if p.is_dir()) == ["t-0"]
    asyncio.run(replicas.shutdown())


def _with_data(tmp_path: Path) -> BrokerConfig:
    config = _config(tmp_path)
    store, replicas = open_replicas(config)
    asyncio.run(replicas.create_topic("t", 1, {}, 1, [(0,)]))
    for i in range(3):
        assert replicas.get("t", 0).append(_batch(i), 1 << 20).error == ErrorCode.none
    asyncio.run(replicas.shutdown())
    store.close()
    return config


def test_no_role_is_taken_before_the_first_image_is_applied(tmp_path: Path,
                                                              monkeypatch) -> None:
    """At start the broker loads its logs and listens before it joins (leaving the roles
    it had) and applies the image: a request then must not make it lead a replica it could
    not open at load, from the image of before the join."""
    config = _with_data(tmp_path)
    fail_opens(monkeypatch, lambda p: "t-0" in p, 100)
    store = ClusterMetadata(SqliteBackend(Path(config.log_dirs[0]) / "cluster.db"),
                            [Path(d) for d in config.log_dirs], 0)
    replicas = ReplicaManager(config, store)
    replicas.load()  # as the broker starts: no image applied yet
    assert replicas.get("t", 0) is None
    monkeypatch.undo()
    assert replicas.opened("t", 0) is None
    replicas.apply_image(store.image)  # after the join
    assert replicas.get("t", 0).is_leader
    asyncio.run(replicas.shutdown())


def test_out_of_descriptors_a_request_does_not_retry_the_open(tmp_path: Path,
                                                               monkeypatch) -> None:
    config = _with_data(tmp_path)
    refused = fail_opens(monkeypatch, lambda p: "t-0" in p, 10_000)
    _, replicas = open_replicas(config)
    tried = len(refused)
    for _ in range(200):  # a client retrying its produce while the broker is out of fds
        assert replicas.opened("t", 0) is None
    assert len(refused) == tried and len(replicas._refused) == 1
    monkeypatch.undo()
    asyncio.run(replicas.shutdown())
