"""Group requests on the wire (JoinGroup, SyncGroup, Heartbeat, OffsetCommit,
OffsetFetch, DeleteGroups), built from keyword values, for the group tests that need
exact codes."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from kio.index import load_request_schema
from kio.schema.errors import ErrorCode

from broker.protocol.messages import build
from kafkube.harness.wire import WireClient

JOIN_GROUP, SYNC_GROUP, HEARTBEAT, LEAVE_GROUP = 11, 14, 12, 13
OFFSET_COMMIT, OFFSET_FETCH, LIST_GROUPS, DELETE_GROUPS = 8, 9, 16, 42


# --------------------------------------------------------------------------- wire requests


def req(api_key: int, version: int, values: dict[str, Any]) -> Any:
    return build(load_request_schema(api_key, version), values)


def consumer_metadata(topic: str) -> bytes:
    """A ConsumerProtocolSubscription v0: the topic, no user data."""
    raw = topic.encode()
    return b"\x00\x00" + b"\x00\x00\x00\x01" + len(raw).to_bytes(2, "big") + raw + b"\xff" * 4


def find_coordinator(client: WireClient, group: str) -> Any:
    """What every client does first: it creates ``__consumer_offsets`` on first use."""
    response = client.request(req(10, 3, {"key": group, "key_type": 0}))
    assert response.error_code == ErrorCode.none, response
    return response


def join(client: WireClient, group: str, member_id: str = "", *, session_ms: int = 10_000,
         protocols: tuple[str, ...] = ("range",), protocol_type: str = "consumer",
         instance_id: str | None = None, version: int = 5) -> Any:
    return client.request(req(JOIN_GROUP, version, {
        "group_id": group, "session_timeout": timedelta(milliseconds=session_ms),
        "rebalance_timeout": timedelta(milliseconds=session_ms), "member_id": member_id,
        "group_instance_id": instance_id, "protocol_type": protocol_type,
        "protocols": [{"name": n, "metadata": consumer_metadata("t")} for n in protocols],
    }))


def sync(client: WireClient, group: str, generation: int, member_id: str,
         assignments: dict[str, bytes] | None = None) -> Any:
    return client.request(req(SYNC_GROUP, 3, {
        "group_id": group, "generation_id": generation, "member_id": member_id,
        "assignments": [{"member_id": m, "assignment": a} for m, a in (assignments or {}).items()],
    }))


def heartbeat(client: WireClient, group: str, generation: int, member_id: str) -> ErrorCode:
    return client.request(req(HEARTBEAT, 3, {
        "group_id": group, "generation_id": generation, "member_id": member_id,
    })).error_code


def commit(client: WireClient, group: str, generation: int, member_id: str, topic: str,
           offset: int = 1) -> ErrorCode:
    response = client.request(req(OFFSET_COMMIT, 7, {
        "group_id": group, "generation_id_or_member_epoch": generation, "member_id": member_id,
        "topics": [{"name": topic, "partitions": [
            {"partition_index": 0, "committed_offset": offset, "committed_metadata": ""}]}],
    }))
    ((partition,),) = [t.partitions for t in response.topics]
    return partition.error_code


def delete_groups(client: WireClient, *groups: str) -> dict[str, ErrorCode]:
    response = client.request(req(DELETE_GROUPS, 2, {"groups_names": list(groups)}))
    return {r.group_id: r.error_code for r in response.results}


def offset_fetch(client: WireClient, group: str, topic: str, partitions: int) -> dict[int, int]:
    response = client.request(req(OFFSET_FETCH, 7, {
        "group_id": group, "require_stable": True,
        "topics": [{"name": topic, "partition_indexes": list(range(partitions))}],
    }))
    assert response.error_code == ErrorCode.none, response
    (t,) = response.topics
    assert all(p.error_code == ErrorCode.none for p in t.partitions), response
    return {p.partition_index: p.committed_offset for p in t.partitions}


def current_generation(client: WireClient, group: str, member_id: str, limit: int = 50) -> int:
    """The group's generation, probed with Heartbeats on behalf of ``member_id``: only the
    right generation gets NONE (the others ILLEGAL_GENERATION). DescribeGroups has none."""
    for generation in range(1, limit):
        error = heartbeat(client, group, generation, member_id)
        if error == ErrorCode.none:
            return generation
        assert error == ErrorCode.illegal_generation, error
    raise AssertionError(f"no generation below {limit} accepted for {member_id}")
