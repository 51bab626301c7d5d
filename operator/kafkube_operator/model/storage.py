"""Changes to a KafkaCluster's storage, which a StatefulSet cannot take in place: its claim
templates are immutable, and an apply that changes them fails whole, so an edit of
``storage.size`` used to freeze every later change (image, config, replicas, certificates).

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


@dataclass(frozen=True)
class ClaimChange:
    """The claim size to grow to, or why the claim templates stay as they are."""

    size: str | None = None
    refused: str | None = None


def _claim(sts: Mapping) -> tuple[str | None, str | None]:
    templates = (sts.get("spec") or {}).get("volumeClaimTemplates") or [{}]
    spec = templates[0].get("spec") or {}
    return (((spec.get("resources") or {}).get("requests") or {}).get("storage"),
            spec.get("storageClassName"))


def claim_change(live: Mapping | None, desired: Mapping) -> ClaimChange | None:
    """None when the live StatefulSet's claim templates are what ``desired`` says (or none
    exists yet)."""
    if live is None:
        return None
    (live_size, live_class), (size, storage_class) = _claim(live), _claim(desired)
    if live_class != storage_class:
        return ClaimChange(refused=(
            f"storage.class {storage_class or '(the default)'} differs from the class the "
            f"brokers' volumes were made with, {live_class or '(the default)'}: a volume "
            "cannot change class; the brokers keep theirs"))
    if live_size is None or size is None or parse_quantity(size) == parse_quantity(live_size):
        return None
    if parse_quantity(size) < parse_quantity(live_size):
        return ClaimChange(refused=(
            f"storage.size {size} is below the brokers' {live_size}: a volume cannot shrink"))
    return ClaimChange(size=size)


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
