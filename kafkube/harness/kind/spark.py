"""The Spark pipeline's platform on the suite's cluster, installed as docs/spark.md tells a
user to: the Kubeflow Spark Operator from its own Helm chart with spark/k8s's values, the
object store of spark/k8s/object-store.yaml, and SparkApplications from
spark/k8s/sparkapplication.yaml; and the pods the scenarios read results with."""

from __future__ import annotations

import contextlib
import json
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import yaml

from kafkube.harness.checkout import REPO
from kafkube.harness.kind.operated import helm_binary
from kafkube.harness.kind.platform import Cluster, KubectlError
from kafkube.harness.waiting import wait_until

SPARK_K8S = REPO / "spark" / "k8s"
OPERATOR_NAMESPACE = "spark-operator"  # spark/k8s/rbac.yaml binds its controller's account
SPARK_IMAGE = "localhost/kafkube-spark:dev"


def spark_operator_chart() -> Path:
    """The chart in the Spark Operator's Go module, the version scripts/go_tool.sh builds."""
    out = subprocess.run(["bash", str(REPO / "scripts" / "go_tool.sh"), "spark-operator",
                          "--source"], capture_output=True, text=True, timeout=300, check=True)
    return Path(out.stdout.strip()) / "charts" / "spark-operator-chart"


@contextlib.contextmanager
def installed_spark_operator(cluster: Cluster, job_namespace: str) -> Iterator[None]:
    """`helm install` of the Spark Operator's chart with spark/k8s/spark-operator.values.yaml,
    watching JOB_NAMESPACE; its pod's log printed and the release removed afterwards."""
    helm = helm_binary()
    cluster.run_in_netns(
        [helm, "install", "spark-operator", str(spark_operator_chart()), "--namespace",
         OPERATOR_NAMESPACE, "--create-namespace", "-f",
         str(SPARK_K8S / "spark-operator.values.yaml"),
         "--set", f"spark.jobNamespaces={{{job_namespace}}}", "--wait", "--timeout", "300s"],
        timeout=360)
    try:
        yield
    finally:
        with contextlib.suppress(KubectlError):
            for pod in cluster.kubectl("-n", OPERATOR_NAMESPACE, "get", "pods", "-o",
                                       "name").split():
                print(f"--- {pod}\n" + cluster.kubectl("-n", OPERATOR_NAMESPACE, "logs", pod,
                                                      "--tail=80"))
        cluster.run_in_netns([helm, "uninstall", "spark-operator", "--namespace",
                              OPERATOR_NAMESPACE, "--wait"], timeout=180, check=False)
        cluster.kubectl("delete", "namespace", OPERATOR_NAMESPACE, "--ignore-not-found",
                        "--wait=false")


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


def s3_spark_conf(app: dict) -> dict[str, str]:
    """The s3a settings of a SparkApplication's sparkConf (endpoint, path style…), for
    another Spark program to read what the application wrote."""
    return {k: v for k, v in app["spec"]["sparkConf"].items()
            if k.startswith("spark.hadoop.fs.s3a.")}


def read_parquet_totals(cluster: Cluster, namespace: str, conf: dict[str, str], output: str,
                        timeout: float = 600) -> list[dict]:
    """The rows of a Parquet folder on the object store, read through Spark (which counts
    only the files a streaming sink's _spark_metadata log commits) by kafkube_spark.report in
    a pod of the Spark image, with the credentials of the Secret s3-credentials."""
    name = f"report-{uuid.uuid4().hex[:8]}"
    submit_args = " ".join(f"--conf {k}={v}" for k, v in conf.items())
    script = ("python -m kafkube_spark.report --output \"$OUTPUT\" --json /tmp/rows.json >&2"
              " && echo \"ROWS $(cat /tmp/rows.json)\"")
    secret = {"name": "s3-credentials"}
    pod = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": {"kafkube.io/e2e": "client"}},
        "spec": {"restartPolicy": "Never", "containers": [{
            "name": "report", "image": SPARK_IMAGE, "imagePullPolicy": "IfNotPresent",
            "command": ["bash", "-c", script],
            "env": [{"name": "OUTPUT", "value": output},
                    {"name": "PYSPARK_SUBMIT_ARGS", "value": f"{submit_args} pyspark-shell"},
                    {"name": "AWS_ACCESS_KEY_ID", "valueFrom": {"secretKeyRef": {
                        **secret, "key": "access-key"}}},
                    {"name": "AWS_SECRET_ACCESS_KEY", "valueFrom": {"secretKeyRef": {
                        **secret, "key": "secret-key"}}}],
            "resources": {"requests": {"cpu": "250m", "memory": "768Mi"}}}]},
    }
    cluster.apply(json.dumps(pod), namespace=namespace)
    phase = wait_until(
        lambda: (p := cluster.kubectl("-n", namespace, "get", "pod", name, "-o",
                                      "jsonpath={.status.phase}")) in ("Succeeded", "Failed")
        and p, timeout, f"the report pod {name}", 2.0)
    log = cluster.kubectl("-n", namespace, "logs", name, timeout=120)
    assert phase == "Succeeded", f"report pod {name} {phase}:\n{log[-4000:]}"
    cluster.kubectl("-n", namespace, "delete", "pod", name, "--wait=false")
    rows = [line for line in log.splitlines() if line.startswith("ROWS ")]
    assert len(rows) == 1, log[-4000:]
    return json.loads(rows[0][len("ROWS "):])
