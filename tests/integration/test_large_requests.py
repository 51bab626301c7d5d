"""A request naming a hundred thousand groups or topics is answered in full, and meanwhile
the broker goes on answering everyone else: its event loop is never held for long (the long
fuzz run found DescribeGroups, Metadata and FindCoordinator holding it for 3 to 6 s)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from kio.schema.describe_groups.v5.request import DescribeGroupsRequest
from kio.schema.describe_user_scram_credentials.v0.request import (
    DescribeUserScramCredentialsRequest,
    UserName,
)
from kio.schema.find_coordinator.v4.request import FindCoordinatorRequest
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic

from kafkube.harness.metrics import scrape
from kafkube.harness.wire import WireClient, api_versions_request

BUSY_AFTER_S = 1.0  # another client waiting this long means the loop was held

CASES: dict[str, tuple[Callable[[], Any], Callable[[Any], int], int]] = {
    "DescribeGroups, 100,000 groups": (
        lambda: DescribeGroupsRequest(groups=tuple(f"g-{i}" for i in range(100_000)),
                                      include_authorized_operations=False),
        lambda answer: len(answer.groups), 100_000),
    "Metadata, 50,000 unknown topics": (
        lambda: MetadataRequest(
            topics=tuple(MetadataRequestTopic(topic_id=None, name=f"t-{i}")
                         for i in range(50_000)),
            allow_auto_topic_creation=False, include_topic_authorized_operations=False),
        lambda answer: len(answer.topics), 50_000),
    "FindCoordinator, 1,000 keys of 32,000 characters": (
        lambda: FindCoordinatorRequest(
            key_type=0, coordinator_keys=tuple(f"{i:05d}" + "k" * 31_995 for i in range(1000))),
        lambda answer: len(answer.coordinators), 1000),
    "DescribeUserScramCredentials, 100,000 unknown users": (
        lambda: DescribeUserScramCredentialsRequest(
            users=tuple(UserName(name=f"user-{i}") for i in range(100_000))),
        lambda answer: len(answer.results), 100_000),
}


@pytest.mark.timeout(180)
@pytest.mark.parametrize("case", list(CASES))
def test_a_huge_request_is_answered_and_holds_nobody_up(broker, case: str) -> None:
    build, count, expected = CASES[case]
    request = build()
    answered: dict[str, Any] = {}

    def big() -> None:
        with WireClient.connect(broker.bootstrap, timeout=120) as client:
            started = time.monotonic()
            answered["answer"] = client.request(request)
            answered["took"] = time.monotonic() - started

    worker = threading.Thread(target=big)
    worker.start()
    waits = []
    with WireClient.connect(broker.bootstrap) as other:
        while worker.is_alive():
            started = time.monotonic()
            other.request(api_versions_request())
            waits.append(time.monotonic() - started)
            worker.join(0.05)
    assert "answer" in answered, "the huge request got no answer"
    assert count(answered["answer"]) == expected
    print(f"{case}: answered in {answered['took']:.2f} s; another client's ApiVersions "
          f"meanwhile: {len(waits)} answered, slowest {max(waits) * 1000:.0f} ms")
    assert max(waits) < BUSY_AFTER_S, f"another client waited {max(waits):.2f} s"
    assert scrape(broker.metrics_port).get("kafkube_event_loop_stalls_total") == 0


def test_a_request_naming_too_many_things_is_refused_as_malformed(broker) -> None:
    """25 million partition indexes fit in socket.request.max.bytes (the long fuzz run sent
    them): past bounds.MAX_ENTRIES the connection is closed, as for an oversized frame, in
    well under a second, and the broker goes on serving."""
    from kio.schema.describe_producers.v0.request import DescribeProducersRequest, TopicRequest

    from broker.protocol.bounds import MAX_ENTRIES

    request = DescribeProducersRequest(topics=(TopicRequest(
        name="t", partition_indexes=tuple(range(MAX_ENTRIES + 1))),))
    with WireClient.connect(broker.bootstrap) as client:
        started = time.monotonic()
        client.send(request)
        assert client.closed_by_peer(timeout=10)
        took = time.monotonic() - started
    with WireClient.connect(broker.bootstrap) as other:
        other.request(api_versions_request())
    print(f"{MAX_ENTRIES + 1} partition indexes: refused in {took * 1000:.0f} ms")
    assert took < 2.0


def test_a_partition_named_again_and_again_is_answered_once(broker) -> None:
    """DescribeProducers naming one partition 100,000 times (the long fuzz run's, with
    thousands of producers on it) gets that partition's producers once, in a second or two,
    not 100,000 copies of them."""
    from confluent_kafka import Producer
    from kio.schema.describe_producers.v0.request import DescribeProducersRequest, TopicRequest

    for _ in range(3):  # three idempotent producers: three active producer ids
        producer = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True})
        producer.produce("described", b"x", partition=0)
        assert producer.flush(30) == 0
    request = DescribeProducersRequest(topics=(
        TopicRequest(name="described", partition_indexes=(0,) * 100_000),))
    with WireClient.connect(broker.bootstrap, timeout=60) as client:
        started = time.monotonic()
        answer = client.request(request)
        took = time.monotonic() - started
    (topic,) = answer.topics
    (partition,) = topic.partitions
    assert partition.partition_index == 0 and len(partition.active_producers) == 3
    print(f"one partition named 100,000 times: answered once, in {took:.2f} s")
    assert took < 10
