"""A broker process older than its cluster (kafkube_contract/features.py): a newer kafkube
finalized ``kafkube.metadata.version`` above this broker's range, and the broker exits with
code 3 and the reason as its last line (what Kubernetes shows as the pod's termination
message), touching nothing; once the level is one it supports, it starts and serves again.
"""

from __future__ import annotations

from broker.cluster.sqlite import SqliteBackend
from kafkube.harness.waiting import wait_until
from kafkube.harness.wire import WireClient, create_topic, metadata_request
from kafkube_contract.features import METADATA_VERSION


def _finalize(path: object, level: int) -> int:
    """What a kafkube supporting ``level`` would have written; the image's version after."""
    store = SqliteBackend(path)
    try:
        image = store.read_image()
        assert store.write_image(image.with_feature(METADATA_VERSION, level))
        return store.image_version()
    finally:
        store.close()


def test_a_broker_older_than_the_cluster_exits_saying_why(cluster_factory) -> None:
    cluster = cluster_factory(1)
    broker = cluster.brokers[0]
    with WireClient.connect(broker.bootstrap) as client:
        create_topic(client, "kept")
    assert broker.stop() == 0
    version = _finalize(cluster.coordination_path, 3)
    broker.spawn()
    assert broker.proc is not None and broker.proc.wait(60) == 3
    broker.join_output()
    assert broker.output[-1].strip() == (
        "kafkube broker: cannot join the cluster: this kafkube is older than the cluster: "
        "kafkube.metadata.version is finalized at 3, this broker supports 1-2. Run the "
        "kafkube version that finalized it, or newer (an image rollback is possible only "
        "before the new level is finalized, or after a downgrade of the feature)")
    store = SqliteBackend(cluster.coordination_path)
    assert store.image_version() == version and not store.live_brokers()  # nothing written
    store.close()
    _finalize(cluster.coordination_path, 2)  # lowered by the newer kafkube
    broker.start()
    with WireClient.connect(broker.bootstrap) as client:
        wait_until(lambda: client.request(metadata_request(["kept"], auto_create=False))
                   .topics[0].error_code == 0, 30, "the topic served again")
