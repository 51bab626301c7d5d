"""KIP-1066's ``cordoned.log.dirs``: a broker cordoned with ``*`` gets no replica of a topic
or partition created meanwhile, and gets them again once uncordoned; what the operator sets
on the brokers it drains before a scale-down (issue 27, item 2)."""

from __future__ import annotations

from confluent_kafka.admin import (
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    NewTopic,
)

from kafkube.harness.waiting import wait_until


def _set(cluster, broker: int, value: str | None) -> None:
    op = AlterConfigOpType.SET if value is not None else AlterConfigOpType.DELETE
    resource = ConfigResource("broker", str(broker), incremental_configs=[
        ConfigEntry("cordoned.log.dirs", value or "", incremental_operation=op)])
    for future in cluster.admin.incremental_alter_configs([resource]).values():
        future.result(30)


def _replicas(cluster, topic: str) -> set[int]:
    partitions = wait_until(lambda: cluster.partitions(topic), 30, f"{topic}'s partitions")
    return {b for p in partitions.values() for b in p.replicas}


def test_a_cordoned_broker_gets_no_new_replicas_until_uncordoned(cluster_factory) -> None:
    cluster = cluster_factory(3)
    _set(cluster, 2, "*")
    described = cluster.admin.describe_configs([ConfigResource("broker", "2")])
    assert next(iter(described.values())).result(30)["cordoned.log.dirs"].value == "*"
    cluster.admin.create_topics([NewTopic("during-drain", 12, 2)])["during-drain"].result(30)
    assert _replicas(cluster, "during-drain") == {0, 1}
    cluster.admin.create_partitions([NewPartitions("during-drain", 24)])[
        "during-drain"].result(30)
    wait_until(lambda: len(cluster.partitions("during-drain") or {}) == 24, 30, "24 partitions")
    assert _replicas(cluster, "during-drain") == {0, 1}
    # A replication factor above the usable brokers is refused, as in Kafka.
    too_big = cluster.admin.create_topics([NewTopic("rf3", 1, 3)])["rf3"]
    try:
        too_big.result(30)
        raise AssertionError("RF 3 over 2 usable brokers was accepted")
    except Exception as e:  # KafkaException with INVALID_REPLICATION_FACTOR
        assert "INVALID_REPLICATION_FACTOR" in str(e) or "replication factor" in str(e).lower()
    _set(cluster, 2, None)
    cluster.admin.create_topics([NewTopic("after", 12, 2)])["after"].result(30)
    assert _replicas(cluster, "after") == {0, 1, 2}


def test_placement_reads_the_cordon_in_the_image_it_writes_over(tmp_path) -> None:
    """A cordon written through another broker a moment ago is in the stored image before it
    reaches this broker's applied one: placement must read the stored one (the race behind a
    topic placed on a broker being drained, seen in CI)."""
    import asyncio

    import pytest

    from broker.config.broker_config import BrokerConfig
    from broker.controller.placement import PlacementError
    from tests.support.in_process import open_replicas

    config = BrokerConfig.from_dict({"log.dirs": str(tmp_path / "logs"), "node.id": "0"})
    store, replicas = open_replicas(config)
    stored = store.backend.read_image()
    assert store.backend.write_image(
        stored.with_broker_configs("0", {"cordoned.log.dirs": "*"}))
    assert store.image.cordoned() == frozenset()  # not applied here yet
    with pytest.raises(PlacementError):
        asyncio.run(replicas.create_topic("during-drain", 3, {}, 1))
    assert "during-drain" not in store.backend.read_image().topics
    store.refresh()
    assert store.image.cordoned() == frozenset({0})
