"""The embedded backend's polls (broker/cluster/sqlite.py): every broker of a local cluster
reads the leases, the controller and the image version several times a second and nearly
always finds the file unchanged, so the rows are read again only after a commit. These check
that nothing is missed by that: another broker's commit is seen, this connection's own at once,
and a lease lapses with time though nobody writes."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from broker.cluster import sqlite
from broker.cluster.backend import MetadataMissing
from broker.cluster.sqlite import RECHECK_S, SqliteBackend
from kafkube.harness.waiting import wait_until
from kafkube_contract.registration import BrokerRegistration
from tests.support.in_process import new_cluster


def reg(node: int) -> BrokerRegistration:
    return BrokerRegistration(node, "127.0.0.1", 9092 + node)


def test_commits_of_another_broker_and_its_own_are_seen_and_leases_lapse(
        tmp_path: Path) -> None:
    one = new_cluster(SqliteBackend(tmp_path / "cluster.db"))
    two = SqliteBackend(tmp_path / "cluster.db")
    try:
        epoch = one.register_broker(reg(1), ttl_ms=10_000)
        assert set(one.live_brokers()) == {1}  # its own commit, at once
        wait_until(lambda: set(two.live_brokers()) == {1}, 5, "broker 1 seen by the other")
        one.register_broker(reg(2), ttl_ms=300)
        wait_until(lambda: set(two.live_brokers()) == {1, 2}, 5, "broker 2 seen")
        assert one.acquire_controller(1, epoch, 10_000) is not None
        wait_until(lambda: (c := two.controller()) is not None and c.holder == 1, 5,
                   "the controller seen")
        version = one.image_version()
        assert one.write_image(one.read_image())
        assert one.image_version() == version + 1
        wait_until(lambda: two.image_version() == version + 1, 5, "the new image version")
        assert two.read_image().version == version + 1
        # Broker 2's lease lapses while nobody writes: judged by the clock, not by a commit.
        wait_until(lambda: set(two.live_brokers()) == {1}, 5, "broker 2's lease lapsed")
        assert set(two.lease_expiries()) == {1}
    finally:
        one.close()
        two.close()


def test_an_unchanged_file_is_not_read_again(tmp_path: Path) -> None:
    one = new_cluster(SqliteBackend(tmp_path / "cluster.db"))
    one.register_broker(reg(1), ttl_ms=60_000)
    poller = SqliteBackend(tmp_path / "cluster.db")
    statements: list[str] = []
    poller._db.set_trace_callback(statements.append)
    try:
        assert set(poller.live_brokers()) == {1}
        first = len(statements)
        for _ in range(20):  # a broker's polls, each past the recheck window
            time.sleep(RECHECK_S * 1.5)
            assert set(poller.live_brokers()) == {1}
            assert poller.controller() is None
            assert poller.image_version() == 0  # a new cluster's image
        later = statements[first:]
        assert later and all(s.startswith("PRAGMA data_version") for s in later), later[:3]
        assert len(later) <= 20  # one check a poll, not one per read
    finally:
        one.close()
        poller.close()


def test_an_image_read_newer_than_the_rows_brings_the_rows_along(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The image is read by its own query: when another broker wrote one since the rows were
    read, the rows are read again, so the stored version is never older than the image
    just read (the guard would judge the store gone back). And a cluster row deleted in
    between is MetadataMissing, which the guard knows, not a crash."""
    monkeypatch.setattr(sqlite, "RECHECK_S", 60.0)  # the window wide open: no luck involved
    one = new_cluster(SqliteBackend(tmp_path / "cluster.db"))
    poller = SqliteBackend(tmp_path / "cluster.db")
    try:
        version = poller.image_version()
        assert one.write_image(one.read_image())
        assert poller.image_version() == version  # within the window: not checked again
        assert poller.read_image().version == version + 1
        assert poller.stored_identity().version == version + 1
        assert poller.image_version() == version + 1
        fresh = SqliteBackend(tmp_path / "cluster.db")
        assert fresh.image_version() == version + 1
        one._db.execute("DELETE FROM cluster")  # the store lost its image
        with pytest.raises(MetadataMissing):
            fresh.read_image()
        with pytest.raises(MetadataMissing):
            fresh.image_version()
        fresh.close()
    finally:
        one.close()
        poller.close()
