"""The cluster image document across versions (kafkube_contract/image.py).

golden/image-format-1.json is an image exactly as brokers wrote it before the contract (no
``format`` key), made from a ClusterImage with topics, a reassignment under way, an offline
partition, broker configs with a cordon, features, ACLs, SCRAM credentials and deleted
topics. golden/image-format-1-later.json is the same as a later revision of format 1 might
write it (keys this reader does not know at every level); golden/image-format-2.json is the
image-format-1-later.json image written at ``kafkube.metadata.version`` 2 (partitions as
arrays); golden/image-format-3.json names a format this reader does not know."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from broker.cluster.image import ClusterImage
from kafkube_contract.features import METADATA_VERSION
from kafkube_contract.image import (
    IMAGE_FORMAT,
    ImageFormatError,
    ImageUnreadable,
    ImageView,
    PartitionState,
    read_image_doc,
    read_image_json,
)
from tests.support.golden import assert_golden

GOLDEN = Path(__file__).parent / "golden"


def document(name: str) -> str:
    return (GOLDEN / name).read_text().strip()


def same_reading(a: ImageView | ClusterImage, b: ImageView | ClusterImage) -> None:
    assert (a.version, a.topics, a.broker_configs, a.features) == \
        (b.version, b.topics, b.broker_configs, b.features)


def test_a_document_written_before_the_contract_reads_as_it_was_written() -> None:
    view = read_image_json(document("image-format-1.json"), 42)
    assert view.version == 42
    assert list(view.topics) == ["orders", "__consumer_offsets"]
    orders = view.topics["orders"]
    assert orders.topic_id == "7d1e4f3a-5b2c-4e8f-9a6d-0c1b2a3d4e5f"
    assert orders.configs == {"cleanup.policy": "compact", "min.insync.replicas": "2"}
    assert orders.assignments[2] == PartitionState((2, 0, 3, 1), (2, 0, 1), 2, 1, 4,
                                                   adding=(3,), removing=(1,))
    assert orders.assignments[2].target_replicas == (2, 0, 3)
    assert view.partition("orders", 3) == PartitionState((0, 2), (), -1, 8, 12)
    assert view.partition("orders", 4) is None
    assert view.broker_configs[""] == {"min.insync.replicas": "2"}
    assert view.cordoned() == frozenset({2})
    assert view.leaders() == {0: 1, 2: 2, 1: 1}
    assert view.feature("transaction.version") == 2 and view.feature("unknown") == 0


def test_the_broker_reads_an_old_document_and_writes_it_back_with_only_its_format_added(
) -> None:
    old = document("image-format-1.json")
    image = ClusterImage.from_json(old, 42)
    written = image.to_json()
    assert json.loads(written) == {"format": 1, **json.loads(old)}  # no metadata level set
    assert written == '{"format":1,' + old[1:]  # byte for byte, the key first
    assert_golden(GOLDEN / "image-written.json", written + "\n")
    assert image.acls and image.scram_credentials and image.deleted_topics
    same_reading(read_image_json(written, 42), image)  # the operator reads what it wrote


def test_a_later_revision_of_format_1_reads_the_same() -> None:
    """Additive changes within a format: unknown keys at the top, in topics and in
    partitions are ignored by the operator's reader and by the broker's."""
    before = document("image-format-1.json")
    later = document("image-format-1-later.json")
    same_reading(read_image_json(later, 42), read_image_json(before, 42))
    assert ClusterImage.from_json(later, 42) == ClusterImage.from_json(before, 42)


def test_the_broker_writes_a_later_revision_back_with_every_key_it_does_not_know() -> None:
    """During a rolling upgrade an older controller writes the image a newer broker wrote:
    the keys it does not know (top, topic, partition) outlive its writes."""
    later = document("image-format-1-later.json")
    image = ClusterImage.from_json(later, 42)
    assert json.loads(image.to_json()) == json.loads(later)
    # ... and a change made by the older code keeps them too.
    orders = image.topics["orders"]
    moved = image.with_partition("orders", 0, orders.assignments[0].with_leader(1))
    grown = moved.with_topic(replace(moved.topics["orders"], configs={}))
    written = json.loads(grown.to_json())
    assert {"writer", "producer_id_blocks", "quotas"} <= written.keys()
    assert written["topics"][0]["created_ms"] == 1767225600000
    assert written["topics"][0]["tiered"] == {"remote.storage.enable": False}
    assert written["topics"][0]["assignments"][0]["elr"] == [0]
    assert written["topics"][0]["assignments"][0]["leader"] == 1


def test_missing_optional_keys_take_their_defaults() -> None:
    view = read_image_doc({"topics": [{"name": "t", "topic_id": "0a9b8c7d-6e5f-4a3b-8c2d-"
                                       "1e0f9a8b7c6d", "assignments": [
                                           {"replicas": [1], "isr": [1], "leader": 1,
                                            "leader_epoch": 4, "partition_epoch": 6}]}]}, 3)
    assert view.topics["t"].configs == {}
    assert view.topics["t"].assignments == (PartitionState((1,), (1,), 1, 4, 6),)
    assert (view.broker_configs, view.features) == ({}, {})
    assert read_image_json('{"topics": []}', 0) == ImageView()


@pytest.mark.parametrize("text", [
    "", "  ", "{}", "[]", '"topics"', '{"format": 1}', '{"topics": {}}', '{"topics": [1]}',
    '{"topics": [{"name": "t", "topic_id": "x", "assignments": [{"replicas": [1], '
    '"isr": [1], "leader": 1, "leader_epoch": 3}]}]}', "{not json"])
def test_a_document_no_broker_wrote_is_unreadable_never_an_empty_image(text: str) -> None:
    for read in (read_image_json, ClusterImage.from_json):
        with pytest.raises(ImageUnreadable):
            read(text, 1)


def test_a_newer_format_is_refused_with_a_message_that_says_why() -> None:
    newer = document("image-format-3.json")
    assert IMAGE_FORMAT == 2
    for read in (read_image_json, ClusterImage.from_json):
        with pytest.raises(ImageFormatError) as refused:
            read(newer, 42)
        message = str(refused.value)
        assert "format 3" in message and "newer than format 2" in message
        assert "Upgrade" in message


def test_at_metadata_version_2_partitions_are_arrays_read_as_format_1_reads_objects() -> None:
    """Format 2: the same image, every key this reader does not know kept (in a partition's
    trailing object), a quarter of the text; lowering the level writes format 1 again."""
    later = ClusterImage.from_json(document("image-format-1-later.json"), 42)
    raised = later.with_feature(METADATA_VERSION, 2)
    written = raised.to_json()
    assert_golden(GOLDEN / "image-format-2.json", written + "\n")
    doc = json.loads(written)
    assert doc["format"] == 2
    assert doc["topics"][0]["assignments"][0] == [[0, 1, 2], [0, 1, 2], 0, 3, 7, [], [], {
        "elr": [0], "last_known_elr": [], "directories": ["dir-0", "dir-0", "dir-0"]}]
    again = ClusterImage.from_json(written, 42)
    assert again == raised
    assert again.topics["orders"].assignments[0].extra == later.topics["orders"].assignments[
        0].extra
    same_reading(read_image_json(written, 42), raised)  # the operator reads it too
    assert json.loads(again.to_json()) == doc
    lowered = again.with_feature(METADATA_VERSION, 1)
    assert json.loads(lowered.to_json())["format"] == 1
    assert ClusterImage.from_json(lowered.to_json(), 42) == lowered
    plain = ClusterImage.from_json(document("image-format-1.json"), 42)
    rows = json.loads(plain.with_feature(METADATA_VERSION, 2).to_json())["topics"][0][
        "assignments"]
    assert rows[0] == [[0, 1, 2], [0, 1, 2], 0, 3, 7]  # nothing optional: five values
    assert rows[2] == [[2, 0, 3, 1], [2, 0, 1], 2, 1, 4, [3], [1]]


@pytest.mark.parametrize("doc", [
    {"format": 2, "topics": [{"name": "t", "topic_id": "x", "assignments": [[[1], [1], 1, 3]]}]},
    {"format": 2, "topics": [{"name": "t", "topic_id": "x", "assignments": [
        {"replicas": [1], "isr": [1], "leader": 1, "leader_epoch": 3, "partition_epoch": 1}]}]},
    {"format": 1, "topics": [{"name": "t", "topic_id": "x", "assignments": [
        [[1], [1], 1, 3, 1]]}]},
    {"format": 2, "topics": [{"name": "t", "topic_id": "x", "assignments": [
        [[1], [1], 1, 3, 1, [], [], 7]]}]},
    {"format": 2, "topics": [{"name": "t", "topic_id": "x", "assignments": [
        [[1], [1], 1, 3, 1, [], [], {}, "a ninth value no reader knows"]]}]},
])
def test_a_partition_of_the_wrong_shape_for_its_format_is_unreadable(doc: dict) -> None:
    for read in (read_image_doc, ClusterImage.from_doc):
        with pytest.raises(ImageUnreadable):
            read(doc, 1)


@pytest.mark.parametrize("bad", ["2", 0, True, None])
def test_a_format_that_is_not_one_is_refused(bad: object) -> None:
    with pytest.raises(ImageFormatError, match="not a format"):
        read_image_doc({"format": bad, "topics": []}, 1)


def test_a_document_missing_a_required_key_is_refused_not_misread() -> None:
    with pytest.raises(ImageFormatError, match="lacks a required key"):
        read_image_doc({"topics": [{"name": "t"}]}, 1)
