"""`kafkube dev`: a local multi-broker cluster that prints its bootstrap servers and stops
cleanly on Ctrl-C."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic


def test_dev_cluster_serves_replicated_topics_and_stops_on_ctrl_c(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "broker", "dev", "--brokers", "3", "--port", "0", "--quiet",
         "--data-dir", str(tmp_path / "dev")],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        assert proc.stdout is not None
        bootstrap = None
        deadline = time.monotonic() + 60
        for line in proc.stdout:
            if line.startswith("bootstrap.servers="):
                bootstrap = line.strip().split("=", 1)[1]
                break
            assert time.monotonic() < deadline, "no bootstrap line"
        assert bootstrap is not None and len(bootstrap.split(",")) == 3
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic("dev", 2, 3)])["dev"].result(30)
        producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
        for i in range(100):
            producer.produce("dev", str(i).encode(), partition=i % 2)
        assert producer.flush(30) == 0
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "dev-check"})
        consumer.assign([TopicPartition("dev", p, 0) for p in (0, 1)])
        seen: set[bytes] = set()
        deadline = time.monotonic() + 30
        while len(seen) < 100 and time.monotonic() < deadline:
            seen.update(m.value() for m in consumer.consume(100, 0.5) if m.error() is None)
        consumer.close()
        assert seen == {str(i).encode() for i in range(100)}
        described = admin.list_topics("dev", timeout=10).topics["dev"].partitions
        assert all(len(p.replicas) == 3 and len(p.isrs) == 3 for p in described.values())
        proc.send_signal(signal.SIGINT)
        rest = proc.communicate(timeout=60)[0]
        assert proc.returncode == 0, rest
        assert "kafkube dev: stopped" in rest
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
