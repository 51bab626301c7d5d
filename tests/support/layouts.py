"""Replica layouts for tests of what the operator decides from an image: the brokers' own
placement (broker/controller/placement.py, Kafka's rack-aware round robin) seeded by the
topic's name, so a test's image is the same on every run."""

from __future__ import annotations

import hashlib
import random
from collections.abc import Mapping

from broker.controller.placement import assign_replicas


def placement(topic: str, brokers: Mapping[int, str | None], partitions: int,
              replication_factor: int, start_partition: int = 0) -> list[tuple[int, ...]]:
    """Replica lists for ``partitions`` partitions over ``brokers`` (id → rack)."""
    seed = int.from_bytes(hashlib.sha256(topic.encode()).digest()[:8], "big")
    return assign_replicas(brokers, partitions, replication_factor, random.Random(seed),
                           start_partition=start_partition)
