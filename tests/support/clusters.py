"""The ``cluster_factory`` fixture: local multi-broker clusters (``kafkube.harness``'s
``Cluster``) that end with the test::

    def test_x(cluster_factory):
        cluster = cluster_factory(3, {"min.insync.replicas": "2"})

It builds on ``broker_factory`` (tests/support/brokers.py), so a failing test gets the last
lines of every broker's output attached by its report hook; the full outputs are written next
to the brokers' log dirs (``<tmp>/cluster-K/broker-N.out``) at teardown.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import pytest

from kafkube.harness.metadata import Cluster
from kafkube.harness.process import BrokerProcess


@pytest.fixture
def cluster_factory(request: pytest.FixtureRequest, tmp_path: Path,
                    broker_factory: Callable[..., BrokerProcess],
                    ) -> Iterator[Callable[..., Cluster]]:
    """``cluster_factory(size=3, overrides=None, start=True, **more) -> Cluster``.

    ``overrides`` are broker config keys (dotted, as in server.properties) given to every
    broker; ``more`` is the same with ``_`` for ``.`` like ``broker_factory``. Teardown resumes
    paused brokers, SIGTERMs everything, writes the outputs to files and fails the test if a
    broker that was running did not exit 0.
    """
    clusters: list[Cluster] = []
    # broker_factory's list: the report hook attaches these brokers' logs on failure.
    attached: list[BrokerProcess] = request.node._kafkube_brokers

    def make(size: int = 3, overrides: Mapping[str, str] | None = None, start: bool = True,
             **more: object) -> Cluster:
        config = {**(overrides or {}), **{k.replace("_", "."): str(v) for k, v in more.items()}}
        cluster = Cluster(tmp_path / f"cluster-{len(clusters)}", size, config)
        clusters.append(cluster)
        attached.extend(cluster.brokers)
        return cluster.start() if start else cluster

    yield make
    unclean = []
    for k, cluster in enumerate(clusters):
        codes = cluster.stop()
        paths = cluster.save_logs()
        unclean += [
            f"cluster {k} broker {i} exited {code} (output: {paths[i]}):\n"
            + cluster.brokers[i].tail(40)
            for i, code in codes.items() if code != 0
        ]
    assert not unclean, "\n".join(unclean)
