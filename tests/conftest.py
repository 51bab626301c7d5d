"""Fixtures that run real broker processes on loopback."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

READY = re.compile(r"listening on (\S+://[\d.]+:\d+(?:, \S+://[\d.]+:\d+)*)"
                   r"(?:, metrics on http://\*:(\d+))?")
LISTENER = re.compile(r"(\S+)://([\d.]+):(\d+)")
HEALTH = re.compile(r"health on http://\*:(\d+)/ready")
START_TIMEOUT = 30.0


class BrokerProcess:
    """One `kafkube broker` process; restartable on the same log.dirs."""

    def __init__(self, log_dir: Path, overrides: dict[str, str]) -> None:
        self.log_dir = log_dir
        self.overrides = overrides
        self.proc: subprocess.Popen[str] | None = None
        self.port = 0  # of the first listener
        self.ports: dict[str, int] = {}  # by listener name
        self.metrics_port = 0
        self.health_port = 0
        self.output: list[str] = []

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def bootstrap_of(self, listener: str) -> str:
        return f"127.0.0.1:{self.ports[listener]}"

    def start(self) -> BrokerProcess:
        # Reuse the ports on restart so clients that knew the broker find it again.
        listeners = self.overrides.get("listeners", "PLAINTEXT://127.0.0.1:0")
        listeners = LISTENER.sub(
            lambda m: f"{m[1]}://{m[2]}:{self.ports.get(m[1], int(m[3]))}", listeners)
        config = {
            "log.dirs": str(self.log_dir),
            "kafkube.metrics.port": "0",
            **self.overrides,
            "listeners": listeners,
        }
        args = [sys.executable, "-m", "kafkube", "broker"]
        for key, value in config.items():
            args += ["--override", f"{key}={value}"]
        self.proc = subprocess.Popen(
            args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        ready = threading.Event()
        threading.Thread(target=self._pump, args=(self.proc, ready), daemon=True).start()
        if not ready.wait(START_TIMEOUT) or self.proc.poll() is not None:
            self.proc.kill()
            raise RuntimeError("broker did not start:\n" + "".join(self.output[-40:]))
        return self

    def _pump(self, proc: subprocess.Popen[str], ready: threading.Event) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            self.output.append(line)
            match = READY.search(line)
            if match:
                bound = LISTENER.findall(match.group(1))
                self.ports = {name: int(port) for name, _, port in bound}
                self.port = int(bound[0][2])
                self.metrics_port = int(match.group(2) or 0)
                health = HEALTH.search(line)
                self.health_port = int(health.group(1)) if health else 0
                ready.set()
        ready.set()

    def kill(self) -> None:
        """SIGKILL: no flush, no clean-shutdown marker."""
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self, timeout: float = 30) -> int:
        """SIGTERM, then wait longer than the broker's own stop deadline (20 s), so a stuck
        shutdown logs what it was stuck on before we kill it."""
        if self.proc is None:
            return 0
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
                raise
        return self.proc.returncode

    def restart(self) -> BrokerProcess:
        self.stop()
        return self.start()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


@pytest.fixture
def broker_factory(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator:
    started: list[BrokerProcess] = []
    request.node._kafkube_brokers = started

    def make(**overrides: str) -> BrokerProcess:
        log_dir = tmp_path / f"broker-{len(started)}"
        broker = BrokerProcess(log_dir, {k.replace("_", "."): str(v) for k, v in overrides.items()})
        started.append(broker)
        return broker.start()

    yield make
    for broker in started:
        if broker.alive():
            code = broker.stop()
            assert code == 0, "broker exited uncleanly:\n" + "".join(broker.output[-40:])


@pytest.fixture
def broker(broker_factory) -> BrokerProcess:
    return broker_factory()


def new_cluster(backend):
    """``backend`` with the image of a new cluster in its store (as the first broker of a new
    cluster creates it), unless one is there already; returned for chaining."""
    from broker.cluster.backend import new_cluster_id
    from broker.cluster.image import ClusterImage

    backend.create_image(new_cluster_id(), ClusterImage())
    return backend


def scrape(port: int) -> dict[str, float]:
    """A broker's Prometheus samples, by name with labels."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    samples = {}
    for line in text.splitlines():
        match = re.match(r"^([^#\s]+)\s+(\S+)$", line)
        if match:
            samples[match.group(1)] = float(match.group(2))
    return samples


def wait_until(predicate, timeout: float, what: str, interval: float = 0.05):
    """Poll ``predicate`` until it returns a truthy value; fail with ``what`` at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Attach the brokers' and operators' own logs to a failing test's report."""
    outcome = yield
    report = outcome.get_result()
    if report.failed and "broker_factory" in item.fixturenames:
        factory_brokers = getattr(item, "_kafkube_brokers", [])
        for i, broker in enumerate(factory_brokers):
            report.sections.append((f"broker {i} log", "".join(broker.output[-80:])))
    if report.failed:
        for i, operator in enumerate(getattr(item, "_kafkube_operators", [])):
            report.sections.append((f"operator {i} log", operator.tail(80)))


def open_replicas(config, rack: str | None = None):
    """The storage layers of one broker, in-process, as the only broker of its cluster: the
    embedded coordination backend in its log dir, this node registered, the replicas loaded."""
    from broker.cluster.backend import BrokerRegistration
    from broker.cluster.metadata import ClusterMetadata
    from broker.cluster.sqlite import SqliteBackend
    from broker.server.dynamic_config import follow_dynamic_configs
    from broker.server.replica_manager import ReplicaManager

    log_dirs = [Path(d) for d in config.log_dirs]
    store = ClusterMetadata(SqliteBackend(log_dirs[0] / "cluster.db"), log_dirs, config.node_id)
    registration = BrokerRegistration(config.node_id, "127.0.0.1", 9092, rack)
    epoch = store.backend.register_broker(registration, 3_600_000)
    store.backend.acquire_controller(config.node_id, epoch, 3_600_000)
    store.refresh()
    follow_dynamic_configs(config, store)
    replicas = ReplicaManager(config, store)
    replicas.load()
    replicas.apply_image(store.image)
    return store, replicas


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator:
    """A real kube-apiserver (and etcd) on loopback, shared by the session's tests; each test
    keeps to a cluster name of its own."""
    from tests.kube_control_plane import LocalControlPlane, build_apiserver

    plane = LocalControlPlane(tmp_path_factory.mktemp("control-plane"), build_apiserver())
    try:
        yield plane.start()
    finally:
        plane.stop()


@pytest.fixture(scope="session")
def crd_api(control_plane: Any) -> Iterator:
    """An API client of the control plane with this tree's CRDs (crds/) installed, or
    replaced by this tree's, and established."""
    import yaml
    from kubernetes import client as k8s
    from kubernetes.client.rest import ApiException

    from broker.cluster.kubernetes import api_client

    with api_client(str(control_plane.kubeconfig)) as client:
        ext = k8s.ApiextensionsV1Api(client)
        for path in sorted((Path(__file__).resolve().parents[1] / "crds").glob("*.yaml")):
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


def finish_now(coroutine):
    """Run a coroutine that completes without ever waiting, from sync code even inside a
    running event loop: with the SQLite backend, coordination writes are made inline."""
    try:
        coroutine.send(None)
    except StopIteration as done:
        return done.value
    coroutine.close()
    raise AssertionError("the coroutine waited; run it on an event loop instead")
