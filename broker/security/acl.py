"""ACLs and the authorizer, with Kafka's semantics (StandardAuthorizer).

An ACL allows or denies a principal (``User:alice``, or ``User:*`` for everyone), from a
host (an IP, or ``*``), an operation on resources of one type whose names match a
pattern: LITERAL (the name, or ``*`` for every name) or PREFIXED. A request is allowed
when its principal is in ``super.users``; else denied when any matching ACL denies it
(deny wins); else allowed when one allows it, where an ALLOW of READ, WRITE, DELETE or
ALTER implies DESCRIBE and ALTER_CONFIGS implies DESCRIBE_CONFIGS; else, when no ACL at
all names the resource, ``allow.everyone.if.no.acl.found`` decides; else denied.

The ACLs live in the cluster metadata image (Kafka's AccessControlEntryRecords), so every
broker enforces the same ones; decisions are cached per image. Denials are logged at INFO
on the ``kafka.authorizer.logger`` logger in Kafka's format.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

log = logging.getLogger("kafka.authorizer.logger")

CLUSTER_NAME = "kafka-cluster"
WILDCARD = "*"
WILDCARD_PRINCIPAL = "User:*"
STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
# authorizedOperations when the client did not ask for them (Kafka's Integer.MIN_VALUE).
OPERATIONS_OMITTED = -(2**31)


class ResourceType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7

    @property
    def label(self) -> str:
        """As Kafka's logs write it: Topic, Group, Cluster, TransactionalId, ..."""
        return "".join(part.capitalize() for part in self.name.split("_"))


class PatternType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class Operation(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class Permission(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


# An ALLOW of any of these also allows the key (AclOperation's implied operations).
_IMPLIED_BY: dict[Operation, frozenset[Operation]] = {
    Operation.DESCRIBE: frozenset({Operation.DESCRIBE, Operation.READ, Operation.WRITE,
                                   Operation.DELETE, Operation.ALTER}),
    Operation.DESCRIBE_CONFIGS: frozenset({Operation.DESCRIBE_CONFIGS,
                                           Operation.ALTER_CONFIGS}),
}

# The operations each resource type has (for authorized-operations bit fields).
SUPPORTED_OPERATIONS: dict[ResourceType, tuple[Operation, ...]] = {
    ResourceType.TOPIC: (Operation.READ, Operation.WRITE, Operation.CREATE, Operation.DESCRIBE,
                         Operation.DELETE, Operation.ALTER, Operation.DESCRIBE_CONFIGS,
                         Operation.ALTER_CONFIGS),
    ResourceType.GROUP: (Operation.READ, Operation.DESCRIBE, Operation.DELETE,
                         Operation.DESCRIBE_CONFIGS, Operation.ALTER_CONFIGS),
    ResourceType.CLUSTER: (Operation.CREATE, Operation.CLUSTER_ACTION,
                           Operation.DESCRIBE_CONFIGS, Operation.ALTER_CONFIGS,
                           Operation.IDEMPOTENT_WRITE, Operation.ALTER, Operation.DESCRIBE),
    ResourceType.TRANSACTIONAL_ID: (Operation.DESCRIBE, Operation.WRITE),
}


@dataclass(frozen=True, slots=True)
class AclBinding:
    """One ACL: a resource pattern and an access control entry."""

    resource_type: ResourceType
    resource_name: str
    pattern_type: PatternType
    principal: str
    host: str
    operation: Operation
    permission: Permission

    def applies_to(self, resource_type: ResourceType, name: str) -> bool:
        if self.resource_type != resource_type:
            return False
        if self.pattern_type == PatternType.LITERAL:
            return self.resource_name in (name, WILDCARD)
        return name.startswith(self.resource_name)  # PREFIXED

    def grants(self, principal: str, host: str, operation: Operation) -> bool:
        if self.principal not in (principal, WILDCARD_PRINCIPAL):
            return False
        if self.host not in (host, WILDCARD):
            return False
        if self.operation == Operation.ALL or self.operation == operation:
            return True
        return self.permission == Permission.ALLOW \
            and self.operation in _IMPLIED_BY.get(operation, ())

    def describe(self) -> str:
        return (f"StandardAcl(resourceType={self.resource_type.name}, "
                f"resourceName={self.resource_name}, patternType={self.pattern_type.name}, "
                f"principal={self.principal}, host={self.host}, "
                f"operation={self.operation.name}, permissionType={self.permission.name})")

    def to_doc(self) -> list[Any]:
        return [int(self.resource_type), self.resource_name, int(self.pattern_type),
                self.principal, self.host, int(self.operation), int(self.permission)]

    @classmethod
    def from_doc(cls, doc: list[Any]) -> AclBinding:
        return cls(ResourceType(doc[0]), doc[1], PatternType(doc[2]), doc[3], doc[4],
                   Operation(doc[5]), Permission(doc[6]))


@dataclass(frozen=True, slots=True)
class AclFilter:
    """DescribeAcls' and DeleteAcls' filter: None and ANY match anything; MATCH matches
    the ACLs that would apply to a resource of that name."""

    resource_type: ResourceType
    resource_name: str | None
    pattern_type: PatternType
    principal: str | None
    host: str | None
    operation: Operation
    permission: Permission

    def matches(self, acl: AclBinding) -> bool:
        if self.resource_type not in (ResourceType.ANY, acl.resource_type):
            return False
        name = self.resource_name
        if self.pattern_type == PatternType.MATCH:
            if name is not None and not (
                    (acl.pattern_type == PatternType.LITERAL
                     and acl.resource_name in (name, WILDCARD))
                    or (acl.pattern_type == PatternType.PREFIXED
                        and name.startswith(acl.resource_name))):
                return False
        else:
            if self.pattern_type != PatternType.ANY and self.pattern_type != acl.pattern_type:
                return False
            if name is not None and name != acl.resource_name:
                return False
        return (self.principal in (None, acl.principal)
                and self.host in (None, acl.host)
                and self.operation in (Operation.ANY, acl.operation)
                and self.permission in (Permission.ANY, acl.permission))


def parse_super_users(text: str) -> frozenset[str]:
    return frozenset(p.strip() for p in text.split(";") if p.strip())


class Authorizer:
    """Decides requests from the current image's ACLs. Disabled (everything allowed) when
    ``authorizer.class.name`` is empty, as Kafka without an authorizer."""

    def __init__(self, enabled: bool, super_users: frozenset[str], allow_if_no_acl: bool,
                 acls: Callable[[], tuple[AclBinding, ...]]) -> None:
        self.enabled = enabled
        self.super_users = super_users
        self.allow_if_no_acl = allow_if_no_acl
        self._acls = acls
        self._cache_for: tuple[AclBinding, ...] | None = None
        self._cache: dict[tuple[str, str, Operation, ResourceType, str],
                          tuple[bool, str]] = {}

    def authorize(self, principal: str, host: str, operation: Operation,
                  resource_type: ResourceType, name: str,
                  request: Callable[[], str] | None = None) -> bool:
        """Whether the request may; a denial is logged when ``request`` (its API's name,
        asked only then) is given."""
        if not self.enabled:
            return True
        allowed, rule = self._decide(principal, host, operation, resource_type, name)
        if not allowed and request is not None:
            log.info("Principal = %s is Denied operation = %s from host = %s on resource = "
                     "%s:LITERAL:%s for request = %s with resourceRefCount = 1 based on rule "
                     "%s", principal, operation.name, host, resource_type.label, name,
                     request(), rule)
        return allowed

    def authorized_operations(self, principal: str, host: str, resource_type: ResourceType,
                              name: str) -> int:
        """The bit field of operations this principal may perform (``1 << code``)."""
        bits = 0
        for operation in SUPPORTED_OPERATIONS.get(resource_type, ()):
            if self.authorize(principal, host, operation, resource_type, name):
                bits |= 1 << operation
        return bits

    def may_write_some_topic(self, principal: str, host: str) -> bool:
        """Kafka's authorizeByResourceType(WRITE, TOPIC), for idempotent producers: allowed
        to write to at least one topic."""
        if not self.enabled or principal in self.super_users:
            return True
        if self.authorize(principal, host, Operation.WRITE, ResourceType.TOPIC, "hardcode"):
            return True
        relevant = [a for a in self._acls() if a.resource_type == ResourceType.TOPIC
                    and a.principal in (principal, WILDCARD_PRINCIPAL)
                    and a.host in (host, WILDCARD)
                    and a.operation in (Operation.WRITE, Operation.ALL)]
        denies = [a for a in relevant if a.permission == Permission.DENY]
        if any(a.pattern_type == PatternType.LITERAL and a.resource_name == WILDCARD
               for a in denies):
            return False
        for allow in (a for a in relevant if a.permission == Permission.ALLOW):
            if allow.pattern_type == PatternType.LITERAL and allow.resource_name == WILDCARD:
                return True
            if not any(_covers(deny, allow) for deny in denies):
                return True
        return False

    def _decide(self, principal: str, host: str, operation: Operation,
                resource_type: ResourceType, name: str) -> tuple[bool, str]:
        if principal in self.super_users:
            return True, "SuperUser"
        acls = self._acls()
        if acls is not self._cache_for:
            self._cache_for, self._cache = acls, {}
        key = (principal, host, operation, resource_type, name)
        cached = self._cache.get(key)
        if cached is not None:
            return cached
        applicable = [a for a in acls if a.applies_to(resource_type, name)]
        matching = [a for a in applicable if a.grants(principal, host, operation)]
        deny = next((a for a in matching if a.permission == Permission.DENY), None)
        allow = next((a for a in matching if a.permission == Permission.ALLOW), None)
        if deny is not None:
            result = False, f"MatchingAcl(acl={deny.describe()})"
        elif allow is not None:
            result = True, f"MatchingAcl(acl={allow.describe()})"
        elif not applicable and self.allow_if_no_acl:
            result = True, "DefaultAllow"
        else:
            result = False, "DefaultDeny"
        if len(self._cache) > 100_000:
            self._cache.clear()
        self._cache[key] = result
        return result


def _covers(deny: AclBinding, allow: AclBinding) -> bool:
    """A deny that takes away everything ``allow`` grants (authorizeByResourceType)."""
    if deny.pattern_type == PatternType.LITERAL:
        return allow.pattern_type == PatternType.LITERAL \
            and deny.resource_name == allow.resource_name
    return allow.resource_name.startswith(deny.resource_name)


def from_config(config: Any, acls: Callable[[], tuple[AclBinding, ...]]) -> Authorizer:
    return Authorizer(bool(config["authorizer.class.name"]),
                      parse_super_users(config["super.users"]),
                      config["allow.everyone.if.no.acl.found"], acls)
