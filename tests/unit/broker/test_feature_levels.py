"""Finalized feature levels and the brokers' supported ranges (kafkube_contract/features.py,
broker/cluster/features.py, broker/handlers/features.py): a level is raised only when every
registered broker announced it, lowered safely at any time, and a broker refuses to start in
a cluster that finalized a level above its range."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode

from broker.cluster.features import SUPPORTED, ClusterTooNew, refusal
from broker.cluster.image import ClusterImage
from broker.cluster.metadata import ClusterMetadata
from broker.cluster.sqlite import SqliteBackend
from broker.handlers import features  # noqa: F401 (registers)
from broker.handlers.context import BrokerServices
from kafkube_contract.features import (
    METADATA_VERSION,
    format_ranges,
    image_format_at,
    parse_ranges,
    unsupported,
)
from kafkube_contract.image import PartitionState, TopicMetadata
from kafkube_contract.objects import A_SUPPORTED_FEATURES, features_annotations, registration_of
from kafkube_contract.registration import BrokerRegistration, feature_tuples
from tests.support.handlers import call, make_services, request


@pytest.fixture
def services(tmp_path: Path) -> BrokerServices:
    return make_services(tmp_path)


def update(services: BrokerServices, name: str, level: int, upgrade_type: int = 1) -> object:
    response = call(services, request(57, 1, {
        "timeout": timedelta(seconds=5), "validate_only": False, "feature_updates": [
            {"feature": name, "max_version_level": level, "upgrade_type": upgrade_type}]}))
    services.store.refresh()
    return response


def register(services: BrokerServices, node_id: int, ranges: dict[str, tuple[int, int]]) -> int:
    epoch = services.store.backend.register_broker(BrokerRegistration(
        node_id, "127.0.0.1", 9100 + node_id, supported_features=feature_tuples(ranges)),
        3_600_000)
    services.store.refresh()
    return epoch


def stored_format(services: BrokerServices) -> int:
    text, = services.store.backend.store._db.execute("SELECT image FROM cluster").fetchone()
    return json.loads(text)["format"]


def test_ranges_read_back_as_announced_and_malformed_entries_are_skipped() -> None:
    assert format_ranges(SUPPORTED) == ("group.version=0-1,kafkube.metadata.version=1-2,"
                                        "share.version=0-1,transaction.version=0-2")
    assert parse_ranges(format_ranges(SUPPORTED)) == SUPPORTED
    assert parse_ranges("a=1-2,b=x-3,=1-1,c=4,d=0-0") == {"a": (1, 2), "d": (0, 0)}
    assert parse_ranges(None) == parse_ranges("") == {}
    assert [image_format_at(level) for level in (0, 1, 2, 3)] == [1, 1, 2, 2]


def test_a_level_is_supported_only_when_every_broker_announced_it() -> None:
    announced = {1: {METADATA_VERSION: (1, 2)}, 2: {METADATA_VERSION: (1, 1)}, 3: {},
                 4: {"group.version": (0, 1)}}
    assert unsupported(announced, METADATA_VERSION, 2) == [
        f"broker 2 supports {METADATA_VERSION} 1-1",
        "broker 3 runs an older kafkube that announces no supported features",
        f"broker 4 does not support {METADATA_VERSION}"]
    assert unsupported({1: {METADATA_VERSION: (1, 2)}}, METADATA_VERSION, 2) == []


def test_a_registration_announces_its_ranges_in_its_lease_and_in_sqlite(tmp_path: Path) -> None:
    registration = BrokerRegistration(3, "h", 1, supported_features=feature_tuples(SUPPORTED))
    annotations = features_annotations(registration)
    assert annotations == {A_SUPPORTED_FEATURES: format_ranges(SUPPORTED)}
    assert features_annotations(BrokerRegistration(3, "h", 1)) == {}  # as an older broker

    class Lease:  # what registration_of reads of a V1Lease
        class metadata:
            annotations = {**features_annotations(registration), "kafkube.io/host": "h",
                           "kafkube.io/port": "1"}

        class spec:
            holder_identity = "3"

    assert registration_of(Lease).feature_ranges == SUPPORTED
    backend = SqliteBackend(tmp_path / "c.db")
    backend.register_broker(registration, 60_000)
    backend.register_broker(BrokerRegistration(4, "h", 2), 60_000)
    live = backend.live_brokers()
    assert live[3].feature_ranges == SUPPORTED and live[4].supported_features == ()


def test_raising_waits_for_every_broker_and_lowering_does_not(
        services: BrokerServices) -> None:
    """A broker of an older kafkube is registered (a roll half done): no level may be raised,
    and the cluster keeps its level; a safe downgrade of kafkube.metadata.version goes
    through and the image is written in format 1 again, which the older broker reads."""
    assert services.store.image.feature(METADATA_VERSION) == 2  # a new cluster: the newest
    assert stored_format(services) == 2
    assert update(services, "share.version", 1).error_code == ErrorCode.none
    register(services, 7, {})
    refused = update(services, "group.version", 1)  # already 1: not a raise
    assert refused.error_code == ErrorCode.none
    update(services, "transaction.version", 1, upgrade_type=2)
    refused = update(services, "transaction.version", 2)
    assert refused.error_code == ErrorCode.invalid_update_version
    assert refused.error_message == (
        "Cannot raise transaction.version to 2: broker 7 runs an older kafkube that "
        "announces no supported features.")
    assert services.store.image.feature("transaction.version") == 1
    lowered = update(services, METADATA_VERSION, 1, upgrade_type=2)
    assert lowered.error_code == ErrorCode.none
    assert stored_format(services) == 1
    refused = update(services, METADATA_VERSION, 2)
    assert refused.error_code == ErrorCode.invalid_update_version
    assert "broker 7 runs an older kafkube" in refused.error_message
    # Broker 7 comes back on a kafkube that supports level 1 only, then on one that has 2.
    register(services, 7, {**SUPPORTED, METADATA_VERSION: (1, 1)})
    refused = update(services, METADATA_VERSION, 2)
    assert "broker 7 supports kafkube.metadata.version 1-1" in refused.error_message
    register(services, 7, SUPPORTED)
    assert update(services, METADATA_VERSION, 2).error_code == ErrorCode.none
    assert stored_format(services) == 2
    assert update(services, METADATA_VERSION, 0, upgrade_type=2).error_code == \
        ErrorCode.invalid_update_version  # never removed: this kafkube supports 1-2


def test_a_broker_refuses_to_start_in_a_cluster_newer_than_it(tmp_path: Path) -> None:
    assert refusal({**{n: high for n, (_, high) in SUPPORTED.items()}}) is None
    why = refusal({METADATA_VERSION: 3, "quorum.version": 1, "group.version": 1})
    assert why is not None
    assert "kafkube.metadata.version is finalized at 3, this broker supports 1-2" in why
    assert "quorum.version is finalized at 1, a feature this broker does not know" in why
    assert "group.version" not in why
    backend = SqliteBackend(tmp_path / "logs" / "cluster.db")
    assert backend.create_image("c1", ClusterImage(features={METADATA_VERSION: 3}))
    with pytest.raises(ClusterTooNew, match="finalized at 3"):
        ClusterMetadata(backend, [tmp_path / "logs"], 0)


def test_a_broker_holding_replicas_but_not_running_blocks_a_raise(
        services: BrokerServices) -> None:
    """Kafka checks every registered broker, fenced ones too: a broker that holds replicas
    and is down (restarting on who knows which kafkube) must not meet a format it cannot
    read when it comes back."""
    update(services, METADATA_VERSION, 1, upgrade_type=2)
    image = services.store.image
    assert services.store.backend.write_image(image.with_topic(TopicMetadata(
        "t", "5f0c2e1a-8a8b-4c1e-9b5e-2b7e0c1d2a3b", {}, (PartitionState((1, 5), (1,), 1),))))
    services.store.refresh()
    refused = update(services, METADATA_VERSION, 2)
    assert refused.error_code == ErrorCode.invalid_update_version
    assert "broker 5 holds replicas but is not running" in refused.error_message
    register(services, 5, SUPPORTED)
    assert update(services, METADATA_VERSION, 2).error_code == ErrorCode.none
