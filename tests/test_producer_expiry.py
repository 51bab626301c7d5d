"""producer.id.expiration.ms and transactional.id.expiration.ms, with Kafka's semantics.

A partition's replicas forget a producer id that has written nothing there (data batch or
transaction marker) for producer.id.expiration.ms and has no transaction open there
(Kafka's ProducerStateManager.removeExpiredProducers, every
producer.id.expiration.check.interval.ms); a reload rebuilding the state from the log does
not bring it back, and the log cleaner stops keeping its last batch. Its next batch is an
unknown producer's: any sequence goes. A transaction coordinator forgets a transactional id
with no transaction in progress after transactional.id.expiration.ms.

The rules are checked where time is an argument (the producer state, the replica manager's
check); the wiring with a real broker, waiting with ``wait_until`` on what clients see.
"""

from __future__ import annotations

import time
import urllib.request
from pathlib import Path

import pytest
from confluent_kafka import Producer
from kio.schema.describe_producers.v0.request import DescribeProducersRequest, TopicRequest
from kio.schema.describe_transactions.v0.request import DescribeTransactionsRequest
from kio.schema.errors import ErrorCode

import broker.handlers.configs  # noqa: F401 (registers)
from broker.config.broker_config import ConfigError, validate_dynamic_broker_configs
from broker.handlers.context import BrokerServices
from broker.protocol.batch_codec import Record, encode_batch
from broker.protocol.records import ATTR_TRANSACTIONAL, BatchHeader, split_batches
from broker.storage.cleaner import clean_log
from broker.storage.log import Log
from broker.storage.producer_state import ProducerStateManager
from kafkube.harness.waiting import wait_until
from kafkube.harness.wire import WireClient, create_topic
from tests.test_admin_handlers import create, make_services, new_topic
from tests.test_config_handlers import BROKER, SET, alter
from tests.test_txn_storage import compact_config, config, data_batch, marker, produce

EXPIRY_MS = 60_000
T = 1_700_000_000_000  # the producer state is given the time: any will do


def header(pid: int, seq: int, ts: int, offset: int = 0, transactional: bool = False
           ) -> BatchHeader:
    """The header of a one-record batch of producer ``pid`` (epoch 0) at ``offset``."""
    data = encode_batch([Record(offset, ts, b"k", b"v")], offset, producer_id=pid,
                        producer_epoch=0, base_sequence=seq,
                        attributes=ATTR_TRANSACTIONAL if transactional else 0)
    [parsed] = split_batches(data)
    return parsed


def now_ms() -> int:
    return int(time.time() * 1000)


# -- the rule, in the producer state ---------------------------------------------------------


def test_an_idle_producer_is_forgotten_and_its_next_batch_is_a_new_producers() -> None:
    state = ProducerStateManager()
    state.update(header(7, 0, T, offset=0))
    state.update(header(7, 1, T, offset=1))
    assert state.check(header(7, 5, T)) == ErrorCode.out_of_order_sequence_number
    assert state.remove_expired(T + 2 * EXPIRY_MS, EXPIRY_MS) == 1
    assert state.producers == {}
    assert state.last_batches() == {}  # the cleaner no longer keeps its last batch
    # Kafka's trade-off: an expired producer's next batch is taken with any sequence.
    assert state.check(header(7, 5, T)) is None
    assert state.find_duplicate(header(7, 1, T)) is None


def test_a_producer_with_an_open_transaction_is_kept_however_long_it_is_idle() -> None:
    state = ProducerStateManager()
    state.update(header(7, 0, T, offset=0, transactional=True))
    state.update(header(8, 0, T, offset=1))
    assert state.remove_expired(T + 100 * EXPIRY_MS, EXPIRY_MS) == 1
    assert set(state.producers) == {7}
    assert state.first_unstable_offset == 0
    # Once a marker ends it, idleness counts from the marker, not from the data.
    ended = T + 100 * EXPIRY_MS
    state.complete(header(7, -1, ended, offset=2, transactional=True), True, 0)
    assert state.remove_expired(ended + EXPIRY_MS - 1, EXPIRY_MS) == 0
    assert state.remove_expired(ended + EXPIRY_MS, EXPIRY_MS) == 1
    assert state.producers == {}


def test_a_producer_that_wrote_recently_is_kept() -> None:
    state = ProducerStateManager()
    state.update(header(7, 0, T, offset=0))
    state.update(header(7, 1, T + EXPIRY_MS // 2, offset=1))  # its last write counts
    assert state.remove_expired(T + EXPIRY_MS, EXPIRY_MS) == 0
    assert state.producers[7].last_sequence == 1


def test_a_producer_expires_exactly_at_the_expiration() -> None:
    state = ProducerStateManager()
    state.update(header(7, 0, T))
    assert state.remove_expired(T + EXPIRY_MS - 1, EXPIRY_MS) == 0
    assert state.remove_expired(T + EXPIRY_MS, EXPIRY_MS) == 1  # Kafka's >=


# -- the log: reloads and the cleaner -------------------------------------------------------


def test_a_reload_does_not_bring_back_an_expired_producer(tmp_path: Path) -> None:
    """Kafka drops expired entries when it loads a snapshot; kafkube replays the log, and
    the producers expired by then stay forgotten."""
    directory = tmp_path / "t-0"
    log = Log(directory, config(producer_id_expiration_ms=EXPIRY_MS))
    old, now = now_ms() - 2 * EXPIRY_MS, now_ms()
    produce(log, data_batch([(b"a", b"1")], pid=1, seq=0, transactional=False, ts=old))
    produce(log, data_batch([(b"a", b"2")], pid=2, seq=0, transactional=False, ts=now))
    produce(log, data_batch([(b"a", b"3")], pid=3, seq=0, ts=old))  # left open
    produce(log, data_batch([(b"a", b"4")], pid=4, seq=0, ts=old))
    marker(log, 4, commit=True)  # stamped now
    log.close()
    for clean_shutdown in (True, False):
        reopened = Log(directory, config(producer_id_expiration_ms=EXPIRY_MS),
                       clean_shutdown=clean_shutdown)
        assert set(reopened.producer_state.producers) == {2, 3, 4}
        assert reopened.producer_state.ongoing_transactions() == {3: 2}
        reopened.close()


def test_the_cleaner_no_longer_keeps_an_expired_producers_last_batch(tmp_path: Path) -> None:
    log = Log(tmp_path / "t-0", compact_config(producer_id_expiration_ms=EXPIRY_MS))
    old = now_ms() - 2 * EXPIRY_MS
    produce(log, data_batch([(b"a", b"1")], pid=42, seq=0, transactional=False, ts=old))
    produce(log, data_batch([(b"a", b"2")], transactional=False))  # a's newer value
    log.roll()
    produce(log, data_batch([(b"z", b"z")], transactional=False))
    assert log.producer_state.remove_expired(now_ms(), EXPIRY_MS) == 1
    clean_log(log, None, now_ms())
    headers = split_batches(log.segments[0].log_path.read_bytes(), allow_empty=True)
    assert [(h.base_offset, h.producer_id) for h in headers] == [(1, -1)]


# -- the broker's configs and check ---------------------------------------------------------


@pytest.fixture
def services(tmp_path: Path) -> BrokerServices:
    services = make_services(tmp_path)
    create(services, 7, new_topic("t"))
    return services


def test_the_expiration_changes_at_run_time_and_the_check_applies_it(
        services: BrokerServices) -> None:
    partition = services.replicas.get("t", 0)
    assert partition.log.config.producer_id_expiration_ms == 86_400_000  # Kafka's default
    now = now_ms()
    records = encode_batch([Record(0, now - 5_000, None, b"v")], 0, producer_id=7,
                           producer_epoch=0, base_sequence=0)
    assert partition.append(records, 1 << 20).error == ErrorCode.none
    assert services.replicas.logs.expire_producers(now) == 0
    assert services.replicas.producer_id_count() == 1
    [result] = alter(services, 1, (BROKER, "", [("producer.id.expiration.ms", SET, "1000")]))
    assert result[2] == ErrorCode.none
    assert partition.log.config.producer_id_expiration_ms == 1000
    assert services.replicas.logs.expire_producers(now) == 1
    assert services.replicas.producer_id_count() == 0
    # The check interval is fixed at start, as in Kafka (an internal config there).
    with pytest.raises(ConfigError, match="Cannot update these configs dynamically"):
        validate_dynamic_broker_configs({"producer.id.expiration.check.interval.ms": "5"})


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
