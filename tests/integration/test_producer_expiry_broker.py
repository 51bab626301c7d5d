"""producer.id.expiration.ms and transactional.id.expiration.ms in a broker process:
idle producer and transactional ids expire while ones in a transaction stay, as
clients see it (the rules themselves: tests/unit/broker/test_producer_expiry.py)."""

from __future__ import annotations

import urllib.request

from confluent_kafka import Producer
from kio.schema.describe_producers.v0.request import DescribeProducersRequest, TopicRequest
from kio.schema.describe_transactions.v0.request import DescribeTransactionsRequest
from kio.schema.errors import ErrorCode

import broker.handlers.configs  # noqa: F401 (registers)
from kafkube.harness.waiting import wait_until
from kafkube.harness.wire import WireClient, create_topic

# -- a real broker --------------------------------------------------------------------------


def describe_producers(bootstrap: str, topic: str) -> dict[int, tuple[int, int]]:
    """Producer id -> (last sequence, start of its open transaction or -1) of partition 0."""
    with WireClient.connect(bootstrap) as client:
        answer = client.request(DescribeProducersRequest(topics=(
            TopicRequest(name=topic, partition_indexes=(0,)),)))
    (partition,) = answer.topics[0].partitions
    assert partition.error_code == ErrorCode.none
    return {p.producer_id: (p.last_sequence, p.current_txn_start_offset)
            for p in partition.active_producers}


def producer_id_count(metrics_port: int) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10) as r:
        for line in r.read().decode().splitlines():
            if line.startswith("kafka_server_replicamanager_produceridcount "):
                return float(line.split()[1])
    raise AssertionError("no kafka_server_replicamanager_produceridcount metric")


def test_an_idle_producer_id_expires_while_one_in_a_transaction_stays(broker_factory) -> None:
    expiry_ms = 6000
    broker = broker_factory(**{"producer.id.expiration.ms": str(expiry_ms),
                               "producer.id.expiration.check.interval.ms": "100",
                               "transaction.state.log.num.partitions": "2"})
    with WireClient.connect(broker.bootstrap) as client:
        create_topic(client, "expiring")
    in_txn = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "open",
                       "transaction.timeout.ms": 120_000})
    in_txn.init_transactions(60)
    in_txn.begin_transaction()
    in_txn.produce("expiring", b"in a transaction", partition=0)
    assert in_txn.flush(30) == 0
    idempotent = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True})
    idempotent.produce("expiring", b"idempotent", partition=0)
    assert idempotent.flush(30) == 0
    # Both are known (the transaction's record first, at offset 0); the idempotent producer,
    # though it wrote last, goes once idle past the expiration; the other stays.
    both = describe_producers(broker.bootstrap, "expiring")
    assert sorted(both.values()) == [(0, -1), (0, 0)], both
    [txn_pid] = [pid for pid, (_, start) in both.items() if start == 0]
    wait_until(lambda: describe_producers(broker.bootstrap, "expiring") == {txn_pid: (0, 0)},
               expiry_ms / 1000 + 30, "the idempotent producer id to expire")
    # Its next batch, sequence 1, is taken as an unknown producer's (Kafka's trade-off).
    idempotent.produce("expiring", b"idempotent again", partition=0)
    assert idempotent.flush(30) == 0
    again = describe_producers(broker.bootstrap, "expiring")
    assert len(again) == 2 and again[txn_pid] == (0, 0)
    assert sorted(again.values()) == [(0, 0), (1, -1)]
    # Ended, the transaction's producer expires too, counted from its marker.
    in_txn.commit_transaction(30)
    wait_until(lambda: describe_producers(broker.bootstrap, "expiring") == {},
               expiry_ms / 1000 + 30, "every producer id to expire")
    assert producer_id_count(broker.metrics_port) == 0


def describe_transaction(bootstrap: str, transactional_id: str) -> tuple[int, str, int]:
    with WireClient.connect(bootstrap) as client:
        answer = client.request(DescribeTransactionsRequest(
            transactional_ids=(transactional_id,)))
    (state,) = answer.transaction_states
    return state.error_code, state.transaction_state, state.producer_id


def test_an_idle_transactional_id_expires_while_one_in_a_transaction_stays(
        broker_factory) -> None:
    expiry_ms = 3000
    broker = broker_factory(**{
        "transactional.id.expiration.ms": str(expiry_ms),
        "transaction.remove.expired.transaction.cleanup.interval.ms": "100",
        "transaction.abort.timed.out.transaction.cleanup.interval.ms": "100",
        "transaction.state.log.num.partitions": "2"})
    with WireClient.connect(broker.bootstrap) as client:
        create_topic(client, "txns")

    def transactional(txn_id: str) -> Producer:
        producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": txn_id,
                             "transaction.timeout.ms": 120_000})
        producer.init_transactions(60)
        producer.begin_transaction()
        producer.produce("txns", txn_id.encode(), partition=0)
        assert producer.flush(30) == 0
        return producer

    def committed(txn_id: str) -> int:
        """The producer id of ``txn_id`` once its transaction is complete (EndTxn returns
        when it is prepared; the markers come after)."""
        def complete() -> tuple[int] | None:  # a tuple: producer id 0 is false
            error, state, pid = describe_transaction(broker.bootstrap, txn_id)
            return (pid,) if (error, state) == (ErrorCode.none, "CompleteCommit") else None

        return wait_until(complete, 30, f"{txn_id}'s transaction complete")[0]

    ongoing = transactional("ongoing")
    transactional("done").commit_transaction(30)
    done_pid = committed("done")
    wait_until(lambda: describe_transaction(broker.bootstrap, "done")[0]
               == ErrorCode.transactional_id_not_found,
               expiry_ms / 1000 + 30, "the idle transactional id to expire")
    # Older than the one that expired, but its transaction is in progress.
    assert describe_transaction(broker.bootstrap, "ongoing")[:2] == (ErrorCode.none, "Ongoing")
    # Back after expiry, the id starts afresh: a new producer id, at epoch 0.
    transactional("done").commit_transaction(30)
    assert committed("done") != done_pid
    ongoing.commit_transaction(30)
    wait_until(lambda: describe_transaction(broker.bootstrap, "ongoing")[0]
               == ErrorCode.transactional_id_not_found,
               expiry_ms / 1000 + 30, "the ended transaction's id to expire")
