"""The broker's configuration, checked against the one table of keys.

Like Kafka's LogConfig/KafkaConfig, every key is declared in one table with its type,
default, validator and doc (kafkube_contract/broker_keys.py, shared with the operator);
parsing, `server.properties` loading, DescribeConfigs and topic overrides all read that
table, through ``BrokerConfig`` and the ``validate_*`` functions here.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from broker.config.listeners import listener_plan
from kafkube_contract.broker_keys import (
    BROKER_KEYS,
    DYNAMIC_BROKER_KEYS,
    IGNORED_KAFKA_KEYS,
    TOPIC_KEYS,
)
from kafkube_contract.config_keys import ConfigError
from kafkube_contract.properties import parse_properties

log = logging.getLogger(__name__)

# listener.name.<listener>.<key>: a key's value for one listener (broker.config.listeners).
LISTENER_PREFIX = "listener.name."


@dataclass
class BrokerConfig:
    """The broker's effective configuration: parsed values for every declared key.

    ``originals`` are the static settings (file and overrides). The dynamic ones, stored in
    the cluster metadata for every broker (``dynamic_default``) or for this one
    (``dynamic_broker``), are laid over them by :meth:`apply_dynamic` as the metadata changes,
    in place, as Kafka's DynamicBrokerConfig updates its KafkaConfig: every part of the broker
    that reads a key when it acts sees the new value from then on.
    """

    values: Mapping[str, Any]
    originals: Mapping[str, str]
    dynamic_default: Mapping[str, str] = field(default_factory=dict)
    dynamic_broker: Mapping[str, str] = field(default_factory=dict)
    generation: int = 0  # moves on with every change of the dynamic settings

    @classmethod
    def from_sources(
        cls, file: Path | None = None, overrides: Iterable[str] = ()
    ) -> BrokerConfig:
        raw: dict[str, str] = {}
        if file is not None:
            try:
                raw.update(parse_properties(Path(file).read_text()))
            except OSError as e:
                raise ConfigError(f"cannot read config file {file}: {e.strerror}") from None
        for item in overrides:
            key, sep, value = item.partition("=")
            if not sep or not key.strip():
                raise ConfigError(f"--override expects key=value, got {item!r}")
            raw[key.strip()] = value.strip()
        return cls.from_dict(raw)

    @classmethod
    def from_dict(cls, raw: Mapping[str, str]) -> BrokerConfig:
        for name, text in raw.items():
            if name in BROKER_KEYS or name.startswith(LISTENER_PREFIX):
                continue
            if name in IGNORED_KAFKA_KEYS:
                log.info("config %s has no effect in kafkube; ignored", name)
            else:
                log.warning("unknown config %s=%s; ignored", name, text)
        config = cls(_parse_broker_values(raw), dict(raw))
        config._check()
        return config

    def apply_dynamic(self, default: Mapping[str, str], broker: Mapping[str, str]) -> list[str]:
        """Lay the dynamic settings over the static ones; returns the keys whose value changed.

        A stored value this broker cannot use (a key it does not know or cannot change at
        run time, a value it refuses: written by another version) is skipped with a warning,
        as Kafka skips invalid dynamic configs, rather than stopping the broker.
        """
        if default == self.dynamic_default and broker == self.dynamic_broker:
            return []
        usable_default = _usable_dynamic(default, "the cluster-wide default")
        usable_broker = _usable_dynamic(broker, f"broker {self.node_id}")
        values = _parse_broker_values({**self.originals, **usable_default, **usable_broker})
        changed = sorted(k for k, v in values.items() if v != self.values[k])
        self.values = values
        self.dynamic_default = dict(default)
        self.dynamic_broker = dict(broker)
        self.generation += 1
        return changed

    def _check(self) -> None:
        listener_plan(self)
        if not self.log_dirs:
            raise ConfigError("log.dirs: no log directory given")
        queued = self.values["queued.max.request.bytes"]
        if 0 <= queued < self.values["socket.request.max.bytes"]:
            raise ConfigError(
                f"queued.max.request.bytes: {queued} is below socket.request.max.bytes "
                f"{self.values['socket.request.max.bytes']}: the largest request could never "
                f"be read")

    def __getitem__(self, name: str) -> Any:
        return self.values[name]

    def for_listener(self, listener: str, name: str) -> Any:
        """A key's value on one listener: ``listener.name.<listener>.<key>`` if set (the
        listener's name in lower case, as Kafka writes it), else the key's own value."""
        raw = self.originals.get(f"{LISTENER_PREFIX}{listener.lower()}.{name}")
        return BROKER_KEYS[name].parse(raw) if raw is not None else self.values[name]

    @property
    def node_id(self) -> int:
        return self.values["node.id"]

    @property
    def listeners(self) -> list[str]:
        return self.values["listeners"]

    @property
    def advertised_listeners(self) -> list[str]:
        return self.values["advertised.listeners"] or self.listeners

    @property
    def log_dirs(self) -> list[str]:
        return self.values["log.dirs"] or [self.values["log.dir"]]

    def topic_values(self, overrides: Mapping[str, str]) -> dict[str, Any]:
        """Each topic key's parsed value for a topic with these overrides: the override, else
        the broker's default."""
        values = self.topic_defaults()
        values.update(validate_topic_configs(overrides))
        return values

    def topic_defaults(self) -> dict[str, Any]:
        """Each topic-level key's value when a topic sets no override."""
        v = self.values
        defaults = {
            name: key.default if broker_key is None else v[broker_key]
            for name, (key, broker_key) in TOPIC_KEYS.items()
        }
        defaults["segment.ms"] = v["log.roll.ms"] or v["log.roll.hours"] * 3_600_000
        if v["log.retention.ms"] is not None:
            retention = v["log.retention.ms"]
        elif v["log.retention.minutes"] is not None:
            retention = v["log.retention.minutes"] * 60_000
        else:
            retention = v["log.retention.hours"] * 3_600_000
        defaults["retention.ms"] = retention
        return defaults


def _parse_broker_values(raw: Mapping[str, str]) -> dict[str, Any]:
    values = {k: key.default for k, key in BROKER_KEYS.items()}
    for name, text in raw.items():
        key = BROKER_KEYS.get(name)
        if key is not None:
            values[name] = key.parse(text)
    return values


def _usable_dynamic(configs: Mapping[str, str], where: str) -> dict[str, str]:
    usable = {}
    for name, text in configs.items():
        try:
            validate_dynamic_broker_configs({name: text})
        except ConfigError as e:
            log.warning("dynamic config %s=%s for %s ignored: %s", name, text, where, e)
            continue
        usable[name] = text
    return usable


def validate_dynamic_broker_configs(configs: Mapping[str, str | None]) -> dict[str, Any]:
    """Parse broker settings meant to change at run time; raises ConfigError naming the key
    for one that is unknown, fixed at startup, or badly formed."""
    parsed = {}
    for name, raw in configs.items():
        key = BROKER_KEYS.get(name)
        if key is None:
            raise ConfigError(f"Unknown broker config name: {name}")
        if name not in DYNAMIC_BROKER_KEYS:
            raise ConfigError(f"Cannot update these configs dynamically: {name}")
        parsed[name] = key.parse(raw)
    return parsed


def validate_topic_configs(configs: Mapping[str, str | None]) -> dict[str, Any]:
    """Parse topic-level overrides; raises ConfigError for unknown keys or bad values."""
    parsed = {}
    for name, raw in configs.items():
        entry = TOPIC_KEYS.get(name)
        if entry is None:
            raise ConfigError(f"Unknown topic config name: {name}")
        parsed[name] = entry[0].parse(raw)
    return parsed
