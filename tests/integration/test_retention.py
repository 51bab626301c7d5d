"""Retention enforced by a running broker's background check."""

from __future__ import annotations

import contextlib

from confluent_kafka import Consumer, TopicPartition

from kafkube.harness.waiting import wait_until
from tests.integration.test_compat_clients import ck_produce


def test_broker_deletes_segments_beyond_retention_bytes(broker_factory):
    broker = broker_factory(**{
        "log.segment.bytes": "20000",
        "log.retention.bytes": "40000",
        "log.retention.check.interval.ms": "200",
        "log.segment.delete.delay.ms": "0",
    })
    records = [{"key": None, "value": b"%06d" % i + b"x" * 994, "headers": [], "timestamp": 0}
               for i in range(300)]
    assert ck_produce(broker.bootstrap, "kept-small", records, **{"batch.size": 4000}) == []
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "unused",
                         "enable.auto.commit": False})
    try:
        tp = TopicPartition("kept-small", 0)
        data_dir = broker.log_dir / "kept-small-0"

        def kept() -> int:
            total = 0
            for path in data_dir.glob("*.log"):
                # Retention may rename a segment between the listing and the stat.
                with contextlib.suppress(FileNotFoundError):
                    total += path.stat().st_size
            return total

        # A check may run while the records still arrive: wait for one after the last.
        wait_until(lambda: kept() <= 40000 + 20000, 30,  # the limit plus the active segment
                   "retention to trim the log to retention.bytes")
        low, high = consumer.get_watermark_offsets(tp, 10)
        assert low > 0 and high == 300
        # The oldest remaining records are still readable from the new start.
        consumer.assign([TopicPartition("kept-small", 0, low)])
        msg = consumer.poll(10)
        assert msg is not None and not msg.error() and msg.offset() == low
        assert msg.value().startswith(b"%06d" % low)
    finally:
        consumer.close()
