"""Apache Kafka's own command-line tools, run against kafkube as a user would run them.

The jars are the ones ``python -m bench compare`` uses (``kafkube.harness.kafka_jars``: the
``kafka_2.13`` and ``kafka-tools`` artifacts from Maven Central with their dependencies,
cached under ``~/.cache/kafkube/kafka-<version>/libs``; ``scripts/setup.sh`` fetches them).
A tool runs as ``kafka-run-class.sh`` would run it, ``java -cp 'libs/*' <main class> …``, in
a JVM of its own with options for a short life (C1 only, serial GC): these tools spend most
of their time starting.

Use the ``kafka_tools`` fixture (session-scoped; registered by tests/conftest.py)::

    def test_x(kafka_tools, cluster_factory):
        out = kafka_tools.run(TOPIC_COMMAND, "--bootstrap-server", b, "--list").stdout
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from kafkube.harness.kafka_jars import KAFKA_CONF, ensure_jars
from kafkube.harness.process_group import kill_group

TOPIC_COMMAND = "org.apache.kafka.tools.TopicCommand"
CONFIG_COMMAND = "org.apache.kafka.tools.ConfigCommand"  # kafka.admin. until Kafka 4.1
DUMP_LOG_SEGMENTS = "org.apache.kafka.tools.DumpLogSegments"  # kafka.tools. until 4.1
GET_OFFSET_SHELL = "org.apache.kafka.tools.GetOffsetShell"
LOG_DIRS_COMMAND = "org.apache.kafka.tools.LogDirsCommand"
REASSIGN_PARTITIONS_COMMAND = "org.apache.kafka.tools.reassign.ReassignPartitionsCommand"
LEADER_ELECTION_COMMAND = "org.apache.kafka.tools.LeaderElectionCommand"
DELETE_RECORDS_COMMAND = "org.apache.kafka.tools.DeleteRecordsCommand"
CONSUMER_GROUP_COMMAND = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand"
GROUPS_COMMAND = "org.apache.kafka.tools.GroupsCommand"
TRANSACTIONS_COMMAND = "org.apache.kafka.tools.TransactionsCommand"
FEATURE_COMMAND = "org.apache.kafka.tools.FeatureCommand"  # kafka-features.sh
VERIFIABLE_PRODUCER = "org.apache.kafka.tools.VerifiableProducer"
VERIFIABLE_CONSUMER = "org.apache.kafka.tools.VerifiableConsumer"

# Short-lived JVMs: the client-only JIT and the serial collector start fastest on 2 cores.
JVM_OPTS = ["-Xmx256M", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC",
            "-Djava.awt.headless=true"]
DEFAULT_TIMEOUT = 120.0


@dataclass(frozen=True, slots=True)
class ToolResult:
    main: str
    args: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str

    def describe(self) -> str:
        short = self.main.rsplit(".", 1)[-1]
        return (f"{short} {' '.join(self.args)} exited {self.returncode}\n"
                f"--- stdout ---\n{self.stdout[-4000:]}\n--- stderr ---\n{self.stderr[-4000:]}")


class ToolFailed(AssertionError):
    pass


class KafkaTools:
    def __init__(self, libs: Path) -> None:
        self.libs = libs

    def command(self, main: str, args: tuple[str, ...]) -> list[str]:
        return ["java", *JVM_OPTS,
                f"-Dlog4j2.configurationFile={KAFKA_CONF / 'tools-log4j2.properties'}",
                "-cp", f"{self.libs}/*", main, *args]

    def run(self, main: str, *args: str, timeout: float = DEFAULT_TIMEOUT,
            check: bool = True, stdin: str | None = None) -> ToolResult:
        """Run ``main`` to the end. With ``check``, a non-zero exit fails the test with the
        tool's output; a tool still running at ``timeout`` is killed and always fails."""
        with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
            proc = subprocess.Popen(
                self.command(main, args), stdout=out, stderr=err,
                stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                start_new_session=True,
            )
            try:
                proc.communicate(stdin.encode() if stdin is not None else None, timeout)
            except subprocess.TimeoutExpired:
                kill_group(proc)
                out.seek(0)
                raise ToolFailed(f"{main} {' '.join(args)} still running after {timeout}s; "
                                 f"killed\n{out.read().decode(errors='replace')[-4000:]}") from None
            out.seek(0)
            err.seek(0)
            result = ToolResult(main, args, proc.returncode,
                                out.read().decode(errors="replace"),
                                err.read().decode(errors="replace"))
        if check and result.returncode != 0:
            raise ToolFailed(result.describe())
        return result

    @contextlib.contextmanager
    def spawn(self, main: str, *args: str) -> Iterator[RunningTool]:
        """A long-running tool (VerifiableProducer, VerifiableConsumer): its stdout lines
        are collected as they come; the JVM is stopped (SIGTERM, then SIGKILL) on exit."""
        proc = subprocess.Popen(self.command(main, args), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
                                start_new_session=True)
        tool = RunningTool(proc)
        try:
            yield tool
        finally:
            kill_group(proc)
            tool.join()


class RunningTool:
    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.proc = proc
        self.lines: list[str] = []
        self.errors: list[str] = []
        self._threads = [
            threading.Thread(target=self._pump, args=(proc.stdout, self.lines), daemon=True),
            threading.Thread(target=self._pump, args=(proc.stderr, self.errors), daemon=True),
        ]
        for thread in self._threads:
            thread.start()

    @staticmethod
    def _pump(stream, into: list[str]) -> None:
        for line in stream:
            into.append(line)

    def wait(self, timeout: float) -> int:
        """Wait for the tool to exit by itself; its exit code."""
        code = self.proc.wait(timeout)
        self.join()
        return code

    def stop(self, timeout: float = 30.0) -> int:
        """SIGTERM (the Verifiable tools print their summary on it), then wait."""
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
        return self.wait(timeout)

    def join(self) -> None:
        for thread in self._threads:
            thread.join(10)


@pytest.fixture(scope="session")
def kafka_tools() -> KafkaTools:
    return KafkaTools(ensure_jars())
