"""Configuration keys of a group (Kafka's GroupConfig, resource type GROUP of
DescribeConfigs / IncrementalAlterConfigs, ``kafka-configs.sh --entity-type groups``).

A group's value overrides the broker's ``group.consumer.*`` / ``group.share.*`` key of the
same meaning for that group alone; the defaults here are those broker keys' defaults. As in
Kafka 4.4, a numeric group value is accepted above a fixed floor and takes effect clamped into
the broker's ``min``/``max`` keys of it (``BROKER_BOUNDS``), which an operator may change
later without invalidating stored group configs.
"""

from __future__ import annotations

from kafkube_contract.config_keys import ConfigKey, at_least, keys_by_name, one_of

GROUP_KEYS: dict[str, ConfigKey] = keys_by_name(
    ConfigKey("consumer.session.timeout.ms", "int", 45000,
              "The session timeout of the group's consumer-protocol members (KIP-848).",
              at_least(1)),
    ConfigKey("consumer.heartbeat.interval.ms", "int", 5000,
              "How often the group's consumer-protocol members heartbeat.", at_least(1)),
    ConfigKey("share.session.timeout.ms", "int", 45000,
              "The session timeout of the share group's members.", at_least(1)),
    ConfigKey("share.heartbeat.interval.ms", "int", 5000,
              "How often the share group's members heartbeat.", at_least(1)),
    ConfigKey("share.record.lock.duration.ms", "int", 30000,
              "How long a share consumer holds the records it fetched.", at_least(1000)),
    ConfigKey("share.delivery.count.limit", "int", 5,
              "Deliveries of a record before it is archived.", at_least(2)),
    ConfigKey("share.partition.max.record.locks", "int", 2000,
              "Most records of a partition in flight for the share group.", at_least(100)),
    ConfigKey("share.auto.offset.reset", "string", "latest",
              "Where a share group starts reading a partition it has not read before: latest "
              "or earliest.", one_of("latest", "earliest")),
    ConfigKey("share.isolation.level", "string", "read_uncommitted",
              "read_committed: records of aborted transactions are never delivered, and none "
              "past the last stable offset.", one_of("read_uncommitted", "read_committed")),
)

# The broker key each group key overrides.
BROKER_DEFAULTS: dict[str, str] = {
    "consumer.session.timeout.ms": "group.consumer.session.timeout.ms",
    "consumer.heartbeat.interval.ms": "group.consumer.heartbeat.interval.ms",
    "share.session.timeout.ms": "group.share.session.timeout.ms",
    "share.heartbeat.interval.ms": "group.share.heartbeat.interval.ms",
    "share.record.lock.duration.ms": "group.share.record.lock.duration.ms",
    "share.delivery.count.limit": "group.share.delivery.count.limit",
    "share.partition.max.record.locks": "group.share.partition.max.record.locks",
}

# The broker keys bounding where each numeric group key takes effect: (min key, max key).
BROKER_BOUNDS: dict[str, tuple[str, str]] = {
    "consumer.session.timeout.ms": ("group.consumer.min.session.timeout.ms",
                                    "group.consumer.max.session.timeout.ms"),
    "consumer.heartbeat.interval.ms": ("group.consumer.min.heartbeat.interval.ms",
                                       "group.consumer.max.heartbeat.interval.ms"),
    "share.session.timeout.ms": ("group.share.min.session.timeout.ms",
                                 "group.share.max.session.timeout.ms"),
    "share.heartbeat.interval.ms": ("group.share.min.heartbeat.interval.ms",
                                    "group.share.max.heartbeat.interval.ms"),
    "share.record.lock.duration.ms": ("group.share.min.record.lock.duration.ms",
                                      "group.share.max.record.lock.duration.ms"),
    "share.delivery.count.limit": ("group.share.min.delivery.count.limit",
                                   "group.share.max.delivery.count.limit"),
    "share.partition.max.record.locks": ("group.share.min.partition.max.record.locks",
                                         "group.share.max.partition.max.record.locks"),
}
