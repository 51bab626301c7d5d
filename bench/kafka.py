"""Apache Kafka for ``python -m bench compare``: fetch the jars, run a KRaft cluster, run the
perf tools.

- **Jars** (``kafkube.harness.kafka_jars``, shared with the tests that run Kafka's
  tools): ``bench/setup_kafka.sh`` resolves ``org.apache.kafka:kafka_2.13`` and
  ``org.apache.kafka:kafka-tools`` (version pinned in ``bench/kafka/pom.xml``) with their
  runtime dependencies through Maven into ``~/.cache/kafkube/kafka-<version>/libs``; the
  processes run with plain ``java -cp 'libs/*'``, as the distribution's scripts do.
- **Cluster**: ``KafkaCluster(n)`` formats ``n`` log dirs (``kafka.tools.StorageTool format``
  with one cluster id) and starts ``n`` combined broker+controller nodes
  (``process.roles=broker,controller``, a static ``controller.quorum.voters`` of all ``n``)
  on 127.0.0.1 with the JVM options of ``kafka-server-start.sh``. ``with KafkaCluster(...)``
  always ends with every process it started dead (SIGTERM, then SIGKILL).
- **Tools**: ``run_tool`` runs ``org.apache.kafka.tools.ProducerPerformance`` /
  ``ConsumerPerformance`` in a JVM of their own, killed if it outlives its timeout.
"""

from __future__ import annotations

import base64
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from string import Template
from types import TracebackType

from kafkube.harness.kafka_jars import KAFKA_CONF
from kafkube.harness.ports import free_port_base
from kafkube.harness.process_group import kill_group

READY_MARK = "Kafka Server started"
# kafka-run-class.sh's KAFKA_JVM_PERFORMANCE_OPTS.
JVM_PERFORMANCE_OPTS = [
    "-server", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
    "-XX:InitiatingHeapOccupancyPercent=35", "-XX:+ExplicitGCInvokesConcurrent",
    "-Djava.awt.headless=true",
]
TOOL_HEAP = "512M"  # kafka-producer-perf-test.sh / kafka-consumer-perf-test.sh
START_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 20.0


def java_version() -> str:
    try:
        out = subprocess.run(["java", "-version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return "java: not found"
    first = (out.stderr or out.stdout).splitlines()
    return first[0].strip() if first else "java: unknown"


# util-linux's setpriv sets PR_SET_PDEATHSIG and execs the JVM: if the harness dies without
# running its finally blocks (SIGKILL), its JVMs get SIGKILL too instead of holding ports.
# (A preexec_fn could do the same, but forking with librdkafka's threads running makes that
# unsafe.) The harness starts every JVM from its main thread, the one whose exit counts.
_SETPRIV = ["setpriv", "--pdeathsig", "KILL", "--"] if shutil.which("setpriv") else []


def _java(libs: Path, heap: str, main: str, args: list[str], log4j: Path,
          server: bool = False) -> list[str]:
    """``kafka-run-class.sh``'s command line: a fixed heap for the server, a cap for tools."""
    heap_opts = [f"-Xmx{heap}", f"-Xms{heap}"] if server else [f"-Xmx{heap}"]
    return [*_SETPRIV, "java", *heap_opts, *JVM_PERFORMANCE_OPTS,
            f"-Dlog4j2.configurationFile={log4j}", "-cp", f"{libs}/*", main, *args]


def random_uuid() -> str:
    """What ``kafka-storage.sh random-uuid`` prints (``Uuid.randomUuid()``: 16 random bytes,
    URL-safe base64 without padding, never starting with '-'), without a JVM start."""
    for _ in range(100):
        uuid = base64.urlsafe_b64encode(os.urandom(16)).rstrip(b"=").decode()
        if not uuid.startswith("-"):
            return uuid
    raise RuntimeError("no cluster id in 100 tries")


class KafkaCluster:
    """``nodes`` Apache Kafka KRaft nodes, each a combined broker and controller.

    ``config`` is appended to every node's ``server.properties`` (the settings shared with
    kafkube). Node ``i`` listens on ``base + i`` (clients) and ``base + nodes + i``
    (controller).
    """

    def __init__(self, libs: Path, nodes: int, config: dict[str, str], heap: str = "1G",
                 keep: bool = False, tls: TlsFiles | None = None) -> None:
        """``tls``: also an SSL listener on ``base + 2 * nodes + i`` (``ssl_bootstrap``)."""
        self.libs, self.size, self.config, self.heap, self.keep = libs, nodes, config, heap, keep
        self.tls = tls
        self.data_dir = Path(tempfile.mkdtemp(prefix="kafkube-bench-kafka-"))
        self.base_port = 0
        self.procs: list[subprocess.Popen[bytes]] = []
        self.commands: list[list[str]] = []

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{self.base_port + i}" for i in range(self.size))

    @property
    def ssl_bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{self.base_port + 2 * self.size + i}"
                        for i in range(self.size))

    def node_dir(self, node: int) -> Path:
        return self.data_dir / f"node-{node}"

    def log_path(self, node: int) -> Path:
        return self.node_dir(node) / "server.log"

    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]

    def __enter__(self) -> KafkaCluster:
        try:
            self.start()
        except BaseException:
            self.keep = True
            self.stop()
            print(f"kafka logs kept: {self.data_dir}", file=sys.stderr)
            raise
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if exc is not None:  # keep the logs of a failed run
            self.keep = True
        self.stop()
        if exc is not None:
            print(f"kafka logs kept: {self.data_dir}", file=sys.stderr)

    def properties(self, node: int) -> str:
        voters = ",".join(f"{i}@127.0.0.1:{self.base_port + self.size + i}"
                          for i in range(self.size))
        text = Template((KAFKA_CONF / "server.properties").read_text()).substitute(
            node_id=node, voters=voters, port=self.base_port + node,
            controller_port=self.base_port + self.size + node,
            log_dir=self.node_dir(node) / "data", internal_rf=self.size,
            internal_min_isr=min(2, self.size),
        )
        shared = "".join(f"{k}={v}\n" for k, v in self.config.items())
        text = f"{text}\n# Shared with kafkube (bench.systems.SHARED_BROKER_CONFIG)\n{shared}"
        if self.tls is not None:  # later keys win in a properties file
            port, ssl_port = self.base_port + node, self.base_port + 2 * self.size + node
            controller = self.base_port + self.size + node
            text += (
                "\n# An SSL listener beside PLAINTEXT (bench tls)\n"
                f"listeners=PLAINTEXT://127.0.0.1:{port},SSL://127.0.0.1:{ssl_port},"
                f"CONTROLLER://127.0.0.1:{controller}\n"
                f"advertised.listeners=PLAINTEXT://127.0.0.1:{port},"
                f"SSL://127.0.0.1:{ssl_port}\n"
                "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SSL:SSL,"
                "CONTROLLER:PLAINTEXT\n"
                f"ssl.keystore.type=PEM\nssl.keystore.location={self.tls.keystore}\n"
                f"ssl.truststore.type=PEM\nssl.truststore.location={self.tls.ca}\n")
        return text

    def start(self) -> None:
        self.base_port = free_port_base(3 * self.size)
        log4j = KAFKA_CONF / "log4j2.properties"
        cluster_id = random_uuid()
        # Format every node's storage, in parallel (each is a JVM start, ~3 s).
        formats = []
        for node in range(self.size):
            self.node_dir(node).mkdir(parents=True)
            props = self.node_dir(node) / "server.properties"
            props.write_text(self.properties(node))
            with (self.node_dir(node) / "format.log").open("wb") as log:
                formats.append(subprocess.Popen(
                    _java(self.libs, "256M", "kafka.tools.StorageTool",
                          ["format", "--cluster-id", cluster_id, "--config", str(props)], log4j),
                    stdout=log, stderr=subprocess.STDOUT, start_new_session=True))
        try:
            for node, proc in enumerate(formats):
                code = proc.wait(START_TIMEOUT_S)
                if code != 0:
                    raise RuntimeError(f"kafka node {node}: storage format failed ({code}):\n"
                                       + _tail(self.node_dir(node) / "format.log"))
        finally:
            for proc in formats:
                kill_group(proc, 0)
        for node in range(self.size):
            command = _java(self.libs, self.heap, "kafka.Kafka",
                            [str(self.node_dir(node) / "server.properties")], log4j,
                            server=True)
            self.commands.append(command)
            with self.log_path(node).open("wb") as log:
                self.procs.append(subprocess.Popen(
                    command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                    start_new_session=True, cwd=self.node_dir(node)))
        deadline = time.monotonic() + START_TIMEOUT_S
        for node, proc in enumerate(self.procs):
            while READY_MARK not in self.log_path(node).read_text(errors="replace"):
                if proc.poll() is not None:
                    raise RuntimeError(f"kafka node {node} exited with {proc.returncode}:\n"
                                       + _tail(self.log_path(node)))
                if time.monotonic() > deadline:
                    raise RuntimeError(f"kafka node {node} not started within "
                                       f"{START_TIMEOUT_S:.0f}s:\n" + _tail(self.log_path(node)))
                time.sleep(0.2)


    def alive(self) -> bool:
        return all(p.poll() is None for p in self.procs)

    def stop(self) -> None:
        """SIGTERM every node at once, SIGKILL what is left after ``STOP_TIMEOUT_S``."""
        for proc in self.procs:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGTERM)
        threads = [threading.Thread(target=kill_group, args=(p, STOP_TIMEOUT_S))
                   for p in self.procs]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(STOP_TIMEOUT_S + 30)
        if not self.keep:
            deadline = time.monotonic() + 10
            while self.data_dir.exists() and time.monotonic() < deadline:
                shutil.rmtree(self.data_dir, ignore_errors=True)


@dataclass(frozen=True)
class TlsFiles:
    keystore: Path  # PEM: the key, then the certificate
    ca: Path


def _tail(path: Path, lines: int = 25) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return "".join(text.splitlines(keepends=True)[-lines:])


def tool_command(libs: Path, main: str, args: list[str]) -> list[str]:
    return _java(libs, TOOL_HEAP, f"org.apache.kafka.tools.{main}", args,
                 KAFKA_CONF / "tools-log4j2.properties")


def run_tool(libs: Path, main: str, args: list[str], timeout: float) -> str:
    """Run a Kafka perf tool to the end; its stdout. RuntimeError if it fails or times out
    (the JVM is killed then)."""
    command = tool_command(libs, main, args)
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(command, stdout=out, stderr=err, stdin=subprocess.DEVNULL,
                                start_new_session=True)
        try:
            code = proc.wait(timeout)
        except subprocess.TimeoutExpired:
            code = None
        finally:
            kill_group(proc, 0)
        out.seek(0)
        err.seek(0)
        stdout = out.read().decode(errors="replace")
        stderr = err.read().decode(errors="replace")
    if code is None:
        raise RuntimeError(f"{main} still running after {timeout:.0f}s; killed.\n"
                           f"{stdout[-2000:]}{stderr[-2000:]}")
    if code != 0:
        raise RuntimeError(f"{main} exited with {code}:\n{stdout[-2000:]}{stderr[-3000:]}")
    return stdout
