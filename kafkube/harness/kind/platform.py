"""The Kubernetes cluster the e2e suite runs on, and the two ways to reach it.

Here (and in CI) `scripts/kind.sh up` makes a 4-node kind cluster inside a network namespace of
its own: every cluster address lives there, so kubectl and anything that talks to a pod must
run inside that namespace too (`run_in_netns`). Pointed at an existing cluster instead
(KAFKUBE_E2E_KUBECONFIG), the same helpers run commands directly with that kubeconfig.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from kafkube.harness.checkout import REPO, cache_dir
from kafkube.harness.waiting import wait_until

KIND_SH = REPO / "scripts" / "kind.sh"
IMAGE_SH = REPO / "scripts" / "image.sh"
# Long enough for a warm `up` (~2 min) and, with an empty cache, the whole build.
UP_TIMEOUT = 3600.0
DOWN_TIMEOUT = 600.0
# A cold build of the node image takes ~10 min on 2 cores, longer at the lowest priority
# beside the integration tier.
BUILD_TIMEOUT = 3000.0


class KubectlError(RuntimeError):
    """A kubectl (or other cluster command) that exited non-zero; carries its output."""

    def __init__(self, argv: list[str], returncode: int, stdout: str, stderr: str) -> None:
        said = stderr.strip() or stdout[-2000:]
        super().__init__(f"{' '.join(argv)} exited {returncode}: {said}")
        self.returncode = returncode
        self.stdout = stdout
        self.stderr = stderr


@dataclass
class Cluster:
    """A reachable cluster: a kind cluster of our own (name and netns set) or an existing one."""

    kubeconfig: Path
    netns: str | None = None
    name: str | None = None
    kubectl_bin: str = "kubectl"
    env: dict[str, str] = field(default_factory=dict)

    def run_in_netns(
        self, argv: list[str], input: str | None = None, timeout: float = 120.0,
        check: bool = True,
    ) -> subprocess.CompletedProcess[str]:
        """Runs argv where the cluster's addresses are reachable (its netns, if it has one),
        with KUBECONFIG set; raises KubectlError on failure when check is set."""
        full = list(argv)
        if self.netns:
            full = ["nsenter", f"--net=/var/run/netns/{self.netns}", "--", *full]
        env = {**os.environ, **self.env, "KUBECONFIG": str(self.kubeconfig)}
        result = subprocess.run(
            full, input=input, capture_output=True, text=True, timeout=timeout, env=env)
        if check and result.returncode != 0:
            raise KubectlError(list(argv), result.returncode, result.stdout, result.stderr)
        return result

    def kubectl(self, *args: str, input: str | None = None, timeout: float = 120.0) -> str:
        """kubectl ARGS against the cluster; its stdout. Raises KubectlError on failure."""
        argv = [self.kubectl_bin, f"--request-timeout={int(timeout)}s", *args]
        return self.run_in_netns(argv, input=input, timeout=timeout + 10).stdout

    def on_node(self, node: str, *argv: str, timeout: float = 60.0) -> str:
        """A command on one node of our own kind cluster (a container of its Docker engine);
        its stdout. An existing cluster's nodes are not ours to reach."""
        if self.name is None:
            raise RuntimeError("running commands on nodes needs the suite's own kind cluster")
        return run_script([str(KIND_SH), "exec", self.name, "--", "docker", "exec", node,
                           *argv], timeout=timeout)

    def apply(self, manifest: str, namespace: str | None = None, timeout: float = 120.0) -> str:
        """kubectl apply of a YAML manifest given as text."""
        ns = ["-n", namespace] if namespace else []
        return self.kubectl(*ns, "apply", "-f", "-", input=manifest, timeout=timeout)


def existing_cluster() -> Cluster | None:
    """The cluster named by KAFKUBE_E2E_KUBECONFIG (a laptop's kind, any real cluster), if set.

    kubectl comes from KAFKUBE_E2E_KUBECTL or PATH; the project's images must already be
    loadable there (e.g. `kind load docker-image localhost/kafkube:dev`)."""
    kubeconfig = os.environ.get("KAFKUBE_E2E_KUBECONFIG")
    if not kubeconfig:
        return None
    return Cluster(kubeconfig=Path(kubeconfig),
                   kubectl_bin=os.environ.get("KAFKUBE_E2E_KUBECTL", "kubectl"))


def parse_up_output(stdout: str) -> dict[str, str]:
    """`kind.sh up` ends with NETNS=… and KUBECONFIG=… lines."""
    pairs = (line.split("=", 1) for line in stdout.splitlines() if "=" in line)
    return {key.strip(): value.strip() for key, value in pairs}


def build_images() -> None:
    """The broker, workload and Spark images from the working tree, so the suite tests this
    code, and the previous release's broker image, which the upgrade scenario starts from
    (scripts/image.sh builds only those whose inputs changed since their archive)."""
    run_script([str(IMAGE_SH)], timeout=1800)
    run_script([str(IMAGE_SH), "previous"], timeout=1800)
    run_script([str(IMAGE_SH), "spark"], timeout=1800)


def build_lock() -> Path:
    """The lock a kind build holds while it runs: scripts/setup.sh takes it for the build it
    starts in the background (`make test`: the node image is built while the unit and
    integration tiers run)."""
    return cache_dir() / "kind" / "build.lock"


def kind_built() -> None:
    """kind and its node image built: once a background build (if any) lets go of the lock,
    `scripts/kind.sh build` checks its stamps (a second when that build is done) or builds
    what is missing, failing with the build's own error."""
    lock = build_lock()
    lock.parent.mkdir(parents=True, exist_ok=True)
    with open(lock, "a") as held:

        def taken() -> bool:
            try:
                fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return False
            return True

        wait_until(taken, BUILD_TIMEOUT, "the background kind build (log: "
                   f"{cache_dir() / 'logs' / 'setup' / 'kind.log'})", 5.0)
        run_script([str(KIND_SH), "build"], timeout=BUILD_TIMEOUT)


def kind_up(name: str) -> Cluster:
    """`scripts/kind.sh up NAME`: a fresh 4-node cluster in its own network namespace."""
    out = run_script([str(KIND_SH), "up", name], timeout=UP_TIMEOUT)
    values = parse_up_output(out)
    kubectl = cache_dir() / "kubernetes" / os.environ.get("K8S_VERSION", "v1.35.4") / "bin"
    return Cluster(kubeconfig=Path(values["KUBECONFIG"]), netns=values["NETNS"], name=name,
                   kubectl_bin=str(kubectl / "kubectl"))


def kind_down(name: str) -> None:
    """`scripts/kind.sh down NAME`: cluster, Docker engine and network namespace removed."""
    run_script([str(KIND_SH), "down", name], timeout=DOWN_TIMEOUT)


@contextlib.contextmanager
def own_kind_cluster(name: str) -> Iterator[Cluster]:
    """The images built from this tree, then a fresh kind cluster NAME, torn down however
    the user of it ends (and when bringing it up fails half-way). The background build of
    `make test` is waited for first: it builds the images too (their stamps then say they
    are current)."""
    kind_built()
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


def run_script(argv: list[str], timeout: float) -> str:
    """Runs one of the repository's bash scripts; its stdout, or its stderr in the error."""
    result = subprocess.run(["bash", *argv], capture_output=True, text=True, timeout=timeout,
                            cwd=REPO)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({result.returncode}):\n"
                           f"{result.stderr[-4000:]}")
    return result.stdout
