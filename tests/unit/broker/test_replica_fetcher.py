"""The follower's side of a fetch (broker/server/replica_fetcher.py) when the leader's batches
do not line up with its log: the leader's batch holding our log end starts before it (our
tail was written in other batches: it diverged). Truncation by leader epoch may find
nothing to cut when the epochs agree, so a follower that only asked again fetched the same
batch for ever and never rejoined the ISR. It must take the leader's boundary."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from kio.schema.errors import ErrorCode

from broker.server.partition import Partition
from broker.server.replica_fetcher import FetcherConfig, FetchState, ReplicaFetcher
from broker.storage.log import Log, LogConfig
from kafkube.harness.wire import build_batch

TS = 1_700_000_000_000
EPOCH = 4


def batch(base: int, n: int, value: bytes) -> bytes:
    return build_batch([(None, value, (), i) for i in range(n)], TS, base_offset=base,
                       partition_leader_epoch=EPOCH)


def answer(records: bytes, high_watermark: int) -> SimpleNamespace:
    return SimpleNamespace(error_code=ErrorCode.none, records=records,
                           high_watermark=high_watermark, log_start_offset=0)


def follower_of_broker_0() -> ReplicaFetcher:
    """Broker 1's fetcher from broker 0, never connected: the tests hand it answers."""
    return ReplicaFetcher(0, FetcherConfig(node_id=1, wait_max_ms=500, min_bytes=1,
                                           max_bytes=1 << 20, response_max_bytes=1 << 20,
                                           backoff_ms=1000, socket_timeout_ms=30_000),
                          endpoint=lambda _: None)


def test_a_leader_batch_overlapping_our_log_end_truncates_to_its_start(tmp_path: Path) -> None:
    log = Log(tmp_path / "t-0", LogConfig())
    # Ours: 0-2, then a diverged 3-4. The leader's: 0-2, then 3-5 and 6-7.
    assert log.append_as_follower(batch(0, 3, b"a") + batch(3, 2, b"ours")) == 5
    partition = Partition("t", 0, log, node_id=1, high_watermark=3)
    fetcher = follower_of_broker_0()
    state = FetchState(partition, EPOCH, truncating=False)
    leaders = batch(3, 3, b"theirs") + batch(6, 2, b"theirs")

    # Fetching from our end (5), the leader answers from the batch that holds it.
    fetcher._apply_fetch(state, 5, answer(leaders, 8))
    assert log.log_end_offset == 3, "the follower kept a tail the leader does not have"
    assert not state.truncating
    fetcher._apply_fetch(state, 3, answer(leaders, 8))
    assert log.log_end_offset == 8
    assert partition.high_watermark == 8
    log.close()


def test_an_empty_follower_log_starting_inside_the_leaders_first_batch_starts_at_it(
        tmp_path: Path) -> None:
    """The leader's log start moved into a batch (DeleteRecords): a new follower, reset to
    it, gets the whole batch from before it. Kafka's follower starts its log at the batch
    (truncateFullyAndStartAt); ours asked for truncation, found nothing to cut and fetched
    the same batch again, for ever."""
    log = Log(tmp_path / "t-0", LogConfig())
    log.reset_to(5)  # the leader's log start, inside its batch 3-7
    partition = Partition("t", 0, log, node_id=1, high_watermark=5)
    fetcher = follower_of_broker_0()
    state = FetchState(partition, EPOCH, truncating=False)
    leaders = batch(3, 5, b"theirs")

    fetcher._apply_fetch(state, 5, answer(leaders, 8))
    assert (log.log_start_offset, log.log_end_offset) == (3, 3)
    assert not state.truncating
    fetcher._apply_fetch(state, 3, answer(leaders, 8))
    assert log.log_end_offset == 8
    log.close()
