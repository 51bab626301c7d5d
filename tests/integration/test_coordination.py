"""The embedded coordination backend and the controller's election rules, without brokers."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from broker.cluster.backend import CoordinationBackend
from broker.cluster.image import ClusterImage
from broker.cluster.sqlite import SqliteBackend
from broker.controller.elections import (
    Handover,
    cancel_reassignment,
    fence_and_elect,
    start_reassignment,
    step_down,
    step_reassignment,
    without_broker,
)
from kafkube_contract.image import NO_LEADER, PartitionState, TopicMetadata
from kafkube_contract.registration import BrokerRegistration
from tests.support.in_process import new_cluster


@pytest.fixture(params=["sqlite", "kubernetes"])
def open_backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator:
    """Opens backends over one store: the SQLite file, or one cluster's objects on a real
    API server. The same rules hold for both."""
    opened: list[CoordinationBackend] = []
    if request.param == "sqlite":
        def make() -> CoordinationBackend:
            opened.append(new_cluster(SqliteBackend(tmp_path / "cluster.db")))
            return opened[-1]
    else:
        from broker.cluster.kubernetes import KubernetesBackend, KubernetesSettings

        plane = request.getfixturevalue("control_plane")
        settings = KubernetesSettings("default", f"c{uuid.uuid4().hex[:10]}",
                                      str(plane.kubeconfig))

        def make() -> CoordinationBackend:
            opened.append(new_cluster(KubernetesBackend(settings)))
            return opened[-1]
    yield make
    for backend in opened:
        backend.close()


@pytest.fixture
def backend(open_backend) -> CoordinationBackend:
    return open_backend()


def reg(node: int) -> BrokerRegistration:
    return BrokerRegistration(node, "127.0.0.1", 9092 + node)


def test_broker_lease_expires_and_a_lapsed_epoch_cannot_renew(backend: CoordinationBackend) -> None:
    other = backend.register_broker(reg(2), ttl_ms=10_000)
    epoch = backend.register_broker(reg(1), ttl_ms=150)
    assert set(backend.live_brokers()) == {1, 2}
    assert backend.renew_broker(1, epoch, ttl_ms=150)
    deadline = time.monotonic() + 5
    # Broker 1 stops renewing; the store goes on answering broker 2's renewals, so its
    # lapse is plain to see (a lease that expires while the store is silent is not judged).
    while set(backend.live_brokers()) != {2} and time.monotonic() < deadline:
        assert backend.renew_broker(2, other, ttl_ms=10_000)
        time.sleep(0.02)
    assert set(backend.live_brokers()) == {2}
    # A paused broker coming back learns it was fenced, and must register anew.
    assert not backend.renew_broker(1, epoch, ttl_ms=150)
    again = backend.register_broker(reg(1), ttl_ms=10_000)
    assert again > epoch
    assert not backend.renew_broker(1, epoch, ttl_ms=10_000)  # the old incarnation stays fenced
    assert backend.renew_broker(1, again, ttl_ms=10_000)


def test_controller_lease_has_one_holder_and_a_restart_takes_over(
        backend: CoordinationBackend) -> None:
    e1 = backend.register_broker(reg(1), 10_000)
    e2 = backend.register_broker(reg(2), 10_000)
    first = backend.acquire_controller(1, e1, 10_000)
    assert first is not None
    assert backend.acquire_controller(2, e2, 10_000) is None
    assert backend.acquire_controller(1, e1, 10_000) == first  # renewal keeps the term
    # Broker 1 restarts (new broker epoch): its old lease is its own, taken over at once.
    e1b = backend.register_broker(reg(1), 10_000)
    second = backend.acquire_controller(1, e1b, 10_000)
    assert second is not None and second > first
    backend.resign_controller(1)
    third = backend.acquire_controller(2, e2, 10_000)
    assert third is not None and third > second
    assert backend.controller().holder == 2


def test_image_writes_are_compare_and_set(backend: CoordinationBackend) -> None:
    image = backend.read_image()
    topic = TopicMetadata("t", "00000000-0000-0000-0000-000000000001", {},
                          (PartitionState((1, 2), (1, 2), 1),))
    assert backend.write_image(image.with_topic(topic))
    assert not backend.write_image(image.with_topic(topic))  # stale version: refused
    stored = backend.read_image()
    assert stored.version == image.version + 1
    assert stored.topics["t"] == topic
    assert ClusterImage.from_json(stored.to_json(), stored.version) == stored


def test_producer_id_blocks_never_overlap(open_backend) -> None:
    one, two = open_backend(), open_backend()
    blocks = [one.allocate_producer_ids(1000), two.allocate_producer_ids(1000),
              one.allocate_producer_ids(1000)]
    assert blocks == [0, 1000, 2000]


def state(replicas, isr, leader, epoch=5, **kw) -> PartitionState:
    return PartitionState(tuple(replicas), tuple(isr), leader, epoch, 0, **kw)


def test_dead_leader_is_replaced_from_the_isr_in_replica_order() -> None:
    new = fence_and_elect(state([1, 2, 3], [3, 2, 1], 1), live={2, 3}, unclean=False)
    assert (new.leader, new.isr, new.leader_epoch) == (2, (3, 2), 6)


def test_dead_follower_only_leaves_the_isr() -> None:
    new = fence_and_elect(state([1, 2, 3], [1, 2, 3], 1), live={1, 2}, unclean=False)
    assert (new.leader, new.isr, new.leader_epoch) == (1, (1, 2), 5)


def test_no_live_isr_member_means_offline_never_an_out_of_sync_leader() -> None:
    old = state([1, 2, 3], [1], 1)
    offline = fence_and_elect(old, live={2, 3}, unclean=False)
    assert (offline.leader, offline.isr) == (NO_LEADER, (1,))  # 1 holds every acked write
    assert fence_and_elect(offline, live={2, 3}, unclean=False) == offline
    back = fence_and_elect(offline, live={1, 2, 3}, unclean=False)
    assert (back.leader, back.isr) == (1, (1,))
    unclean = fence_and_elect(old, live={2, 3}, unclean=True)
    assert (unclean.leader, unclean.isr) == (2, (2,))


def test_a_rejoining_or_stopping_broker_hands_over_only_to_the_isr() -> None:
    led = state([1, 2, 3], [1, 2, 3], 1)
    moved = without_broker(led, 1, live={1, 2, 3})
    assert (moved.leader, moved.isr) == (2, (2, 3))
    alone = state([1, 2, 3], [1], 1)
    assert without_broker(alone, 1, live={1, 2, 3}) == alone  # nobody else has its writes
    following = without_broker(state([2, 1], [2, 1], 2), 1, live={1, 2})
    assert (following.leader, following.isr) == (2, (2,))


def test_a_controlled_shutdown_hands_over_only_to_replicas_seen_alive_and_caught_up() -> None:
    # Broker 3 was SIGKILLed a moment ago: its lease is still live, it is still in the ISR.
    led = state([1, 3, 2], [1, 3, 2], 1)
    moved = without_broker(led, 1, live={1, 2, 3}, successors={2})
    assert (moved.leader, moved.isr) == (2, (3, 2))
    # Nobody fetched since the shutdown began: the leadership stays, with the ISR.
    assert without_broker(led, 1, live={1, 2, 3}, successors=set()) == led
    # A follower leaves the ISR only of a leader its fetcher heard from meanwhile.
    followed = state([3, 1, 2], [3, 1, 2], 3)
    assert without_broker(followed, 1, live={1, 2, 3}, leader_heard=False) == followed
    assert without_broker(followed, 1, live={1, 2, 3}, leader_heard=True).isr == (3, 2)


def test_step_down_uses_the_handover_per_partition() -> None:
    image = ClusterImage({"t": TopicMetadata("t", "00000000-0000-0000-0000-000000000001", {}, (
        state([1, 2, 3], [1, 2, 3], 1),  # led by 1: 3 proved caught up, 2 did not
        state([1, 2, 3], [1, 2, 3], 1),  # led by 1: nobody proved anything
        state([2, 1, 3], [2, 1, 3], 2),  # followed under 2, which answered
        state([3, 1, 2], [3, 1, 2], 3),  # followed under 3, which did not
    ))})
    handover = Handover({("t", 0): frozenset({3})}, leaders_heard=frozenset({2}))
    after = step_down(image, 1, {1, 2, 3}, handover)
    assert after is not None
    p0, p1, p2, p3 = after.topics["t"].assignments
    assert (p0.leader, p0.isr) == (3, (2, 3))
    assert (p1.leader, p1.isr) == (1, (1, 2, 3))
    assert (p2.leader, p2.isr) == (2, (2, 3))
    assert (p3.leader, p3.isr) == (3, (3, 1, 2))


def test_reassignment_adds_first_then_removes_once_in_sync() -> None:
    begun = start_reassignment(state([1, 2], [1, 2], 1), (3, 2))
    assert (begun.replicas, begun.adding, begun.removing) == ((3, 2, 1), (3,), (1,))
    assert step_reassignment(begun, live={1, 2, 3}) == begun  # 3 is not in the ISR yet
    caught_up = begun.with_isr((1, 2, 3))
    done = step_reassignment(caught_up, live={1, 2, 3})
    assert (done.replicas, done.isr, done.adding, done.removing) == ((3, 2), (2, 3), (), ())
    assert done.leader == 3 and done.leader_epoch == begun.leader_epoch + 1
    undone = cancel_reassignment(begun, live={1, 2, 3})
    # As KRaft's PartitionReassignmentRevert: the merged list minus the adding replicas,
    # so the order may change (the leader does not).
    assert (set(undone.replicas), undone.isr, undone.leader) == ({1, 2}, (1, 2), 1)
    assert (undone.adding, undone.removing) == ((), ())


def test_controller_fences_a_dead_broker_and_hands_over(tmp_path: Path) -> None:
    """Two brokers' controllers over one backend: one acts; when broker 1's leases lapse,
    broker 2 takes the controller lease and moves broker 1's leadership within the ISR."""
    from broker.cluster.metadata import ClusterMetadata
    from broker.config.broker_config import BrokerConfig
    from broker.controller.controller import Controller

    session = 300
    backend = new_cluster(SqliteBackend(tmp_path / "cluster.db"))
    controllers = {}
    epochs = {}
    for node in (1, 2):
        config = BrokerConfig.from_dict({
            "node.id": str(node), "log.dirs": str(tmp_path / f"b{node}"),
            "broker.session.timeout.ms": str(session), "broker.heartbeat.interval.ms": "50",
            "auto.leader.rebalance.enable": "false",
        })
        epochs[node] = backend.register_broker(reg(node), session)
        metadata = ClusterMetadata(backend, [tmp_path / f"b{node}"], node)
        controllers[node] = Controller(config, metadata, lambda n=node: epochs[n])
    topic = TopicMetadata("t", "00000000-0000-0000-0000-000000000002", {},
                          (state([1, 2], [1, 2], 1, epoch=0),))
    assert backend.write_image(backend.read_image().with_topic(topic))
    asyncio.run(controllers[1].round())
    asyncio.run(controllers[2].round())
    assert controllers[1].active and not controllers[2].active
    # Broker 1 stops heartbeating (killed); broker 2 keeps renewing its own lease.
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        assert backend.renew_broker(2, epochs[2], session)
        asyncio.run(controllers[2].round())
        if backend.read_image().topics["t"].assignments[0].leader == 2:
            break
        time.sleep(0.05)
    moved = backend.read_image().topics["t"].assignments[0]
    assert controllers[2].active
    assert (moved.leader, moved.isr, moved.leader_epoch) == (2, (2,), 1)


def _open_backend(path: str, results) -> None:
    try:
        results.put(new_cluster(SqliteBackend(Path(path))).cluster_id())
    except Exception as e:  # reported to the test, which fails on it
        results.put(f"error: {e!r}")


def test_brokers_starting_together_share_one_new_store(tmp_path: Path) -> None:
    """Three processes create the same coordination file and a new cluster in it at once: one
    cluster id, no 'database is locked' (switching a new file to WAL does not wait for the
    lock)."""
    import multiprocessing

    context = multiprocessing.get_context("spawn")
    for attempt in range(5):
        path = tmp_path / f"{attempt}" / "cluster.db"
        results = context.Queue()
        procs = [context.Process(target=_open_backend, args=(str(path), results))
                 for _ in range(3)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(30)
        ids = [results.get(timeout=5) for _ in procs]
        assert len(set(ids)) == 1 and not ids[0].startswith("error"), ids
