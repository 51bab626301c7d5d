"""The server-side assignors of KIP-848 consumer groups: ``uniform`` (the default) and
``range`` (``group.consumer.assignors``, ``group.remote.assignor`` on the client).

Both are pure functions from the group's subscriptions, the subscribed topics' partition
counts and the previous target assignment to the next one, and both are sticky: a partition
stays with its member unless balance requires a move, since every move costs a revocation
round trip and a pause of that one partition (KIP-848's point).

- **uniform** spreads every subscribed partition so that no member eligible for a partition
  holds two more than another (members subscribe to different topics: the balance is among
  those eligible), keeping what each member had where the quota allows.
- **range** assigns each topic on its own: its members (sorted by id) get ``n // m``
  partitions each and the first ``n % m`` one more, each keeping the partitions it had up
  to that quota; co-partitioned topics therefore line up when the membership is stable.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass

from broker.coordinator.consumer_group import Assignment

UNIFORM, RANGE = "uniform", "range"
ASSIGNORS = (UNIFORM, RANGE)


@dataclass(frozen=True, slots=True)
class GroupSpec:
    """What an assignor sees: each member's subscribed topic ids, each topic's partition
    count, and each member's previous target (empty for a new member)."""

    subscriptions: Mapping[str, frozenset[uuid.UUID]]
    partitions: Mapping[uuid.UUID, int]
    previous: Mapping[str, Assignment]


def assign(name: str, spec: GroupSpec) -> dict[str, Assignment]:
    if name == UNIFORM:
        return uniform(spec)
    if name == RANGE:
        return range_assign(spec)
    raise ValueError(f"unknown assignor {name}")


def uniform(spec: GroupSpec) -> dict[str, Assignment]:
    members = sorted(spec.subscriptions)
    eligible: dict[tuple[uuid.UUID, int], list[str]] = {}
    for topic_id in sorted({t for subs in spec.subscriptions.values() for t in subs}, key=str):
        subscribers = [m for m in members if topic_id in spec.subscriptions[m]]
        for p in range(spec.partitions.get(topic_id, 0)):
            eligible[(topic_id, p)] = subscribers
    held: dict[str, set[tuple[uuid.UUID, int]]] = {m: set() for m in members}
    owner: dict[tuple[uuid.UUID, int], str] = {}
    quota = _fair_share(len(eligible), len(members))
    # 1. Keep previous partitions still valid, up to the fair share (ceil) of the member.
    for m in members:
        for topic_id, parts in sorted(spec.previous.get(m, {}).items(), key=lambda i: str(i[0])):
            for p in sorted(parts):
                tp = (topic_id, p)
                if tp in eligible and tp not in owner and m in eligible[tp] \
                        and len(held[m]) < quota:
                    held[m].add(tp)
                    owner[tp] = m
    # 2. Hand out the rest, the partitions with the fewest candidates first, each to its
    # least loaded candidate.
    unassigned = sorted((tp for tp in eligible if tp not in owner),
                        key=lambda tp: (len(eligible[tp]), str(tp[0]), tp[1]))
    for tp in unassigned:
        candidates = eligible[tp]
        if not candidates:
            continue
        m = min(candidates, key=lambda c: (len(held[c]), c))
        held[m].add(tp)
        owner[tp] = m
    # 3. Even out: move a partition from a member to an eligible one holding two fewer.
    moves = len(eligible) * max(1, len(members))  # a bound; each move narrows a gap
    changed = True
    while changed and moves > 0:
        changed = False
        for m in sorted(members, key=lambda c: (-len(held[c]), c)):
            for tp in sorted(held[m], key=lambda i: (str(i[0]), i[1])):
                target = min(eligible[tp], key=lambda c: (len(held[c]), c))
                if len(held[target]) + 1 < len(held[m]):
                    held[m].discard(tp)
                    held[target].add(tp)
                    moves -= 1
                    changed = True
                    break
            if changed:
                break
    return {m: _as_assignment(held[m]) for m in members}


def range_assign(spec: GroupSpec) -> dict[str, Assignment]:
    members = sorted(spec.subscriptions)
    out: dict[str, dict[uuid.UUID, set[int]]] = {m: {} for m in members}
    for topic_id in sorted({t for subs in spec.subscriptions.values() for t in subs}, key=str):
        subscribers = [m for m in members if topic_id in spec.subscriptions[m]]
        count = spec.partitions.get(topic_id, 0)
        if not subscribers or not count:
            continue
        base, extra = divmod(count, len(subscribers))
        quotas = {m: base + (1 if i < extra else 0) for i, m in enumerate(subscribers)}
        taken: set[int] = set()
        for m in subscribers:  # sticky: keep what it had, up to its quota
            kept = sorted(p for p in spec.previous.get(m, {}).get(topic_id, ())
                          if p < count and p not in taken)[:quotas[m]]
            out[m][topic_id] = set(kept)
            taken.update(kept)
        free = iter(p for p in range(count) if p not in taken)
        for m in subscribers:
            while len(out[m][topic_id]) < quotas[m]:
                out[m][topic_id].add(next(free))
    return {m: {t: frozenset(ps) for t, ps in topics.items() if ps} for m, topics in out.items()}


def _fair_share(partitions: int, members: int) -> int:
    return -(-partitions // members) if members else 0


def _as_assignment(tps: set[tuple[uuid.UUID, int]]) -> Assignment:
    out: dict[uuid.UUID, set[int]] = {}
    for topic_id, p in tps:
        out.setdefault(topic_id, set()).add(p)
    return {t: frozenset(ps) for t, ps in out.items()}
