"""spark/k8s/submit.sh assembles spark-submit's arguments: the streaming job gets the s3a
settings of sparkapplication.yaml's orders-stream, the batch job none of them."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]


def submitted(tmp_path: Path, job: str, *args: str, **env: str) -> list[str]:
    fake = tmp_path / "spark-submit"
    fake.write_text('#!/bin/sh\nprintf "%s\\n" "$@"\n')
    fake.chmod(0o755)
    run = subprocess.run(
        ["bash", str(REPO / "spark" / "k8s" / "submit.sh"), job, *args], check=True,
        capture_output=True, text=True, timeout=30,
        env={**os.environ, "SPARK_SUBMIT": str(fake), "K8S_MASTER": "https://127.0.0.1:6443",
             **env})
    return run.stdout.splitlines()


def confs(argv: list[str]) -> dict[str, str]:
    return dict(argv[i + 1].split("=", 1) for i, a in enumerate(argv) if a == "--conf")


def test_stream_defaults_to_the_in_cluster_object_store(tmp_path: Path) -> None:
    argv = submitted(tmp_path, "stream")
    conf = confs(argv)
    assert conf["spark.hadoop.fs.s3a.endpoint"] == "http://s3:8333"
    assert conf["spark.hadoop.fs.s3a.connection.ssl.enabled"] == "false"
    for pod in ("driver", "executor"):
        assert conf[f"spark.kubernetes.{pod}.secretKeyRef.AWS_SECRET_ACCESS_KEY"] == \
            "s3-credentials:secret-key"
    assert argv[-4:] == ["--topic=orders", "--result-topic=order-totals",
                         "--output=s3a://spark/orders-stream/totals",
                         "--checkpoint=s3a://spark/orders-stream/checkpoint"]
    assert "local:///opt/app/kafkube_spark/stream.py" in argv


def test_stream_on_aws_keeps_the_default_credential_chain(tmp_path: Path) -> None:
    argv = submitted(tmp_path, "stream", "--topic=o", "--output=s3a://b/t",
                     S3_ENDPOINT="", S3_PREFIX="s3a://b/job")
    assert not [k for k in confs(argv) if "s3a" in k or "secretKeyRef" in k]
    assert argv[-3:] == ["--topic=o", "--output=s3a://b/t", "--checkpoint=s3a://b/job/checkpoint"]


def test_batch_has_no_object_store(tmp_path: Path) -> None:
    argv = submitted(tmp_path, "batch")
    assert not [k for k in confs(argv) if "s3a" in k or "secretKeyRef" in k]
    assert argv[-2:] == ["--topic=orders", "--result-topic=order-totals"]


def test_an_unknown_job_prints_the_usage(tmp_path: Path) -> None:
    run = subprocess.run(["bash", str(REPO / "spark" / "k8s" / "submit.sh"), "nightly"],
                         capture_output=True, text=True, timeout=30)
    assert run.returncode == 2
    assert "spark/k8s/submit.sh stream" in run.stderr
