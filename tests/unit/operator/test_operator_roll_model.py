"""The rolling restart's order and gate (kafkube_operator.model.roll): one pod at a time,
never a partition below min.insync.replicas (with Strimzi's RF <= min ISR exception), the
controller last, stuck pods restarted anyway."""

from __future__ import annotations

import pytest

from kafkube_contract.image import ImageView, PartitionState, TopicMetadata
from kafkube_operator.model.roll import PodState, next_restart, pod_state

TOPIC_ID = "5f0c2e1a-8a8b-4c1e-9b5e-2b7e0c1d2a3b"


def image(*partitions: tuple[tuple[int, ...], tuple[int, ...]], topic: str = "t") -> ImageView:
    states = tuple(PartitionState(r, isr, isr[0] if isr else -1) for r, isr in partitions)
    return ImageView({topic: TopicMetadata(topic, TOPIC_ID, {}, states)})


def pods(outdated: set[int], ready: set[int] | None = None, stuck: set[int] = frozenset(),
         n: int = 3) -> list[PodState]:
    ready = set(range(n)) if ready is None else ready
    return [PodState(b, f"k-{b}", f"uid-{b}", b in outdated, b in ready, b in stuck)
            for b in range(n)]


def min_isr_2(_: str) -> int:
    return 2


WHOLE = image(((0, 1, 2), (0, 1, 2)), ((1, 2, 0), (1, 2, 0)), ((2, 0, 1), (2, 0, 1)))


def test_nothing_to_do_when_every_pod_runs_the_current_revision() -> None:
    step = next_restart(pods(set()), WHOLE, min_isr_2, controller=1)
    assert (step.restart, step.waiting, step.pending) == (None, None, 0)


def test_one_at_a_time_in_broker_order_with_the_controller_last() -> None:
    step = next_restart(pods({0, 1, 2}), WHOLE, min_isr_2, controller=0)
    assert step.restart is not None and step.restart.broker == 1 and step.pending == 3
    # Broker 1 restarting: its pod is not ready, its partitions are short of one replica.
    short = image(((0, 1, 2), (0, 2)), ((1, 2, 0), (2, 0)), ((2, 0, 1), (2, 0)))
    step = next_restart(pods({0, 2}, ready={0, 2}), short, min_isr_2, controller=0)
    assert step.restart is None and "k-1" in step.waiting
    step = next_restart(pods({0, 2}), short, min_isr_2, controller=0, last_restarted=1)
    assert step.restart is None and "broker 1 to rejoin the ISR of 3" in step.waiting
    # Caught up: broker 2 next, the controller (0) after it.
    step = next_restart(pods({0, 2}), WHOLE, min_isr_2, controller=0, last_restarted=1)
    assert step.restart.broker == 2
    step = next_restart(pods({0}), WHOLE, min_isr_2, controller=0, last_restarted=2)
    assert step.restart.broker == 0 and step.pending == 1
    # The controller was the last: the roll is done only once it is ready and back in every
    # ISR (else the preferred-leader election that follows would leave its partitions out).
    back = image(((0, 1, 2), (1, 2)), ((1, 2, 0), (1, 2)), ((2, 0, 1), (2, 1)))
    step = next_restart(pods(set(), ready={1, 2}), back, min_isr_2, controller=1,
                        last_restarted=0)
    assert (step.restart, step.pending) == (None, 0) and "k-0" in step.waiting
    step = next_restart(pods(set()), back, min_isr_2, controller=1, last_restarted=0)
    assert "broker 0 to rejoin the ISR of 3" in step.waiting
    step = next_restart(pods(set()), WHOLE, min_isr_2, controller=1, last_restarted=0)
    assert (step.restart, step.waiting, step.pending) == (None, None, 0)
    # Another pod not ready (a scaled-up one stuck Pending) does not hold the roll's end.
    step = next_restart(pods(set(), ready={0, 1}), WHOLE, min_isr_2, controller=1,
                        last_restarted=0)
    assert (step.restart, step.waiting, step.pending) == (None, None, 0)


def test_a_broker_whose_restart_takes_a_partition_below_min_isr_waits() -> None:
    # Broker 2 is out of the ISR of p0 for good (a slow disk): restarting 0 or 1 would leave
    # p0 with one in-sync replica, below min ISR 2. Broker 2 itself is not in p0's ISR.
    stuck_follower = image(((0, 1, 2), (0, 1)))
    assert next_restart(pods({0, 1}), stuck_follower, min_isr_2, None).waiting is not None
    step = next_restart(pods({0, 1}), stuck_follower, lambda _: 1, None)  # min ISR 1: fine
    assert step.restart is not None and step.restart.broker == 0


def test_a_follower_out_of_sync_for_other_reasons_does_not_stall_the_roll() -> None:
    # p0's follower 2 lags (not restarted by the roll): 2 may restart, 0 and 1 may not.
    lagging = image(((0, 1, 2), (0, 1)), ((1, 2, 0), (1, 2, 0)))
    step = next_restart(pods({0, 1, 2}), lagging, min_isr_2, None)
    assert step.restart is not None and step.restart.broker == 2


@pytest.mark.parametrize("rf", [1, 2])
def test_partitions_with_rf_at_most_min_isr_do_not_block(rf: int) -> None:
    """Strimzi's exception: such a partition goes below min ISR with any restart."""
    replicas = tuple(range(rf))
    topics = image((replicas, replicas))
    step = next_restart(pods({0}), topics, min_isr_2, None)
    assert step.restart is not None and step.restart.broker == 0


def test_min_isr_is_read_per_topic() -> None:
    topics = image(((0, 1, 2, 3), (0, 1, 2)), topic="critical")
    step = next_restart(pods({0}, n=4), topics, lambda t: 3 if t == "critical" else 2, None)
    assert step.restart is None and "critical-0" in step.waiting
    assert next_restart(pods({0}, n=4), topics, min_isr_2, None).restart is not None


def test_a_stuck_pod_is_restarted_even_while_others_are_not_ready() -> None:
    step = next_restart(pods({0, 2}, ready={0}, stuck={2}), WHOLE, min_isr_2, controller=2)
    assert step.restart is not None and step.restart.broker == 2


def test_pod_state_reads_revision_readiness_and_stuck_reasons() -> None:
    pod = {"metadata": {"name": "orders-4", "uid": "u",
                        "labels": {"controller-revision-hash": "orders-abc"}},
           "status": {"conditions": [{"type": "Ready", "status": "True"}],
                      "containerStatuses": [{"state": {"running": {}}}]}}
    assert pod_state(pod, "orders-abc") == PodState(4, "orders-4", "u", False, True, False)
    assert pod_state(pod, "orders-def").outdated
    crashing = {**pod, "status": {"containerStatuses": [
        {"state": {"waiting": {"reason": "CrashLoopBackOff"}}}]}}
    assert pod_state(crashing, "orders-def").stuck and not pod_state(crashing, "x").ready
    pending = {**pod, "status": {"phase": "Pending", "conditions": [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]}}
    assert pod_state(pending, "orders-def").stuck
    # Issue 27: a sidecar waiting on its image is no reason to restart the broker regardless.
    sidecar = {**pod, "status": {**pod["status"], "containerStatuses": [
        {"name": "broker", "state": {"running": {}}},
        {"name": "istio-proxy", "state": {"waiting": {"reason": "ImagePullBackOff"}}}]}}
    assert not pod_state(sidecar, "orders-abc").stuck
    # No update revision known (no controller-manager yet): nothing is outdated.
    assert not pod_state(pod, None).outdated


def test_a_lowered_min_isr_gates_the_roll_only_once_every_broker_runs_it() -> None:
    """Issue 27: min ISR 3 -> 2 while brokers not yet restarted still enforce 3."""
    from kafkube_operator.model.roll import roll_min_isr

    assert roll_min_isr(2, 3, rolling=True) == 3
    assert roll_min_isr(2, 3, rolling=False) == 2
    assert roll_min_isr(3, 2, rolling=True) == 3  # raised: the new one is the higher
    assert roll_min_isr(2, None, rolling=True) == 2
