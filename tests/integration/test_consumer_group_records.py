"""KIP-848 consumer groups' records in __consumer_offsets, read by Kafka 4.4's own codec
(tests/support/java/CoordinatorRecordCodec.java: GroupCoordinatorRecordSerde and the generated JSON
converters): Kafka reads every field we write, and writes the same record to the same bytes."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

from broker.coordinator import share_records as sr
from broker.coordinator import share_state_log as ssl
from broker.coordinator.consumer_group import (
    ClassicProtocols,
    ConsumerMember,
    MemberState,
    assignment,
)
from broker.coordinator.consumer_records import (
    CURRENT_ASSIGNMENT,
    GROUP_METADATA,
    MEMBER_METADATA,
    REGULAR_EXPRESSION,
    TARGET_MEMBER,
    TARGET_METADATA,
    ConsumerKey,
    encode_current_assignment,
    encode_group_metadata,
    encode_key,
    encode_member_metadata,
    encode_regular_expression,
    encode_target_member,
    encode_target_metadata,
)
from broker.coordinator.share_group import ShareMember

CODEC = Path(__file__).resolve().parents[1] / "support" / "java" / "CoordinatorRecordCodec.java"
TOPIC = uuid.UUID("12345678-1234-5678-1234-567812345678")
TOPIC_JSON = "EjRWeBI0VngSNFZ4EjRWeA"  # Kafka prints a topic id in URL-safe base64

MEMBER = ConsumerMember(
    "m-1", "i-1", "rack-a", "client", "/127.0.0.1", ("orders", "clicks"), None, 30000,
    "uniform", ClassicProtocols(45000, (("range", b"\x00\x01"),)), 3, 2,
    MemberState.UNREVOKED_PARTITIONS, assignment([(TOPIC, 0), (TOPIC, 2)]),
    assignment([(TOPIC, 1)]), {(TOPIC, 0): 2, (TOPIC, 2): 3})
PLAIN = ConsumerMember("m-2", client_id="c2", client_host="/127.0.0.2",
                       subscribed_topic_regex="ord.*", rebalance_timeout_ms=5000)

RECORDS = [
    (ConsumerKey(GROUP_METADATA, "g"), encode_group_metadata(7, 123456789),
     {"groupId": "g"}, {"epoch": 7, "metadataHash": 123456789}),
    (ConsumerKey(MEMBER_METADATA, "g", "m-1"), encode_member_metadata(MEMBER),
     {"groupId": "g", "memberId": "m-1"},
     {"instanceId": "i-1", "rackId": "rack-a", "clientId": "client", "clientHost": "/127.0.0.1",
      "subscribedTopicNames": ["orders", "clicks"], "subscribedTopicRegex": None,
      "rebalanceTimeoutMs": 30000, "serverAssignor": "uniform",
      "classicMemberMetadata": {"sessionTimeoutMs": 45000, "supportedProtocols": [
          {"name": "range", "metadata": "AAE="}]}}),
    (ConsumerKey(MEMBER_METADATA, "g", "m-2"), encode_member_metadata(PLAIN),
     {"groupId": "g", "memberId": "m-2"},
     {"instanceId": None, "rackId": None, "clientId": "c2", "clientHost": "/127.0.0.2",
      "subscribedTopicNames": [], "subscribedTopicRegex": "ord.*", "rebalanceTimeoutMs": 5000,
      "serverAssignor": None}),  # a null tagged field is not written, nor printed
    (ConsumerKey(TARGET_METADATA, "g"), encode_target_metadata(7, 1_700_000_000_000),
     {"groupId": "g"}, {"assignmentEpoch": 7, "assignmentTimestamp": 1_700_000_000_000}),
    (ConsumerKey(TARGET_MEMBER, "g", "m-1"), encode_target_member(MEMBER.assigned),
     {"groupId": "g", "memberId": "m-1"},
     {"topicPartitions": [{"topicId": TOPIC_JSON, "partitions": [0, 2]}]}),
    (ConsumerKey(CURRENT_ASSIGNMENT, "g", "m-1"), encode_current_assignment(MEMBER),
     {"groupId": "g", "memberId": "m-1"},
     {"memberEpoch": 3, "previousMemberEpoch": 2, "state": 1,
      "assignedPartitions": [{"topicId": TOPIC_JSON, "partitions": [0, 2],
                              "assignmentEpochs": [2, 3]}],
      "partitionsPendingRevocation": [{"topicId": TOPIC_JSON, "partitions": [1]}]}),
    (ConsumerKey(REGULAR_EXPRESSION, "g", "ord.*"),
     encode_regular_expression(("orders",), 42, 1_700_000_000_000),
     {"groupId": "g", "regularExpression": "ord.*"},
     {"topics": ["orders"], "version": 42, "timestamp": 1_700_000_000_000}),
    (ConsumerKey(CURRENT_ASSIGNMENT, "g", "m-1"), None,  # a tombstone
     {"groupId": "g", "memberId": "m-1"}, None),
]


def test_kafka_reads_and_writes_our_consumer_group_records(kafka_tools) -> None:
    check_with_kafka(kafka_tools, "group", [(encode_key(k), v, kj, vj)
                                            for k, v, kj, vj in RECORDS])


SHARE_MEMBER = ShareMember("s-1", "rack-b", "share-client", "/127.0.0.3", ("orders",), 4, 3,
                           assignment([(TOPIC, 0), (TOPIC, 1)]))
SHARE_RECORDS = [
    (sr.ShareKey(sr.GROUP_METADATA, "sg"), sr.encode_group_metadata(5, -42),
     {"groupId": "sg"}, {"epoch": 5, "metadataHash": -42}),
    (sr.ShareKey(sr.MEMBER_METADATA, "sg", "s-1"), sr.encode_member_metadata(SHARE_MEMBER),
     {"groupId": "sg", "memberId": "s-1"},
     {"rackId": "rack-b", "clientId": "share-client", "clientHost": "/127.0.0.3",
      "subscribedTopicNames": ["orders"]}),
    (sr.ShareKey(sr.TARGET_METADATA, "sg"), sr.encode_target_metadata(5),
     {"groupId": "sg"}, {"assignmentEpoch": 5}),
    (sr.ShareKey(sr.TARGET_MEMBER, "sg", "s-1"), sr.encode_target_member(SHARE_MEMBER.assigned),
     {"groupId": "sg", "memberId": "s-1"},
     {"topicPartitions": [{"topicId": TOPIC_JSON, "partitions": [0, 1]}]}),
    (sr.ShareKey(sr.CURRENT_ASSIGNMENT, "sg", "s-1"),
     sr.encode_current_assignment(SHARE_MEMBER), {"groupId": "sg", "memberId": "s-1"},
     {"memberEpoch": 4, "previousMemberEpoch": 3, "state": 0,
      "assignedPartitions": [{"topicId": TOPIC_JSON, "partitions": [0, 1]}]}),
    (sr.ShareKey(sr.STATE_PARTITIONS, "sg"),
     sr.encode_state_partitions({TOPIC: ("orders", frozenset({0, 1}))}), {"groupId": "sg"},
     {"initializingTopics": [], "initializedTopics": [
         {"topicId": TOPIC_JSON, "topicName": "orders", "partitions": [0, 1]}],
      "deletingTopics": []}),
    (sr.ShareKey(sr.MEMBER_METADATA, "sg", "s-1"), None,
     {"groupId": "sg", "memberId": "s-1"}, None),
]


def test_kafka_reads_and_writes_our_share_group_records(kafka_tools) -> None:
    check_with_kafka(kafka_tools, "group", [(sr.encode_key(k), v, kj, vj)
                                            for k, v, kj, vj in SHARE_RECORDS])


STATE_KEY = ssl.ShareKey("sg", TOPIC, 3)
STATE_BATCHES = (ssl.StateBatch(10, 12, ssl.RecordState.ARCHIVED, 2),
                 ssl.StateBatch(13, 13, ssl.RecordState.ACKNOWLEDGED, 1))
STATE_JSON = [{"firstOffset": 10, "lastOffset": 12, "deliveryState": 4, "deliveryCount": 2},
              {"firstOffset": 13, "lastOffset": 13, "deliveryState": 2, "deliveryCount": 1}]
STATE_RECORDS = [
    (ssl.encode_key(ssl.SNAPSHOT, STATE_KEY),
     ssl.encode_snapshot(ssl.ShareSnapshot(2, 5, 10, STATE_BATCHES, 1, 1_700_000_000_000,
                                           1_700_000_000_500)),
     {"groupId": "sg", "topicId": TOPIC_JSON, "partition": 3},
     {"snapshotEpoch": 1, "stateEpoch": 2, "leaderEpoch": 5, "startOffset": 10,
      "createTimestamp": 1_700_000_000_000, "writeTimestamp": 1_700_000_000_500,
      "stateBatches": STATE_JSON}),
    (ssl.encode_key(ssl.UPDATE, STATE_KEY), ssl.encode_update(1, 6, 11, STATE_BATCHES),
     {"groupId": "sg", "topicId": TOPIC_JSON, "partition": 3},
     {"snapshotEpoch": 1, "leaderEpoch": 6, "startOffset": 11, "stateBatches": STATE_JSON}),
    (ssl.encode_key(ssl.SNAPSHOT, STATE_KEY), None,
     {"groupId": "sg", "topicId": TOPIC_JSON, "partition": 3}, None),
]


def test_kafka_reads_and_writes_our_share_state_records(kafka_tools) -> None:
    """__share_group_state: ShareSnapshot and ShareUpdate, through Kafka's share coordinator
    codec."""
    check_with_kafka(kafka_tools, "share", STATE_RECORDS)


def check_with_kafka(kafka_tools, kind: str, records: list) -> None:
    lines = "".join(f"{key.hex()} {value.hex() if value is not None else '-'}\n"
                    for key, value, _, _ in records)
    result = kafka_tools.run(str(CODEC), kind, stdin=lines)
    decoded = [json.loads(line) for line in result.stdout.splitlines()]
    assert len(decoded) == len(records), result.describe()
    for (key, value, key_json, value_json), kafka in zip(records, decoded, strict=True):
        assert (kafka["key"], kafka["value"]) == (key_json, value_json), key_json
        assert kafka["keyHex"] == key.hex()
        assert kafka.get("valueHex") == (value.hex() if value is not None else None), key_json
