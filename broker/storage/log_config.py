"""The settings a partition's log obeys, with Kafka's topic config names: what the log reads
when it acts (append, roll, retention, cleaning, producer expiry), so a new value takes
effect on its next act."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

PRODUCER_ID_EXPIRATION_MS = 86_400_000  # Kafka's default: a day

@dataclass(frozen=True, slots=True)
class LogConfig:
    """The topic-level settings the log obeys (Kafka's topic config names)."""

    segment_bytes: int = 1073741824
    segment_ms: int = 7 * 24 * 3_600_000
    retention_ms: int = 7 * 24 * 3_600_000
    retention_bytes: int = -1
    index_interval_bytes: int = 4096
    segment_index_bytes: int = 10485760
    file_delete_delay_ms: int = 60000
    max_message_bytes: int = 1048588
    message_timestamp_type: str = "CreateTime"
    message_timestamp_before_max_ms: int = 2**63 - 1
    message_timestamp_after_max_ms: int = 3_600_000
    flush_messages: int = 2**63 - 1
    flush_ms: int = 2**63 - 1
    cleanup_policy: tuple[str, ...] = ("delete",)
    delete_retention_ms: int = 86400000
    min_compaction_lag_ms: int = 0
    min_cleanable_dirty_ratio: float = 0.5
    min_insync_replicas: int = 1  # not the log's own, but read with it on every produce
    # Broker-wide (producer.id.expiration.ms, Kafka's ProducerStateManagerConfig), carried
    # here so that a change at run time reaches every log as topic configs do.
    producer_id_expiration_ms: int = PRODUCER_ID_EXPIRATION_MS
    # Replicas of this partition's topic under a replication throttle ("*" or
    # "partition:broker"); like Kafka's LogConfig, the topic's configs travel together.
    leader_throttled_replicas: tuple[str, ...] = ()
    follower_throttled_replicas: tuple[str, ...] = ()

    @classmethod
    def from_topic_config(cls, values: dict[str, Any],
                          producer_id_expiration_ms: int = PRODUCER_ID_EXPIRATION_MS,
                          ) -> LogConfig:
        """``values``: every topic-level key's value; the one broker key comes apart."""
        return cls(
            segment_bytes=values["segment.bytes"],
            segment_ms=values["segment.ms"],
            retention_ms=values["retention.ms"],
            retention_bytes=values["retention.bytes"],
            index_interval_bytes=values["index.interval.bytes"],
            segment_index_bytes=values["segment.index.bytes"],
            file_delete_delay_ms=values["file.delete.delay.ms"],
            max_message_bytes=values["max.message.bytes"],
            message_timestamp_type=values["message.timestamp.type"],
            message_timestamp_before_max_ms=values["message.timestamp.before.max.ms"],
            message_timestamp_after_max_ms=values["message.timestamp.after.max.ms"],
            flush_messages=values["flush.messages"],
            flush_ms=values["flush.ms"],
            cleanup_policy=tuple(values["cleanup.policy"]),
            delete_retention_ms=values["delete.retention.ms"],
            min_compaction_lag_ms=values["min.compaction.lag.ms"],
            min_insync_replicas=values["min.insync.replicas"],
            min_cleanable_dirty_ratio=values["min.cleanable.dirty.ratio"],
            leader_throttled_replicas=_replica_list(values["leader.replication.throttled.replicas"]),
            follower_throttled_replicas=_replica_list(
                values["follower.replication.throttled.replicas"]),
            producer_id_expiration_ms=producer_id_expiration_ms,
        )

    def changes_from(self, old: LogConfig) -> str:
        """What differs from ``old``, for the log line a run-time change leaves."""
        return ", ".join(f"{f.name}={getattr(self, f.name)}" for f in fields(self)
                         if getattr(self, f.name) != getattr(old, f.name)) or "unchanged"


def _replica_list(items: list[str]) -> tuple[str, ...]:
    """``0 : 1`` and ``0:1`` name the same replica."""
    return tuple(":".join(part.strip() for part in item.split(":")) for item in items)
