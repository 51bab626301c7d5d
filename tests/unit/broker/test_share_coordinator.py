"""The share coordinator on a real replica manager: share-partition state initialized, written
and read back, writes from a deposed leader or an old state fenced with nothing stored, and the
state loaded back from __share_group_state (Kafka's ShareUpdate records merged in) as after a
failover."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode

from broker.coordinator import share_state_log as ssl
from broker.coordinator.share_coordinator import ShareCoordinator
from broker.coordinator.share_state_log import RecordState, ShareKey, StateBatch
from broker.protocol.batch_codec import Record, encode_batch
from tests.support.group_calls import finish_now
from tests.support.handlers import make_services

KEY = ShareKey("queue", uuid.UUID(int=7), 1)
BATCHES = (StateBatch(10, 11, RecordState.ACKNOWLEDGED, 1),
           StateBatch(12, 12, RecordState.AVAILABLE, 2))


@pytest.fixture
def coordinator(tmp_path: Path) -> ShareCoordinator:
    services = make_services(tmp_path, **{"share.coordinator.state.topic.num.partitions": "3"})
    coordinator = ShareCoordinator(services.config, services.replicas)
    finish_now(coordinator.ensure_topic())
    for partition in services.replicas.topic_partitions(ssl.TOPIC):
        coordinator.on_leadership(partition, True)
    return coordinator


def reload(coordinator: ShareCoordinator) -> None:
    partition = coordinator.replicas.get(ssl.TOPIC, coordinator.partition_of(KEY))
    coordinator.on_leadership(partition, False)
    assert finish_now(coordinator.read(KEY)).error == ErrorCode.not_coordinator
    coordinator.on_leadership(partition, True)


def log_end(coordinator: ShareCoordinator) -> int:
    partition = coordinator.replicas.get(ssl.TOPIC, coordinator.partition_of(KEY))
    return partition.log.log_end_offset


def test_state_is_initialized_written_and_read_back(coordinator: ShareCoordinator) -> None:
    assert finish_now(coordinator.read(KEY)).state is None
    assert finish_now(coordinator.initialize(KEY, 0, 10)) == (ErrorCode.none, None)
    assert finish_now(coordinator.read(KEY)).state.start_offset == 10
    assert finish_now(coordinator.write(KEY, 0, 3, 10, BATCHES))[0] == ErrorCode.none
    reload(coordinator)
    state = finish_now(coordinator.read(KEY)).state
    assert (state.state_epoch, state.leader_epoch, state.start_offset, state.batches) == \
        (0, 3, 10, BATCHES)


def test_a_deposed_leader_and_an_old_state_are_fenced(coordinator: ShareCoordinator) -> None:
    finish_now(coordinator.initialize(KEY, 1, 0))
    finish_now(coordinator.write(KEY, 1, 5, 10, BATCHES))
    end = log_end(coordinator)
    error, message = finish_now(coordinator.write(KEY, 1, 4, 12, ()))
    assert error == ErrorCode.fenced_leader_epoch and "older than 5" in message
    assert finish_now(coordinator.write(KEY, 0, 5, 12, ()))[0] == ErrorCode.fenced_state_epoch
    assert finish_now(coordinator.initialize(KEY, 1, 0))[0] == ErrorCode.fenced_state_epoch
    assert finish_now(coordinator.read(KEY, leader_epoch=4)).error == ErrorCode.fenced_leader_epoch
    assert log_end(coordinator) == end  # nothing stored
    assert finish_now(coordinator.read(KEY)).state.batches == BATCHES


def test_kafkas_update_records_are_merged_when_loaded(coordinator: ShareCoordinator) -> None:
    finish_now(coordinator.initialize(KEY, 0, 10))
    finish_now(coordinator.write(KEY, 0, 1, 10, BATCHES))
    partition = coordinator.replicas.get(ssl.TOPIC, coordinator.partition_of(KEY))
    update = ssl.encode_update(0, 2, 11, (StateBatch(12, 13, RecordState.ARCHIVED, 2),))
    outcome = partition.append(encode_batch([Record(0, 0, ssl.encode_key(ssl.UPDATE, KEY),
                                                    update)], 0), 2**31 - 1, 1, acks=-1)
    assert outcome.error == ErrorCode.none
    reload(coordinator)
    state = finish_now(coordinator.read(KEY)).state
    assert (state.leader_epoch, state.start_offset) == (2, 11)
    assert state.batches == (StateBatch(11, 11, RecordState.ACKNOWLEDGED, 1),
                             StateBatch(12, 13, RecordState.ARCHIVED, 2))


def test_deleted_state_stays_deleted(coordinator: ShareCoordinator) -> None:
    finish_now(coordinator.initialize(KEY, 0, 10))
    finish_now(coordinator.write(KEY, 0, 1, 10, BATCHES))
    assert finish_now(coordinator.delete(KEY)) == ErrorCode.none
    end = log_end(coordinator)
    # A leader that still serves the deleted state (it learns of it by this error, and
    # reads again) must not bring it back.
    error, message = finish_now(coordinator.write(KEY, 0, 1, 12, BATCHES))
    assert error == ErrorCode.fenced_state_epoch and "no state" in message
    assert log_end(coordinator) == end
    reload(coordinator)
    assert finish_now(coordinator.read(KEY)).state is None


def test_a_state_never_initialized_is_not_written(coordinator: ShareCoordinator) -> None:
    assert finish_now(coordinator.write(KEY, 0, 1, 10, BATCHES))[0] == \
        ErrorCode.fenced_state_epoch
    assert finish_now(coordinator.read(KEY)).state is None
