"""producer.id.expiration.ms and transactional.id.expiration.ms, with Kafka's semantics.

A partition's replicas forget a producer id that has written nothing there (data batch or
transaction marker) for producer.id.expiration.ms and has no transaction open there
(Kafka's ProducerStateManager.removeExpiredProducers, every
producer.id.expiration.check.interval.ms); a reload rebuilding the state from the log does
not bring it back, and the log cleaner stops keeping its last batch. Its next batch is an
unknown producer's: any sequence goes. A transaction coordinator forgets a transactional id
with no transaction in progress after transactional.id.expiration.ms.

The rules are checked here where time is an argument (the producer state, the replica
manager's check); the wiring with a real broker, waiting on what clients see, in
tests/integration/test_producer_expiry_broker.py.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode

import broker.handlers.configs  # noqa: F401 (registers)
from broker.config.broker_config import validate_dynamic_broker_configs
from broker.handlers.context import BrokerServices
from broker.protocol.batch_codec import Record, encode_batch
from broker.protocol.records import ATTR_TRANSACTIONAL, BatchHeader, split_batches
from broker.storage.cleaner import clean_log
from broker.storage.log import Log
from broker.storage.producer_state import ProducerStateManager
from kafkube_contract.config_keys import ConfigError
from tests.support.handlers import create, make_services, new_topic
from tests.support.txn_logs import compact_config, config, data_batch, marker, produce
from tests.unit.broker.test_config_handlers import BROKER, SET, alter

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
