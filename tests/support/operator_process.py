"""``kafkube operator`` as a real process against the test control plane, for the operator's
tests: its output kept for the failure report, its metrics endpoint on a port of its own."""

from __future__ import annotations

import subprocess
import sys
import threading
import urllib.error
import urllib.request
from pathlib import Path

from kafkube.harness.ports import free_port


class OperatorProcess:
    def __init__(self, kubeconfig: Path, namespace: str, lease_duration_s: int = 5) -> None:
        self.metrics_port = free_port()
        self.output: list[str] = []
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "kafkube", "operator", "--kubeconfig", str(kubeconfig),
             "--namespace", namespace, "--lease-namespace", namespace,
             "--lease-duration", str(lease_duration_s),
             "--metrics-port", str(self.metrics_port)],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.output.append(line)

    def metric(self, name: str, labels: str = "") -> float | None:
        """One sample of the operator's /metrics, or None if absent or not served yet."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics",
                                        timeout=5) as response:
                text = response.read().decode()
        except urllib.error.URLError:
            return None
        key = f"{name}{{{labels}}}" if labels else name
        for line in text.splitlines():
            if line.startswith(key + " "):
                return float(line.split()[-1])
        return None

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait(10)

    def stop(self, timeout: float = 30) -> int:
        if self.proc.poll() is None:
            self.proc.terminate()
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
            raise AssertionError("the operator did not stop on SIGTERM:\n"
                                 + "".join(self.output[-40:])) from None

    def tail(self, lines: int = 60) -> str:
        return "".join(self.output[-lines:])
