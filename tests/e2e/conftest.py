"""The e2e suite's cluster: one 4-node kind cluster for the suite (scripts/kind.sh), or an
existing cluster named by KAFKUBE_E2E_KUBECONFIG. KAFKUBE_E2E=0 skips the suite."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator

import pytest

from kafkube.harness.checkout import REPO
from kafkube.harness.kind.deployment import NAMESPACE, WORKLOAD_IMAGE, Brokers
from kafkube.harness.kind.operated import example_cluster, installed_operator, namespace_of
from kafkube.harness.kind.platform import (
    KIND_SH,
    Cluster,
    existing_cluster,
    own_kind_cluster,
    run_script,
)

# The session's cluster comes up inside the first e2e test: pytest-timeout counts fixture set-up.
E2E_TIMEOUT = 3600


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every e2e test gets a timeout that covers bringing the cluster up."""
    here = os.path.dirname(__file__)
    for item in items:
        if str(item.path).startswith(here):
            item.add_marker(pytest.mark.timeout(E2E_TIMEOUT))


_durations: list[tuple[str, float, str]] = []


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when == "call" and "tests/e2e/" in report.nodeid.replace("\\", "/"):
        _durations.append((report.nodeid.split("::")[-1], report.duration, report.outcome))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Each scenario's duration, also under -q (set-up, i.e. bringing the cluster up, apart)."""
    if _durations:
        terminalreporter.section("e2e scenarios")
        for name, seconds, outcome in _durations:
            terminalreporter.write_line(f"{seconds:7.1f} s  {outcome:7}  {name}")


def dry_run(name: str) -> None:
    """What the kind driver would run, printed: the images, the cluster, the deployment."""
    print("\n# the images (scripts/image.sh)\nbash scripts/image.sh")
    print(f"# the cluster\n{run_script([str(KIND_SH), 'up', name, '--dry-run'], 60)}", end="")
    print("# each scenario module: the reference deployment, then its client pods\n"
          f"kubectl create namespace {NAMESPACE}\n"
          f"kubectl -n {NAMESPACE} apply -f deploy/kafkube.yaml\n"
          f"kubectl -n {NAMESPACE} apply -f - # a Pod of {WORKLOAD_IMAGE} per client")
    print(f"# afterwards\n{run_script([str(KIND_SH), 'down', name, '--dry-run'], 60)}", end="")


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
    # One name per run: two suites on one machine get two clusters, not one fight.
    name = os.environ.get("KAFKUBE_E2E_CLUSTER") or f"e2e-{os.getpid()}"
    if os.environ.get("KAFKUBE_DRY_RUN"):
        dry_run(name)
        pytest.skip("KAFKUBE_DRY_RUN: the commands were printed, none was run")
    reason = skip_reason()
    if reason:
        pytest.skip(reason)
    # A run stopped with SIGTERM (a CI timeout, `kill`) tears the cluster down too: the
    # signal becomes KeyboardInterrupt, which pytest turns into the fixtures' teardown.
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        with own_kind_cluster(name) as cluster:
            yield cluster
    finally:
        signal.signal(signal.SIGTERM, previous)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


@pytest.fixture
def kube_namespace(kind_cluster: Cluster) -> Iterator[str]:
    """A namespace of the test's own, deleted afterwards (without waiting for it to go)."""
    with namespace_of(kind_cluster) as name:
        yield name


@pytest.fixture(scope="module")
def operator(kind_cluster: Cluster) -> Iterator[Cluster]:
    """The operator's chart installed for the module's scenarios, uninstalled after them."""
    with installed_operator(kind_cluster) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def pipeline_cluster(operator: Cluster) -> Iterator[Brokers]:
    """my-cluster with the Spark pipeline's Topics and the driver's RBAC, applied with kubectl
    from the files a user would apply, in a namespace of the module's own."""
    with namespace_of(operator) as namespace:
        operator.apply(example_cluster("my-cluster"), namespace=namespace)
        operator.kubectl("-n", namespace, "wait", "kafkacluster/my-cluster",
                         "--for=condition=Ready", "--timeout=420s", timeout=450)
        for manifest in ("examples/topic.yaml", "spark/k8s/topics.yaml", "spark/k8s/rbac.yaml"):
            operator.apply((REPO / manifest).read_text(), namespace=namespace)
        operator.kubectl("-n", namespace, "wait", "topic/orders", "topic/order-totals",
                         "--for=condition=Ready", "--timeout=120s", timeout=150)
        yield Brokers(operator, namespace, "my-cluster")
