"""JBOD: one of a broker's two log dirs fails under acks=all producers (KIP-112, KIP-858).

Three brokers, each with two log dirs. Two acks=all producers (test_durability's Workload,
idempotent) write to an RF 3 topic with ``min.insync.replicas=2`` while a tailing consumer
reads. Then one log dir of the leader of partition 0, the dir holding that partition, fails.

The fault, injected for real from outside the broker: the dir is renamed away and a regular
file put at its path, as when a disk's mount disappears. (The tests run as root, so taking
permissions away would not stop the broker; a loopback file system needs mount rights the
test does not have.) What the broker meets is the kernel's ENOTDIR on the next file it
opens under that path: a segment roll (``segment.bytes`` is small) or a checkpoint write
(every second here). File descriptors opened before still write into the renamed dir, so
nothing fails until then; that is the one way this differs from a disk returning EIO on
every write, and it changes only when the failure is noticed, not what follows.

What must follow, as in Kafka: the broker stays up; the partitions on the failed dir
move their leadership and ISR to the other brokers (the broker names them in its
registration, the controller elects); the partitions on its other dir stay in its hands
(it stays in their ISR); writes go on; restarted with the dir still failing, the broker
starts without it and does not take those replicas back; and every acknowledged record is
read back in order (``kafkube.harness.queue_checker``).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from kafkube.harness.metadata import Cluster
from kafkube.harness.queue_checker import History
from kafkube.harness.waiting import wait_until
from tests.integration.test_durability import PARTITIONS, Workload, check, drain, wait_for_progress

CLUSTER_CONFIG = {
    "broker.session.timeout.ms": "3000",
    "broker.heartbeat.interval.ms": "500",
    "replica.lag.time.max.ms": "6000",
    "default.replication.factor": "3",
    "min.insync.replicas": "2",
    "unclean.leader.election.enable": "false",
    "auto.leader.rebalance.enable": "false",  # leadership moves only because of the fault
    "offsets.topic.replication.factor": "3",
    "offsets.topic.num.partitions": "3",
    "replica.high.watermark.checkpoint.interval.ms": "1000",
}
TOPIC = "jbod"
TOPIC_CONFIG = {"min.insync.replicas": "2", "segment.bytes": "16384"}
MOVE_DEADLINE = 30.0
REJOIN_DEADLINE = 60.0


def dirs_of(cluster: Cluster, node: int) -> list[Path]:
    root = cluster.brokers[node].log_dir
    return [root / "d0", root / "d1"]


def dir_holding(cluster: Cluster, node: int, partition: int) -> Path:
    found = [d for d in dirs_of(cluster, node) if (d / f"{TOPIC}-{partition}").is_dir()]
    assert len(found) == 1, f"broker {node}'s dirs holding {TOPIC}-{partition}: {found}"
    return found[0]


def fail_dir(log_dir: Path) -> None:
    """The disk goes: the dir moves away and a plain file takes its path (ENOTDIR)."""
    log_dir.rename(log_dir.with_name(log_dir.name + ".gone"))
    log_dir.write_text("this disk failed\n")


@pytest.mark.timeout(300)
def test_a_failed_log_dir_goes_offline_and_the_broker_serves_the_other(cluster_factory):
    cluster: Cluster = cluster_factory(3, CLUSTER_CONFIG, start=False)
    for node, broker in enumerate(cluster.brokers):
        broker.overrides["log.dirs"] = ",".join(str(d) for d in dirs_of(cluster, node))
    cluster.start()
    cluster.create_topic(TOPIC, PARTITIONS, 3, TOPIC_CONFIG)
    victim = cluster.leader_of(TOPIC, 0)
    failing = dir_holding(cluster, victim, 0)
    on_failing = {p for p in range(PARTITIONS) if dir_holding(cluster, victim, p) == failing}
    healthy = set(range(PARTITIONS)) - on_failing
    assert healthy, f"every {TOPIC} replica of broker {victim} is in {failing}"
    print(f"broker {victim}: {TOPIC} partitions {sorted(on_failing)} in {failing.name}, "
          f"{sorted(healthy)} in the other dir")
    history = History()
    with Workload(cluster.bootstrap, TOPIC, history, idempotent=True) as workload:
        wait_for_progress(history, "before the fault", timeout=60)
        acked_before = history.counts()
        fail_dir(failing)
        failed_at = time.monotonic()

        states = wait_moved(cluster, victim, on_failing, healthy)
        moved = time.monotonic() - failed_at
        print(f"leadership and ISR of {sorted(on_failing)} off broker {victim} after "
              f"{moved:.1f}s: {states}")
        writable = wait_for_progress(history, f"with {failing.name} of broker {victim} failed")
        assert cluster.alive(victim), cluster.brokers[victim].tail(40)
        assert "is offline" in "\n".join(cluster.brokers[victim].output), "no offline dir logged"

        cluster.restart(victim)  # the dir still fails: started without it
        cluster.wait_for_brokers(3)
        cluster.wait_for_partitions(
            TOPIC, lambda s: s.leader >= 0 and len(s.isr) >= 2, REJOIN_DEADLINE,
            "every partition led after the restart")
        states = wait_moved(cluster, victim, on_failing, healthy)
        print(f"restarted with {failing.name} still failing: {states}")
        wait_for_progress(history, "after the restart")
        assert cluster.alive(victim)
    drain(cluster, TOPIC, history)
    print(f"acked before the fault: {acked_before}; leadership moved in {moved:.1f}s; "
          f"writable again after {writable:.1f}s")
    check(TOPIC, history, True, workload, (cluster,))


def wait_moved(cluster: Cluster, victim: int, on_failing: set[int],
               healthy: set[int]) -> dict:
    """The partitions of the failed dir led elsewhere without ``victim`` in their ISR, and
    ``victim`` in the ISR of those on its healthy dir, in three answers in a row."""
    def ok(states: dict) -> bool:
        return all(
            0 <= states[p].leader != victim and victim not in states[p].isr for p in on_failing
        ) and all(victim in states[p].isr and states[p].leader >= 0 for p in healthy)

    streak: list[bool] = []

    def answered() -> dict | None:
        states = cluster.partitions(TOPIC, timeout=3.0)
        if states is None:
            return None
        if ok(states):
            streak.append(True)
        else:
            streak.clear()
        return states if len(streak) >= 3 else None

    return wait_until(answered, MOVE_DEADLINE, f"{TOPIC}: broker {victim}'s failed replicas "
                      "moved off it, its healthy ones kept", interval=0.2)
