"""Online migration between the classic group protocol and KIP-848's, as Kafka 4 does it
(``group.consumer.migration.policy``).

A team moves its consumers to ``group.protocol=consumer`` one process at a time. When the first
one heartbeats into a classic group, the group is **upgraded**: it becomes a consumer group
whose members are the classic ones, each at the group's generation as its member epoch,
holding what its last SyncGroup gave it, the target assignment equal to that; the newcomer
then joins as in any consumer group. Classic members keep speaking JoinGroup, SyncGroup and
Heartbeat to it (``mixed_membership``). When the last KIP-848 member leaves a group whose
other members are all classic, the group is **downgraded**: a classic group at the group
epoch, each member assigned its target, which then rebalances the classic way.

The policy allows ``upgrade``, ``downgrade``, both (``bidirectional``, Kafka's default) or
neither (``disabled``). An empty group is migrated offline whatever the policy: it keeps only
its committed offsets, so either protocol may take it.

Pure functions from one group to the other and to the records that store the change: a
conversion is written as one batch (the old group's tombstones, the new group's records)
before it takes effect in memory.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping

from broker.coordinator import consumer_protocol as cp
from broker.coordinator import consumer_records as cr
from broker.coordinator.consumer_group import (
    ClassicProtocols,
    ConsumerGroup,
    ConsumerMember,
    MemberState,
    assignment,
    pairs,
)
from broker.coordinator.group import Group, GroupState, Member
from broker.coordinator.offsets_topic import GroupKey, encode_key
from broker.coordinator.offsets_writer import Entry, group_record
from kafkube_contract.image import TopicMetadata

PROTOCOL_TYPE = "consumer"


def upgrade_enabled(policy: str) -> bool:
    return policy.lower() in ("upgrade", "bidirectional")


def downgrade_enabled(policy: str) -> bool:
    return policy.lower() in ("downgrade", "bidirectional")


def why_not_upgrade(group: Group, policy: str, max_size: int) -> str | None:
    """Why a classic group with members cannot become a consumer group (Kafka's
    validateOnlineUpgrade), or None."""
    gid = group.group_id
    if not upgrade_enabled(policy):
        return f"Cannot upgrade classic group {gid} to consumer group because the online " \
               f"upgrade is disabled (group.consumer.migration.policy={policy})."
    if group.protocol_type != PROTOCOL_TYPE:
        return f"Cannot upgrade classic group {gid} to consumer group because the group " \
               f"does not use the consumer embedded protocol."
    if len(group.members) > max_size:
        return f"Cannot upgrade classic group {gid} to consumer group because the group " \
               f"size exceeds the consumer group maximum size."
    return None


def upgraded(group: Group, topics: Mapping[str, TopicMetadata]) -> ConsumerGroup:
    """The consumer group a classic group becomes (Kafka's ConsumerGroup.fromClassicGroup).
    Raises MalformedProtocol if a member's subscription or assignment is not the consumer's
    embedded protocol."""
    epoch = group.generation
    ids = {name: uuid.UUID(t.topic_id) for name, t in topics.items()}
    out = ConsumerGroup(group.group_id, group_epoch=epoch, target_epoch=epoch)
    for m in group.members.values():
        metadata = m.metadata_for(group.protocol) or (m.protocols[0][1] if m.protocols else b"")
        subscription = cp.decode_subscription(metadata)
        held = assignment((ids[topic], p) for topic, parts in cp.decode_assignment(m.assignment)
                          for p in parts if topic in ids)
        member = ConsumerMember(
            m.member_id, instance_id=m.group_instance_id, rack_id=subscription.rack_id,
            client_id=m.client_id, client_host="/" + m.client_host.removeprefix("/"),
            subscribed_topic_names=tuple(sorted(set(subscription.topics))),
            rebalance_timeout_ms=m.rebalance_timeout_ms,
            classic=ClassicProtocols(m.session_timeout_ms, tuple(m.protocols)),
            member_epoch=epoch, previous_member_epoch=epoch, state=MemberState.STABLE,
            assigned=held, assignment_epochs={tp: epoch for tp in pairs(held)})
        out.put(member)
        out.target[m.member_id] = held
    return out


def upgrade_entries(classic: Group, group: ConsumerGroup) -> list[Entry]:
    """The batch that stores an upgrade: the classic group's tombstone, then the consumer
    group's records."""
    return [(encode_key(GroupKey(classic.group_id)), None), *cr.group_entries(group)]


def why_not_downgrade(group: ConsumerGroup, leaving: str, policy: str,
                      max_size: int) -> str | None:
    """Why ``group`` stays a consumer group as ``leaving`` goes (Kafka's
    validateOnlineDowngradeWithFencedMember), or None: the group downgrades when the
    leaving member is its last KIP-848 member and classic members remain."""
    rest = [m for mid, m in group.members.items() if mid != leaving]
    leaver = group.members.get(leaving)
    if leaver is None or leaver.classic is not None or not rest or \
            any(m.classic is None for m in rest):
        return "not the last member using the consumer protocol"
    if not downgrade_enabled(policy):
        return f"the online downgrade is disabled (group.consumer.migration.policy={policy})"
    if len(rest) > max_size:
        return "its size is greater than the classic group maximum size"
    return None


def downgraded(group: ConsumerGroup, leaving: str, topics: Mapping[str, TopicMetadata],
               now_ms: int) -> Group:
    """The classic group a consumer group becomes once ``leaving`` is gone (Kafka's
    ClassicGroup.fromConsumerGroup): Stable at the group epoch, each member holding its
    target assignment; the caller then starts a rebalance."""
    names = {uuid.UUID(t.topic_id): name for name, t in topics.items()}
    out = Group(group.group_id, state=GroupState.STABLE, generation=group.group_epoch,
                protocol_type=PROTOCOL_TYPE, state_timestamp=now_ms)
    for mid, m in group.members.items():
        if mid == leaving or m.classic is None:
            continue
        out.add(Member(mid, m.instance_id, m.client_id, m.client_host.removeprefix("/"),
                       m.classic.session_timeout_ms, m.rebalance_timeout_ms, PROTOCOL_TYPE,
                       list(m.classic.protocols)))
    out.protocol = out.select_protocol()
    for mid, member in out.members.items():
        target = group.target.get(mid, {})
        by_topic: dict[str, list[int]] = {}
        for topic_id, p in pairs(target):
            if topic_id in names:
                by_topic.setdefault(names[topic_id], []).append(p)
        version = cp.subscription_version(member.metadata_for(out.protocol))
        member.assignment = cp.encode_assignment(version, by_topic.items())
    return out


def downgrade_entries(group: ConsumerGroup, classic: Group) -> list[Entry]:
    """The batch that stores a downgrade: every consumer-group record's tombstone, then the
    classic group's GroupMetadata."""
    return [*cr.group_tombstones(group), group_record(classic)]
