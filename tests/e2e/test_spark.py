"""The Spark pipeline on Kubernetes: `spark/k8s/submit.sh batch` (spark-submit --master
k8s://, cluster mode) runs the batch job as a driver pod and executor pods of the Spark image
against a KafkaCluster made by the operator, and the totals it writes to the result topic
equal the ones computed from the events in plain Python."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pyspark
import yaml

from kafkube.harness.kind.deployment import Brokers
from kafkube.harness.kind.platform import Cluster
from kafkube.harness.kind.spark import result_history
from kafkube_spark.events import expected_totals, orders, recent_start

REPO = Path(__file__).resolve().parents[2]
EVENTS = 5000


def api_server(cluster: Cluster) -> str:
    config = yaml.safe_load(cluster.kubeconfig.read_text())
    return config["clusters"][0]["cluster"]["server"]


def test_spark_submit_runs_the_batch_job_in_pods_and_its_totals_are_exact(
        pipeline_cluster: Brokers) -> None:
    brokers, cluster, namespace = pipeline_cluster, pipeline_cluster.cluster, \
        pipeline_cluster.namespace
    start = recent_start(EVENTS)  # the pod and this test make the same orders from it
    assert brokers.run("orders", brokers.bootstrap, "orders", "--count", str(EVENTS),
                       "--start-ms", str(start)) == [f"O {EVENTS}"]

    # The suite's own pyspark, as a user's activated virtualenv would provide it.
    spark_submit = str(Path(sys.executable).parent / "spark-submit")
    submitted = cluster.run_in_netns(
        ["env", f"NAMESPACE={namespace}", "KAFKA_CLUSTER=my-cluster",
         f"K8S_MASTER={api_server(cluster)}", f"SPARK_SUBMIT={spark_submit}",
         f"SPARK_HOME={Path(pyspark.__file__).parent}",
         "bash", str(REPO / "spark" / "k8s" / "submit.sh"), "batch"],
        timeout=900, check=False)
    drivers = cluster.kubectl("-n", namespace, "get", "pods", "-l", "spark-role=driver",
                              "-o", "jsonpath={.items[*].metadata.name}").split()
    assert len(drivers) == 1, f"spark-submit exited {submitted.returncode}, driver pods " \
        f"{drivers}:\n{submitted.stdout[-2000:]}{submitted.stderr[-3000:]}"
    driver = drivers[0]
    log = cluster.kubectl("-n", namespace, "logs", driver, timeout=120)
    phase = cluster.kubectl("-n", namespace, "get", "pod", driver, "-o",
                            "jsonpath={.status.phase}")
    assert phase == "Succeeded", f"driver {driver} {phase}:\n{log[-4000:]}\n" \
        f"spark-submit:\n{submitted.stderr[-3000:]}"
    assert submitted.returncode == 0, submitted.stderr[-3000:]

    # The work ran in executor pods: Spark on Kubernetes made (and removed) two of them.
    events = json.loads(cluster.kubectl("-n", namespace, "get", "events", "-o", "json"))
    executors = {e["involvedObject"]["name"] for e in events["items"]
                 if e["reason"] == "Scheduled" and "-exec-" in e["involvedObject"]["name"]}
    assert len(executors) == 2, executors

    want = expected_totals(orders(EVENTS, start_ms=start))
    assert f"batch: {len(want)} window totals written to order-totals" in log
    assert sorted(values[-1] for values in result_history(brokers).values()) == want
