"""The Spark pipeline's platform on the suite's cluster, installed as docs/spark.md tells a
user to: the Kubeflow Spark Operator from its own Helm chart with spark/k8s's values, the
object store of spark/k8s/object-store.yaml, and SparkApplications from
spark/k8s/sparkapplication.yaml; and the pods the scenarios read results with."""

from __future__ import annotations

import contextlib
import json
import re
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import yaml

from kafkube.harness.checkout import REPO
from kafkube.harness.kind.deployment import Brokers
from kafkube.harness.kind.operated import helm_release
from kafkube.harness.kind.platform import Cluster
from kafkube_spark.events import Total

SPARK_K8S = REPO / "spark" / "k8s"
# spark/k8s/rbac.yaml binds the Spark Operator's controller account in this namespace.
SPARK_OPERATOR_NAMESPACE = "spark-operator"


def spark_operator_chart() -> Path:
    """The chart in the Spark Operator's Go module, the version scripts/go_tool.sh builds."""
    out = subprocess.run(["bash", str(REPO / "scripts" / "go_tool.sh"), "spark-operator",
                          "--source"], capture_output=True, text=True, timeout=300)
    if out.returncode != 0 or not out.stdout.strip():
        raise RuntimeError(f"scripts/go_tool.sh spark-operator --source: {out.stderr}")
    return Path(out.stdout.strip()) / "charts" / "spark-operator-chart"


@contextlib.contextmanager
def installed_spark_operator(cluster: Cluster, job_namespace: str) -> Iterator[None]:
    """The Spark Operator's chart with spark/k8s/spark-operator.values.yaml, watching
    JOB_NAMESPACE (docs/spark.md's command)."""
    with helm_release(cluster, "spark-operator", spark_operator_chart(),
                      SPARK_OPERATOR_NAMESPACE, "-f",
                      str(SPARK_K8S / "spark-operator.values.yaml"),
                      "--set", f"spark.jobNamespaces={{{job_namespace}}}"):
        yield


def manifest_document(path: Path, kind: str, name: str) -> dict:
    """One object of a repository manifest with several, by kind and name."""
    for document in yaml.safe_load_all(path.read_text()):
        if document and document["kind"] == kind and document["metadata"]["name"] == name:
            return document
    raise KeyError(f"no {kind} {name} in {path}")


def application(cluster: Cluster, namespace: str, name: str) -> dict:
    """A SparkApplication as the API server has it (status included)."""
    return json.loads(cluster.kubectl("-n", namespace, "get", "sparkapplication", name,
                                      "-o", "json"))


def application_state(cluster: Cluster, namespace: str, name: str) -> str:
    """The state `kubectl get sparkapplications` shows (RUNNING, FAILING, PENDING_RERUN…)."""
    status = application(cluster, namespace, name).get("status", {})
    return status.get("applicationState", {}).get("state", "")


@dataclass(frozen=True)
class Driver:
    """A driver pod of a SparkApplication: each submission makes a new one (same name, new
    uid, new Spark application id, which its executors carry as spark-app-selector)."""

    name: str
    uid: str
    phase: str
    spark_app_id: str


def driver_pod(cluster: Cluster, namespace: str, name: str) -> Driver | None:
    """The application's driver pod, if there is one."""
    pods = json.loads(cluster.kubectl(
        "-n", namespace, "get", "pods", "-l",
        f"sparkoperator.k8s.io/app-name={name},spark-role=driver", "-o", "json"))["items"]
    if not pods:
        return None
    meta = pods[0]["metadata"]
    return Driver(meta["name"], meta["uid"], pods[0]["status"].get("phase", ""),
                  meta.get("labels", {}).get("spark-app-selector", ""))


def running_pods(cluster: Cluster, namespace: str, selector: str) -> list[str]:
    """Names of the pods matching SELECTOR that are Running and not being deleted."""
    pods = json.loads(cluster.kubectl("-n", namespace, "get", "pods", "-l", selector,
                                      "-o", "json"))["items"]
    return sorted(p["metadata"]["name"] for p in pods
                  if p["status"].get("phase") == "Running"
                  and not p["metadata"].get("deletionTimestamp"))


def latest_batch(cluster: Cluster, namespace: str, driver: str) -> int:
    """The highest micro-batch id the driver has started tasks for (its log: Spark's
    "[batchId = N] Starting task"), -1 before the first."""
    log = cluster.kubectl("-n", namespace, "logs", driver, timeout=120)
    started = [int(m.group(1)) for m in _STARTING_TASK.finditer(log)]
    return max(started, default=-1)


_STARTING_TASK = re.compile(r"\[batchId = (\d+)\] Starting task")


def s3_spark_conf(app: dict) -> dict[str, str]:
    """The s3a settings of a SparkApplication's sparkConf (endpoint, path style…), for
    another Spark program to read what the application wrote."""
    return {k: v for k, v in app["spec"]["sparkConf"].items()
            if k.startswith("spark.hadoop.fs.s3a.")}


def read_parquet_totals(brokers: Brokers, app: dict, output: str,
                        timeout: float = 600) -> list[Total]:
    """The totals in a Parquet folder on the object store, read through Spark (which counts
    only the files a streaming sink's _spark_metadata log commits) by kafkube_spark.report in
    a client pod of APP's image, with APP's s3a settings and the credentials of the Secret
    s3-credentials."""
    submit_args = " ".join(f"--conf {k}={v}" for k, v in s3_spark_conf(app).items())
    secret = {"name": "s3-credentials"}
    pod = brokers.start_pod({
        "image": app["spec"]["image"],
        "command": ["bash", "-c", "python -m kafkube_spark.report --output \"$OUTPUT\" "
                    "--json /tmp/rows.json >&2 && echo \"ROWS $(cat /tmp/rows.json)\""],
        "env": [{"name": "OUTPUT", "value": output},
                {"name": "PYSPARK_SUBMIT_ARGS", "value": f"{submit_args} pyspark-shell"},
                {"name": "AWS_ACCESS_KEY_ID",
                 "valueFrom": {"secretKeyRef": {**secret, "key": "access-key"}}},
                {"name": "AWS_SECRET_ACCESS_KEY",
                 "valueFrom": {"secretKeyRef": {**secret, "key": "secret-key"}}}],
        "resources": {"requests": {"cpu": "250m", "memory": "768Mi"}}})
    lines = brokers.finish(pod, timeout)
    rows = [line for line in lines if line.startswith("ROWS ")]
    assert len(rows) == 1, "\n".join(lines[-40:])
    return sorted(Total(**r) for r in json.loads(rows[0][len("ROWS "):]))


def result_history(brokers: Brokers, topic: str = "order-totals") -> dict[tuple[int, str],
                                                                          list[Total]]:
    """The result topic read to its end by a client pod: every total written, per key
    (window start, category), in offset order. Spark's Kafka sink is at-least-once, so a key
    may be written more than once, but always with the same total; the last is what
    compaction keeps."""
    history: dict[tuple[int, str], list[Total]] = {}
    for line in brokers.run("drain", brokers.bootstrap, topic):
        if line.startswith("R "):
            total = Total(**json.loads(line.split(" ", 3)[3]))
            history.setdefault((total.window_start, total.category), []).append(total)
    return history
