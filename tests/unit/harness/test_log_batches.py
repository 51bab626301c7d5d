"""tests/support/log_batches.py: the batches behind a duplicate, read from a real log."""

from __future__ import annotations

from broker.storage.log import Log
from tests.support.log_batches import batches_holding
from tests.support.txn_logs import config, data_batch, produce


def test_a_batch_written_twice_shows_both_copies_with_their_epochs(tmp_path) -> None:
    log = Log(tmp_path / "moved-2", config(segment_bytes=1 << 20))
    pairs = [(None, b"v%d" % i) for i in range(3)]
    produce(log, data_batch(pairs, pid=7, epoch=0, seq=0, transactional=False))  # 0-2
    produce(log, data_batch(pairs, pid=7, epoch=1, seq=0, transactional=False))  # 3-5
    produce(log, data_batch(pairs, pid=7, epoch=1, seq=3, transactional=False))  # 6-8
    log.flush()
    lines = batches_holding([tmp_path], "moved", [(2, 1), (2, 4)], context=0)
    assert lines == [
        f"{tmp_path} moved-2 offsets 0-2: producer 7 epoch 0 sequences 0-2, leader epoch 0 <-",
        f"{tmp_path} moved-2 offsets 3-5: producer 7 epoch 1 sequences 0-2, leader epoch 0 <-",
    ]
    around = batches_holding([tmp_path], "moved", [(2, 4)], context=1)
    assert [line.split(":")[0].rsplit(" ", 1)[1] for line in around] == ["0-2", "3-5", "6-8"]
    assert batches_holding([tmp_path], "other", [(0, 0)]) == []
