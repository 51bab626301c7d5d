"""Producer streams run in client pods during a fault, and what is judged of them: shared by
the scenarios of the reference deployment and of the operator."""

from __future__ import annotations

import time

from kafkube.harness.kind.deployment import Brokers
from kafkube.harness.kind.history import Produced, read_produce
from kafkube.harness.kind.platform import KubectlError
from kafkube.harness.queue_checker import History
from kafkube.harness.waiting import WaitTimedOut, wait_until


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


def partitions_acked_since(brokers: Brokers, pod: str, since_ms: int) -> set[int]:
    """The partitions a running producer pod has had a record acknowledged on at or after
    ``since_ms`` (unix ms; the kind nodes share the host's clock)."""
    produced = read_produce(brokers.logs(pod), History())  # a throwaway history
    return {p for p, times in produced.ack_times.items() if times and max(times) >= since_ms}


def end_stream(brokers: Brokers, pod: str, partitions: int, timeout: float = 120,
               finish_timeout: float = 60) -> None:
    """End a stream once the fault is over: as soon as every one of the topic's
    ``partitions`` has had a record acknowledged after this call, the producer is asked to
    stop (SIGTERM: workload.py stops sending, flushes and prints its totals). A stream
    sized for the slowest fault would otherwise run on for minutes after a quick one; its
    ``--count`` and ``--seconds`` stay the bound if the cluster never takes writes again."""
    since_ms = int(time.time() * 1000)

    def over() -> bool:
        return brokers.phase(pod) in ("Succeeded", "Failed") or len(
            partitions_acked_since(brokers, pod, since_ms)) >= partitions

    wait_until(over, timeout, f"every one of {partitions} partitions written to after the "
               "fault", 1.0)
    try:
        brokers.kubectl("exec", pod, "--", "python3", "-c",
                        "import os, signal; os.kill(1, signal.SIGTERM)", timeout=60)
    except KubectlError as refused:
        # The producer may have reached its --count meanwhile: its container is gone ("container
        # not found") before the kubelet reports the pod's phase, so give the phase time to
        # follow before judging the exec's failure a real one.
        try:
            wait_until(lambda: brokers.phase(pod) in ("Succeeded", "Failed"), finish_timeout,
                       f"producer pod {pod} finished after an exec into it failed", 1.0)
        except WaitTimedOut:
            raise refused from None


def unwritable(produced: Produced, led: list[int]) -> str:
    """How long the partitions a killed broker led went without an acknowledgement."""
    gaps = produced.longest_gap_ms(led)
    return (f"partitions it led {led} unwritable for at most "
            f"{max(gaps.values(), default=0) / 1000:.1f} s "
            f"({ {p: g / 1000 for p, g in gaps.items()} } s)")
