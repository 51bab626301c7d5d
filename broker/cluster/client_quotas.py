"""Client quotas as the cluster image holds them (Kafka's ClientQuotaRecords), and which one
applies to a client.

A quota entity is a set of (entity type, name) pairs, a name of None being the type's
default (``--entity-default``): ``{user: alice}``, ``{user: alice, client-id: None}``,
``{client-id: app}``, ``{ip: 10.0.0.1}``. Each entity holds values by key
(``producer_byte_rate``, ``consumer_byte_rate``, ``request_percentage``,
``controller_mutation_rate``; ``connection_creation_rate`` for an ip). They are plain values
so the controller's change (broker/controller/quota_changes.py) and the broker's enforcement
(broker/server/client_quotas.py) are pure functions of the image.

Which entity applies to a request of (user, client-id) for one key is Kafka's precedence
(its documentation, "Quotas"), the first entity in this order holding that key:

1. user and client-id, 2. user and the default client-id, 3. user,
4. the default user and client-id, 5. the default user and default client-id,
6. the default user, 7. client-id, 8. the default client-id.

Each key is looked up on its own, so a user's ``producer_byte_rate`` and a client-id's
``consumer_byte_rate`` both apply to the same client.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

USER, CLIENT_ID, IP = "user", "client-id", "ip"
ENTITY_TYPES = (USER, CLIENT_ID, IP)
PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
CONTROLLER_MUTATION_RATE = "controller_mutation_rate"
CONNECTION_CREATION_RATE = "connection_creation_rate"


@dataclass(frozen=True, slots=True)
class QuotaEntity:
    """An entity: (type, name or None for the default) pairs in ``ENTITY_TYPES`` order, so two
    spellings of one entity are equal and hash alike."""

    entries: tuple[tuple[str, str | None], ...]

    @classmethod
    def of(cls, pairs: Iterable[tuple[str, str | None]]) -> QuotaEntity:
        order = {kind: i for i, kind in enumerate(ENTITY_TYPES)}
        return cls(tuple(sorted(pairs, key=lambda p: (order.get(p[0], len(order)), p[0]))))

    @classmethod
    def user(cls, name: str | None, client_id: str | bool | None = False) -> QuotaEntity:
        """``client_id`` False: no client-id in the entity; None: the default client-id."""
        pairs: list[tuple[str, str | None]] = [(USER, name)]
        if client_id is not False:
            pairs.append((CLIENT_ID, client_id if isinstance(client_id, str) else None))
        return cls.of(pairs)

    @classmethod
    def client(cls, name: str | None) -> QuotaEntity:
        return cls(((CLIENT_ID, name),))

    def as_dict(self) -> dict[str, str | None]:
        return dict(self.entries)

    def to_doc(self) -> dict[str, str | None]:
        return self.as_dict()

    def __str__(self) -> str:
        return "{" + ", ".join(f"{k}={'<default>' if v is None else v}"
                               for k, v in self.entries) + "}"


ClientQuotas = Mapping[QuotaEntity, Mapping[str, float]]


@dataclass(frozen=True, slots=True)
class Match:
    """The quota that applies to a client for one key, and whose usage it shares: the
    sensor is kept per (user, client-id) as named by the matched entity's types (Kafka's
    quota metric tags), so a user-level quota is shared by all its client-ids and a
    default-user quota applies to each user on its own."""

    bound: float
    entity: QuotaEntity
    sensor_user: str
    sensor_client_id: str


def precedence(user: str, client_id: str) -> tuple[QuotaEntity, ...]:
    """The entities that may apply to (user, client-id), most specific first."""
    return (
        QuotaEntity.user(user, client_id), QuotaEntity.user(user, None), QuotaEntity.user(user),
        QuotaEntity.user(None, client_id), QuotaEntity.user(None, None), QuotaEntity.user(None),
        QuotaEntity.client(client_id), QuotaEntity.client(None),
    )


def quota_for(quotas: ClientQuotas, key: str, user: str, client_id: str) -> Match | None:
    """The quota on ``key`` for a request of ``user`` (the principal's name) with
    ``client_id``, or None when no entity holds one."""
    if not quotas:
        return None
    for entity in precedence(user, client_id):
        values = quotas.get(entity)
        if values is not None and key in values:
            kinds = dict(entity.entries)
            return Match(values[key], entity, user if USER in kinds else "",
                         client_id if CLIENT_ID in kinds else "")
    return None


def quotas_to_doc(quotas: ClientQuotas) -> list[dict[str, Any]]:
    return [{"entity": entity.to_doc(), "values": dict(values)}
            for entity, values in quotas.items()]


def quotas_of_doc(doc: Any) -> dict[QuotaEntity, dict[str, float]]:
    """The image's ``client_quotas`` (absent: none); raises KeyError, TypeError or
    ValueError on a malformed one, which the image reports as unreadable."""
    found: dict[QuotaEntity, dict[str, float]] = {}
    for entry in doc or ():
        entity = QuotaEntity.of((str(k), None if v is None else str(v))
                                for k, v in entry["entity"].items())
        found[entity] = {str(k): float(v) for k, v in entry["values"].items()}
    return found
