"""How AlterConfigs and IncrementalAlterConfigs change the stored configs.

Pure functions from the current cluster image and one resource's request to the next image,
with the checks, order and messages of Kafka (ConfigAdminManager on the broker,
ConfigurationControlManager and ControllerConfigurationValidator on the controller). A
resource changes all or nothing: one bad key refuses the whole resource and leaves what is
stored as it was. The handlers only decode, call these, and write the result.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from kio.schema.errors import ErrorCode

from broker.cluster.image import ClusterImage
from broker.cluster.metadata import topic_name_error
from broker.config.broker_config import validate_dynamic_broker_configs, validate_topic_configs
from kafkube_contract.broker_keys import BROKER_KEYS, TOPIC_KEYS
from kafkube_contract.config_keys import ConfigError, ConfigKey
from kafkube_contract.group_keys import GROUP_KEYS
from kafkube_contract.image import DEFAULT_BROKER

# ConfigResource.Type ids.
TOPIC_RESOURCE = 2
BROKER_RESOURCE = 4
GROUP_RESOURCE = 32
RESOURCE_TYPE_NAMES = {2: "TOPIC", 4: "BROKER", 8: "BROKER_LOGGER", 16: "CLIENT_METRICS",
                       32: "GROUP"}
# AlterConfigOp.OpType ids.
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
_OP_NAMES = {APPEND: "append", SUBTRACT: "subtract"}


class ConfigChangeError(Exception):
    """One resource refused, with Kafka's error code and a message naming the cause."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True, slots=True)
class ConfigOp:
    name: str
    value: str | None
    op: int = SET


@dataclass(frozen=True, slots=True)
class ConfigChange:
    """One resource of a request: ``incremental`` ops edit what is stored; legacy
    AlterConfigs (``incremental=False``) replaces the resource's whole set of configs."""

    resource_type: int
    resource_name: str
    ops: tuple[ConfigOp, ...]
    incremental: bool = True


def check_request_shape(change: ConfigChange) -> None:
    """What ConfigAdminManager.preprocess refuses before looking at any value."""
    names = [op.name for op in change.ops]
    if len(set(names)) != len(names):
        raise ConfigChangeError(ErrorCode.invalid_request, "Error due to duplicate config keys")
    for op in change.ops:
        if op.op not in (SET, DELETE, APPEND, SUBTRACT):
            raise ConfigChangeError(ErrorCode.invalid_request,
                                    f"Unknown operations type {op.op}")
    nulls = [op.name for op in change.ops if op.value is None and op.op != DELETE]
    if nulls:
        raise ConfigChangeError(ErrorCode.invalid_request,
                                "Null value not supported for : " + ", ".join(nulls))


def apply_ops(current: Mapping[str, str], ops: Sequence[ConfigOp],
              keys: Mapping[str, ConfigKey]) -> dict[str, str]:
    """The configs after ``ops`` (AlterConfigOp semantics). APPEND and SUBTRACT work on
    list keys only, starting from the stored value or else the key's default."""
    configs = dict(current)
    for op in ops:
        if op.op == SET:
            configs[op.name] = op.value or ""
        elif op.op == DELETE:
            configs.pop(op.name, None)
        else:
            key = keys.get(op.name)
            if key is None or key.type != "list":
                raise ConfigChangeError(
                    ErrorCode.invalid_config,
                    f"Config value {_OP_NAMES[op.op]} is not allowed for config key: {op.name}",
                )
            configs[op.name] = _edit_list(configs.get(op.name), key, op)
    return configs


def _edit_list(stored: str | None, key: ConfigKey, op: ConfigOp) -> str:
    old = key.parse(stored) if stored is not None else list(key.default or [])
    given = [item.strip() for item in (op.value or "").split(",") if item.strip()]
    if op.op == APPEND:
        new = old + [item for item in given if item not in old]
    else:
        new = [item for item in old if item not in given]
    return ",".join(new)


def _topic_keys() -> dict[str, ConfigKey]:
    """Topic keys with the defaults their broker keys declare, for APPEND and SUBTRACT."""
    keys = {}
    for name, (key, broker_key) in TOPIC_KEYS.items():
        default = key.default if broker_key is None else BROKER_KEYS[broker_key].default
        keys[name] = replace(key, default=default)
    return keys


def _invalid_config(e: ConfigError) -> ConfigChangeError:
    return ConfigChangeError(ErrorCode.invalid_config, str(e))


def _new_configs(current: Mapping[str, str], change: ConfigChange,
                 keys: Mapping[str, ConfigKey]) -> dict[str, str]:
    if change.incremental:
        return apply_ops(current, change.ops, keys)
    return {op.name: op.value or "" for op in change.ops}


def _change_topic(image: ClusterImage, change: ConfigChange) -> ClusterImage:
    name = change.resource_name
    if name == "":
        raise ConfigChangeError(ErrorCode.invalid_request,
                                "Default topic resources are not allowed.")
    error = topic_name_error(name)
    if error is not None:
        raise ConfigChangeError(ErrorCode.invalid_topic_exception, error)
    topic = image.topics.get(name)
    if topic is None:
        raise ConfigChangeError(ErrorCode.unknown_topic_or_partition,
                                f"The topic '{name}' does not exist.")
    configs = _new_configs(topic.configs, change, _topic_keys())
    try:
        validate_topic_configs(configs)
    except ConfigError as e:
        raise _invalid_config(e) from None
    return image.with_topic(replace(topic, configs=configs))


def check_broker_name(name: str, node_id: int) -> None:
    """A broker's own configs are altered through that broker, the default through any."""
    if name == DEFAULT_BROKER:
        return
    try:
        broker = int(name)
    except ValueError:
        raise ConfigChangeError(ErrorCode.invalid_request,
                                f"Node id must be an integer, but it is: {name}") from None
    if broker != node_id:
        raise ConfigChangeError(
            ErrorCode.invalid_request,
            f"Unexpected broker id, expected {node_id}, but received {name}")


def _change_broker(image: ClusterImage, change: ConfigChange) -> ClusterImage:
    current = image.broker_configs.get(change.resource_name, {})
    configs = _new_configs(current, change, BROKER_KEYS)
    try:
        validate_dynamic_broker_configs(configs)
    except ConfigError as e:
        raise _invalid_config(e) from None
    return image.with_broker_configs(change.resource_name, configs)


def _change_group(image: ClusterImage, change: ConfigChange) -> ClusterImage:
    """A group's configs (Kafka's GroupConfig): known keys with valid values only; the group
    need not exist yet (a share group is configured before its first consumer starts)."""
    if not change.resource_name:
        raise ConfigChangeError(ErrorCode.invalid_request, "Group id must not be empty.")
    configs = _new_configs(image.group_configs.get(change.resource_name, {}), change,
                           GROUP_KEYS)
    for name, raw in configs.items():
        key = GROUP_KEYS.get(name)
        if key is None:
            raise ConfigChangeError(ErrorCode.invalid_config,
                                    f"Unknown group config name: {name}")
        try:
            key.parse(raw)
        except ConfigError as e:
            raise _invalid_config(e) from None
    return image.with_group_configs(change.resource_name, configs)


def change_configs(image: ClusterImage, change: ConfigChange) -> ClusterImage:
    """The image with one resource's configs changed; raises ConfigChangeError to refuse."""
    check_request_shape(change)
    if change.resource_type == TOPIC_RESOURCE:
        return _change_topic(image, change)
    if change.resource_type == BROKER_RESOURCE:
        return _change_broker(image, change)
    if change.resource_type == GROUP_RESOURCE:
        return _change_group(image, change)
    type_name = RESOURCE_TYPE_NAMES.get(change.resource_type, str(change.resource_type))
    raise ConfigChangeError(ErrorCode.invalid_request, f"Unknown resource type {type_name}")
