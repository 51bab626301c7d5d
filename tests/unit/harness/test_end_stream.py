"""end_stream and a producer that finishes on its own meanwhile: its container is gone before
the kubelet reports the pod's phase, so the SIGTERM's exec fails with "container not found"
while the pod still reads Running. That is a stream that ended, not an error (the failure of
a CI run at c31ac65). A scripted stand-in for the client pods: the race is the kubelet's and
cannot be produced on demand on a real cluster."""

from __future__ import annotations

import time

import pytest

from kafkube.harness.kind.platform import KubectlError
from kafkube.harness.kind.streams import end_stream


class ProducerPod:
    """One client pod whose container exits before its phase turns Succeeded."""

    def __init__(self, phases: list[str]) -> None:
        self.phases = phases
        now = int(time.time() * 1000) + 1000
        self.lines = [f"A {i} {i % 2} {i // 2} {now}" for i in range(4)]

    def phase(self, pod: str) -> str:
        return self.phases.pop(0) if len(self.phases) > 1 else self.phases[0]

    def logs(self, pod: str) -> list[str]:
        return self.lines

    def kubectl(self, *args: str, **kw) -> str:
        raise KubectlError(list(args), 1, "", 'unable to upgrade connection: container not '
                           'found ("client")')


def test_an_exec_refused_because_the_producer_just_finished_ends_the_stream() -> None:
    # phases read: the wait for writes (Running), then after the refused exec Running
    # once more (the kubelet has not caught up), then Succeeded.
    end_stream(ProducerPod(["Running", "Running", "Succeeded"]), "client-1", partitions=2)


def test_an_exec_refused_into_a_producer_that_keeps_running_is_an_error() -> None:
    with pytest.raises(KubectlError, match="container not found"):
        end_stream(ProducerPod(["Running"]), "client-1", partitions=2, timeout=5,
                   finish_timeout=2)
