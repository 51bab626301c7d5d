"""The operator's one Kubernetes client: server-side apply of rendered manifests, reads and
deletes, on the official ``kubernetes`` client the brokers already use (one client for the
whole codebase; kopf keeps its own for watching and for the resources' status).

Server-side apply (field manager ``kafkube-operator``) makes "create or update" one call that
owns exactly the fields the model renders: a field another controller sets (the StatefulSet's
defaults, a PVC's volumeName) is left alone, and a field someone edited by hand that the
model renders is set back, which is what a reconcile means.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from kubernetes import client as k8s
from kubernetes.client.rest import ApiException
from kubernetes.dynamic import DynamicClient
from kubernetes.dynamic.exceptions import NotFoundError

from kafkube_contract.objects import REQUEST_TIMEOUT_S, api_client

FIELD_MANAGER = "kafkube-operator"
log = logging.getLogger(__name__)


class ApplyError(Exception):
    """The API server refused an object: its message, for a Warning condition."""

    def __init__(self, manifest: Mapping, status: int, message: str) -> None:
        self.kind, self.name = manifest["kind"], manifest["metadata"]["name"]
        self.status = status
        super().__init__(f"{self.kind} {self.name}: {message}")


class Kube:
    def __init__(self, api: k8s.ApiClient) -> None:
        self.api = api
        self._dynamic: DynamicClient | None = None
        # Called before every write: the active operator's lease check (leadership.py), the
        # seconds it may still act, which bound the write's request timeout.
        self.fence: Callable[[], float | None] = lambda: None

    @classmethod
    def connect(cls, kubeconfig: str | None) -> Kube:
        """In a pod, its service account; outside one, ``kubeconfig`` (or ~/.kube/config)."""
        return cls(api_client(kubeconfig))

    def close(self) -> None:
        self.api.close()

    def _write_timeout(self) -> float:
        """The fence, then a write's request timeout: never past the operator's lease."""
        left = self.fence()
        return REQUEST_TIMEOUT_S if left is None else max(0.1, min(REQUEST_TIMEOUT_S, left))

    def _resource(self, api_version: str, kind: str) -> Any:
        if self._dynamic is None:
            self._dynamic = DynamicClient(self.api)
        return self._dynamic.resources.get(api_version=api_version, kind=kind)

    def apply(self, manifest: Mapping, dry_run: bool = False) -> dict:
        """Create or update ``manifest`` to exactly what it says; the object as stored."""
        timeout = self._write_timeout() if not dry_run else REQUEST_TIMEOUT_S
        meta = manifest["metadata"]
        resource = self._resource(manifest["apiVersion"], manifest["kind"])
        extra = {"dry_run": "All"} if dry_run else {}
        try:
            applied = resource.server_side_apply(
                body=dict(manifest), name=meta["name"], namespace=meta.get("namespace"),
                field_manager=FIELD_MANAGER, force_conflicts=True,
                _request_timeout=timeout, **extra)
        except ApiException as e:
            raise ApplyError(manifest, e.status, _reason(e)) from None
        return applied.to_dict()

    def apply_all(self, manifests: Iterable[Mapping], dry_run: bool = False) -> list[dict]:
        return [self.apply(m, dry_run) for m in manifests]

    def get(self, api_version: str, kind: str, name: str,
            namespace: str | None = None) -> dict | None:
        try:
            found = self._resource(api_version, kind).get(
                name=name, namespace=namespace, _request_timeout=REQUEST_TIMEOUT_S)
        except NotFoundError:
            return None
        return found.to_dict()

    def list(self, api_version: str, kind: str, namespace: str | None = None,
             labels: Mapping[str, str] | None = None) -> list[dict]:
        selector = ",".join(f"{k}={v}" for k, v in (labels or {}).items()) or None
        found = self._resource(api_version, kind).get(
            namespace=namespace, label_selector=selector, _request_timeout=REQUEST_TIMEOUT_S)
        return [item.to_dict() for item in found.items]

    def merge_patch(self, api_version: str, kind: str, name: str, namespace: str | None,
                    patch: Mapping) -> dict:
        timeout = self._write_timeout()
        try:
            patched = self._resource(api_version, kind).patch(
                body=dict(patch), name=name, namespace=namespace,
                content_type="application/merge-patch+json", _request_timeout=timeout)
        except ApiException as e:
            raise ApplyError({"kind": kind, "metadata": {"name": name}}, e.status,
                             _reason(e)) from None
        return patched.to_dict()

    def delete(self, api_version: str, kind: str, name: str, namespace: str | None = None,
               grace_period_s: int | None = None, uid: str | None = None,
               orphan: bool = False) -> bool:
        """False if it was already gone. ``uid`` deletes only that incarnation of a pod, never
        the one a StatefulSet already made in its place; ``orphan`` leaves what it owns (a
        StatefulSet's pods keep running)."""
        timeout = self._write_timeout()
        body: dict[str, Any] = {"propagationPolicy": "Orphan"} if orphan else {}
        if grace_period_s is not None:
            body["gracePeriodSeconds"] = grace_period_s
        if uid is not None:
            body["preconditions"] = {"uid": uid}
        try:
            self._resource(api_version, kind).delete(
                name=name, namespace=namespace, body=body or None,
                _request_timeout=timeout)
        except NotFoundError:
            return False
        except ApiException as e:
            if e.status == 409 and uid is not None:  # a newer pod of that name: not ours
                return False
            raise
        return True


def _reason(e: ApiException) -> str:
    """The API server's own message (admission, schema, immutable fields), not the HTTP dump."""
    try:
        return json.loads(e.body)["message"]
    except (TypeError, ValueError, KeyError):
        return f"{e.status} {e.reason}"
