"""The classic group coordinator's offsets, driven directly: persisted to and reloaded
from __consumer_offsets, expired, deleted with their groups, and which partition of it
a group lives in (Kafka's rule)."""

from __future__ import annotations

import asyncio
import time

import pytest
from kio.schema.errors import ErrorCode

from broker.cluster.internal_topics import java_string_hash, partition_for
from broker.coordinator.group import GroupState
from tests.support.group_calls import join, make, offset, sync
from tests.support.handlers import make_services

# -- offsets: persistence, reload, expiry --------------------------------------------------


@pytest.mark.parametrize("shutdown", ["clean", "abandoned"])
def test_offsets_and_groups_reload_from_consumer_offsets(tmp_path, shutdown):
    services = make_services(tmp_path, **{"group.initial.rebalance.delay.ms": "0",
                                          "offsets.topic.num.partitions": "5"})
    gc = services.groups

    async def first_life():
        joined = await join(gc, "g")
        a = joined.member_id
        await sync(gc, "g", 1, a, {a: b"assignment"})
        assert gc.commit_offsets("g", 1, a, None, {("t", 0): offset(5), ("t", 1): offset(7)}) == (
            ErrorCode.none)
        assert gc.commit_offsets("g", 1, a, None, {("t", 0): offset(6)}) == ErrorCode.none
        # Simple commits (no membership), a deleted offset, a deleted group.
        simple = {("t", 0): offset(3), ("u", 2): offset(4)}
        assert gc.commit_offsets("simple", -1, "", None, simple) == ErrorCode.none
        assert gc.delete_offsets("simple", [("u", 2)])[0] == ErrorCode.none
        assert gc.commit_offsets("doomed", -1, "", None, {("t", 0): offset(1)}) == ErrorCode.none
        assert gc.delete_groups(["doomed"]) == {"doomed": ErrorCode.none}
        if shutdown == "clean":
            await services.replicas.shutdown()
        return a

    a = asyncio.run(first_life())
    before = {g: dict(o) for g, o in gc.offsets.items()}
    assert set(before) == {"g", "simple"}

    fresh = make_services(tmp_path).groups  # same log dir, a new broker process
    fresh.load()
    assert {g: dict(o) for g, o in fresh.offsets.items() if o} == before
    assert fresh.fetch_offsets("g", [("t", 0), ("t", 1)]) == before["g"]
    assert fresh.fetch_offsets("simple", None) == {("t", 0): before["simple"][("t", 0)]}
    assert "doomed" not in fresh.groups and fresh.fetch_offsets("doomed", None) == {}
    group = fresh.groups["g"]
    assert (group.state, group.generation, group.protocol, group.leader_id) == (
        GroupState.STABLE, 1, "range", a)
    assert group.members[a].assignment == b"assignment"
    # The member carries on with the new coordinator, as after a coordinator failover.
    assert fresh.heartbeat("g", 1, a, None) == ErrorCode.none


def test_expire_offsets_of_empty_groups_only(tmp_path):
    now_ms = int(time.time() * 1000)
    minute = 60_000

    async def main():
        gc = make(tmp_path, **{"offsets.retention.minutes": "1"})
        gc.commit_offsets("old", -1, "", None, {("t", 0): offset(1, now_ms - 2 * minute),
                                                 ("t", 1): offset(2, now_ms - 10_000)})
        gc.commit_offsets("fresh", -1, "", None, {("t", 0): offset(3, now_ms - 10_000)})
        # An active group keeps its offsets however old they are.
        joined = await join(gc, "active")
        a = joined.member_id
        await sync(gc, "active", 1, a, {})
        gc.commit_offsets("active", 1, a, None, {("t", 0): offset(4, now_ms - 5 * minute)})
        # A group that has just become empty: retention counts from then (KIP-211).
        joined = await join(gc, "left")
        b = joined.member_id
        await sync(gc, "left", 1, b, {})
        gc.commit_offsets("left", 1, b, None, {("t", 0): offset(5, now_ms - 5 * minute)})
        gc.leave_group("left", [(b, None)])
        assert gc.groups["left"].state is GroupState.EMPTY

        assert gc.expire_offsets(now_ms) == 1
        assert gc.fetch_offsets("old", None) == {("t", 1): gc.offsets["old"][("t", 1)]}
        assert gc.fetch_offsets("fresh", None) != {}
        assert gc.fetch_offsets("active", None) != {}
        assert gc.fetch_offsets("left", None) != {}

        later = now_ms + 2 * minute
        assert gc.expire_offsets(later) == 3  # old t-1, fresh t-0, left t-0
        assert gc.fetch_offsets("old", None) == {} and gc.fetch_offsets("fresh", None) == {}
        assert gc.fetch_offsets("left", None) == {}
        assert gc.fetch_offsets("active", None) != {}
        # An Empty group left without offsets is gone (Kafka: Dead, and a tombstone for its
        # metadata; GroupMetadataManager.cleanupGroupMetadata), so ListGroups does not keep
        # every console consumer's group forever.
        assert {g.group_id for g in gc.list_groups()} == {"active"}

    asyncio.run(main())
    # Expiry wrote tombstones: a reloaded coordinator does not bring the offsets back.
    fresh = make(tmp_path)
    fresh.load()
    assert {g for g, o in fresh.offsets.items() if o} == {"active"}
    assert {g.group_id for g in fresh.list_groups()} == {"active"}


def test_delete_groups(tmp_path):
    async def main():
        gc = make(tmp_path)
        joined = await join(gc, "busy")
        await sync(gc, "busy", 1, joined.member_id, {})
        gc.commit_offsets("idle", -1, "", None, {("t", 0): offset(1)})
        assert gc.delete_groups(["busy", "idle", "nobody"]) == {
            "busy": ErrorCode.non_empty_group, "idle": ErrorCode.none,
            "nobody": ErrorCode.group_id_not_found,
        }
        assert "idle" not in gc.groups and gc.fetch_offsets("idle", None) == {}
        assert [g.group_id for g in gc.list_groups()] == ["busy"]

    asyncio.run(main())


# -- which __consumer_offsets partition a group lives in -----------------------------------

# String.hashCode() and Kafka's partitionFor, Utils.abs(hashCode) % 50 (Utils.abs maps
# Integer.MIN_VALUE to 0), computed with a JDK 17.
JAVA = [
    ("", 0, 0),
    ("hello", 99162322, 22),
    ("Aa", 2112, 12),
    ("BB", 2112, 12),
    ("polygenelubricants", -2147483648, 0),  # hashCode() == Integer.MIN_VALUE
    ("my-group", -1906497762, 12),
    ("consumer-group", -1738392088, 38),
    ("console-consumer-12345", 158455506, 6),
    ("g\u00e9", 3426, 26),
    ("\U0001f600", 1772899, 49),  # one code point, two UTF-16 code units
]


@pytest.mark.parametrize(("group", "hash_code", "partition"), JAVA)
def test_java_string_hash(group, hash_code, partition):
    assert java_string_hash(group) == hash_code


@pytest.mark.parametrize(("group", "hash_code", "partition"), JAVA)
def test_partition_for_is_kafkas_rule(group, hash_code, partition):
    assert partition_for(group, 50) == partition


@pytest.mark.parametrize(("group", "hash_code", "partition"), JAVA)
def test_partition_for_a_prefixed_key_is_that_of_the_whole_key(group, hash_code, partition):
    """The prefix's hash is remembered apart (a share-partition's key starts with its group
    id): every split of the key gives the whole key's partition."""
    for cut in range(len(group) + 1):
        assert partition_for(group[cut:], 50, prefix=group[:cut]) == partition
