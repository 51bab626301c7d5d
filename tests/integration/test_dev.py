"""`kafkube dev`: a local multi-broker cluster that prints its bootstrap servers, survives
the death of a broker and starts it again on SIGHUP, and stops cleanly on Ctrl-C."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from kafkube.harness.waiting import wait_until


def test_dev_cluster_serves_replicated_topics_and_stops_on_ctrl_c(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "kafkube", "dev", "--brokers", "3", "--port", "0", "--quiet",
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


def _leaders(admin: AdminClient, topic: str) -> dict[int, tuple[int, tuple[int, ...]]] | None:
    """partition -> (leader, ISR) from one Metadata answer; None if it did not come."""
    try:
        described = admin.list_topics(topic, timeout=5).topics[topic]
    except KafkaException:
        return None
    if described.error is not None:
        return None
    return {p.id: (p.leader, tuple(p.isrs)) for p in described.partitions.values()}


def test_dev_cluster_survives_a_killed_broker_and_starts_it_again(tmp_path: Path) -> None:
    """What the README says: kill -9 one broker, the others keep serving and take over its
    leaderships; kill -HUP starts it again on its port and it rejoins every ISR."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "kafkube", "dev", "--brokers", "3", "--port", "0", "--quiet",
         "--data-dir", str(tmp_path / "dev"),
         # Fence a dead broker after 3 s rather than 9 s: the same path, a quicker test.
         "--override", "broker.session.timeout.ms=3000",
         "--override", "broker.heartbeat.interval.ms=500"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    lines: list[str] = []
    try:
        assert proc.stdout is not None
        pids: dict[int, int] = {}
        bootstrap = None
        deadline = time.monotonic() + 60
        for line in proc.stdout:
            lines.append(line)
            if match := re.match(r"kafkube dev: broker (\d+) pid (\d+) ", line):
                pids[int(match.group(1))] = int(match.group(2))
            if line.startswith("bootstrap.servers="):
                bootstrap = line.strip().split("=", 1)[1]
                break
            assert time.monotonic() < deadline, "no bootstrap line"
        assert bootstrap is not None and sorted(pids) == [0, 1, 2], "".join(lines)
        reader = threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True)
        reader.start()
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic("survive", 6, 3)])["survive"].result(30)
        producer = Producer({"bootstrap.servers": bootstrap, "acks": "all",
                             "message.timeout.ms": 30000})

        def produce(count: int, tag: str) -> None:
            for i in range(count):
                producer.produce("survive", f"{tag}-{i}".encode(), partition=i % 6)
            assert producer.flush(30) == 0

        produce(60, "before")
        victim = wait_until(
            lambda: (s := _leaders(admin, "survive")) and len(s) == 6 and s[0][0] >= 0
            and (s[0][0],), 30, "a leader for survive-0")[0]
        os.kill(pids[victim], signal.SIGKILL)
        moved = wait_until(
            lambda: (s := _leaders(admin, "survive")) and all(
                leader >= 0 and leader != victim and victim not in isr
                for leader, isr in s.values()) and s,
            30, f"every leadership off broker {victim}, and it out of every ISR")
        assert all(len(isr) == 2 for _, isr in moved.values()), moved
        produce(60, "during")  # min.insync.replicas 2 of 3: still writable
        assert proc.poll() is None, "".join(lines)
        wait_until(lambda: any(f"broker {victim} exited (killed by SIGKILL)" in line
                               for line in lines), 10, "dev reporting the killed broker")

        proc.send_signal(signal.SIGHUP)
        wait_until(lambda: any(f"broker {victim} started again" in line for line in lines),
                   60, f"dev starting broker {victim} again")
        wait_until(
            lambda: (s := _leaders(admin, "survive")) and len(s) == 6
            and all(len(isr) == 3 for _, isr in s.values()),
            60, f"broker {victim} back in every ISR")
        produce(60, "after")
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "survive-check"})
        consumer.assign([TopicPartition("survive", p, 0) for p in range(6)])
        seen: set[bytes] = set()
        deadline = time.monotonic() + 30
        while len(seen) < 180 and time.monotonic() < deadline:
            seen.update(m.value() for m in consumer.consume(200, 0.5) if m.error() is None)
        consumer.close()
        expected = {f"{tag}-{i}".encode() for tag in ("before", "during", "after")
                    for i in range(60)}
        assert seen == expected, sorted(expected - seen)[:10]
        proc.send_signal(signal.SIGINT)
        proc.wait(60)
        reader.join(10)
        assert proc.returncode == 0, "".join(lines)
        assert "kafkube dev: stopped" in "".join(lines)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
