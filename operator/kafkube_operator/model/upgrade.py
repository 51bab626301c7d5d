"""Upgrades of kafkube itself: whether a new ``spec.image`` may be rolled out, and when the
cluster's ``kafkube.metadata.version`` (kafkube_contract/features.py) is raised or lowered.
Pure: every decision is tested without a cluster (reconcile/upgrade.py acts on them).

**The image.** Once the cluster finalized ``kafkube.metadata.version`` above 1, its image is
written in a format an older kafkube cannot read: a broker of such an image refuses to
start (exit 3), and a roll onto it would take the brokers down one by one until the min-ISR
gate stops it, with one broker crash-looping. So before a new image goes into the
StatefulSet the operator asks the image itself which levels it supports: a probe pod runs
``kafkube features`` in it, which prints the ranges and writes them as the pod's
termination message. An older kafkube has no such command (argparse exits 2): it reads
format 1 only, level 1 at most. An image that supports the finalized level is rolled out; one
that does not is held back (the StatefulSet keeps the image it runs, every other change of
the spec still applied) with a Warning saying how a rollback is possible: lower the level
first (``spec.metadataVersion``), then change the image. At level 1 or below every kafkube
reads the image, and no probe is needed.

**The level.** Raised only once the roll is over (every broker pod on the StatefulSet's
update revision, ready, and registered with its supported ranges), so no broker of the
previous image ever meets the new format, and a rollback stays possible for as long as the
roll lasts. Without ``spec.metadataVersion`` the operator raises it to the highest level
every broker supports, never lowering it; with it, to exactly that level, lowering it by a
safe downgrade (the brokers write the older format at once).
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kafkube_contract.features import METADATA_VERSION, FeatureRanges, unsupported
from kafkube_operator.model.cluster import (
    CLUSTER_LABEL,
    CONTAINER,
    GROUP,
    ClusterRef,
    Manifest,
    owner_reference,
)
from kafkube_operator.model.roll import STUCK_REASONS, owner_of, pod_state
from kafkube_operator.model.status import SpecWarning

DEFAULT_IMAGE = "localhost/kafkube:dev"  # the CRD's default of spec.image
PROBED_IMAGE = f"{GROUP}/probed-image"
PROBE_CONTAINER = "probe"
TERMINATION_LOG = "/dev/termination-log"
PROBE_RESOURCES = {"requests": {"cpu": "10m", "memory": "64Mi"},
                   "limits": {"memory": "128Mi"}}
# What the probe takes from the brokers' pod template: the image must be pulled, scheduled
# and run as the brokers' would be (the service account may carry imagePullSecrets).
INHERITED = ("serviceAccountName", "securityContext", "nodeSelector", "tolerations",
             "affinity", "imagePullSecrets", "priorityClassName")
# Why a probe pod cannot start, as its container's waiting reason says (the kubelet keeps
# trying: the probe goes on by itself once the image can be pulled).
PROBE_STUCK = STUCK_REASONS | {"ErrImageNeverPull", "RunContainerError"}
# An image without a supported range runs a kafkube from before features: format 1 only.
OLDER_KAFKUBE_HIGHEST = 1
# argparse's exit status for an unknown subcommand: what an older kafkube answers.
ARGPARSE_USAGE_EXIT = 2

PROBING, HELD_BACK, ROLLING, FINALIZING = "Probing", "HeldBack", "Rolling", "Finalizing"
RUNNING, SUPPORTS, STUCK, FAILED, UNREADABLE = (
    "running", "supports", "stuck", "failed", "unreadable")


def probe_name(ref: ClusterRef) -> str:
    return f"{ref.name}-image-probe"


def probe_labels(ref: ClusterRef) -> dict[str, str]:
    """The cluster's, but never the brokers' selector (model/cluster.py ``selector``): the
    probe is no broker to the StatefulSet, the Services, the budget or the roll."""
    return {"app.kubernetes.io/name": "kafkube-image-probe", CLUSTER_LABEL: ref.name,
            "app.kubernetes.io/instance": ref.name,
            "app.kubernetes.io/component": "image-probe",
            "app.kubernetes.io/managed-by": "kafkube-operator"}


def broker_container(pod_spec: Mapping) -> Mapping:
    return next(c for c in pod_spec.get("containers") or () if c.get("name") == CONTAINER)


PROBE_DEADLINE_S = 300


def probe_pod(ref: ClusterRef, statefulset: Mapping, image: str) -> Manifest:
    """The pod that asks ``image`` which feature levels it supports, placed and pulled as
    the brokers of ``statefulset`` (the rendered one) would be. Never restarted: one answer
    is all it gives; no API token, it asks nothing of the cluster."""
    template = statefulset["spec"]["template"]["spec"]
    broker = broker_container(template)
    container: Manifest = {
        "name": PROBE_CONTAINER, "image": image,
        "imagePullPolicy": broker.get("imagePullPolicy", "IfNotPresent"),
        "args": ["features", "--termination-log", TERMINATION_LOG],
        "resources": PROBE_RESOURCES,
        "terminationMessagePath": TERMINATION_LOG,
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }
    if "securityContext" in broker:
        container["securityContext"] = broker["securityContext"]
    spec: Manifest = {key: template[key] for key in INHERITED if key in template}
    # Bounded: a probe stuck pulling its image or never scheduled ends (DeadlineExceeded,
    # read as no answer, made again) instead of standing there for good.
    spec |= {"restartPolicy": "Never", "automountServiceAccountToken": False,
             "activeDeadlineSeconds": PROBE_DEADLINE_S, "containers": [container]}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": probe_name(ref), "namespace": ref.namespace,
                         "labels": probe_labels(ref),
                         "annotations": {PROBED_IMAGE: image},
                         "ownerReferences": [owner_reference(ref)]},
            "spec": spec}


def with_image(statefulset: Manifest, image: str) -> Manifest:
    """``statefulset`` with its broker container running ``image`` (the image it runs, while
    spec.image is probed or held back), every other field as rendered."""
    template = statefulset["spec"]["template"]
    containers = [{**c, "image": image} if c.get("name") == CONTAINER else c
                  for c in template["spec"]["containers"]]
    return {**statefulset, "spec": {**statefulset["spec"], "template": {
        **template, "spec": {**template["spec"], "containers": containers}}}}


def deployed_image(statefulset: Mapping | None, pods: Sequence[Mapping]) -> str | None:
    """The image the brokers run: the live StatefulSet's, or while it is being made again
    (a storage change orphans its pods), the one its broker pods run; None: no broker yet."""
    if statefulset is not None and not statefulset["metadata"].get("deletionTimestamp"):
        return broker_container(statefulset["spec"]["template"]["spec"]).get("image")
    images = sorted(pod_images(pods).items())
    return images[0][1] if images else None


def pod_images(pods: Sequence[Mapping]) -> dict[str, str]:
    """The image each broker pod's broker container runs, by pod name."""
    found = {}
    for pod in pods:
        try:
            found[pod["metadata"]["name"]] = broker_container(pod.get("spec") or {})["image"]
        except (StopIteration, KeyError):
            continue
    return found


@dataclass(frozen=True)
class ProbeReading:
    """What a probe pod says: ``state`` one of running (not done yet), supports (the image's
    ``highest`` kafkube.metadata.version), stuck (cannot start: ``reason``), failed (ended
    without an answer, to be made again) or unreadable (an answer that is no range)."""

    image: str
    state: str
    highest: int | None = None
    reason: str = ""
    message: str = ""
    deleting: bool = False


def supported_highest(message: str) -> int | None:
    """The highest kafkube.metadata.version in ``kafkube features``' line (its last JSON
    line, as the termination message or a log tail holds it); 0 for an image that knows
    features but not this one; None when there is no such line."""
    for line in reversed(message.strip().splitlines()):
        try:
            found = json.loads(line)
        except ValueError:
            continue
        features = found.get("supported_features") if isinstance(found, dict) else None
        if not isinstance(features, dict):
            continue
        levels = features.get(METADATA_VERSION)
        if levels is None:
            return 0
        if isinstance(levels, list) and len(levels) == 2 and all(
                isinstance(v, int) for v in levels):
            return int(levels[1])
        return None
    return None


def _last_line(text: str | None) -> str:
    lines = [line for line in (text or "").strip().splitlines() if line.strip()]
    return lines[-1].strip() if lines else ""


def read_probe(pod: Mapping) -> ProbeReading:
    """A probe pod as the API returns it (camelCase keys)."""
    meta, status = pod["metadata"], pod.get("status") or {}
    image = (meta.get("annotations") or {}).get(PROBED_IMAGE) or next(
        (c.get("image", "") for c in (pod.get("spec") or {}).get("containers") or ()), "")
    deleting = bool(meta.get("deletionTimestamp"))
    container = next((s for s in status.get("containerStatuses") or ()
                      if s.get("name") == PROBE_CONTAINER), {})
    state = container.get("state") or {}
    terminated, waiting = state.get("terminated"), state.get("waiting")
    if terminated:
        code, message = int(terminated.get("exitCode", 0)), terminated.get("message") or ""
        if code == 0:
            highest = supported_highest(message)
            if highest is None:
                return ProbeReading(image, UNREADABLE, message=_last_line(message) or
                                    "no termination message", deleting=deleting)
            return ProbeReading(image, SUPPORTS, highest, deleting=deleting)
        if code == ARGPARSE_USAGE_EXIT:  # `kafkube features` unknown: an older kafkube
            return ProbeReading(image, SUPPORTS, OLDER_KAFKUBE_HIGHEST, reason=f"exit {code}",
                                message=_last_line(message) or terminated.get("reason", ""),
                                deleting=deleting)
        # Killed (OOMKilled, a signal) or not kafkube at all: no answer to act on.
        return ProbeReading(image, UNREADABLE, reason=f"exit {code}",
                            message=f"exit {code} " + (terminated.get("reason", "") or "")
                            + (f": {_last_line(message)}" if message else ""),
                            deleting=deleting)
    if waiting and waiting.get("reason") in PROBE_STUCK:
        return ProbeReading(image, STUCK, reason=waiting["reason"],
                            message=waiting.get("message", ""), deleting=deleting)
    scheduled = next((c for c in status.get("conditions") or ()
                      if c.get("type") == "PodScheduled"), {})
    if scheduled.get("reason") == "Unschedulable":
        return ProbeReading(image, STUCK, reason="Unschedulable",
                            message=scheduled.get("message", ""), deleting=deleting)
    if status.get("phase") in ("Failed", "Succeeded"):  # evicted, node lost: no answer
        return ProbeReading(image, FAILED, reason=status.get("reason", ""),
                            message=status.get("message", ""), deleting=deleting)
    return ProbeReading(image, RUNNING, deleting=deleting)


@dataclass(frozen=True)
class ImageDecision:
    """Which image the StatefulSet gets in this pass (``image``: spec.image, or while it is
    probed or held back the one deployed) and what to do with the probe pod. ``phase``:
    Probing or HeldBack while spec.image is not rolled out, else None; ``verdict``: the
    highest level the probe just found, for the operator to remember per image."""

    spec_image: str
    image: str
    phase: str | None = None
    message: str | None = None
    warning: SpecWarning | None = None
    create_probe: bool = False
    delete_probe: bool = False
    verdict: int | None = None

    @property
    def held(self) -> bool:
        return self.image != self.spec_image


def too_old(spec_image: str, highest: int, finalized: int) -> str:
    return (f"spec.image {spec_image} supports {METADATA_VERSION} up to {highest}, but the "
            f"cluster finalized {finalized}: not rolled out; an image rollback is possible "
            f"only before finalizing (set spec.metadataVersion: {max(highest, 1)} first to "
            "lower it)")


def decide_image(spec_image: str, deployed: str | None, finalized: int, known: int | None,
                 probe: ProbeReading | None, pod_name: str) -> ImageDecision:
    """What to do about spec.image. ``deployed``: the image the brokers run (None: none
    yet); ``finalized``: the cluster's kafkube.metadata.version; ``known``: the highest level
    spec.image supports, if an earlier probe found it; ``probe``: the probe pod, if any."""
    stale = probe is not None and not probe.deleting
    if deployed is None or spec_image == deployed or finalized <= OLDER_KAFKUBE_HIGHEST:
        return ImageDecision(spec_image, spec_image, delete_probe=stale)
    mine = probe is not None and probe.image == spec_image and not probe.deleting
    highest, verdict = known, None
    if highest is None and mine and probe is not None and probe.state == SUPPORTS:
        highest = verdict = probe.highest
    if highest is not None:
        if highest >= finalized:
            return ImageDecision(spec_image, spec_image, delete_probe=stale, verdict=verdict)
        message = too_old(spec_image, highest, finalized)
        return ImageDecision(spec_image, deployed, HELD_BACK, message,
                             SpecWarning("ImageTooOld", message), delete_probe=stale,
                             verdict=verdict)
    probing = (f"probing spec.image {spec_image} (pod {pod_name}) for the {METADATA_VERSION} "
               f"it supports before rolling it out: the cluster finalized {finalized}; the "
               f"brokers keep {deployed} meanwhile")
    if probe is None:
        return ImageDecision(spec_image, deployed, PROBING, probing, create_probe=True)
    if probe.deleting:
        return ImageDecision(spec_image, deployed, PROBING, probing)
    if not mine or probe.state == FAILED:  # another image's, or ended without an answer
        return ImageDecision(spec_image, deployed, PROBING, probing, delete_probe=True)
    if probe.state == STUCK:
        message = (f"spec.image {spec_image} not rolled out: its probe pod {pod_name} cannot "
                   f"start ({probe.reason}: {probe.message or 'no message'}); the brokers "
                   f"keep {deployed}")
        return ImageDecision(spec_image, deployed, PROBING, message,
                             SpecWarning(probe.reason, message))
    if probe.state == UNREADABLE:
        message = (f"spec.image {spec_image} not rolled out: its probe pod {pod_name} ended "
                   f"without the supported feature levels ({probe.message}); delete the pod "
                   "to probe again")
        return ImageDecision(spec_image, deployed, PROBING, message,
                             SpecWarning("ImageProbeFailed", message))
    return ImageDecision(spec_image, deployed, PROBING, probing)


def roll_waiting(statefulsets: Mapping[str, Mapping] | Mapping | None,
                 pods: Sequence[Mapping], live: Collection[int],
                 wanted: int | Collection[int]) -> str | None:
    """What the roll still waits for before the level may change (None: it is over): every
    pool's StatefulSet (``statefulsets``, by pool; one StatefulSet alone is the default
    pool) with its current template taken up, its broker pods on its update revision and
    ready, and each broker of ``wanted`` (the node ids, or a count from 0) registered
    (``live``: the live broker ids)."""
    if statefulsets is not None and "metadata" in statefulsets:
        statefulsets = {"": statefulsets}
    ids = set(range(wanted)) if isinstance(wanted, int) else set(wanted)
    if not statefulsets or any(sts["metadata"].get("deletionTimestamp")
                               for sts in statefulsets.values()):
        return "the StatefulSet"
    revisions = {}
    for sts in statefulsets.values():
        status = sts.get("status") or {}
        if status.get("observedGeneration") != sts["metadata"].get("generation"):
            return "the StatefulSet controller to take up the new template"
        revisions[sts["metadata"]["name"]] = status.get("updateRevision")
    if len(pods) != len(ids):
        return f"{len(ids)} broker pods (there are {len(pods)})"
    only = next(iter(revisions.values())) if len(revisions) == 1 else None
    states = (pod_state(p, revisions.get(owner_of(p), only)) for p in pods)
    for state in sorted(states, key=lambda s: s.broker):
        if state.outdated:
            return f"pod {state.name} to be restarted onto the current revision"
        if not state.ready:
            return f"pod {state.name} to be ready"
    if set(live) != ids:
        return f"brokers {sorted(ids - set(live))} to register"
    return None


@dataclass(frozen=True)
class LevelChange:
    """The kafkube.metadata.version change to make now (``target``; ``downgrade``: a safe
    downgrade), or why none: ``waiting`` for the roll, or a ``warning`` (a level some broker
    does not support). ``wanted``: the level spec.metadataVersion asks for, if any."""

    target: int | None = None
    downgrade: bool = False
    waiting: str | None = None
    warning: SpecWarning | None = None
    wanted: int | None = None

    def described(self, current: int) -> str:
        verb = "lowering" if self.downgrade else "raising"
        return f"{verb} {METADATA_VERSION} from {current} to {self.target}"


def level_change(wanted: int | None, current: int, announced: Mapping[int, FeatureRanges],
                 waiting: str | None, image_settled: bool) -> LevelChange:
    """``wanted``: spec.metadataVersion (None: the highest every broker supports, never
    lower than ``current``); ``announced``: each live broker's supported ranges;
    ``waiting``: what the roll waits for (``roll_waiting``); ``image_settled``: spec.image is
    the one deployed (a level is never raised while a new image is probed or held back: it
    would only make that image less likely to fit)."""
    if wanted is None:
        if waiting is not None or not image_settled or not announced:
            return LevelChange(waiting=waiting)
        highest = min((ranges.get(METADATA_VERSION, (0, 0))[1] if ranges else 0)
                      for ranges in announced.values())
        return LevelChange(target=highest) if highest > current else LevelChange()
    if wanted == current:
        return LevelChange(wanted=wanted)
    if waiting is not None:
        return LevelChange(waiting=waiting, wanted=wanted)
    if wanted > current and not image_settled:
        return LevelChange(waiting="spec.image to be rolled out", wanted=wanted)
    reasons = unsupported(announced, METADATA_VERSION, wanted)
    if reasons:
        return LevelChange(wanted=wanted, warning=SpecWarning("MetadataVersionUnsupported", (
            f"spec.metadataVersion {wanted} not applied ({METADATA_VERSION} stays "
            f"{current}): " + "; ".join(reasons))))
    return LevelChange(target=wanted, downgrade=wanted < current, wanted=wanted)


def upgrade_status(decision: ImageDecision | None, images: Mapping[str, str],
                   change: LevelChange, current: int) -> dict[str, Any] | None:
    """``status.upgrade`` while an upgrade is under way, else None: the probe or the hold
    (``decision``), the roll onto spec.image (``images``: what each broker pod runs), the
    level change waiting for the roll or being made."""
    image = decision.spec_image if decision is not None else None
    if decision is not None and decision.phase is not None:
        return {"image": image, "phase": decision.phase, "message": decision.message}
    behind = sorted(name for name, runs in images.items() if runs != image)
    if image is not None and behind:
        return {"image": image, "phase": ROLLING, "message": (
            f"{len(images) - len(behind)}/{len(images)} broker pods run {image}; next: "
            f"{behind[0]}")}
    if change.target is not None:
        return {"image": image, "phase": FINALIZING, "message": change.described(current)}
    if change.wanted is not None and change.waiting is not None:
        return {"image": image, "phase": ROLLING, "message": (
            f"{METADATA_VERSION} {change.wanted} (now {current}) once the roll is over: "
            f"waiting for {change.waiting}")}
    return None
