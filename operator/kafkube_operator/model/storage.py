"""Changes to a KafkaCluster's storage, which a StatefulSet cannot take in place: its claim
templates are immutable, and an apply that changes them fails whole, so an edit of
``storage.size`` used to freeze every later change (image, config, replicas, certificates).

Several volumes per broker (JBOD, ``spec.storage.volumes``) are several claim templates, each
mounted at its own path and listed in ``log.dirs``. Adding one is a new StatefulSet object
too (its pods orphaned, then rolled by the config change that adds the log dir).

Growing ``storage.size`` is done the Kubernetes way: each broker's claim is patched (the
StorageClass must allow expansion), then the StatefulSet object is recreated with the new
template and its pods orphaned, not restarted. What cannot be done (a refused expansion, a
smaller size or another class that admission did not stop) is a Warning, and the StatefulSet
is applied with the claim templates it has, so nothing else waits on it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kubernetes.utils.quantity import parse_quantity

# Volume 0 is spec.storage's size and class, its claim template named "data" and mounted
# where a cluster made before JBOD has it; volume N (spec.storage.volumes) is "data-N".
BASE_MOUNT = "/var/lib/kafkube"
MAX_VOLUMES = 16


@dataclass(frozen=True)
class Volume:
    """One of each broker's volumes (JBOD): its own claim, mount and log dir."""

    id: int
    size: str
    storage_class: str | None = None

    @property
    def claim(self) -> str:
        """The claim template's name (the PVCs are ``<claim>-<statefulset>-<ordinal>``)."""
        return "data" if self.id == 0 else f"data-{self.id}"

    @property
    def mount(self) -> str:
        return BASE_MOUNT if self.id == 0 else f"{BASE_MOUNT}-{self.id}"

    @property
    def log_dir(self) -> str:
        """A directory inside the mount, as a volume's root may hold lost+found."""
        return f"{self.mount}/data"


def volumes(spec: Mapping) -> list[Volume]:
    """Every broker volume: spec.storage (id 0), then spec.storage.volumes by id. An extra
    volume without a class takes spec.storage.class."""
    storage = spec.get("storage") or {}
    base_class = storage.get("class") or None
    found = [Volume(0, storage.get("size", "10Gi"), base_class)]
    extra = sorted(storage.get("volumes") or [], key=lambda v: int(v["id"]))
    found += [Volume(int(v["id"]), v.get("size", storage.get("size", "10Gi")),
                     v.get("class") or base_class) for v in extra if int(v["id"]) != 0]
    return found


def log_dirs(spec: Mapping) -> str:
    """``log.dirs``: one log dir per volume, in id order."""
    return ",".join(v.log_dir for v in volumes(spec))


@dataclass(frozen=True)
class ClaimChange:
    """The claims to grow (template name -> size), whether templates were added (a new
    StatefulSet object, like a growth), or why the claim templates stay as they are."""

    grow: tuple[tuple[str, str], ...] = ()
    added: tuple[str, ...] = ()
    refused: str | None = None

    @property
    def size(self) -> str | None:
        """The size volume 0 grows to, if it does."""
        return dict(self.grow).get("data")

    def described(self) -> str:
        """The growths in the spec's own words, for a message a user acts on:
        ``storage.size 2Gi, storage.volumes[id=1].size 5Gi``."""
        return ", ".join(
            (f"storage.size {size}" if claim == "data"
             else f"storage.volumes[id={claim.removeprefix('data-')}].size {size}")
            for claim, size in self.grow)


def _claims(sts: Mapping) -> dict[str, tuple[str | None, str | None]]:
    templates = (sts.get("spec") or {}).get("volumeClaimTemplates") or []
    found = {}
    for template in templates:
        spec = template.get("spec") or {}
        name = (template.get("metadata") or {}).get("name", "data")
        found[name] = ((((spec.get("resources") or {}).get("requests") or {}).get("storage")),
                       spec.get("storageClassName"))
    return found


def claim_change(live: Mapping | None, desired: Mapping) -> ClaimChange | None:
    """None when the live StatefulSet's claim templates are what ``desired`` says (or none
    exists yet). Volumes may be added and grown, never removed, shrunk or reclassed (the
    CRD refuses those at admission; a spec that got past it is refused here)."""
    if live is None:
        return None
    before, after = _claims(live), _claims(desired)
    removed = sorted(set(before) - set(after))
    if removed:
        return ClaimChange(refused=(
            f"volume claim templates {removed} would be removed: a broker volume cannot be "
            "removed (its partitions live there); the brokers keep theirs"))
    grow = []
    for name, (live_size, live_class) in sorted(before.items()):
        size, storage_class = after[name]
        what = "storage" if name == "data" else f"storage volume {name}"
        if live_class != storage_class:
            return ClaimChange(refused=(
                f"{what}: class {storage_class or '(the default)'} differs from the class the "
                f"brokers' volumes were made with, {live_class or '(the default)'}: a volume "
                "cannot change class; the brokers keep theirs"))
        if live_size is None or size is None or parse_quantity(size) == parse_quantity(live_size):
            continue
        if parse_quantity(size) < parse_quantity(live_size):
            return ClaimChange(refused=(
                f"{what}: size {size} is below the brokers' {live_size}: a volume cannot "
                "shrink"))
        grow.append((name, size))
    added = tuple(sorted(set(after) - set(before)))
    if not grow and not added:
        return None
    return ClaimChange(grow=tuple(grow), added=added)


def with_claims_of(desired: Mapping, live: Mapping) -> dict[str, Any]:
    """``desired`` with the live StatefulSet's claim templates, so the rest applies."""
    spec = dict(desired["spec"])
    spec["volumeClaimTemplates"] = [
        {"metadata": {k: v for k, v in (t.get("metadata") or {}).items()
                      if k in ("name", "labels", "annotations")},
         "spec": {k: v for k, v in (t.get("spec") or {}).items()
                  if k in ("accessModes", "resources", "storageClassName")}}
        for t in live["spec"]["volumeClaimTemplates"]]
    return {**desired, "spec": spec}
