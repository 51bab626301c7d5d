"""The transaction coordinator at the edges of the producer epoch (findings of a review of
transaction.version 2): a transaction timed out at the last epochs is still aborted, under
a new producer id, instead of staying open for good (an LSO held back forever, KAFKA-20090);
and a producer fenced by a new instance's InitProducerId cannot come back through a KIP-360
InitProducerId naming its old epoch.

The coordinator runs in process; its log writes and marker sends are replaced by ones that
succeed at once (what is tested is what it decides to write, not the writing, which
tests/integration/test_transactions.py covers on real brokers)."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path

from kio.schema.errors import ErrorCode

from broker.config.broker_config import BrokerConfig
from broker.coordinator.transaction_coordinator import TransactionCoordinator
from broker.coordinator.transaction_log import TxnState, decode_value, encode_value
from broker.coordinator.txn_end import MAX_EPOCH


class Markers:
    def __init__(self) -> None:
        self.sent: list[tuple[int, int, bool]] = []

    async def send(self, job, still_coordinator) -> bool:
        self.sent.append((job.producer_id, job.producer_epoch, job.commit))
        return True


class Ids:
    def __init__(self) -> None:
        self.last = 1000

    async def next_producer_id(self) -> int:
        self.last += 1
        return self.last


def coordinator(tmp_path: Path) -> tuple[TransactionCoordinator, Markers]:
    config = BrokerConfig.from_dict({"log.dirs": str(tmp_path), "node.id": "0"})
    markers = Markers()
    c = TransactionCoordinator(config, None, Ids(), markers)  # type: ignore[arg-type]
    c.owned = dict.fromkeys(range(c.partitions), 0)

    async def write(meta, record) -> ErrorCode:
        if meta.pending is not None:
            return ErrorCode.concurrent_transactions
        meta.record = decode_value(encode_value(record)) if record is not None else record
        return ErrorCode.none

    c._write = write  # type: ignore[method-assign]
    return c, markers


async def settled(c: TransactionCoordinator) -> None:
    while c._tasks:
        await asyncio.gather(*list(c._tasks))


def test_a_transaction_timed_out_at_the_last_epoch_is_aborted_under_a_new_id(
        tmp_path: Path) -> None:
    async def scenario() -> None:
        c, markers = coordinator(tmp_path)
        init = await c.init_producer_id("w", 60_000)
        meta = c.txns["w"]
        last = MAX_EPOCH - 1
        meta.record = replace(meta.record, producer_epoch=last)
        assert await c.add_partitions("w", init.producer_id, last, [("t", 0)], 2) == \
            ErrorCode.none
        meta.record = replace(meta.record, start_ms=0)  # long past its timeout
        assert await c.abort_timed_out() == 1
        await settled(c)
        assert markers.sent == [(init.producer_id, MAX_EPOCH, False)]
        assert (meta.state, meta.record.producer_id, meta.record.producer_epoch) == (
            TxnState.COMPLETE_ABORT, 1002, 0)
        # The producer's own abort, at the epoch it had: the new id, and it goes on.
        ended = await c.end_transaction("w", init.producer_id, last, False, bump=True)
        assert (ended.error, ended.producer_id, ended.producer_epoch) == (
            ErrorCode.none, 1002, 0)
        assert await c.add_partitions("w", 1002, 0, [("t", 0)], 2) == ErrorCode.none
        ended = await c.end_transaction("w", 1002, 0, True, bump=True)
        assert (ended.error, ended.producer_epoch) == (ErrorCode.none, 1)

    asyncio.run(scenario())


def test_a_transaction_at_the_maximum_epoch_is_still_aborted(tmp_path: Path) -> None:
    async def scenario() -> None:
        c, markers = coordinator(tmp_path)
        init = await c.init_producer_id("m", 60_000)
        meta = c.txns["m"]
        meta.record = replace(meta.record, producer_epoch=MAX_EPOCH)
        assert await c.add_partitions("m", init.producer_id, MAX_EPOCH, [("t", 0)]) == \
            ErrorCode.none
        meta.record = replace(meta.record, start_ms=0)
        assert await c.abort_timed_out() == 1
        await settled(c)
        assert markers.sent == [(init.producer_id, MAX_EPOCH, False)]
        assert meta.state == TxnState.COMPLETE_ABORT and meta.record.producer_epoch == 0

    asyncio.run(scenario())


def test_a_producer_replaced_by_a_new_instance_stays_fenced(tmp_path: Path) -> None:
    async def scenario() -> None:
        c, _ = coordinator(tmp_path)
        old = await c.init_producer_id("z", 60_000)
        new = await c.init_producer_id("z", 60_000)  # another instance: no expected epoch
        assert new.producer_epoch == old.producer_epoch + 1
        back = await c.init_producer_id("z", 60_000, (old.producer_id, old.producer_epoch))
        assert back.error == ErrorCode.producer_fenced
        # A KIP-360 client's own bump is answered again when it retries it.
        mine = await c.init_producer_id("z", 60_000, (new.producer_id, new.producer_epoch))
        again = await c.init_producer_id("z", 60_000, (new.producer_id, new.producer_epoch))
        assert (again.error, again.producer_epoch) == (ErrorCode.none, mine.producer_epoch)

    asyncio.run(scenario())
