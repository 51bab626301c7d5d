"""Configuration: Kafka's names and defaults, refusals that name the key."""

from __future__ import annotations

import logging

import pytest

from broker.config.broker_config import BrokerConfig, validate_topic_configs
from kafkube_contract.config_keys import ConfigError
from kafkube_contract.properties import parse_properties


def test_defaults_are_kafkas():
    config = BrokerConfig.from_dict({})
    assert config["log.segment.bytes"] == 1073741824
    assert config["message.max.bytes"] == 1048588
    assert config["socket.request.max.bytes"] == 104857600
    assert config["log.index.interval.bytes"] == 4096
    assert config["num.partitions"] == 1
    assert config["auto.create.topics.enable"] is True
    defaults = config.topic_defaults()
    assert defaults["retention.ms"] == 7 * 24 * 3600 * 1000
    assert defaults["segment.ms"] == 7 * 24 * 3600 * 1000
    assert config.log_dirs == ["/tmp/kafka-logs"]


def test_retention_falls_back_from_ms_to_minutes_to_hours():
    assert BrokerConfig.from_dict({"log.retention.hours": "2"}).topic_defaults()[
        "retention.ms"] == 7_200_000
    assert BrokerConfig.from_dict(
        {"log.retention.hours": "2", "log.retention.minutes": "3"}
    ).topic_defaults()["retention.ms"] == 180_000
    assert BrokerConfig.from_dict(
        {"log.retention.minutes": "3", "log.retention.ms": "-1"}
    ).topic_defaults()["retention.ms"] == -1


@pytest.mark.parametrize(("key", "value", "message"), [
    ("num.partitions", "zero", "num.partitions: expected an integer"),
    ("num.partitions", "0", "num.partitions: 0 is below the minimum 1"),
    ("auto.create.topics.enable", "yes", "auto.create.topics.enable: expected true or false"),
    ("listeners", "127.0.0.1:9092", "listeners: '127.0.0.1:9092' is not of the form"),
    ("listeners", "PLAINTEXT://127.0.0.1:99999", "out of range"),
    ("log.message.timestamp.type", "Now", "log.message.timestamp.type: 'Now' is not one of"),
    ("log.cleanup.policy", "delete,shred", "log.cleanup.policy: 'shred' is not one of"),
])
def test_bad_values_are_refused_naming_the_key(key, value, message):
    with pytest.raises(ConfigError, match=message):
        BrokerConfig.from_dict({key: value})


def test_unknown_keys_warn_and_kafka_only_keys_are_noted(caplog):
    with caplog.at_level(logging.INFO, logger="broker.config.broker_config"):
        BrokerConfig.from_dict({"no.such.key": "1", "num.io.threads": "8"})
    messages = {r.getMessage(): r.levelname for r in caplog.records}
    assert messages["unknown config no.such.key=1; ignored"] == "WARNING"
    assert messages["config num.io.threads has no effect in kafkube; ignored"] == "INFO"


def test_properties_syntax():
    text = "# comment\n! also\nnode.id = 3\nlisteners: PLAINTEXT://127.0.0.1:1\\\n2\n\nempty=\n"
    assert parse_properties(text) == {
        "node.id": "3", "listeners": "PLAINTEXT://127.0.0.1:12", "empty": "",
    }


def test_topic_configs_are_validated():
    assert validate_topic_configs({"retention.ms": "1000", "cleanup.policy": "compact"}) == {
        "retention.ms": 1000, "cleanup.policy": ["compact"],
    }
    with pytest.raises(ConfigError, match=r"Unknown topic config name: retention\.hours"):
        validate_topic_configs({"retention.hours": "1"})
    with pytest.raises(ConfigError, match=r"segment\.bytes: 1 is below the minimum 14"):
        validate_topic_configs({"segment.bytes": "1"})
