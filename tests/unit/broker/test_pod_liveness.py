"""What counts as a broker's pod showing its process gone (broker/cluster/pod_liveness.py):
only a container end after the registration, a replaced or deleted pod, a finished pod."""

from __future__ import annotations

import datetime as dt

from kubernetes import client as k8s

from broker.cluster.pod_liveness import PodRef, process_ended

REF = PodRef("kafkube-1", "uid-1", "broker")
REGISTERED = dt.datetime(2026, 11, 25, 12, 0, 0, 400_000, tzinfo=dt.UTC)
REGISTERED_MS = int(REGISTERED.timestamp() * 1000)


def terminated(at: dt.datetime, code: int = 137) -> k8s.V1ContainerState:
    return k8s.V1ContainerState(terminated=k8s.V1ContainerStateTerminated(
        exit_code=code, reason="Error", finished_at=at.replace(microsecond=0)))


RUNNING = k8s.V1ContainerState(running=k8s.V1ContainerStateRunning(started_at=REGISTERED))


def pod(*containers: k8s.V1ContainerStatus, uid: str = "uid-1", phase: str = "Running",
        reason: str | None = None) -> k8s.V1Pod:
    return k8s.V1Pod(metadata=k8s.V1ObjectMeta(name=REF.name, uid=uid),
                     status=k8s.V1PodStatus(phase=phase, reason=reason,
                                            container_statuses=list(containers)))


def container(state: k8s.V1ContainerState, last: k8s.V1ContainerState | None = None,
              name: str = "broker", restarts: int = 0) -> k8s.V1ContainerStatus:
    return k8s.V1ContainerStatus(name=name, image="kafkube", image_id="", ready=False,
                                 restart_count=restarts, state=state, last_state=last)


def ended(p: k8s.V1Pod | None, gone_uid: str | None = None) -> str | None:
    return process_ended(REF, REGISTERED_MS, p, gone_uid)


LATER = REGISTERED + dt.timedelta(seconds=3)


def test_a_running_broker_is_not_ended() -> None:
    assert ended(pod(container(RUNNING))) is None


def test_its_container_terminated_after_the_registration_ends_it() -> None:
    reason = ended(pod(container(terminated(LATER))))
    assert reason is not None and "exit code 137" in reason and "kafkube-1" in reason


def test_a_restarted_container_ends_the_process_that_registered_before_the_restart() -> None:
    reason = ended(pod(container(RUNNING, last=terminated(LATER), restarts=1)))
    assert reason is not None and "restarted 1 times" in reason


def test_an_end_before_the_registration_is_a_previous_process() -> None:
    """The process now registered started after that container ended."""
    earlier = REGISTERED - dt.timedelta(seconds=5)
    assert ended(pod(container(RUNNING, last=terminated(earlier), restarts=1))) is None


def test_an_end_in_the_registration_second_is_left_to_the_lease() -> None:
    """finishedAt is truncated to the second: 12:00:00 may be before 12:00:00.400."""
    assert ended(pod(container(terminated(REGISTERED)))) is None


def test_another_container_of_the_pod_ending_is_not_the_broker() -> None:
    assert ended(pod(container(RUNNING), container(terminated(LATER), name="sidecar"))) is None


def test_a_deleted_or_replaced_pod_ends_it() -> None:
    assert ended(None, gone_uid="uid-1") == "pod kafkube-1 was deleted"
    assert "replaced" in (ended(pod(container(RUNNING), uid="uid-2")) or "")
    # The StatefulSet made it again under the same name before we saw the deletion's event.
    assert ended(pod(container(RUNNING), uid="uid-2"), gone_uid="uid-1") is not None


def test_a_pod_missing_from_the_list_is_no_evidence() -> None:
    """No pod of that name, never seen deleted: a label typo must not fence every broker."""
    assert ended(None) is None
    assert ended(None, gone_uid="uid-0") is None  # an earlier pod of that name


def test_a_failed_pod_ends_it() -> None:
    reason = ended(pod(container(RUNNING), phase="Failed", reason="Evicted"))
    assert reason == "pod kafkube-1 is Failed (Evicted)"


def test_a_pod_without_status_yet_is_no_evidence() -> None:
    assert ended(k8s.V1Pod(metadata=k8s.V1ObjectMeta(name=REF.name, uid="uid-1"))) is None
