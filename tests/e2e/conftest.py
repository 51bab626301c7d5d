"""The e2e suite's cluster: one 3-node kind cluster for the suite (scripts/kind.sh), or an
existing cluster named by KAFKUBE_E2E_KUBECONFIG. KAFKUBE_E2E=0 skips the suite."""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator

import pytest

from tests.e2e.platform import (
    Cluster,
    KubectlError,
    build_images,
    existing_cluster,
    kind_down,
    kind_up,
)

# The session's cluster comes up inside the first e2e test: pytest-timeout counts fixture set-up.
E2E_TIMEOUT = 3600


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every e2e test gets a timeout that covers bringing the cluster up."""
    here = os.path.dirname(__file__)
    for item in items:
        if str(item.path).startswith(here):
            item.add_marker(pytest.mark.timeout(E2E_TIMEOUT))


def skip_reason() -> str | None:
    """Why this machine cannot make its own kind cluster, if it cannot."""
    if os.environ.get("KAFKUBE_E2E") == "0":
        return "KAFKUBE_E2E=0"
    if os.geteuid() != 0 or not os.path.exists("/proc/self/ns/net"):
        return ("a kind cluster of our own needs root (network namespaces); point "
                "KAFKUBE_E2E_KUBECONFIG at an existing cluster instead")
    return None


# Package scope: one cluster for all of tests/e2e (sub-packages included), gone as soon as the
# last e2e test is done, so it does not load the machine while the rest of the suite runs.
@pytest.fixture(scope="package")
def kind_cluster() -> Iterator[Cluster]:
    """The cluster the scenarios run on; torn down after the last e2e test if ours."""
    existing = existing_cluster()
    if existing is not None:
        yield existing
        return
    reason = skip_reason()
    if reason:
        pytest.skip(reason)
    # One name per run: two suites on one machine get two clusters, not one fight.
    name = os.environ.get("KAFKUBE_E2E_CLUSTER") or f"e2e-{os.getpid()}"
    build_images()
    try:
        cluster = kind_up(name)
    except BaseException:
        kind_down(name)
        raise
    try:
        yield cluster
    finally:
        kind_down(name)


@pytest.fixture
def kube_namespace(kind_cluster: Cluster) -> Iterator[str]:
    """A namespace of the test's own, deleted afterwards (without waiting for it to go)."""
    name = f"e2e-{uuid.uuid4().hex[:8]}"
    kind_cluster.kubectl("create", "namespace", name)
    try:
        yield name
    finally:
        with contextlib.suppress(KubectlError):
            kind_cluster.kubectl("delete", "namespace", name, "--wait=false")
