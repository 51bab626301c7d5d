"""The value a group config takes effect at for one group (Kafka's GroupConfigManager).

A group's own value (``kafka-configs.sh --entity-type groups``, kept in the cluster image)
wins; else the broker key it overrides; else the key's default. A numeric group value outside
the broker's ``min``/``max`` keys of it is clamped into them, with a warning, as Kafka 4.4
does: the bounds are the operator's, and may change after the group's value was stored.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

from broker.config.broker_config import BrokerConfig
from kafkube_contract.group_keys import BROKER_BOUNDS, BROKER_DEFAULTS, GROUP_KEYS

log = logging.getLogger(__name__)
GroupConfigs = Callable[[str], Mapping[str, str]]  # a group's own configs


class GroupSettings:
    def __init__(self, config: BrokerConfig, own: GroupConfigs = lambda group_id: {}
                 ) -> None:
        self.config = config
        self.own = own
        self._warned: set[tuple[str, str, str]] = set()

    def get(self, group_id: str, name: str) -> str:
        """``name``'s effective value for ``group_id``, rendered as a config value."""
        own = self.own(group_id)
        if name in own:
            value = own[name]
            if name in BROKER_BOUNDS:
                return str(self._clamped(group_id, name, int(value)))
            return value
        broker_key = BROKER_DEFAULTS.get(name)
        if broker_key is not None:
            return str(self.config[broker_key])
        key = GROUP_KEYS[name]
        return key.render(key.default) or ""

    def number(self, group_id: str, name: str) -> int:
        return int(self.get(group_id, name))

    def _clamped(self, group_id: str, name: str, value: int) -> int:
        low_key, high_key = BROKER_BOUNDS[name]
        low, high = self.config[low_key], self.config[high_key]
        effective = min(max(value, low), high)
        if effective != value and (group_id, name, str(value)) not in self._warned:
            self._warned.add((group_id, name, str(value)))
            bound = low_key if value < low else high_key
            log.warning("group %s: %s=%d is outside %s=%d; it takes effect as %d", group_id,
                        name, value, bound, self.config[bound], effective)
        return effective
