"""The Spark jobs (spark/kafkube_spark) as real processes in local mode, for the pipeline's
tests: a job is ``python -m kafkube_spark.<job>``, exactly what the README runs, with its
output kept for the failure message."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

from kafkube_spark.events import Total

JOB_TIMEOUT = 240.0


class SparkJob:
    def __init__(self, job: str, *args: str, master: str = "local[2]") -> None:
        self.output: list[str] = []
        env = {**os.environ, "PYSPARK_PYTHON": sys.executable,
               "PYSPARK_DRIVER_PYTHON": sys.executable}
        # A session of its own: a kill reaches the JVM that pyspark starts as its child.
        self.proc = subprocess.Popen(
            [sys.executable, "-m", f"kafkube_spark.{job}", *args, "--master", master],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
            start_new_session=True)
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.output.append(line)

    def tail(self, lines: int = 60) -> str:
        return "".join(self.output[-lines:])

    def wait(self, timeout: float = JOB_TIMEOUT) -> int:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"job still running after {timeout}s:\n{self.tail()}") from None

    def succeed(self, timeout: float = JOB_TIMEOUT) -> str:
        code = self.wait(timeout)
        assert code == 0, f"job exited {code}:\n{self.tail()}"
        return "".join(self.output)

    def kill(self) -> None:
        """SIGKILL the job: the Python driver and its JVM together."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(30)


def committed_batches(checkpoint: Path) -> int:
    """Micro-batches the query has committed (files in its checkpoint's commits/)."""
    commits = checkpoint / "commits"
    return sum(1 for p in commits.iterdir() if p.name.isdigit()) if commits.exists() else 0


def read_totals(output: Path, scratch: Path) -> list[Total]:
    """The totals a job wrote, read back through Spark (kafkube_spark.report)."""
    rows = scratch / f"rows-{len(list(scratch.glob('rows-*')))}.json"
    SparkJob("report", "--output", str(output), "--json", str(rows),
             master="local[1]").succeed()
    return sorted(Total(**r) for r in json.loads(rows.read_text()))
