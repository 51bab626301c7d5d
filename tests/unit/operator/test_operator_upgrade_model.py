"""Upgrades of kafkube itself, the pure decisions (kafkube_operator.model.upgrade): a new
spec.image is probed before it is rolled out onto a cluster that finalized
kafkube.metadata.version above 1 and held back when it is too old (every other change still
applied); the level is raised or lowered only once the roll is over."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kafkube_contract.features import METADATA_VERSION
from kafkube_operator.model.cluster import ClusterRef, desired_cluster, selector, stateful_set
from kafkube_operator.model.status import SpecWarning
from kafkube_operator.model.upgrade import (
    FINALIZING,
    HELD_BACK,
    PROBING,
    ROLLING,
    ImageDecision,
    LevelChange,
    ProbeReading,
    decide_image,
    deployed_image,
    level_change,
    probe_pod,
    read_probe,
    roll_waiting,
    supported_highest,
    upgrade_status,
    with_image,
)

REF = ClusterRef("prod", "kafka", "uid-1")
POD = "prod-image-probe"
OLD, NEW = "kafkube:old", "kafkube:new"
FEATURES = json.dumps({"supported_features": {METADATA_VERSION: [1, 2],
                                              "group.version": [0, 1]}})


def probe(state: dict | None = None, phase: str = "Pending", image: str = NEW,
          conditions: list | None = None, deleting: bool = False) -> dict:
    """A probe pod as the API returns it; ``state``: its container's state."""
    meta: dict = {"name": POD, "uid": "p-1", "annotations": {"kafkube.io/probed-image": image}}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    status: dict = {"phase": phase, "conditions": conditions or []}
    if state is not None:
        status["containerStatuses"] = [{"name": "probe", "state": state}]
    return {"metadata": meta, "spec": {"containers": [{"name": "probe", "image": image}]},
            "status": status}


def terminated(code: int, message: str = "") -> dict:
    return {"terminated": {"exitCode": code, "message": message,
                           "reason": "Completed" if code == 0 else "Error"}}


def decide(finalized: int = 2, probe_pod_: dict | None = None, known: int | None = None,
           deployed: str | None = OLD, wanted: str = NEW) -> ImageDecision:
    reading = read_probe(probe_pod_) if probe_pod_ is not None else None
    return decide_image(wanted, deployed, finalized, known, reading, POD)


# The image: probed, rolled out or held back.

def test_no_probe_for_a_new_cluster_the_same_image_or_a_level_every_kafkube_reads() -> None:
    for decision in (decide(deployed=None), decide(deployed=NEW), decide(finalized=1),
                     decide(finalized=0)):
        assert (decision.image, decision.phase, decision.warning) == (NEW, None, None)
        assert not decision.create_probe and not decision.delete_probe
    # A probe left from before (the image was changed back) is deleted.
    assert decide(deployed=NEW, probe_pod_=probe()).delete_probe


def test_a_new_image_is_probed_while_the_brokers_keep_theirs() -> None:
    decision = decide()
    assert decision.create_probe and decision.image == OLD and decision.held
    assert decision.phase == PROBING and decision.warning is None
    assert f"probing spec.image {NEW} (pod {POD})" in decision.message
    running = decide(probe_pod_=probe({"running": {}}, phase="Running"))
    assert (running.image, running.phase, running.create_probe) == (OLD, PROBING, False)
    assert not running.delete_probe


def test_a_probe_of_another_image_is_replaced_and_one_being_deleted_awaited() -> None:
    other = decide(probe_pod_=probe(image="kafkube:other"))
    assert other.delete_probe and not other.create_probe and other.image == OLD
    gone = decide(probe_pod_=probe(image="kafkube:other", deleting=True))
    assert not gone.delete_probe and not gone.create_probe and gone.phase == PROBING


@pytest.mark.parametrize("reason", ["ErrImageNeverPull", "ImagePullBackOff", "ErrImagePull",
                                    "CreateContainerConfigError", "InvalidImageName"])
def test_a_probe_that_cannot_start_is_a_warning_with_its_reason(reason: str) -> None:
    decision = decide(probe_pod_=probe({"waiting": {"reason": reason, "message": "no"}}))
    assert decision.image == OLD and decision.phase == PROBING
    assert decision.warning is not None and decision.warning.reason == reason
    assert decision.warning.message == (
        f"spec.image {NEW} not rolled out: its probe pod {POD} cannot start ({reason}: no); "
        f"the brokers keep {OLD}")
    assert not decision.delete_probe  # the kubelet keeps trying; it goes on by itself


def test_an_unschedulable_probe_is_a_warning() -> None:
    pending = probe(conditions=[{"type": "PodScheduled", "status": "False",
                                 "reason": "Unschedulable", "message": "0/3 nodes"}])
    decision = decide(probe_pod_=pending)
    assert decision.warning is not None and decision.warning.reason == "Unschedulable"
    assert "0/3 nodes" in decision.warning.message and decision.image == OLD


def test_an_image_that_supports_the_finalized_level_is_rolled_out() -> None:
    decision = decide(probe_pod_=probe(terminated(0, FEATURES), phase="Succeeded"))
    assert (decision.image, decision.phase, decision.verdict) == (NEW, None, 2)
    assert decision.delete_probe and decision.warning is None
    # Remembered: no probe again for that image.
    again = decide(known=2)
    assert (again.image, again.create_probe, again.verdict) == (NEW, False, None)


def test_an_older_kafkube_without_the_command_is_held_back() -> None:
    usage = "usage: kafkube ...\nkafkube: error: argument command: invalid choice: 'features'"
    decision = decide(probe_pod_=probe(terminated(2, usage), phase="Failed"))
    assert (decision.image, decision.phase, decision.verdict) == (OLD, HELD_BACK, 1)
    assert decision.delete_probe and decision.held
    assert decision.warning == SpecWarning("ImageTooOld", (
        f"spec.image {NEW} supports kafkube.metadata.version up to 1, but the cluster "
        "finalized 2: not rolled out; an image rollback is possible only before finalizing "
        "(set spec.metadataVersion: 1 first to lower it)"))
    # Remembered: still held on the next passes, without a probe.
    assert decide(known=1).warning == decision.warning
    # Lowered meanwhile: the same image rolls.
    assert decide(finalized=1, known=1).image == NEW


def test_a_newer_level_than_the_image_supports_holds_it_back() -> None:
    decision = decide(finalized=3, probe_pod_=probe(terminated(0, FEATURES), "Succeeded"))
    assert decision.image == OLD and decision.warning.reason == "ImageTooOld"
    assert "supports kafkube.metadata.version up to 2, but the cluster finalized 3" in \
        decision.warning.message


def test_a_probe_ended_without_an_answer_is_made_again_or_reported() -> None:
    evicted = {"metadata": {"name": POD, "annotations": {"kafkube.io/probed-image": NEW}},
               "status": {"phase": "Failed", "reason": "Evicted"}}
    decision = decide(probe_pod_=evicted)
    assert decision.delete_probe and decision.image == OLD and decision.warning is None
    garbled = decide(probe_pod_=probe(terminated(0, "hello"), phase="Succeeded"))
    assert garbled.warning is not None and garbled.warning.reason == "ImageProbeFailed"
    assert garbled.image == OLD and not garbled.delete_probe
    # Killed (its memory limit) or not a kafkube at all: no answer, never taken for an
    # older kafkube (only argparse's exit 2 for an unknown command says that).
    killed = probe({"terminated": {"exitCode": 137, "reason": "OOMKilled"}}, phase="Failed")
    oom = decide(probe_pod_=killed)
    assert oom.warning is not None and oom.warning.reason == "ImageProbeFailed"
    assert "exit 137 OOMKilled" in oom.warning.message and oom.verdict is None
    assert oom.image == OLD


def test_the_termination_message_is_read_from_its_last_json_line() -> None:
    assert supported_highest(FEATURES) == 2
    assert supported_highest(f"starting\n{FEATURES}\n") == 2
    assert supported_highest(json.dumps({"supported_features": {}})) == 0
    assert supported_highest("") is None
    assert supported_highest('{"supported_features": {"kafkube.metadata.version": "2"}}') \
        is None
    assert read_probe(probe()).state == "running"


@given(spec=st.sampled_from([OLD, NEW, "kafkube:other"]),
       deployed=st.sampled_from([None, OLD, NEW]),
       finalized=st.integers(0, 4), known=st.none() | st.integers(0, 4),
       state=st.sampled_from([None, "running", "supports", "stuck", "failed", "unreadable"]),
       probed=st.sampled_from([OLD, NEW, "kafkube:other"]), highest=st.integers(0, 4),
       deleting=st.booleans())
def test_the_brokers_only_ever_get_an_image_known_to_read_the_cluster(
        spec: str, deployed: str | None, finalized: int, known: int | None, state: str | None,
        probed: str, highest: int, deleting: bool) -> None:
    reading = None if state is None else ProbeReading(
        probed, state, highest if state == "supports" else None, reason="ErrImagePull",
        deleting=deleting)
    decision = decide_image(spec, deployed, finalized, known, reading, POD)
    found = known if known is not None else (
        highest if reading is not None and state == "supports" and probed == spec
        and not deleting else None)
    fits = deployed is None or spec == deployed or finalized <= 1 or \
        (found is not None and found >= finalized)
    assert decision.image == (spec if fits else deployed)
    assert (decision.phase is None) == fits
    assert not (decision.create_probe and reading is not None)  # one probe at a time
    assert not (decision.delete_probe and (reading is None or deleting))
    if decision.warning is not None:
        assert decision.held and decision.warning.message == decision.message


def test_the_probe_pod_is_placed_as_the_brokers_and_is_no_broker() -> None:
    spec = {"image": OLD}
    sts = stateful_set(REF, spec, "")
    sts["spec"]["template"]["spec"]["nodeSelector"] = {"pool": "kafka"}
    sts["spec"]["template"]["spec"]["tolerations"] = [{"key": "kafka", "operator": "Exists"}]
    pod = probe_pod(REF, sts, NEW)
    template = sts["spec"]["template"]["spec"]
    assert pod["metadata"]["name"] == POD and pod["metadata"]["namespace"] == "kafka"
    assert pod["metadata"]["annotations"] == {"kafkube.io/probed-image": NEW}
    assert pod["metadata"]["ownerReferences"][0]["uid"] == "uid-1"
    labels = pod["metadata"]["labels"]
    assert labels["kafkube.io/cluster"] == "prod"
    assert not selector(REF).items() <= labels.items()  # never one of the brokers' pods
    for key in ("serviceAccountName", "securityContext", "nodeSelector", "tolerations"):
        assert pod["spec"][key] == template[key]
    assert pod["spec"]["restartPolicy"] == "Never"
    assert pod["spec"]["automountServiceAccountToken"] is False
    assert pod["spec"]["activeDeadlineSeconds"] == 300  # a probe stuck pulling ends
    (container,) = pod["spec"]["containers"]
    assert container["image"] == NEW
    assert container["args"] == ["features", "--termination-log", "/dev/termination-log"]
    assert container["imagePullPolicy"] == template["containers"][0]["imagePullPolicy"]
    assert container["resources"]["limits"]["memory"] == "128Mi"


def test_a_held_back_image_keeps_every_other_change_of_the_spec() -> None:
    resource = {"metadata": {"name": "prod", "namespace": "kafka", "uid": "uid-1"},
                "spec": {"image": NEW, "replicas": 3, "config": {"log.retention.ms": 1000},
                         "resources": {"limits": {"memory": "2Gi"}}}}
    (sts,) = desired_cluster(resource).by_kind("StatefulSet")
    held = with_image(sts, OLD)
    broker = held["spec"]["template"]["spec"]["containers"][0]
    assert broker["image"] == OLD and broker["resources"] == {"limits": {"memory": "2Gi"}}
    assert held["spec"]["template"]["metadata"] == sts["spec"]["template"]["metadata"]
    assert sts["spec"]["template"]["spec"]["containers"][0]["image"] == NEW  # not mutated
    assert with_image(sts, NEW) == sts


def test_the_deployed_image_is_the_statefulsets_or_while_it_is_remade_its_pods() -> None:
    sts = stateful_set(REF, {"image": OLD}, "")
    pod = {"metadata": {"name": "prod-0"},
           "spec": {"containers": [{"name": "broker", "image": NEW}]}}
    assert deployed_image(sts, [pod]) == OLD
    gone = {**sts, "metadata": {**sts["metadata"], "deletionTimestamp": "now"}}
    assert deployed_image(gone, [pod]) == NEW
    assert deployed_image(None, []) is None


# The level: raised or lowered once the roll is over.

def statefulset(generation: int = 2, observed: int = 2) -> dict:
    return {"metadata": {"name": "prod", "generation": generation},
            "status": {"observedGeneration": observed, "updateRevision": "r2"}}


def broker_pod(node: int, revision: str = "r2", ready: bool = True) -> dict:
    return {"metadata": {"name": f"prod-{node}", "labels": {
        "controller-revision-hash": revision}},
        "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}


def test_the_roll_is_over_when_every_pod_runs_the_revision_ready_and_registered() -> None:
    pods = [broker_pod(n) for n in range(3)]
    assert roll_waiting(statefulset(), pods, {0, 1, 2}, 3) is None
    assert roll_waiting(None, pods, {0, 1, 2}, 3) == "the StatefulSet"
    assert "take up the new template" in roll_waiting(statefulset(observed=1), pods,
                                                      {0, 1, 2}, 3)
    assert roll_waiting(statefulset(), pods[:2], {0, 1}, 3) == "3 broker pods (there are 2)"
    outdated = [broker_pod(0), broker_pod(1, revision="r1"), broker_pod(2)]
    assert "pod prod-1 to be restarted" in roll_waiting(statefulset(), outdated, {0, 1, 2}, 3)
    starting = [broker_pod(0), broker_pod(1), broker_pod(2, ready=False)]
    assert roll_waiting(statefulset(), starting, {0, 1, 2}, 3) == "pod prod-2 to be ready"
    assert roll_waiting(statefulset(), pods, {0, 2}, 3) == "brokers [1] to register"


NEW_RANGES = {METADATA_VERSION: (1, 2), "group.version": (0, 1)}
OLD_RANGES = {METADATA_VERSION: (1, 1)}


def test_unset_the_level_is_raised_to_the_highest_every_broker_supports() -> None:
    assert level_change(None, 1, {0: NEW_RANGES, 1: NEW_RANGES}, None, True) == \
        LevelChange(target=2)
    assert level_change(None, 0, {0: NEW_RANGES, 1: OLD_RANGES}, None, True) == \
        LevelChange(target=1)
    # Never lowered, nor raised while a broker runs an older kafkube or the roll goes on.
    assert level_change(None, 2, {0: OLD_RANGES}, None, True) == LevelChange()
    assert level_change(None, 1, {0: NEW_RANGES, 1: {}}, None, True) == LevelChange()
    assert level_change(None, 1, {0: NEW_RANGES}, "pod prod-1 to be ready", True) == \
        LevelChange(waiting="pod prod-1 to be ready")
    assert level_change(None, 1, {0: NEW_RANGES}, None, False).target is None
    assert level_change(None, 1, {}, None, True).target is None


def test_set_the_level_is_raised_or_lowered_to_exactly_it() -> None:
    announced = {0: NEW_RANGES, 1: NEW_RANGES}
    assert level_change(2, 1, announced, None, True) == LevelChange(target=2, wanted=2)
    assert level_change(1, 2, announced, None, True) == \
        LevelChange(target=1, downgrade=True, wanted=1)
    assert level_change(2, 2, announced, None, True) == LevelChange(wanted=2)
    assert level_change(1, 2, announced, "pod prod-0 to be ready", True).target is None
    # Lowering is what lets a held-back image roll; raising waits for spec.image.
    assert level_change(1, 2, announced, None, False).target == 1
    assert level_change(2, 1, announced, None, False).waiting == "spec.image to be rolled out"


def test_a_level_some_broker_does_not_support_is_a_warning_naming_it() -> None:
    change = level_change(2, 1, {0: NEW_RANGES, 1: OLD_RANGES, 2: {}}, None, True)
    assert change.target is None and change.warning is not None
    assert change.warning.reason == "MetadataVersionUnsupported"
    assert change.warning.message == (
        "spec.metadataVersion 2 not applied (kafkube.metadata.version stays 1): broker 1 "
        "supports kafkube.metadata.version 1-1; broker 2 runs an older kafkube that "
        "announces no supported features")


@given(current=st.integers(0, 3), wanted=st.none() | st.integers(1, 3),
       highs=st.lists(st.integers(1, 3), min_size=1, max_size=4))
def test_a_level_change_is_always_one_every_broker_supports(
        current: int, wanted: int | None, highs: list[int]) -> None:
    announced = {n: {METADATA_VERSION: (1, high)} for n, high in enumerate(highs)}
    change = level_change(wanted, current, announced, None, True)
    if change.target is not None:
        assert change.target != current and change.target <= min(highs)
        assert change.downgrade == (change.target < current)
        assert wanted is not None or change.target > current  # never lowered unasked


def test_the_upgrade_status_says_which_step_is_under_way() -> None:
    probing = decide()
    assert upgrade_status(probing, {}, LevelChange(), 2) == {
        "image": NEW, "phase": PROBING, "message": probing.message}
    rolled = decide(known=2)
    images = {"prod-0": NEW, "prod-1": OLD, "prod-2": OLD}
    assert upgrade_status(rolled, images, LevelChange(), 2) == {
        "image": NEW, "phase": ROLLING, "message": f"1/3 broker pods run {NEW}; next: prod-1"}
    done = dict.fromkeys(images, NEW)
    assert upgrade_status(rolled, done, LevelChange(target=3), 2) == {
        "image": NEW, "phase": FINALIZING,
        "message": "raising kafkube.metadata.version from 2 to 3"}
    waiting = LevelChange(waiting="pod prod-0 to be ready", wanted=1)
    assert upgrade_status(rolled, done, waiting, 2)["phase"] == ROLLING
    assert upgrade_status(rolled, done, LevelChange(), 2) is None
    held = decide(known=1)
    assert upgrade_status(held, done, LevelChange(), 2)["phase"] == HELD_BACK
