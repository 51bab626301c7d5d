"""Transactions against a 3-broker cluster: librdkafka's transactional producer and
read_committed consumer (confluent-kafka), zombie fencing, consume-transform-produce with
offsets in the transaction, a coordinator killed mid-run, and Kafka's error codes for bad
transactional requests (sent on the wire).

What read_committed must see is Kafka's rule: every record of a committed transaction and
none of an aborted one; read_uncommitted sees both; the last stable offset stops at the
first record of a transaction still open.
"""

from __future__ import annotations

import time
from collections import Counter
from datetime import timedelta
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from kio.schema.add_offsets_to_txn.v3.request import AddOffsetsToTxnRequest
from kio.schema.add_partitions_to_txn.v3.request import (
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnTopic,
)
from kio.schema.describe_transactions.v0.request import DescribeTransactionsRequest
from kio.schema.end_txn.v1.request import EndTxnRequest as EndTxnV1Request
from kio.schema.end_txn.v3.request import EndTxnRequest
from kio.schema.find_coordinator.v4.request import FindCoordinatorRequest
from kio.schema.init_producer_id.v4.request import InitProducerIdRequest
from kio.schema.list_transactions.v1.request import ListTransactionsRequest
from kio.schema.produce.v9.request import (
    PartitionProduceData,
    ProduceRequest,
    TopicProduceData,
)
from kio.schema.txn_offset_commit.v3.request import (
    TxnOffsetCommitRequest,
    TxnOffsetCommitRequestPartition,
    TxnOffsetCommitRequestTopic,
)
from kio.schema.write_txn_markers.v1.request import (
    WritableTxnMarker,
    WritableTxnMarkerTopic,
    WriteTxnMarkersRequest,
)

from broker.cluster.internal_topics import partition_for
from broker.protocol.records import ATTR_TRANSACTIONAL
from kafkube.harness.metadata import Cluster
from kafkube.harness.waiting import wait_until
from kafkube.harness.wire import WireClient, build_batch, produce

TXN_TOPIC = "__transaction_state"
TXN_PARTITIONS = 5
FAST_TIMEOUTS = {
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "200",
    "transaction.state.log.num.partitions": str(TXN_PARTITIONS),
    "offsets.topic.num.partitions": "5",
}


def _producer(cluster: Cluster, txn_id: str, **extra: Any) -> Producer:
    return Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": txn_id,
                     "transaction.timeout.ms": 60000, "linger.ms": 5, **extra})


def _read_all(cluster: Cluster, topic: str, partitions: int, isolation: str,
              timeout: float = 60.0) -> list[tuple[int, int, bytes]]:
    """(partition, offset, value) of every record up to the end for this isolation
    level, read with an assigned consumer (no group)."""
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "reader",
                         "enable.auto.commit": False, "isolation.level": isolation,
                         "auto.offset.reset": "earliest"})
    try:
        ends = {}
        for p in range(partitions):
            _, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            ends[p] = high
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        got: list[tuple[int, int, bytes]] = []
        positions = dict.fromkeys(range(partitions), 0)
        deadline = time.monotonic() + timeout
        while any(positions[p] < ends[p] for p in positions):
            assert time.monotonic() < deadline, f"read {positions} of {ends} in {timeout}s"
            msg = consumer.poll(0.5)
            if msg is None:
                for tp in consumer.position([TopicPartition(topic, p) for p in positions]):
                    if tp.offset >= 0:
                        positions[tp.partition] = tp.offset
                continue
            assert msg.error() is None, msg.error()
            got.append((msg.partition(), msg.offset(), msg.value()))
            positions[msg.partition()] = msg.offset() + 1
        return got
    finally:
        consumer.close()


def _ends(cluster: Cluster, topic: str, partitions: int, isolation: str) -> list[int]:
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "ends",
                         "isolation.level": isolation})
    try:
        return [consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                for p in range(partitions)]
    finally:
        consumer.close()


@pytest.mark.parametrize("transaction_version", [1, 2])
def test_read_committed_sees_committed_transactions_only(cluster_factory,
                                                         transaction_version):
    """librdkafka's producer speaks the protocol before KIP-890 part 2 on either level."""
    cluster = cluster_factory(3, FAST_TIMEOUTS)
    if transaction_version != 2:
        cluster.finalize_feature("transaction.version", transaction_version)
    cluster.create_topic("txn-out", 3, 3)
    producer = _producer(cluster, "txn-basic")
    producer.init_transactions(30)
    committed, aborted = [], []
    for t in range(20):
        producer.begin_transaction()
        values = [f"t{t}-r{r}".encode() for r in range(30)]
        for r, value in enumerate(values):
            producer.produce("txn-out", value, partition=r % 3)
        if t % 4 == 3:
            assert producer.flush(30) == 0  # else the abort purges them unsent
            producer.abort_transaction(30)
            aborted += values
        else:
            producer.commit_transaction(30)
            committed += values
    # A transaction left open holds read_committed readers back at its first record.
    producer.begin_transaction()
    for r in range(9):
        producer.produce("txn-out", f"open-r{r}".encode(), partition=r % 3)
    producer.flush(30)
    assert sum(_ends(cluster, "txn-out", 3, "read_committed")) \
        < sum(_ends(cluster, "txn-out", 3, "read_uncommitted"))
    seen = Counter(v for _, _, v in _read_all(cluster, "txn-out", 3, "read_committed"))
    assert sorted(seen) == sorted(committed) and max(seen.values()) == 1
    producer.commit_transaction(30)
    committed += [f"open-r{r}".encode() for r in range(9)]
    # EndTxn answers once the commit is decided (PrepareCommit durable, as in Kafka); the
    # markers reach the partitions after it, and each last stable offset with its marker.
    wait_until(lambda: _ends(cluster, "txn-out", 3, "read_committed")
               == _ends(cluster, "txn-out", 3, "read_uncommitted"), 30,
               "every last stable offset at its high watermark after the commit's markers")
    seen = Counter(v for _, _, v in _read_all(cluster, "txn-out", 3, "read_committed"))
    assert sorted(seen) == sorted(committed) and max(seen.values()) == 1
    everything = Counter(v for _, _, v in _read_all(cluster, "txn-out", 3, "read_uncommitted"))
    assert sorted(everything) == sorted(committed + aborted)


def test_an_older_producer_with_the_same_transactional_id_is_fenced(cluster_factory):
    cluster = cluster_factory(3, FAST_TIMEOUTS)
    cluster.create_topic("fenced", 1, 3)
    zombie = _producer(cluster, "txn-fence")
    zombie.init_transactions(30)
    zombie.begin_transaction()
    zombie.produce("fenced", b"zombie-1")
    zombie.flush(30)
    successor = _producer(cluster, "txn-fence")
    successor.init_transactions(60)  # aborts the zombie's open transaction first
    with pytest.raises(KafkaException) as fenced:
        zombie.produce("fenced", b"zombie-2")
        zombie.commit_transaction(30)
    error = fenced.value.args[0]
    assert error.code() in (KafkaError._FENCED, KafkaError.PRODUCER_FENCED,
                            KafkaError.INVALID_PRODUCER_EPOCH), error
    successor.begin_transaction()
    successor.produce("fenced", b"successor")
    successor.commit_transaction(30)
    values = [v for _, _, v in _read_all(cluster, "fenced", 1, "read_committed")]
    assert values == [b"successor"]
    raw = sorted(v for _, _, v in _read_all(cluster, "fenced", 1, "read_uncommitted"))
    assert b"zombie-1" in raw and b"successor" in raw


def _copy_loop(cluster: Cluster, txn_id: str, expected: int, deadline: float,
               kill_after: float | None = None) -> dict[str, int]:
    """librdkafka's consume-transform-produce: input records copied to the output in
    transactions of up to 50 that also commit the group's offsets. ``kill_after`` seconds,
    the broker coordinating ``txn_id`` is SIGKILLed, and restarted 3 s later. A transaction
    whose commit fails is aborted and the consumer rewound to the committed offsets, as
    KIP-447 apps do."""
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "copier",
                         "enable.auto.commit": False, "isolation.level": "read_committed",
                         "auto.offset.reset": "earliest", "session.timeout.ms": 10000})
    # librdkafka caps its message timeout at the transaction timeout: the partitions the
    # killed broker led wait ~10 s for new leaders, and records timing out in the queue
    # before their AddPartitionsToTxn was answered make its abort send EndTxn for a
    # transaction the coordinator never saw begin (INVALID_TXN_STATE, fatal), which
    # Kafka's coordinator answers the same way. 30 s outlasts the failover.
    producer = _producer(cluster, txn_id, **{"transaction.timeout.ms": 30000})
    producer.init_transactions(60)
    consumer.subscribe(["copy-in"])
    stats = Counter()
    started = time.monotonic()
    victim = None
    try:
        while True:
            assert time.monotonic() < deadline, f"copy loop stalled: {dict(stats)}"
            elapsed = time.monotonic() - started
            if kill_after is not None and victim is None and elapsed > kill_after:
                victim = cluster.leader_of(TXN_TOPIC, partition_for(txn_id, TXN_PARTITIONS))
                cluster.kill(victim)
                stats["killed_broker"] = victim
            if victim is not None and not cluster.alive(victim) and elapsed > kill_after + 3:
                cluster.restart(victim)
            msgs = consumer.consume(50, 1.0)
            msgs = [m for m in msgs if m.error() is None]
            if not msgs:
                committed = consumer.committed([TopicPartition("copy-in", p) for p in range(3)],
                                               timeout=10)
                if sum(max(tp.offset, 0) for tp in committed) >= expected:
                    return dict(stats)
                continue
            producer.begin_transaction()
            for m in msgs:
                producer.produce("copy-out", m.value() + b":copied", key=m.key(),
                                 partition=m.partition())
            try:
                producer.send_offsets_to_transaction(
                    consumer.position(consumer.assignment()), consumer.consumer_group_metadata(),
                    30)
                producer.commit_transaction(30)
                stats["committed"] += 1
                stats["records"] += len(msgs)
            except KafkaException as e:
                err = e.args[0]
                if err.fatal():
                    raise
                assert err.txn_requires_abort() or err.retriable(), err
                producer.abort_transaction(30)
                stats["aborted"] += 1
                committed = consumer.committed(consumer.assignment(), timeout=30)
                for tp in committed:
                    consumer.seek(TopicPartition(tp.topic, tp.partition,
                                                 tp.offset if tp.offset >= 0 else 0))
    finally:
        consumer.close()


@pytest.mark.parametrize("kill_coordinator", [False, True], ids=["steady", "coordinator-killed"])
def test_consume_transform_produce_is_exactly_once(cluster_factory, kill_coordinator):
    cluster = cluster_factory(3, {**FAST_TIMEOUTS, "min.insync.replicas": "2"})
    cluster.create_topic("copy-in", 3, 3)
    cluster.create_topic("copy-out", 3, 3)
    source = Producer({"bootstrap.servers": cluster.bootstrap, "enable.idempotence": True})
    total = 6000
    for i in range(total):
        source.produce("copy-in", f"v{i}".encode(), key=f"k{i}".encode(), partition=i % 3)
    assert source.flush(30) == 0
    stats = _copy_loop(cluster, "txn-copier", total, time.monotonic() + 240,
                       kill_after=1.5 if kill_coordinator else None)
    assert stats["records"] >= total
    if kill_coordinator:
        assert "killed_broker" in stats, stats
    out = Counter(v for _, _, v in _read_all(cluster, "copy-out", 3, "read_committed"))
    wanted = Counter(f"v{i}:copied".encode() for i in range(total))
    assert out == wanted, (
        f"missing {sum((wanted - out).values())}, duplicated {sum((out - wanted).values())}; "
        f"{stats}")


# -- the wire: Kafka's error codes for bad transactional requests ------------------------------

NONE = 0
INVALID_PRODUCER_EPOCH = 47
INVALID_TXN_STATE = 48
INVALID_PRODUCER_ID_MAPPING = 49
INVALID_TRANSACTION_TIMEOUT = 50
CONCURRENT_TRANSACTIONS = 51
UNKNOWN_TOPIC_OR_PARTITION = 3
INVALID_REQUEST = 42
PRODUCER_FENCED = 90
TRANSACTIONAL_ID_NOT_FOUND = 105
TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
NOT_ENOUGH_REPLICAS = 19


def _coordinator_client(cluster: Cluster, key: str, key_type: int = 1) -> WireClient:
    """A connection to the coordinator of a transactional id (key type 1) or a group (0)."""
    alive = next(i for i in range(cluster.size) if cluster.alive(i))
    with WireClient.connect(cluster.brokers[alive].bootstrap) as c:
        def found() -> Any:
            answer = c.request(FindCoordinatorRequest(key_type=key_type,
                                                      coordinator_keys=(key,)))
            entry = answer.coordinators[0]
            return entry if entry.error_code == NONE else None

        entry = wait_until(found, 30, f"a coordinator for {key}")
    return WireClient.connect(f"{entry.host}:{entry.port}")


RETRIABLE = (14, 15, 16, 51)  # load in progress, not available, not coordinator, concurrent


def _init(c: WireClient, txn_id: str, timeout_ms: int = 60000) -> Any:
    """InitProducerId, asked again while the answer is one a client retries (the
    coordinator's partition is still being taken up right after its topic was created)."""
    def ask() -> Any:
        answer = c.request(InitProducerIdRequest(
            transactional_id=txn_id, transaction_timeout=timedelta(milliseconds=timeout_ms),
            producer_id=-1, producer_epoch=-1))
        return None if answer.error_code in RETRIABLE else answer

    return wait_until(ask, 30, f"InitProducerId({txn_id}) answered")


def _end(c: WireClient, txn_id: str, pid: int, epoch: int, commit: bool = True) -> int:
    return c.request(EndTxnRequest(transactional_id=txn_id, producer_id=pid,
                                   producer_epoch=epoch, committed=commit)).error_code


def _add(c: WireClient, txn_id: str, pid: int, epoch: int, topic: str,
         partitions: tuple[int, ...] = (0,)) -> list[int]:
    answer = c.request(AddPartitionsToTxnRequest(
        v3_and_below_transactional_id=txn_id, v3_and_below_producer_id=pid,
        v3_and_below_producer_epoch=epoch,
        v3_and_below_topics=(AddPartitionsToTxnTopic(name=topic, partitions=partitions),)))
    return [p.partition_error_code for t in answer.results_by_topic_v3_and_below
            for p in t.results_by_partition]


def _txn_produce(cluster: Cluster, txn_id: str, topic: str, partition: int, pid: int,
                 epoch: int, sequence: int) -> int:
    """Produce one transactional record as the producer's client would, straight to the
    partition's leader; its error code."""
    leader = cluster.leader_of(topic, partition)
    batch = build_batch([(None, f"seq-{sequence}".encode(), (), 0)], int(time.time() * 1000),
                        pid, epoch, sequence, attributes=ATTR_TRANSACTIONAL)
    request = ProduceRequest(
        transactional_id=txn_id, acks=-1, timeout=timedelta(seconds=10),
        topic_data=(TopicProduceData(name=topic, partition_data=(
            PartitionProduceData(index=partition, records=batch),)),))
    with WireClient.connect(cluster.brokers[leader].bootstrap) as c:
        (answer,) = c.request(request).responses
    return answer.partition_responses[0].error_code


def test_bad_transactional_requests_get_kafkas_error_codes(cluster_factory):
    cluster = cluster_factory(3, FAST_TIMEOUTS)
    cluster.create_topic("bad-txn", 2, 3)
    txn_id = "txn-bad"
    with _coordinator_client(cluster, txn_id) as c:
        assert _end(c, "never-initialised", 1, 0) in (INVALID_PRODUCER_ID_MAPPING, 16)
        assert _init(c, txn_id, timeout_ms=900001).error_code == INVALID_TRANSACTION_TIMEOUT
        assert _init(c, "x" * 40_000).error_code == INVALID_REQUEST  # too long to store
        init = _init(c, txn_id)
        assert init.error_code == NONE and init.producer_epoch == 0
        pid, epoch = init.producer_id, init.producer_epoch
        assert _end(c, txn_id, pid, epoch) == INVALID_TXN_STATE  # nothing open
        assert _end(c, txn_id, pid, epoch + 1) == PRODUCER_FENCED
        assert _end(c, txn_id, pid + 1000, epoch) == INVALID_PRODUCER_ID_MAPPING
        assert _add(c, txn_id, pid, epoch, "no-such-topic") == [UNKNOWN_TOPIC_OR_PARTITION]
        assert _add(c, txn_id, pid, epoch + 1, "bad-txn") == [PRODUCER_FENCED]
        assert _add(c, txn_id, pid, epoch, "bad-txn") == [NONE]
        # KIP-890: a partition the transaction never added refuses its batches.
        assert _txn_produce(cluster, txn_id, "bad-txn", 1, pid, epoch, 0) == INVALID_TXN_STATE
        assert _txn_produce(cluster, txn_id, "bad-txn", 0, pid, epoch, 0) == NONE
        assert _end(c, txn_id, pid, epoch, commit=True) == NONE
        # A retried EndTxn is answered as the first, once the markers are written.
        assert wait_until(lambda: _end(c, txn_id, pid, epoch, commit=True) == NONE, 30,
                          "the commit complete")
        assert _end(c, txn_id, pid, epoch, commit=False) == INVALID_TXN_STATE
        # A write arriving after its transaction ended cannot open a hanging one.
        assert _txn_produce(cluster, txn_id, "bad-txn", 0, pid, epoch, 1) == INVALID_TXN_STATE
        assert _ends(cluster, "bad-txn", 2, "read_committed") == _ends(
            cluster, "bad-txn", 2, "read_uncommitted")
        described = c.request(DescribeTransactionsRequest(transactional_ids=(txn_id, "nope")))
        ours, unknown = described.transaction_states
        assert (ours.error_code, ours.transaction_state, ours.producer_id) == (
            NONE, "CompleteCommit", pid)
        assert unknown.error_code in (TRANSACTIONAL_ID_NOT_FOUND, 16)
        listed = c.request(ListTransactionsRequest(state_filters=("CompleteCommit", "Bogus"),
                                                   producer_id_filters=()))
        assert [t.transactional_id for t in listed.transaction_states] == [txn_id]
        assert listed.unknown_state_filters == ("Bogus",)


def test_writes_outside_their_transaction_are_refused(cluster_factory):
    """A transactional batch naming no transactional id, offsets committed into a
    transaction that never added the group, a marker where the ISR is short of
    min.insync.replicas, and an old client's fenced EndTxn: each gets Kafka's code, and
    nothing is left open (the last stable offsets stay at the high watermarks)."""
    cluster = cluster_factory(3, FAST_TIMEOUTS)
    cluster.create_topic("strict", 1, 3)
    cluster.create_topic("short-isr", 1, 1, {"min.insync.replicas": "2"})
    txn_id = "txn-strict"
    with _coordinator_client(cluster, txn_id) as c:
        init = _init(c, txn_id)
        pid, epoch = init.producer_id, init.producer_epoch
        assert _add(c, txn_id, pid, epoch, "strict") == [NONE]
    leader = cluster.leader_of("strict", 0)
    with WireClient.connect(cluster.brokers[leader].bootstrap) as data:
        batch = build_batch([(None, b"no id", (), 0)], int(time.time() * 1000), pid, epoch, 0,
                            attributes=ATTR_TRANSACTIONAL)
        assert produce(data, "strict", batch).error_code == TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    group = "strict-group"
    with _coordinator_client(cluster, group, key_type=0) as g:
        def commit() -> int:
            """TxnOffsetCommit's answer once it is not one a client retries."""
            (code,) = wait_until(lambda: (lambda e: None if e in RETRIABLE else (e,))(ask()),
                                 30, "TxnOffsetCommit answered")
            return code

        def ask() -> int:
            answer = g.request(TxnOffsetCommitRequest(
                transactional_id=txn_id, group_id=group, producer_id=pid,
                producer_epoch=epoch, generation_id=-1, member_id="", group_instance_id=None,
                topics=(TxnOffsetCommitRequestTopic(name="strict", partitions=(
                    TxnOffsetCommitRequestPartition(partition_index=0, committed_offset=7,
                                                    committed_leader_epoch=-1,
                                                    committed_metadata=""),)),)))
            return answer.topics[0].partitions[0].error_code

        assert commit() == INVALID_TXN_STATE  # no AddOffsetsToTxn for the group
        with _coordinator_client(cluster, txn_id) as c:
            assert c.request(AddOffsetsToTxnRequest(
                transactional_id=txn_id, producer_id=pid, producer_epoch=epoch,
                group_id=group)).error_code == NONE
        assert commit() == NONE
    with _coordinator_client(cluster, txn_id) as c:
        fenced = c.request(EndTxnV1Request(transactional_id=txn_id, producer_id=pid,
                                           producer_epoch=epoch + 1, committed=True))
        assert fenced.error_code == INVALID_PRODUCER_EPOCH  # v1 predates PRODUCER_FENCED
        assert _end(c, txn_id, pid, epoch, commit=False) == NONE
        wait_until(lambda: _end(c, txn_id, pid, epoch, commit=False) == NONE, 30,
                   "the abort complete")
    with WireClient.connect(cluster.brokers[cluster.leader_of("short-isr", 0)].bootstrap) as d:
        short = d.request(WriteTxnMarkersRequest(markers=(WritableTxnMarker(
            producer_id=pid, producer_epoch=epoch, transaction_result=True,
            coordinator_epoch=0, topics=(WritableTxnMarkerTopic(
                name="short-isr", partition_indexes=(0,)),)),)))
        assert short.markers[0].topics[0].partitions[0].error_code == NOT_ENOUGH_REPLICAS
    assert _ends(cluster, "strict", 1, "read_committed") == _ends(
        cluster, "strict", 1, "read_uncommitted")
    assert _ends(cluster, "__consumer_offsets", 5, "read_committed") == _ends(
        cluster, "__consumer_offsets", 5, "read_uncommitted")


def test_a_transaction_past_its_timeout_is_aborted_and_its_producer_fenced(cluster_factory):
    cluster = cluster_factory(3, FAST_TIMEOUTS)
    cluster.create_topic("slow-txn", 1, 3)
    txn_id = "txn-slow"
    with _coordinator_client(cluster, txn_id) as c:
        init = _init(c, txn_id, timeout_ms=1000)
        pid, epoch = init.producer_id, init.producer_epoch
        assert _add(c, txn_id, pid, epoch, "slow-txn") == [NONE]
    assert _txn_produce(cluster, txn_id, "slow-txn", 0, pid, epoch, 0) == NONE
    assert _ends(cluster, "slow-txn", 1, "read_committed") == [0]

    def aborted() -> bool:
        with _coordinator_client(cluster, txn_id) as c:
            state = c.request(DescribeTransactionsRequest(transactional_ids=(txn_id,)))
            return state.transaction_states[0].transaction_state == "CompleteAbort"

    wait_until(aborted, 30, "the timed-out transaction aborted")
    # The abort marker moved the last stable offset past the record, which no
    # read_committed reader sees; the producer's epoch was bumped past its own.
    assert _ends(cluster, "slow-txn", 1, "read_committed") == [2]
    assert _read_all(cluster, "slow-txn", 1, "read_committed") == []
    with _coordinator_client(cluster, txn_id) as c:
        assert _end(c, txn_id, pid, epoch) == PRODUCER_FENCED
    # The coordinator answers the late write's check PRODUCER_FENCED; a producer gets
    # INVALID_PRODUCER_EPOCH, as from Kafka.
    assert _txn_produce(cluster, txn_id, "slow-txn", 0, pid, epoch, 1) == INVALID_PRODUCER_EPOCH
    leader = cluster.leader_of("slow-txn", 0)
    with WireClient.connect(cluster.brokers[leader].bootstrap) as data:
        stale = data.request(WriteTxnMarkersRequest(markers=(WritableTxnMarker(
            producer_id=pid, producer_epoch=epoch, transaction_result=True,
            coordinator_epoch=0, topics=(WritableTxnMarkerTopic(
                name="slow-txn", partition_indexes=(0,)),)),)))
        assert stale.markers[0].topics[0].partitions[0].error_code == INVALID_PRODUCER_EPOCH


def test_a_new_coordinator_finishes_what_a_killed_one_prepared(cluster_factory):
    """EndTxn is answered once PrepareCommit is in the ISR; the markers come after. With the
    data partition's leader paused, they cannot be written, and the coordinator is killed
    meanwhile: the broker that takes over its partition of __transaction_state reads the
    prepared commit and writes the markers itself."""
    cluster = cluster_factory(3, {**FAST_TIMEOUTS, "broker.session.timeout.ms": "3000",
                                  "broker.heartbeat.interval.ms": "500",
                                  "replica.lag.time.max.ms": "2000"})
    cluster.create_topic("handover", 3, 3)
    txn_id = "txn-handover"
    with _coordinator_client(cluster, txn_id) as c:
        init = _init(c, txn_id)
        pid, epoch = init.producer_id, init.producer_epoch
    coordinator = cluster.leader_of(TXN_TOPIC, partition_for(txn_id, TXN_PARTITIONS))
    partition = next(p for p in range(3) if cluster.leader_of("handover", p) != coordinator)
    data_leader = cluster.leader_of("handover", partition)
    with _coordinator_client(cluster, txn_id) as c:
        assert _add(c, txn_id, pid, epoch, "handover", (partition,)) == [NONE]
        assert _txn_produce(cluster, txn_id, "handover", partition, pid, epoch, 0) == NONE
        cluster.pause(data_leader)
        assert _end(c, txn_id, pid, epoch, commit=True) == NONE
    cluster.kill(coordinator)
    cluster.resume(data_leader)

    def completed() -> bool:
        try:
            with _coordinator_client(cluster, txn_id) as c:
                state = c.request(DescribeTransactionsRequest(transactional_ids=(txn_id,)))
        except OSError:
            return False
        return state.transaction_states[0].transaction_state == "CompleteCommit"

    wait_until(completed, 60, "the commit completed by the next coordinator")
    def stable_ends() -> list[int] | None:
        try:  # a partition the killed broker led answers with an error until it moves
            committed = _ends(cluster, "handover", 3, "read_committed")
            uncommitted = _ends(cluster, "handover", 3, "read_uncommitted")
        except KafkaException:
            return None
        return committed if committed == uncommitted else None

    ends = wait_until(stable_ends, 30, "the LSO at the high watermark")
    # The record and its COMMIT marker; the dead coordinator's own marker request, left
    # in the paused leader's socket, may be written too (a second marker for a
    # transaction already ended changes nothing, as in Kafka).
    assert ends[partition] in (2, 3)
    assert [v for _, _, v in _read_all(cluster, "handover", 3, "read_committed")] == [b"seq-0"]
