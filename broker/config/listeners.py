"""Listeners as Kafka names them: where a broker listens, with which security protocol, and
which listener the brokers use among themselves.

``listeners`` (NAME://host:port, ...) are bound; ``listener.security.protocol.map`` gives
each name its protocol (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL); ``advertised.listeners``
are the addresses given out in Metadata, per listener name, so a client is always answered
with the addresses of the listener it came in on; ``inter.broker.listener.name`` (or the
listener whose protocol is ``security.inter.broker.protocol``) is the one brokers dial.
Kafka's checks and messages: a configuration it would refuse is refused at start.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kafkube_contract.config_keys import ConfigError

if TYPE_CHECKING:  # the checked configuration calls listener_plan on itself
    from broker.config.broker_config import BrokerConfig

SUPPORTED_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


class SecurityProtocol(enum.Enum):
    PLAINTEXT = "PLAINTEXT"
    SSL = "SSL"
    SASL_PLAINTEXT = "SASL_PLAINTEXT"
    SASL_SSL = "SASL_SSL"

    @property
    def tls(self) -> bool:
        return self in (SecurityProtocol.SSL, SecurityProtocol.SASL_SSL)

    @property
    def sasl(self) -> bool:
        return self in (SecurityProtocol.SASL_PLAINTEXT, SecurityProtocol.SASL_SSL)


@dataclass(frozen=True, slots=True)
class Listener:
    name: str
    protocol: SecurityProtocol
    host: str  # empty: every interface
    port: int


@dataclass(frozen=True, slots=True)
class AdvertisedEndpoint:
    listener: str
    host: str  # empty: the address the client reached
    port: int


@dataclass(frozen=True, slots=True)
class ListenerPlan:
    listeners: tuple[Listener, ...]
    advertised: tuple[AdvertisedEndpoint, ...]
    inter_broker: str

    def listener(self, name: str) -> Listener:
        return next(li for li in self.listeners if li.name == name)

    @property
    def inter_broker_listener(self) -> Listener:
        return self.listener(self.inter_broker)


def protocol_map(config: BrokerConfig) -> dict[str, SecurityProtocol]:
    mapping = {}
    for entry in config["listener.security.protocol.map"]:
        name, sep, protocol = entry.partition(":")
        if not sep or not name.strip():
            raise ConfigError(f"listener.security.protocol.map: {entry!r} is not NAME:PROTOCOL")
        try:
            mapping[name.strip().upper()] = SecurityProtocol(protocol.strip().upper())
        except ValueError:
            raise ConfigError(
                f"listener.security.protocol.map: {protocol.strip()!r} is not a security "
                f"protocol (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL)") from None
    return mapping


def listener_plan(config: BrokerConfig) -> ListenerPlan:
    """The broker's listeners, checked as Kafka checks them (KafkaConfig's validation)."""
    protocols = protocol_map(config)
    listeners = []
    for uri in config.listeners:
        name, host, port = parse_listener(uri)
        name = name.upper()
        if name not in protocols:
            raise ConfigError(f"listeners: no security protocol defined for listener {name} "
                              f"(add it to listener.security.protocol.map)")
        listeners.append(Listener(name, protocols[name], host, port))
    names = [li.name for li in listeners]
    if not listeners:
        raise ConfigError("listeners: no listener given")
    if len(set(names)) != len(names):
        raise ConfigError(f"listeners: each listener must have a different name: {names}")
    bound = [li.port for li in listeners if li.port != 0]
    if len(set(bound)) != len(bound):
        raise ConfigError(f"listeners: each listener must have a different port: {bound}")
    advertised = []
    for uri in config["advertised.listeners"] or config.listeners:
        name, host, port = parse_listener(uri)
        if name.upper() not in names:
            raise ConfigError(f"advertised.listeners: listener {name} is not in listeners")
        advertised.append(AdvertisedEndpoint(name.upper(), host, port))
    inter_broker = config["inter.broker.listener.name"]
    if inter_broker is not None:
        if config.originals.get("security.inter.broker.protocol") is not None:
            raise ConfigError("Only one of inter.broker.listener.name and "
                              "security.inter.broker.protocol should be set.")
        inter_broker = inter_broker.upper()
        if inter_broker not in names:
            raise ConfigError(f"inter.broker.listener.name must be a listener name defined "
                              f"in listeners; {inter_broker} is not one of {names}")
    else:
        wanted = SecurityProtocol(config["security.inter.broker.protocol"])
        inter_broker = next((li.name for li in listeners if li.protocol == wanted), None)
        if inter_broker is None:
            raise ConfigError(f"security.inter.broker.protocol: no listener uses {wanted.value}"
                              f"; set inter.broker.listener.name to one of {names}")
    if config["advertised.listeners"] and inter_broker not in {a.listener for a in advertised}:
        raise ConfigError(f"inter.broker.listener.name must be a listener name defined in "
                          f"advertised.listeners: {inter_broker} is not advertised")
    plan = ListenerPlan(tuple(listeners), tuple(advertised), inter_broker)
    _check_mechanisms(config, plan)
    return plan


def _check_mechanisms(config: BrokerConfig, plan: ListenerPlan) -> None:
    for listener in plan.listeners:
        if not listener.protocol.sasl:
            continue
        mechanisms = config.for_listener(listener.name, "sasl.enabled.mechanisms")
        unsupported = [m for m in mechanisms if m not in SUPPORTED_MECHANISMS]
        if unsupported or not mechanisms:
            raise ConfigError(
                f"sasl.enabled.mechanisms: {', '.join(unsupported) or 'none'} on listener "
                f"{listener.name}: kafkube offers {', '.join(SUPPORTED_MECHANISMS)}")
    inter = plan.inter_broker_listener
    if inter.protocol.sasl:
        mechanism = config["sasl.mechanism.inter.broker.protocol"]
        if mechanism not in config.for_listener(inter.name, "sasl.enabled.mechanisms"):
            raise ConfigError(
                f"sasl.mechanism.inter.broker.protocol: {mechanism} is not enabled on the "
                f"inter-broker listener {inter.name} (sasl.enabled.mechanisms)")


def parse_listener(uri: str) -> tuple[str, str, int]:
    """Split ``NAME://host:port``; an empty host means all interfaces, as in Kafka."""
    name, sep, rest = uri.partition("://")
    if not sep:
        raise ConfigError(f"listeners: {uri!r} is not of the form NAME://host:port")
    host, colon, port_text = rest.rpartition(":")
    if not colon:
        raise ConfigError(f"listeners: {uri!r} has no port")
    try:
        port = int(port_text)
    except ValueError:
        raise ConfigError(f"listeners: port {port_text!r} in {uri!r} is not a number") from None
    if not 0 <= port <= 65535:
        raise ConfigError(f"listeners: port {port} in {uri!r} is out of range")
    return name, host.strip("[]"), port
