"""Member ids the group coordinator generates fit what the offsets topic can store."""

from __future__ import annotations


def test_generated_member_ids_stay_storable():
    from broker.coordinator.classic_membership import new_member_id
    from broker.coordinator.group_store import MAX_NAME_BYTES

    assert new_member_id("rdkafka").startswith("rdkafka-")
    long_id = new_member_id("é" * 20_000)  # 40,000 bytes of client id
    assert len(long_id.encode()) <= MAX_NAME_BYTES
    assert long_id.startswith("é" * 100)
