"""Configs: DescribeConfigs, AlterConfigs and IncrementalAlterConfigs of topics and brokers.

DescribeConfigs follows Kafka's ConfigHelper: each key's effective value with where it comes
from, highest precedence first: a topic's own setting, this broker's dynamic setting, the
cluster-wide dynamic default (broker name ""), the static server.properties, the default.
Changes are decided by the pure functions of ``broker.controller.config_changes`` and stored
in the cluster metadata with one compare-and-set, so every broker, and a broker restarted
later, sees them; each broker lays them over its own settings as the metadata arrives.

Each resource needs its permission (ConfigHelper, ControllerApis): DESCRIBE_CONFIGS or
ALTER_CONFIGS on the topic, the group, or for broker-wide resources on the cluster; a
resource refused is answered with the matching authorization error and nothing else.
"""

from __future__ import annotations

import datetime
import functools
import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from broker.cluster.image import ClusterImage
from broker.cluster.metadata import ConcurrentUpdate, topic_name_error
from broker.config.broker_config import BrokerConfig
from broker.controller.config_changes import (
    BROKER_RESOURCE,
    GROUP_RESOURCE,
    RESOURCE_TYPE_NAMES,
    TOPIC_RESOURCE,
    ConfigChange,
    ConfigChangeError,
    ConfigOp,
    change_configs,
    check_broker_name,
    check_request_shape,
)
from broker.handlers import handles
from broker.handlers.context import DENIED_MESSAGES, BrokerServices, RequestContext
from broker.protocol.messages import build_long_response, build_response
from broker.security.acl import CLUSTER_NAME, Operation, ResourceType
from kafkube_contract.broker_keys import BROKER_KEYS, DYNAMIC_BROKER_KEYS, TOPIC_KEYS
from kafkube_contract.config_keys import ConfigKey
from kafkube_contract.group_keys import BROKER_DEFAULTS, GROUP_KEYS
from kafkube_contract.image import DEFAULT_BROKER, TopicMetadata

NO_THROTTLE = datetime.timedelta(0)
UNKNOWN_TOPIC_MESSAGE = "This server does not host this topic-partition."

# DescribeConfigsResponse.ConfigSource ids.
DYNAMIC_TOPIC_CONFIG = 1
DYNAMIC_BROKER_CONFIG = 2
DYNAMIC_DEFAULT_BROKER_CONFIG = 3
STATIC_BROKER_CONFIG = 4
DEFAULT_CONFIG = 5
# DescribeConfigsResponse.ConfigType ids, by ConfigKey.type.
CONFIG_TYPES = {"bool": 1, "string": 2, "int": 3, "long": 5, "double": 6, "list": 7,
                "password": 9}
# Broker keys that stand in for one another, in precedence order
# (DynamicBrokerConfig.brokerConfigSynonyms).
_SYNONYM_GROUPS = (
    ("log.roll.ms", "log.roll.hours"),
    ("log.retention.ms", "log.retention.minutes", "log.retention.hours"),
)
BROKER_SYNONYMS = {name: group for group in _SYNONYM_GROUPS for name in group}

Synonym = tuple[str, str | None, int]  # name, value, source

# ConfigResource.Type ids that are not in RESOURCE_TYPE_NAMES' short list of ours.
BROKER_LOGGER_RESOURCE, CLIENT_METRICS_RESOURCE = 8, 16
DYNAMIC_GROUP_CONFIG = 8  # ConfigSource of a group's own value
_CLUSTER_GUARD = (ResourceType.CLUSTER, ErrorCode.cluster_authorization_failed)
# What guards each resource type's configs: the ACL resource, and the error if refused.
_GUARDS: dict[int, tuple[ResourceType, ErrorCode]] = {
    TOPIC_RESOURCE: (ResourceType.TOPIC, ErrorCode.topic_authorization_failed),
    GROUP_RESOURCE: (ResourceType.GROUP, ErrorCode.group_authorization_failed),
    BROKER_RESOURCE: _CLUSTER_GUARD,
    BROKER_LOGGER_RESOURCE: _CLUSTER_GUARD,
    CLIENT_METRICS_RESOURCE: _CLUSTER_GUARD,
}


def config_denial(ctx: RequestContext, operation: Operation, resource_type: int,
                  resource_name: str) -> ConfigChangeError | None:
    """Why the principal may not describe or alter a resource's configs; None if it may,
    or if the resource type is unknown (refused later for that, as Kafka does)."""
    guard = _GUARDS.get(resource_type)
    if guard is None:
        return None
    acl_type, code = guard
    name = CLUSTER_NAME if acl_type == ResourceType.CLUSTER else resource_name
    if ctx.authorize(operation, acl_type, name):
        return None
    return ConfigChangeError(code, DENIED_MESSAGES[code])


@dataclass(frozen=True, slots=True)
class ConfigEntry:
    key: ConfigKey
    value: str | None
    synonyms: list[Synonym]  # highest precedence first; the first gives the source
    read_only: bool

    @property
    def source(self) -> int:
        return self.synonyms[0][2] if self.synonyms else DEFAULT_CONFIG


def broker_synonyms(config: BrokerConfig, name: str, per_broker: bool = True) -> list[Synonym]:
    """ConfigHelper.configSynonyms for a broker key: each layer in precedence order, every
    synonym within a layer. ``per_broker=False`` describes the cluster-wide default, which
    no broker's own setting overrides.

    Like Kafka, entries before the first one named ``name`` are dropped, so a topic's
    segment.ms shows log.roll.ms settings but not a lone log.roll.hours.
    """
    group = BROKER_SYNONYMS.get(name, (name,))
    layers: list[tuple[Mapping[str, Any], int]] = [
        (config.dynamic_default, DYNAMIC_DEFAULT_BROKER_CONFIG),
        (config.originals, STATIC_BROKER_CONFIG),
        ({key: BROKER_KEYS[key].render(BROKER_KEYS[key].default) for key in group
          if BROKER_KEYS[key].default is not None}, DEFAULT_CONFIG),
    ]
    if per_broker:
        layers.insert(0, (config.dynamic_broker, DYNAMIC_BROKER_CONFIG))
    found = [(key, values[key], source) for values, source in layers
             for key in group if key in values]
    while found and found[0][0] != name:
        found.pop(0)
    return found


def topic_value_source(config: BrokerConfig, name: str, overrides: Mapping[str, str]) -> int:
    """Where a topic's value of ``name`` comes from."""
    if name in overrides:
        return DYNAMIC_TOPIC_CONFIG
    broker_key = TOPIC_KEYS[name][1]
    if broker_key is None:
        return DEFAULT_CONFIG
    synonyms = broker_synonyms(config, broker_key)
    return synonyms[0][2] if synonyms else DEFAULT_CONFIG


def topic_config_entries(config: BrokerConfig, topic: TopicMetadata) -> list[ConfigEntry]:
    """Every topic key with its effective value (ConfigHelper.createTopicConfigEntry)."""
    values = config.topic_values(topic.configs)
    entries = []
    for name, (key, broker_key) in sorted(TOPIC_KEYS.items()):
        value = key.render(values[name])
        synonyms = broker_synonyms(config, broker_key) if broker_key is not None else []
        if name in topic.configs:
            synonyms.insert(0, (name, value, DYNAMIC_TOPIC_CONFIG))
        entries.append(ConfigEntry(key, value, synonyms, read_only=False))
    return entries


def broker_config_entries(config: BrokerConfig, resource_name: str) -> list[ConfigEntry]:
    """This broker's keys, or for the name "" the cluster-wide dynamic defaults that are set.

    Keys that cannot change at run time are read-only, as in Kafka.
    """
    if resource_name == DEFAULT_BROKER:
        return [
            ConfigEntry(BROKER_KEYS[name], value, broker_synonyms(config, name, per_broker=False),
                        read_only=False)
            for name, value in sorted(config.dynamic_default.items()) if name in BROKER_KEYS
        ]
    if not re.fullmatch(r"[+-]?[0-9]+", resource_name):
        raise ConfigChangeError(ErrorCode.invalid_request,
                                f"Broker id must be an integer, but it is: {resource_name}")
    if int(resource_name) != config.node_id:
        raise ConfigChangeError(
            ErrorCode.invalid_request,
            f"Unexpected broker id, expected {config.node_id} or empty string, but received "
            f"{resource_name}",
        )
    return [
        ConfigEntry(key, key.render(config[name]), broker_synonyms(config, name),
                    read_only=name not in DYNAMIC_BROKER_KEYS)
        for name, key in sorted(BROKER_KEYS.items())
    ]


def _resource_entries(services: BrokerServices, resource: Any) -> list[ConfigEntry]:
    if resource.resource_type == TOPIC_RESOURCE:
        error = topic_name_error(resource.resource_name)
        if error is not None:
            raise ConfigChangeError(ErrorCode.invalid_topic_exception, error)
        topic = services.store.topics.get(resource.resource_name)
        if topic is None:
            raise ConfigChangeError(ErrorCode.unknown_topic_or_partition, UNKNOWN_TOPIC_MESSAGE)
        return topic_config_entries(services.config, topic)
    if resource.resource_type == BROKER_RESOURCE:
        return broker_config_entries(services.config, resource.resource_name)
    if resource.resource_type == GROUP_RESOURCE:
        return group_config_entries(services, resource.resource_name)
    type_name = RESOURCE_TYPE_NAMES.get(resource.resource_type, "UNKNOWN")
    raise ConfigChangeError(ErrorCode.invalid_request, f"Unsupported resource type: {type_name}")


def group_config_entries(services: BrokerServices, group_id: str) -> list[ConfigEntry]:
    """A group's configs: its own value (DYNAMIC_GROUP_CONFIG), else the broker key it
    overrides, else the default."""
    if not group_id:
        raise ConfigChangeError(ErrorCode.invalid_request, "Group id must not be empty.")
    own = services.store.image.group_configs.get(group_id, {})
    entries = []
    for name, key in GROUP_KEYS.items():
        synonyms: list[Synonym] = []
        if name in own:
            synonyms.append((name, own[name], DYNAMIC_GROUP_CONFIG))
        broker_key = BROKER_DEFAULTS.get(name)
        if broker_key is not None:
            synonyms.append((broker_key, BROKER_KEYS[broker_key].render(
                services.config[broker_key]), DEFAULT_CONFIG))
        value = synonyms[0][1] if synonyms else key.render(key.default)
        entries.append(ConfigEntry(key, value, synonyms, read_only=False))
    return entries


def _described(entry: ConfigEntry, synonyms: bool, documentation: bool) -> dict[str, Any]:
    # Passwords and keys are described as Kafka describes its PASSWORD configs: no value.
    sensitive = entry.key.type == "password"
    return {
        "name": entry.key.name,
        "value": None if sensitive else entry.value,
        "read_only": entry.read_only,
        "config_source": entry.source,
        "is_sensitive": sensitive,
        "synonyms": [
            {"name": name, "value": None if sensitive else value, "source": source}
            for name, value, source in (entry.synonyms if synonyms else ())
        ],
        "config_type": CONFIG_TYPES[entry.key.type],
        "documentation": entry.key.doc if documentation else None,
    }


def _describe_resource(
    ctx: RequestContext, resource: Any, synonyms: bool, documentation: bool
) -> dict[str, Any]:
    result: dict[str, Any] = {
        "resource_type": resource.resource_type,
        "resource_name": resource.resource_name,
        "error_code": ErrorCode.none,
        "error_message": None,
        "configs": [],
    }
    try:
        denial = config_denial(ctx, Operation.DESCRIBE_CONFIGS, resource.resource_type,
                               resource.resource_name)
        if denial is not None:
            raise denial
        entries = _resource_entries(ctx.services, resource)
    except ConfigChangeError as e:
        result.update(error_code=e.code, error_message=e.message)
        return result
    wanted = set(resource.configuration_keys or ())  # null or empty: every key
    result["configs"] = [
        _described(entry, synonyms, documentation)
        for entry in entries
        if not wanted or entry.key.name in wanted
    ]
    return result


@handles(32, 1, 4)
async def describe_configs(ctx: RequestContext, request: Any) -> Any:
    """DescribeConfigs of topics and brokers; other resource types are refused."""
    documentation = getattr(request, "include_documentation", False)
    # A resource named twice, with the same keys, is described once: 200,000 copies of one
    # topic would otherwise be 200,000 copies of its ~40 configs, minutes to encode.
    unique = {(r.resource_type, r.resource_name, r.configuration_keys): r
              for r in request.resources}
    results = [
        _describe_resource(ctx, resource, request.include_synonyms, documentation)
        for resource in unique.values()
    ]
    return await build_long_response(
        request, {"throttle_time": NO_THROTTLE, "results": results}, len(results))


# -- AlterConfigs and IncrementalAlterConfigs ---------------------------------------------


def _changes(request: Any, incremental: bool) -> list[ConfigChange]:
    return [
        ConfigChange(
            r.resource_type, r.resource_name,
            tuple(ConfigOp(c.name, c.value, c.config_operation if incremental else 0)
                  for c in r.configs),
            incremental,
        )
        for r in request.resources
    ]


async def _alter(ctx: RequestContext, changes: list[ConfigChange],
                 validate_only: bool) -> list[ConfigChangeError | None]:
    """Decide every resource on the newest image and store the accepted ones at once.

    Kafka's order per resource: named twice, its keys named twice or null, a broker's own
    configs sent to another broker (all decided by the receiving broker before the
    controller sees the request), then ALTER_CONFIGS (the controller's check), then the
    change itself. Legacy AlterConfigs never authorizes BROKER_LOGGER: the broker refuses
    that type first."""
    services = ctx.services
    counts = Counter((c.resource_type, c.resource_name) for c in changes)
    errors: list[ConfigChangeError | None] = []

    @functools.cache  # decided once, though a lost race decides the changes again
    def denial(resource_type: int, resource_name: str) -> ConfigChangeError | None:
        return config_denial(ctx, Operation.ALTER_CONFIGS, resource_type, resource_name)

    def alter(image: ClusterImage) -> ClusterImage | None:
        errors.clear()  # called again on a fresh image if another writer won the race
        accepted = 0
        for change in changes:
            try:
                if counts[(change.resource_type, change.resource_name)] > 1:
                    raise ConfigChangeError(ErrorCode.invalid_request,
                                            "Each resource must appear at most once.")
                check_request_shape(change)
                if change.resource_type == BROKER_RESOURCE:
                    check_broker_name(change.resource_name, services.config.node_id)
                if change.incremental or change.resource_type != BROKER_LOGGER_RESOURCE:
                    refusal = denial(change.resource_type, change.resource_name)
                    if refusal is not None:
                        raise refusal
                image = change_configs(image, change)
            except ConfigChangeError as e:
                errors.append(e)
                continue
            errors.append(None)
            accepted += 1
        return image if accepted and not validate_only else None

    try:
        await services.store.update(alter)
    except ConcurrentUpdate as e:
        failed = ConfigChangeError(ErrorCode.unknown_server_error, str(e))
        return [error or failed for error in errors]
    return errors


def _responses(changes: list[ConfigChange],
               errors: list[ConfigChangeError | None]) -> list[dict[str, Any]]:
    return [
        {
            "error_code": error.code if error else ErrorCode.none,
            "error_message": error.message if error else None,
            "resource_type": change.resource_type,
            "resource_name": change.resource_name,
        }
        for change, error in zip(changes, errors, strict=True)
    ]


@handles(33, 0, 2)
async def alter_configs(ctx: RequestContext, request: Any) -> Any:
    """Legacy AlterConfigs: each resource's dynamic configs replaced by those given."""
    changes = _changes(request, incremental=False)
    errors = await _alter(ctx, changes, request.validate_only)
    return build_response(request, {"throttle_time": NO_THROTTLE,
                                    "responses": _responses(changes, errors)})


@handles(44, 0, 1)
async def incremental_alter_configs(ctx: RequestContext, request: Any) -> Any:
    """IncrementalAlterConfigs: SET, DELETE, APPEND, SUBTRACT per key (KIP-339)."""
    changes = _changes(request, incremental=True)
    errors = await _alter(ctx, changes, request.validate_only)
    return build_response(request, {"throttle_time": NO_THROTTLE,
                                    "responses": _responses(changes, errors)})
