"""Apache Kafka's own jars (the broker, its command-line and perf tools), for what runs them
beside kafkube: `python -m bench compare` and its kin, and the tests that run Kafka's tools
against a kafkube cluster as a user would.

``bench/setup_kafka.sh`` resolves ``org.apache.kafka:kafka_2.13`` and
``org.apache.kafka:kafka-tools`` (the version pinned in ``bench/kafka/pom.xml``) with their
runtime dependencies into ``~/.cache/kafkube/kafka-<version>/libs``; scripts/setup.sh calls
it. The script and the pom stay with the benchmarks that introduced them; both sides find
them through the checkout (``checkout``).
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from kafkube.harness.checkout import REPO

KAFKA_CONF = REPO / "bench" / "kafka"  # the pom, server.properties, log4j configurations
SETUP = REPO / "bench" / "setup_kafka.sh"


def version() -> str:
    """The pinned Kafka version, from ``bench/kafka/pom.xml``."""
    match = re.search(r"<kafka\.version>([^<]+)</kafka\.version>",
                      (KAFKA_CONF / "pom.xml").read_text())
    if match is None:
        raise RuntimeError(f"no <kafka.version> in {KAFKA_CONF / 'pom.xml'}")
    return match.group(1)


def ensure_jars(timeout: float = 900.0) -> Path:
    """Run ``bench/setup_kafka.sh`` (a no-op once cached) and return the libs directory."""
    try:
        done = subprocess.run(["bash", str(SETUP)], capture_output=True, text=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"{SETUP} did not finish within {timeout:.0f}s") from None
    if done.returncode != 0:
        raise RuntimeError(f"{SETUP} failed:\n{done.stderr[-4000:]}")
    libs = Path(done.stdout.strip().splitlines()[-1])
    if not (libs / f"kafka_2.13-{version()}.jar").exists():
        raise RuntimeError(f"{SETUP} printed {libs}, which has no kafka_2.13 jar")
    return libs
