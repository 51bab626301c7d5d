"""What the test tiers share and the harness (kafkube/harness) does not: pytest fixtures,
registered for every tier by tests/conftest.py's ``pytest_plugins``, and helpers for the
clients the tests drive (Java programs, Kafka's tools, Spark jobs, the operator process)."""

from __future__ import annotations

from pathlib import Path

TESTS_DIR = Path(__file__).resolve().parents[1]
REPO = TESTS_DIR.parent  # the checkout
CLIENTS_DIR = TESTS_DIR / "clients"  # the Java and Go test clients, built by scripts/setup.sh
