"""Broker pieces in the test's own process: a coordination store with a new cluster in it,
one broker's storage layers, a coroutine run to its end without an event loop. No process,
no socket: what the unit tier builds on."""

from __future__ import annotations

from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")


def new_cluster(backend: Any) -> Any:
    """``backend`` with the image of a new cluster in its store (as the first broker of a new
    cluster creates it), unless one is there already; returned for chaining."""
    from broker.cluster.backend import new_cluster_id
    from broker.cluster.image import ClusterImage

    backend.create_image(new_cluster_id(), ClusterImage())
    return backend


def open_replicas(config: Any, rack: str | None = None) -> tuple[Any, Any]:
    """The storage layers of one broker, in-process, as the only broker of its cluster: the
    embedded coordination backend in its log dir, this node registered, the replicas loaded."""
    from broker.cluster.features import SUPPORTED
    from broker.cluster.metadata import ClusterMetadata
    from broker.cluster.sqlite import SqliteBackend
    from broker.server.dynamic_config import follow_dynamic_configs
    from broker.server.replica_manager import ReplicaManager
    from kafkube_contract.registration import BrokerRegistration, feature_tuples

    log_dirs = [Path(d) for d in config.log_dirs]
    store = ClusterMetadata(SqliteBackend(log_dirs[0] / "cluster.db"), log_dirs, config.node_id)
    registration = BrokerRegistration(config.node_id, "127.0.0.1", 9092, rack,
                                      supported_features=feature_tuples(SUPPORTED))
    epoch = store.backend.register_broker(registration, 3_600_000)
    store.backend.acquire_controller(config.node_id, epoch, 3_600_000)
    store.refresh()
    follow_dynamic_configs(config, store)
    replicas = ReplicaManager(config, store)
    replicas.load()
    replicas.apply_image(store.image)
    return store, replicas


def finish_now(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine that completes without ever waiting, from sync code even inside a
    running event loop: with the SQLite backend, coordination writes are made inline."""
    try:
        coroutine.send(None)
    except StopIteration as done:
        return done.value
    coroutine.close()
    raise AssertionError("the coroutine waited; run it on an event loop instead")
