"""`kafkube broker`'s command line refuses bad configuration at start, naming the key,
and reports a port in use."""

from __future__ import annotations

import subprocess
import sys


def test_cli_refuses_a_bad_value_at_start(tmp_path):
    config = tmp_path / "server.properties"
    config.write_text(f"log.dirs={tmp_path}\nlog.segment.bytes=lots\n")
    result = subprocess.run(
        [sys.executable, "-m", "kafkube", "broker", "--config", str(config)],
        capture_output=True, text=True, timeout=30,
    )
    assert result.returncode == 2
    assert "invalid configuration: log.segment.bytes: expected an integer" in result.stderr
    missing = subprocess.run(
        [sys.executable, "-m", "kafkube", "broker", "--config", str(tmp_path / "nope")],
        capture_output=True, text=True, timeout=30,
    )
    assert missing.returncode == 2 and "cannot read config file" in missing.stderr
    bad_override = subprocess.run(
        [sys.executable, "-m", "kafkube", "broker", "--override", "novalue"],
        capture_output=True, text=True, timeout=30,
    )
    assert bad_override.returncode == 2 and "expects key=value" in bad_override.stderr


def test_cli_reports_a_port_in_use(tmp_path, broker):
    result = subprocess.run(
        [sys.executable, "-m", "kafkube", "broker", "--override", f"log.dirs={tmp_path}/x",
         "--override", f"listeners=PLAINTEXT://{broker.bootstrap}",
         "--override", "kafkube.metrics.port=-1"],
        capture_output=True, text=True, timeout=30,
    )
    assert result.returncode == 1
    assert "Address already in use" in result.stderr
