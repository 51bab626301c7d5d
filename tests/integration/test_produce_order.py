"""A connection's pipelined produce requests append in the order they were sent, also when
one of them waits for the transaction coordinator (issue 28).

franz-go pipelines a transactional producer's requests to a broker. After an abort, the
first batch of the next transaction in a partition makes its leader ask the coordinator
(KIP-890 verification) before appending; a request sent after it, whose partitions needed
no question, appended first and got OUT_OF_ORDER_SEQUENCE_NUMBER, and the client failed its
producer id. Here: the coordinator on one broker, the partitions on the other.
"""

from __future__ import annotations

import time
from datetime import timedelta

from confluent_kafka.admin import NewTopic
from kio.schema.find_coordinator.v4.request import FindCoordinatorRequest
from kio.schema.produce.v9.request import (
    PartitionProduceData,
    ProduceRequest,
    TopicProduceData,
)

from broker.protocol.records import ATTR_TRANSACTIONAL
from kafkube.harness.waiting import wait_until
from kafkube.harness.wire import WireClient, build_batch, fetch, parse_batches
from tests.integration.test_transactions import FAST_TIMEOUTS, _add, _coordinator_client, _init

TOPIC = "pipelined"
TXN_ID = "txn-pipelined"
UNKNOWN_TOPIC_OR_PARTITION = 3


def _batch(pid: int, epoch: int, sequence: int) -> bytes:
    return build_batch([(None, f"seq-{sequence}".encode(), (), 0)], int(time.time() * 1000),
                       pid, epoch, sequence, attributes=ATTR_TRANSACTIONAL)


def _produce(pid: int, epoch: int, batches: dict[int, int]) -> ProduceRequest:
    """One request: partition -> the sequence of the one-record batch it carries."""
    return ProduceRequest(
        transactional_id=TXN_ID, acks=-1, timeout=timedelta(seconds=10),
        topic_data=(TopicProduceData(name=TOPIC, partition_data=tuple(
            PartitionProduceData(index=p, records=_batch(pid, epoch, s))
            for p, s in batches.items())),))


def _errors(answer) -> dict[int, int]:
    return {p.index: p.error_code for t in answer.responses for p in t.partition_responses}


def test_a_request_behind_one_that_waits_for_the_coordinator_appends_after_it(
        cluster_factory) -> None:
    cluster = cluster_factory(2, FAST_TIMEOUTS)
    with _coordinator_client(cluster, TXN_ID) as c:
        (coordinator,) = wait_until(lambda: [
            e.node_id for e in c.request(FindCoordinatorRequest(
                key_type=1, coordinator_keys=(TXN_ID,))).coordinators if e.error_code == 0],
            30, "the coordinator found")
        leader = 1 - coordinator
        topic = NewTopic(TOPIC, num_partitions=2, replica_assignment=[[leader], [leader]])
        cluster.admin.create_topics([topic])[TOPIC].result(30)
        wait_until(lambda: (s := cluster.partitions(TOPIC)) and len(s) == 2
                   and all(p.leader == leader for p in s.values()), 30, "the topic led")
        init = _init(c, TXN_ID)
        pid, epoch = init.producer_id, init.producer_epoch
        added = wait_until(lambda: (a := _add(c, TXN_ID, pid, epoch, TOPIC, (0, 1)))
                           and UNKNOWN_TOPIC_OR_PARTITION not in a and a,
                           30, "the topic known to the coordinator")
        assert added == [0, 0]
    with WireClient.connect(cluster.brokers[leader].bootstrap) as data:
        # Partition 0's transaction opened: its later batches need no question.
        opened = wait_until(lambda: (e := _errors(data.request(_produce(pid, epoch, {0: 0}))))
                            != {0: UNKNOWN_TOPIC_OR_PARTITION} and e, 30, "partition 0 here")
        assert opened == {0: 0}
        # Sent in one write: the first waits for the coordinator to vouch for partition 1,
        # the second carries partition 0's next batch only.
        first_id, first = data.encode(_produce(pid, epoch, {1: 0, 0: 1}))
        second_id, second = data.encode(_produce(pid, epoch, {0: 2}))
        data.send_raw(first + second)
        version = ProduceRequest.__version__
        assert _errors(data.receive(0, version, first_id)) == {1: 0, 0: 0}
        assert _errors(data.receive(0, version, second_id)) == {0: 0}
        values = [r.value for b in parse_batches(fetch(data, TOPIC, 0).records)
                  for r in b.records]
    assert values == [b"seq-0", b"seq-1", b"seq-2"]
