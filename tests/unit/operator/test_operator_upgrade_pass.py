"""Upgrades of kafkube itself, the acting part (kafkube_operator.reconcile.upgrade) with the
API server and the cluster faked: the probe pod made, read, remembered and deleted; a
held-back image applied with every other change of the spec; the level changed through
UpdateFeatures once the roll is over, a refusal reported once and tried again."""

from __future__ import annotations

import json
from typing import Any

import pytest

from kafkube_contract.features import METADATA_VERSION
from kafkube_contract.image import ImageView
from kafkube_contract.registration import BrokerRegistration, feature_tuples
from kafkube_operator.kafka import KafkaRefused
from kafkube_operator.model.cluster import ClusterRef, stateful_set
from kafkube_operator.reconcile import upgrade
from kafkube_operator.reconcile.cluster_apply import apply_cluster
from kafkube_operator.reconcile.snapshot import ClusterSnapshot
from kafkube_operator.reconcile.views import ClusterMemory, TrustedImage

OLD, NEW = "kafkube:old", "kafkube:new"
RESOURCE = {"apiVersion": "kafkube.io/v1alpha1", "kind": "KafkaCluster",
            "metadata": {"name": "prod", "namespace": "kafka", "uid": "uid-1",
                         "generation": 2},
            "spec": {"replicas": 2, "image": NEW}}
REF = ClusterRef.of(RESOURCE)
FEATURES = json.dumps({"supported_features": {METADATA_VERSION: [1, 2]}})


class Events:
    def __init__(self) -> None:
        self.posted: list[tuple[str, str, str]] = []

    def info(self, reason: str, message: str) -> None:
        self.posted.append(("Normal", reason, message))

    def warning(self, reason: str, message: str) -> None:
        self.posted.append(("Warning", reason, message))

    def reasons(self) -> list[str]:
        return [reason for _, reason, _ in self.posted]


class FakeKube:
    """Objects by (kind, name); apply stores, delete removes."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str], dict] = {}
        self.deleted: list[tuple[str, str, str | None]] = []

    def get(self, _api: str, kind: str, name: str, _ns: str | None = None) -> dict | None:
        return self.objects.get((kind, name))

    def apply(self, manifest: dict) -> dict:
        stored = {**manifest, "metadata": {**manifest["metadata"], "resourceVersion": "1"}}
        self.objects[(manifest["kind"], manifest["metadata"]["name"])] = stored
        return stored

    def delete(self, _api: str, kind: str, name: str, _ns: str | None = None,
               uid: str | None = None, **_: Any) -> bool:
        self.deleted.append((kind, name, uid))
        return self.objects.pop((kind, name), None) is not None


def snapshot(level: int = 2, deployed: str = OLD, live: dict | None = None,
             rolled: bool = True) -> ClusterSnapshot:
    sts = stateful_set(REF, {"image": deployed, "replicas": 2}, "")
    sts["metadata"]["generation"] = 3
    sts["status"] = {"observedGeneration": 3, "updateRevision": "r2"}
    pods = tuple({"metadata": {"name": f"prod-{n}", "labels": {
        "controller-revision-hash": "r2" if rolled else "r1"}},
        "spec": {"containers": [{"name": "broker", "image": deployed}]},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]}} for n in range(2))
    image = ImageView(version=7, features={METADATA_VERSION: level})
    return ClusterSnapshot(REF, sts, pods, "", TrustedImage(image, "id", None, 7),
                           live or {}, 0)


def finished(pod: dict, message: str, code: int = 0) -> None:
    pod["status"] = {"phase": "Succeeded" if code == 0 else "Failed", "containerStatuses": [
        {"name": "probe", "state": {"terminated": {"exitCode": code, "message": message}}}]}
    pod["metadata"]["uid"] = "probe-uid"


def test_a_new_image_is_probed_remembered_and_then_rolled_out() -> None:
    kube, memory, events = FakeKube(), ClusterMemory(), Events()
    decision = upgrade.image_step(kube, RESOURCE, snapshot(), memory, events)  # type: ignore[arg-type]
    assert decision.image == OLD and decision.phase == "Probing"
    pod = kube.objects[("Pod", "prod-image-probe")]
    assert pod["spec"]["containers"][0]["image"] == NEW
    assert events.reasons() == ["ImageProbing"]
    # Still running: the same pod is looked at, none other made.
    assert upgrade.image_step(kube, RESOURCE, snapshot(), memory, events).image == OLD  # type: ignore[arg-type]
    assert events.reasons() == ["ImageProbing"]
    finished(pod, FEATURES)
    decision = upgrade.image_step(kube, RESOURCE, snapshot(), memory, events)  # type: ignore[arg-type]
    assert decision.image == NEW and decision.phase is None
    assert kube.deleted == [("Pod", "prod-image-probe", "probe-uid")]
    assert memory.image_verdicts == {NEW: 2}
    assert events.posted[-1] == ("Normal", "ImageProbed", f"spec.image {NEW} supports "
                                 "kafkube.metadata.version up to 2; rolling it out")
    # The next passes know it: no probe again.
    assert upgrade.image_step(kube, RESOURCE, snapshot(), memory, events).image == NEW  # type: ignore[arg-type]
    assert ("Pod", "prod-image-probe") not in kube.objects


def test_an_image_too_old_is_held_back_with_one_warning_event() -> None:
    kube, memory, events = FakeKube(), ClusterMemory(), Events()
    upgrade.image_step(kube, RESOURCE, snapshot(), memory, events)  # type: ignore[arg-type]
    finished(kube.objects[("Pod", "prod-image-probe")],
             "kafkube: error: argument command: invalid choice: 'features'", code=2)
    for _ in range(3):
        decision = upgrade.image_step(kube, RESOURCE, snapshot(), memory, events)  # type: ignore[arg-type]
        assert decision.image == OLD and decision.warning.reason == "ImageTooOld"
    assert events.reasons() == ["ImageProbing", "ImageProbed", "ImageTooOld"]
    assert memory.image_verdicts == {NEW: 1}
    # spec.metadataVersion lowered the level to 1: the image rolls.
    assert upgrade.image_step(kube, RESOURCE, snapshot(level=1), memory, events).image == NEW  # type: ignore[arg-type]


def test_a_held_back_image_is_applied_with_every_other_change() -> None:
    kube, events = FakeKube(), Events()
    resource = {**RESOURCE, "spec": {**RESOURCE["spec"], "config": {"log.retention.ms": 5}}}
    apply_cluster(kube, resource, events, broker_image=OLD)  # type: ignore[arg-type]
    sts = kube.objects[("StatefulSet", "prod")]
    assert sts["spec"]["template"]["spec"]["containers"][0]["image"] == OLD
    config = kube.objects[("ConfigMap", "prod-config")]["data"]["server.properties"]
    assert "log.retention.ms=5" in config


def test_a_problem_pass_never_changes_the_brokers_image() -> None:
    """The reviewer's case: with the cluster image missing (the level unknown), a new
    spec.image applied by the problem pass would later be taken for the deployed one and
    rolled out unprobed. The problem pass keeps the image the StatefulSet runs."""
    from kafkube_operator.model.status import SpecWarning
    from kafkube_operator.reconcile.cluster import problem_pass

    kube, events = FakeKube(), Events()
    found = snapshot(deployed=OLD)
    kube.apply(found.statefulset)
    troubled = ClusterSnapshot(REF, found.statefulset, found.pods, "", TrustedImage(
        ImageView(), "id", SpecWarning("MetadataMissing", "the ConfigMap is missing")), {}, 0)
    problem_pass(kube, None, RESOURCE, troubled, ClusterMemory(), events)  # type: ignore[arg-type]
    sts = kube.objects[("StatefulSet", "prod")]
    assert sts["spec"]["template"]["spec"]["containers"][0]["image"] == OLD


class Admin:
    def __init__(self, refuse: str | None = None) -> None:
        self.calls: list[tuple[str, int, bool]] = []
        self.refuse = refuse

    def update_feature(self, name: str, level: int, downgrade: bool = False) -> None:
        self.calls.append((name, level, downgrade))
        if self.refuse:
            raise KafkaRefused(f"raising {name} to {level}", self.refuse)


class Admins:
    def __init__(self) -> None:
        self.dropped = 0

    def drop(self, *_: Any) -> None:
        self.dropped += 1


def live(*ranges: dict) -> dict[int, BrokerRegistration]:
    return {n: BrokerRegistration(n, f"b{n}", 9091, supported_features=feature_tuples(r))
            for n, r in enumerate(ranges)}


NEW_RANGES = {METADATA_VERSION: (1, 2)}


@pytest.fixture
def admin(monkeypatch: pytest.MonkeyPatch) -> Admin:
    fake = Admin()
    monkeypatch.setattr(upgrade, "cluster_admin", lambda *_: fake)
    return fake


def test_the_level_is_raised_once_the_roll_is_over(admin: Admin) -> None:
    memory, events = ClusterMemory(), Events()
    rolling = snapshot(level=1, deployed=NEW, live=live(NEW_RANGES, NEW_RANGES), rolled=False)
    outcome = upgrade.level_step(None, Admins(), RESOURCE, rolling, None, memory, events)  # type: ignore[arg-type]
    assert admin.calls == [] and outcome.warnings == []
    assert outcome.status["finalizedMetadataVersion"] == 1
    done = snapshot(level=1, deployed=NEW, live=live(NEW_RANGES, NEW_RANGES))
    outcome = upgrade.level_step(None, Admins(), RESOURCE, done, None, memory, events)  # type: ignore[arg-type]
    assert admin.calls == [(METADATA_VERSION, 2, False)]
    assert events.reasons() == ["MetadataVersionRaised"]
    assert outcome.status["upgrade"]["phase"] == "Finalizing"
    raised = snapshot(level=2, deployed=NEW, live=live(NEW_RANGES, NEW_RANGES))
    outcome = upgrade.level_step(None, Admins(), RESOURCE, raised, None, memory, events)  # type: ignore[arg-type]
    assert outcome.status == {"finalizedMetadataVersion": 2, "upgrade": None}
    assert len(admin.calls) == 1


def test_spec_metadata_version_lowers_and_an_unsupported_one_is_a_warning(
        admin: Admin) -> None:
    memory, events = ClusterMemory(), Events()
    lower = {**RESOURCE, "spec": {**RESOURCE["spec"], "metadataVersion": 1}}
    done = snapshot(level=2, deployed=NEW, live=live(NEW_RANGES, NEW_RANGES))
    upgrade.level_step(None, Admins(), lower, done, None, memory, events)  # type: ignore[arg-type]
    assert admin.calls == [(METADATA_VERSION, 1, True)]
    assert events.reasons() == ["MetadataVersionLowered"]
    higher = {**RESOURCE, "spec": {**RESOURCE["spec"], "metadataVersion": 2}}
    older = snapshot(level=1, deployed=NEW, live=live(NEW_RANGES, {METADATA_VERSION: (1, 1)}))
    for _ in range(2):
        outcome = upgrade.level_step(None, Admins(), higher, older, None, memory, events)  # type: ignore[arg-type]
        assert [w.reason for w in outcome.warnings] == ["MetadataVersionUnsupported"]
    assert len(admin.calls) == 1
    assert events.reasons() == ["MetadataVersionLowered", "MetadataVersionUnsupported"]


def test_a_refused_change_is_one_warning_event_and_tried_again(admin: Admin) -> None:
    admin.refuse = "[Error 95] InvalidUpdateVersionError: broker 1 supports 1-1"
    memory, events, admins = ClusterMemory(), Events(), Admins()
    done = snapshot(level=1, deployed=NEW, live=live(NEW_RANGES, NEW_RANGES))
    for _ in range(2):
        upgrade.level_step(None, admins, RESOURCE, done, None, memory, events)  # type: ignore[arg-type]
    assert len(admin.calls) == 2 and admins.dropped == 2
    assert events.reasons() == ["KafkaRefused"]
    admin.refuse = None
    upgrade.level_step(None, admins, RESOURCE, done, None, memory, events)  # type: ignore[arg-type]
    assert events.reasons() == ["KafkaRefused", "MetadataVersionRaised"]
