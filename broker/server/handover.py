"""A controlled shutdown's handover: before a broker leaves, which of its partitions a
caught-up follower can take over and which leaders still hear from it, found by watching
its followers and fetchers for a while (the replica manager's state, read only)."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING

from broker.controller.elections import Handover
from broker.server.partition import now_ms

if TYPE_CHECKING:
    from broker.server.replica_manager import ReplicaManager

log = logging.getLogger(__name__)

HANDOVER_POLL_S = 0.05


async def hand_over(replicas: ReplicaManager, timeout: float) -> Handover:
    """What a controlled shutdown may hand over: for each partition we lead, the ISR
    followers that fetch from us from now on at our high watermark or beyond; and the
    leaders our fetchers hear from from now on. Waits until every led partition that
    has other ISR members has a successor and every fetcher has heard from its leader,
    or ``timeout`` (seconds) passes: a follower or leader that stays silent is dead, or
    as good as dead to its partitions."""
    since = now_ms()
    marks = {tp: p.high_watermark for tp, p in replicas.partitions.items() if p.is_leader}
    deadline = time.monotonic() + timeout
    while True:
        successors = {
            tp: p.proven_followers(since, marks[tp])
            for tp, p in replicas.partitions.items() if tp in marks and p.is_leader
        }
        heard = frozenset(
            leader for leader, f in replicas.fetchers.items() if f.heard_since(since)
        )
        waiting_leaders = [
            leader for leader, f in replicas.fetchers.items()
            if f.partitions and leader not in heard
        ]
        waiting_partitions = [
            tp for tp, found in successors.items()
            if not found and len(replicas.partitions[tp].isr) > 1
        ]
        if not (waiting_leaders or waiting_partitions) or time.monotonic() >= deadline:
            break
        await asyncio.sleep(HANDOVER_POLL_S)
    if waiting_partitions or waiting_leaders:
        log.warning(
            "controlled shutdown: no follower proved caught up for %d led partitions "
            "(they stay here), no answer from leaders %s (we keep our ISR places there)",
            len(waiting_partitions), sorted(waiting_leaders))
    return Handover(successors, heard)
