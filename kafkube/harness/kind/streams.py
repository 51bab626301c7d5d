"""Producer streams run in client pods during a fault, and what is judged of them: shared by
the scenarios of the reference deployment and of the operator."""

from __future__ import annotations

from kafkube.harness.kind.deployment import Brokers
from kafkube.harness.kind.history import Produced
from kafkube.harness.queue_checker import History
from kafkube.harness.waiting import wait_until


def checked(history: History, produced: Produced, drained: int, idempotent: bool = True) -> str:
    """The queue checker's verdict; the workload's producer is idempotent with acks=all."""
    report = history.check()
    assert produced.finished, "the producer did not finish"
    assert report.ok(idempotent=idempotent), report.summary()
    return (f"{produced.sent} sent, {produced.acked} acknowledged, {produced.failed} failed; "
            f"{drained} read back; no acknowledged record lost")


def acked(brokers: Brokers, pod: str) -> int:
    """Acknowledgements a producer pod has printed so far."""
    return sum(1 for line in brokers.logs(pod) if line.startswith("A "))


def stream(brokers: Brokers, topic: str, count: int, seconds: int, first: int) -> str:
    """An acks=all producer pod sending 1,000 records/s, once ``first`` are acknowledged."""
    pod = brokers.start("produce", brokers.bootstrap, topic, "--count", str(count),
                        "--rate", "1000", "--seconds", str(seconds))
    brokers.wait_running(pod, 120)
    wait_until(lambda: acked(brokers, pod) >= first, 120,
               f"{first:,} acknowledged records before the fault", 1.0)
    return pod


def unwritable(produced: Produced, led: list[int]) -> str:
    """How long the partitions a killed broker led went without an acknowledgement."""
    gaps = produced.longest_gap_ms(led)
    return (f"partitions it led {led} unwritable for at most "
            f"{max(gaps.values(), default=0) / 1000:.1f} s "
            f"({ {p: g / 1000 for p, g in gaps.items()} } s)")
