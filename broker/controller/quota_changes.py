"""How AlterClientQuotas (KIP-546) changes the client quotas: a pure function from the current
quotas and a request's entries to the next quotas and one outcome per entity.

The checks and messages are Kafka's controller's (ClientQuotaControlManager), in its order:
an entity's types (none, one twice, unknown, an empty name), their combination (ip alone;
user and client-id together or alone), then each key (known for the entity, greater than 0,
whole for the integral keys, within the key's type). An entity changes all or nothing; the
others of the request still apply. Setting a value that is already stored, or removing a
key that is not, changes nothing and succeeds.

Two choices of ours, where Kafka's behaviour is an accident of its maps: an entity named
twice in one request is refused in every entry that names it (Kafka applies the first and
reports an error for it), and an ip entity must be an address (Kafka also accepts a host
name it can resolve; a controller here does not resolve names in a pure function).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from broker.cluster.client_quotas import (
    CLIENT_ID,
    CONNECTION_CREATION_RATE,
    CONSUMER_BYTE_RATE,
    CONTROLLER_MUTATION_RATE,
    IP,
    PRODUCER_BYTE_RATE,
    REQUEST_PERCENTAGE,
    USER,
    QuotaEntity,
)

# The keys each kind of entity takes, with their ConfigDef type in Kafka (QuotaConfig).
USER_CLIENT_KEYS = {PRODUCER_BYTE_RATE: "long", CONSUMER_BYTE_RATE: "long",
                    REQUEST_PERCENTAGE: "double", CONTROLLER_MUTATION_RATE: "double"}
IP_KEYS = {CONNECTION_CREATION_RATE: "int"}
_LIMITS = {"long": (2.0 ** 63 - 1, "a LONG"), "int": (2.0 ** 31 - 1, "an INT")}


@dataclass(frozen=True, slots=True)
class QuotaOp:
    key: str
    value: float
    remove: bool = False


@dataclass(frozen=True, slots=True)
class QuotaAlteration:
    """One entry of a request: the entity as sent (pairs in request order) and its ops."""

    pairs: tuple[tuple[str, str | None], ...]
    ops: tuple[QuotaOp, ...]

    @property
    def entity(self) -> QuotaEntity:
        return QuotaEntity.of(self.pairs)


@dataclass(frozen=True, slots=True)
class QuotaOutcome:
    entity: QuotaAlteration
    code: ErrorCode = ErrorCode.none
    message: str | None = None


class QuotaRefused(Exception):
    def __init__(self, message: str, code: ErrorCode = ErrorCode.invalid_request) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def kafka_entity_text(pairs: Iterable[tuple[str, str | None]]) -> str:
    """An entity as Kafka's messages print it (ClientQuotaEntity's toString)."""
    return "ClientQuotaEntity(entries={" + ", ".join(f"{k}={v}" for k, v in pairs) + "})"


def check_entity(pairs: Sequence[tuple[str, str | None]]) -> Mapping[str, str]:
    """The keys (and their types) the entity takes; QuotaRefused when it is no entity."""
    if not pairs:
        raise QuotaRefused("Invalid empty client quota entity")
    seen: dict[str, str | None] = {}
    for kind, name in pairs:
        if kind in seen:
            raise QuotaRefused(f"Invalid client quota entity, duplicate entity entry {kind}")
        if kind not in (USER, CLIENT_ID, IP):
            raise QuotaRefused(f"Unhandled client quota entity type: {kind}")
        if name is not None and not name:
            raise QuotaRefused(f"Empty {kind} not supported")
        seen[kind] = name
    if IP in seen:
        if USER in seen or CLIENT_ID in seen:
            # Kafka's message, its missing space included.
            raise QuotaRefused("Invalid quota entity combination, IP entity should"
                               "not be combined with User or ClientId")
        ip = seen[IP]
        if ip is not None and not _is_address(ip):
            raise QuotaRefused(f"{ip} is not a valid IP or resolvable host.")
        return IP_KEYS
    return USER_CLIENT_KEYS


def _is_address(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def check_value(keys: Mapping[str, str], key: str, value: float) -> None:
    kind = keys.get(key)
    if kind is None:
        raise QuotaRefused(f"Invalid configuration key {key}")
    if not value > 0.0:  # NaN included
        raise QuotaRefused(f"Quota {key} must be greater than 0")
    if kind in _LIMITS:
        limit, name = _LIMITS[kind]
        if value > limit:
            raise QuotaRefused(f"Proposed value for {key} is too large for {name}.")
        if abs(value % 1.0) > 1e-6:
            raise QuotaRefused(f"{key} cannot be a fractional value.")


def _changed(current: Mapping[str, float], alteration: QuotaAlteration) -> dict[str, float]:
    """The entity's values after its ops; QuotaRefused for a bad entity, key or value."""
    keys = check_entity(alteration.pairs)
    values = dict(current)
    seen: set[str] = set()
    for op in alteration.ops:
        if op.key in seen:
            raise QuotaRefused(f"Duplicate quota key {op.key} not updating quota for this "
                               f"entity {kafka_entity_text(alteration.pairs)}")
        seen.add(op.key)
        if op.remove:
            values.pop(op.key, None)
        else:
            check_value(keys, op.key, op.value)
            values[op.key] = float(op.value)
    return values


def alter_quotas(quotas: Mapping[QuotaEntity, Mapping[str, float]],
                 alterations: Sequence[QuotaAlteration]
                 ) -> tuple[dict[QuotaEntity, dict[str, float]] | None, list[QuotaOutcome]]:
    """The quotas after every accepted entry (None: nothing changed) and one outcome per
    entry, in request order."""
    counts: dict[QuotaEntity, int] = {}
    for alteration in alterations:
        counts[alteration.entity] = counts.get(alteration.entity, 0) + 1
    result = {entity: dict(values) for entity, values in quotas.items()}
    outcomes: list[QuotaOutcome] = []
    changed = False
    for alteration in alterations:
        entity = alteration.entity
        try:
            if counts[entity] > 1:
                raise QuotaRefused(
                    f"Ignoring duplicate entity {kafka_entity_text(alteration.pairs)}")
            values = _changed(result.get(entity, {}), alteration)
        except QuotaRefused as e:
            outcomes.append(QuotaOutcome(alteration, e.code, e.message))
            continue
        if values != result.get(entity, {}):
            changed = True
            if values:
                result[entity] = values
            else:
                result.pop(entity, None)
        outcomes.append(QuotaOutcome(alteration))
    return (result if changed else None), outcomes
