"""One configuration key, as Kafka's ConfigDef defines one: its name, type, default, doc and
validator, and how a value of it is parsed from text and rendered back.
kafkube_contract/broker_keys.py declares the broker's and topics' keys with it; the validators
are Kafka's (atLeast, between, ValidString, ThrottledReplicaListValidator) with Kafka's
messages."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

INT_MAX = 2**31 - 1
LONG_MAX = 2**63 - 1


class ConfigError(ValueError):
    """A configuration value was refused; the message names the key."""


def _parse_int(key: str, raw: str) -> int:
    try:
        return int(raw.strip())
    except ValueError:
        raise ConfigError(f"{key}: expected an integer, got {raw!r}") from None


def _parse_double(key: str, raw: str) -> float:
    try:
        return float(raw.strip())
    except ValueError:
        raise ConfigError(f"{key}: expected a number, got {raw!r}") from None


def _parse_bool(key: str, raw: str) -> bool:
    value = raw.strip().lower()
    if value in ("true", "false"):
        return value == "true"
    raise ConfigError(f"{key}: expected true or false, got {raw!r}")


def _parse_list(_key: str, raw: str) -> list[str]:
    return [item.strip() for item in raw.split(",") if item.strip()]


def _parse_str(_key: str, raw: str) -> str:
    return raw.strip()


_PARSERS: dict[str, Callable[[str, str], Any]] = {
    "int": _parse_int,
    "long": _parse_int,
    "double": _parse_double,
    "bool": _parse_bool,
    "list": _parse_list,
    "string": _parse_str,
    "password": _parse_str,  # a string never shown (DescribeConfigs: null, is_sensitive)
}


def at_least(minimum: int) -> Callable[[str, Any], None]:
    def check(key: str, value: Any) -> None:
        if value is not None and value < minimum:
            raise ConfigError(f"{key}: {value} is below the minimum {minimum}")

    return check


def between(minimum: int, maximum: int) -> Callable[[str, Any], None]:
    def check(key: str, value: Any) -> None:
        if value is not None and not minimum <= value <= maximum:
            raise ConfigError(f"{key}: {value} is outside [{minimum}, {maximum}]")

    return check


def one_of(*allowed: str) -> Callable[[str, Any], None]:
    def check(key: str, value: Any) -> None:
        values = value if isinstance(value, list) else [value]
        for v in values:
            if v is not None and v not in allowed:
                raise ConfigError(f"{key}: {v!r} is not one of {', '.join(allowed)}")

    return check


@dataclass(frozen=True, slots=True)
class ConfigKey:
    name: str
    type: str
    default: Any
    doc: str
    validator: Callable[[str, Any], None] | None = None

    def parse(self, raw: str | None) -> Any:
        if raw is None:
            return None
        value = _PARSERS[self.type](self.name, raw)
        if self.validator:
            self.validator(self.name, value)
        return value

    def render(self, value: Any) -> str | None:
        if value is None:
            return None
        if isinstance(value, bool):
            return str(value).lower()
        if isinstance(value, list):
            return ",".join(value)
        return str(value)


def keys_by_name(*keys: ConfigKey) -> dict[str, ConfigKey]:
    return {k.name: k for k in keys}


def throttled_replicas(key: str, value: Any) -> None:
    """Kafka's ThrottledReplicaListValidator: ``*`` or ``partition:broker`` pairs."""
    if value == ["*"]:
        return
    for item in value:
        partition, colon, broker = item.partition(":")
        if not (colon and partition.strip().isdigit() and broker.strip().isdigit()):
            raise ConfigError(
                f"{key} must be the literal '*' or a list of replicas in the following "
                f"format: [partitionId]:[brokerId],[partitionId]:[brokerId],..."
            )
