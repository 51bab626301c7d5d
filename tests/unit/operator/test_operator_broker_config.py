"""KafkaCluster spec → the brokers' server.properties (kafkube_operator.model.broker_config):
the operator's keys, replication defaults that fit the broker count, and spec.config judged by
the broker's own config definitions."""

from __future__ import annotations

from broker.config.broker_config import BrokerConfig
from kafkube_contract.properties import parse_properties
from kafkube_operator.model.broker_config import broker_properties


def test_the_operator_keys_and_kafka_defaults() -> None:
    props = broker_properties("prod", {"replicas": 5}).properties
    assert props["kafkube.cluster.name"] == "prod"
    assert props["kafkube.coordination.backend"] == "kubernetes"
    assert props["listeners"] == "PLAINTEXT://0.0.0.0:9092"
    assert (props["default.replication.factor"], props["min.insync.replicas"]) == ("3", "2")


def test_replication_defaults_fit_a_smaller_cluster() -> None:
    props = broker_properties("dev", {"replicas": 1}).properties
    assert (props["default.replication.factor"], props["min.insync.replicas"]) == ("1", "1")


def test_user_configs_pass_through_and_the_file_reads_back() -> None:
    config = {"log.retention.ms": 86_400_000, "auto.create.topics.enable": "false",
              "log.cleaner.min.cleanable.ratio": "0.5", "num.io.threads": 8}
    out = broker_properties("prod", {"config": config})
    assert out.refused == {}
    read = parse_properties(out.text)
    assert read == out.properties
    assert read["log.retention.ms"] == "86400000" and read["num.io.threads"] == "8"
    # The broker itself starts from it: its parsed values are the user's.
    parsed = BrokerConfig.from_dict(read)
    assert parsed["log.retention.ms"] == 86_400_000
    assert parsed["auto.create.topics.enable"] is False


def test_what_cannot_be_applied_is_reported_not_written() -> None:
    config = {"node.id": 7, "log.dirs": "/tmp", "log.retention.msx": 1,
              "log.retention.ms": "forever", "min.insync.replicas": -1,
              "compression.type": "zip", "log.segment.bytes": "1,024"}
    out = broker_properties("prod", {"replicas": 3, "config": config})
    assert set(out.refused) == set(config)
    assert "set by the operator" in out.refused["node.id"]
    assert "not a broker config" in out.refused["log.retention.msx"]
    assert "log.retention.ms" in out.refused["log.retention.ms"]
    assert out.properties["log.dirs"] == "/var/lib/kafkube/data"
    assert out.properties["min.insync.replicas"] == "2"
    assert "compression.type" not in out.properties and "node.id" not in out.properties


def test_a_value_on_two_lines_is_refused() -> None:
    out = broker_properties("prod", {"config": {"log.retention.ms": "1\n2"}})
    assert "log.retention.ms" in out.refused and "log.retention.ms" not in out.properties
