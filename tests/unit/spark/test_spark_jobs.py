"""The Spark jobs' command lines (spark/kafkube_spark): bad options and missing connector
jars are refused with a message, before Spark starts."""

from __future__ import annotations

from pathlib import Path

import pytest

from kafkube_spark import batch, stream


def test_the_jobs_refuse_bad_options_with_a_message(capsys) -> None:
    with pytest.raises(SystemExit) as exit_:
        stream.main(["--output", "/tmp/x", "--checkpoint", "/tmp/c", "--trigger", "often"])
    assert exit_.value.code == 2
    assert "--trigger 'often'" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_:
        batch.main(["--output", "/tmp/x", "--ending-offsets", "{not json"])
    assert exit_.value.code == 2
    assert "--ending-offsets" in capsys.readouterr().err


def test_without_the_connectors_jars_a_job_says_how_to_get_them(
        tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("KAFKUBE_SPARK_JARS", str(tmp_path))
    with pytest.raises(SystemExit) as exit_:
        batch.main(["--output", str(tmp_path / "out")])
    assert exit_.value.code == 2
    assert "bash spark/setup.sh" in capsys.readouterr().err
