"""A KafkaRebalance's flow (reconcile/rebalance.py) with the cluster faked: an approved
proposal waits while another move runs and keeps its approval, is planned again when its
partitions moved meanwhile, else starts under the throttle; a running one is followed to
Ready (preferred leaders elected, throttle removed) or stopped (moves cancelled); no
cluster is NotReady with a Warning."""

from __future__ import annotations

from typing import Any

import pytest

from kafkube_contract.image import ImageView, PartitionState, TopicMetadata
from kafkube_contract.registration import BrokerRegistration
from kafkube_operator.reconcile import rebalance
from kafkube_operator.reconcile.views import ClusterMemory, TrustedImage

TOPIC_ID = "5f0c2e1a-8a8b-4c1e-9b5e-2b7e0c1d2a3b"
CLUSTER = {"apiVersion": "kafkube.io/v1alpha1", "kind": "KafkaCluster",
           "metadata": {"name": "c", "namespace": "ns", "uid": "u"},
           "spec": {"rebalance": {"throttleBytesPerSecond": 4096}}}
MOVES = [{"topic": "t", "partition": 0, "from": [0, 1], "to": [2, 1]}]


def image(*states: PartitionState) -> ImageView:
    return ImageView({"t": TopicMetadata("t", TOPIC_ID, {}, states)})


class Recorder:
    """The fakes' calls, in order: ``(name, args)``."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple]] = []

    def __getattr__(self, name: str) -> Any:
        return lambda *args, **_: self.calls.append((name, args))


class FakeKube(Recorder):
    def __init__(self, *objects: dict) -> None:
        super().__init__()
        self.objects = list(objects)

    def get(self, _api: str, kind: str, name: str, _ns: str) -> dict | None:
        return next((o for o in self.objects if o["kind"] == kind
                     and o["metadata"]["name"] == name), None)

    def list(self, _api: str, kind: str, _ns: str) -> list[dict]:
        return [o for o in self.objects if o["kind"] == kind]


class FakeView:
    def live_brokers(self) -> dict[int, BrokerRegistration]:
        return {b: BrokerRegistration(b, "127.0.0.1", 9092, "abc"[b]) for b in range(3)}


class FakeViews:
    def of(self, _ref: Any) -> FakeView:
        return FakeView()

    def memory(self, _ref: Any) -> ClusterMemory:
        return ClusterMemory()


def resource(state: str, annotation: str | None = None, name: str = "r") -> dict:
    meta: dict = {"name": name, "namespace": "ns", "generation": 1}
    if annotation:
        meta["annotations"] = {rebalance.ANNOTATION: annotation}
    return {"apiVersion": "kafkube.io/v1alpha1", "kind": "KafkaRebalance", "metadata": meta,
            "spec": {"cluster": "c"},
            "status": {"state": state, "observedGeneration": 1,
                       "proposal": {"partitions": 1, "moves": MOVES}}}


@pytest.fixture
def admin(monkeypatch: pytest.MonkeyPatch) -> Recorder:
    fake = Recorder()
    monkeypatch.setattr(rebalance, "cluster_admin", lambda *_: fake)
    return fake


def run(monkeypatch: pytest.MonkeyPatch, kube: FakeKube, current: ImageView,
        r: dict) -> dict:
    monkeypatch.setattr(rebalance, "trusted_image",
                        lambda *_: TrustedImage(current, "id"))
    return rebalance.reconcile_rebalance(kube, FakeViews(), Recorder(), r, Recorder())


def test_an_approved_proposal_waits_for_another_move_keeping_its_approval(
        monkeypatch: pytest.MonkeyPatch, admin: Recorder) -> None:
    kube = FakeKube(CLUSTER, resource("Rebalancing", name="other"))
    status = run(monkeypatch, kube, image(PartitionState((0, 1), (0, 1), 0)),
                 resource("ProposalReady", "approve"))
    assert status["state"] == "ProposalReady"
    assert status["conditions"][0]["reason"] == "Approved"
    assert "KafkaRebalance other is running" in status["conditions"][0]["message"]
    assert admin.calls == [] and kube.calls == []  # nothing sent, the annotation kept


def test_an_approved_proposal_whose_partitions_moved_is_planned_again(
        monkeypatch: pytest.MonkeyPatch, admin: Recorder) -> None:
    kube = FakeKube(CLUSTER)
    status = run(monkeypatch, kube, image(PartitionState((1, 2), (1, 2), 1)),
                 resource("ProposalReady", "approve"))
    assert status["state"] == "New" and status["conditions"][0]["reason"] == \
        "ProposalOutdated"
    assert [c[0] for c in kube.calls] == ["merge_patch"] and admin.calls == []


def test_an_approved_proposal_starts_under_the_clusters_throttle(
        monkeypatch: pytest.MonkeyPatch, admin: Recorder) -> None:
    kube = FakeKube(CLUSTER)
    status = run(monkeypatch, kube, image(PartitionState((0, 1), (0, 1), 0)),
                 resource("ProposalReady", "approve"))
    assert status["state"] == "Rebalancing"
    assert status["progress"] == {"partitions": 1, "partitionsDone": 0, "partitionsMoving": 1}
    (throttle, rate_args), (reassign, reassign_args) = admin.calls
    assert throttle == "throttle" and rate_args[0] == 4096
    assert rate_args[2] == {"t": {"leader.replication.throttled.replicas": "0:0,0:1",
                                  "follower.replication.throttled.replicas": "0:2"}}
    assert reassign == "reassign" and reassign_args == ({("t", 0): (2, 1)},)


def test_a_running_rebalance_ends_ready_with_leaders_elected_and_no_throttle(
        monkeypatch: pytest.MonkeyPatch, admin: Recorder) -> None:
    kube = FakeKube(CLUSTER)
    moving = image(PartitionState((2, 1, 0), (0, 1), 0, adding=(2,), removing=(0,)))
    status = run(monkeypatch, kube, moving, resource("Rebalancing"))
    assert status["state"] == "Rebalancing" and admin.calls == []
    status = run(monkeypatch, kube, image(PartitionState((2, 1), (2, 1), 1)),
                 resource("Rebalancing"))
    assert status["state"] == "Ready"
    assert [c[0] for c in admin.calls] == ["elect_preferred", "throttle"]
    assert admin.calls[0][1] == ((("t", 0),),)
    assert admin.calls[1][1][0] is None  # the rate removed


def test_stop_cancels_the_moves_still_running(monkeypatch: pytest.MonkeyPatch,
                                              admin: Recorder) -> None:
    kube = FakeKube(CLUSTER)
    moving = image(PartitionState((2, 1, 0), (0, 1), 0, adding=(2,), removing=(0,)))
    status = run(monkeypatch, kube, moving, resource("Rebalancing", "stop"))
    assert status["state"] == "Stopped"
    assert [c[0] for c in admin.calls] == ["cancel_reassignments", "throttle"]
    assert admin.calls[0][1] == ([("t", 0)],)
    assert [c[0] for c in kube.calls] == ["merge_patch"]  # the annotation removed


def test_no_cluster_is_not_ready_with_a_warning(monkeypatch: pytest.MonkeyPatch,
                                                admin: Recorder) -> None:
    status = run(monkeypatch, FakeKube(), image(), resource("New"))
    assert status["state"] == "NotReady"
    assert [(c["type"], c["reason"]) for c in status["conditions"]] == [
        ("NotReady", "ClusterNotFound"), ("Warning", "ClusterNotFound")]
