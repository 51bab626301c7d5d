"""Fixtures of the integration tier's Kubernetes API server (``kafkube.harness.control_plane``):
one real kube-apiserver for the session, the CRDs of this tree installed in it, and settings
for the Kubernetes coordination backend on it."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from kafkube.harness.checkout import REPO
from kafkube.harness.waiting import wait_until


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A real kube-apiserver (and etcd) on loopback, shared by the session's tests; each test
    keeps to a cluster name of its own."""
    from kafkube.harness.control_plane import LocalControlPlane, build_apiserver

    plane = LocalControlPlane(tmp_path_factory.mktemp("control-plane"), build_apiserver())
    try:
        yield plane.start()
    finally:
        plane.stop()


@pytest.fixture(scope="session")
def crd_api(control_plane: Any) -> Iterator[Any]:
    """An API client of the control plane with this tree's CRDs (crds/) installed, or
    replaced by this tree's, and established."""
    import yaml
    from kubernetes import client as k8s
    from kubernetes.client.rest import ApiException

    from kafkube_contract.objects import api_client

    with api_client(str(control_plane.kubeconfig)) as client:
        ext = k8s.ApiextensionsV1Api(client)
        for path in sorted((REPO / "crds").glob("*.yaml")):
            body = yaml.safe_load(path.read_text())
            try:
                ext.create_custom_resource_definition(body)
            except ApiException as e:
                if e.status != 409:
                    raise
                current = ext.read_custom_resource_definition(body["metadata"]["name"])
                body["metadata"]["resourceVersion"] = current.metadata.resource_version
                ext.replace_custom_resource_definition(body["metadata"]["name"], body)

            def established(name: str = body["metadata"]["name"]) -> bool:
                conditions = ext.read_custom_resource_definition(name).status.conditions or []
                return any(c.type == "Established" and c.status == "True" for c in conditions)

            wait_until(established, 30, f"{path.name} established")
        yield client


@pytest.fixture
def settings(control_plane: Any) -> Any:
    """The Kubernetes coordination backend's settings for a cluster name of the test's own."""
    from broker.cluster.kubernetes import KubernetesSettings

    return KubernetesSettings("default", f"k{uuid.uuid4().hex[:10]}",
                              str(control_plane.kubeconfig))
