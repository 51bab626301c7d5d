"""The streaming job as users run it for weeks: a SparkApplication (spark/k8s/
sparkapplication.yaml's `orders-stream`) under the Kubeflow Spark Operator (its own chart,
spark/k8s/spark-operator.values.yaml), its checkpoint and Parquet output on the object store
in the cluster (spark/k8s/object-store.yaml), reading `orders` of a KafkaCluster made by the
operator, written by transactional producers with aborted transactions among them.

Its driver pod is deleted (the operator submits it again, and it resumes from its checkpoint
on S3), then an executor pod (the driver replaces it and retries its tasks), then a broker pod;
orders keep coming between the kills. At the end the Parquet totals (read back through Spark)
and the last total per key in `order-totals` equal what plain Python computes from the
committed orders: no duplicate, no gap, nothing of an aborted transaction."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator

import pytest

from kafkube.harness.kind.deployment import Brokers
from kafkube.harness.kind.spark import (
    SPARK_K8S,
    Driver,
    application,
    application_state,
    driver_pod,
    installed_spark_operator,
    manifest_document,
    read_parquet_totals,
    running_pods,
    s3_spark_conf,
)
from kafkube.harness.waiting import WaitTimedOut, wait_until
from kafkube_spark.events import Total, expected_totals, orders, recent_start
from tests.e2e.workload import aborted

APP = "orders-stream"
TOTAL = 6000  # orders, 2 a second of event time: 50 minutes
PHASES = 4  # sent in 4 parts, one before each fault and one before the end
TRANSACTION, ABORT_EVERY = 50, 5  # each 5th transaction of 50 orders aborted
WATERMARK_MS = 10 * 60_000  # the stream job's default --watermark


@pytest.fixture(scope="module")
def spark_platform(pipeline_cluster: Brokers) -> Iterator[Brokers]:
    """The Spark Operator watching the pipeline's namespace, and the object store there."""
    cluster, namespace = pipeline_cluster.cluster, pipeline_cluster.namespace
    with installed_spark_operator(cluster, namespace):
        cluster.apply((SPARK_K8S / "object-store.yaml").read_text(), namespace=namespace)
        cluster.kubectl("-n", namespace, "rollout", "status", "statefulset/s3",
                        "--timeout=180s", timeout=200)
        yield pipeline_cluster


def expected(committed: list) -> list[Total]:
    """What the stream has emitted once it has read every committed order: the windows its
    final watermark (latest event time read minus 10 minutes) has closed."""
    return expected_totals(committed, closed_before=max(o.ts for o in committed) - WATERMARK_MS)


def latest_results(brokers: Brokers) -> dict[tuple[int, str], Total]:
    """`order-totals` read to its end by a client pod: the last total per key (what
    compaction keeps; Spark's Kafka sink is at-least-once)."""
    latest = {}
    for line in brokers.run("drain", brokers.bootstrap, "order-totals"):
        if line.startswith("R "):
            total = Total(**json.loads(line.split(" ", 3)[3]))
            latest[(total.window_start, total.category)] = total
    return latest


def verdict(seen: dict[tuple[int, str], Total], want: list[Total]) -> str:
    """Why the results differ: still behind (the last window not emitted yet: not read yet,
    nothing judged lost) or wrong (a window past which the job has read is missing or off)."""
    expected_by_key = {(t.window_start, t.category): t for t in want}
    last = max(expected_by_key)[0]
    wrong = sorted(k for k, t in expected_by_key.items() if k in seen and seen[k] != t)
    missing = sorted(k for k in expected_by_key if k not in seen)
    extra = sorted(k for k in seen if k not in expected_by_key)
    if not any(k[0] >= last for k in seen):
        return (f"the job is behind: its last emitted window is "
                f"{max(seen)[0] if seen else None}, the last expected {last} "
                f"({len(missing)} totals not emitted yet)")
    pairs = [(seen[k], expected_by_key[k]) for k in wrong[:3]]
    return (f"{len(wrong)} totals wrong (got, want: {pairs}), "
            f"{len(missing)} missing (e.g. {missing[:3]}), {len(extra)} unexpected "
            f"(e.g. {extra[:3]})")


def test_the_stream_under_the_spark_operator_is_exact_across_a_dead_driver_executor_and_broker(
        spark_platform: Brokers) -> None:
    brokers, cluster, namespace = spark_platform, spark_platform.cluster, \
        spark_platform.namespace
    start = recent_start(TOTAL)
    sequence = list(orders(TOTAL, start_ms=start))
    committed = [o for o in sequence if not aborted(o.order_id, TRANSACTION, ABORT_EVERY)]
    bounds = [TOTAL * i // PHASES for i in range(PHASES + 1)]

    def send(phase: int) -> None:
        first, last = bounds[phase], bounds[phase + 1]
        out = brokers.run("orders", brokers.bootstrap, "orders", "--count", str(TOTAL),
                          "--start-ms", str(start), "--first", str(first), "--last", str(last),
                          "--transaction-size", str(TRANSACTION),
                          "--abort-every", str(ABORT_EVERY))
        transactions = range(first // TRANSACTION, (last - 1) // TRANSACTION + 1)
        gave_up = sum(1 for t in transactions if aborted(t * TRANSACTION, TRANSACTION,
                                                         ABORT_EVERY))
        assert out[-1:] == [f"T {len(transactions) - gave_up} {gave_up}"], out[-5:]

    app = manifest_document(SPARK_K8S / "sparkapplication.yaml", "SparkApplication", APP)
    send(0)
    cluster.apply(json.dumps(app), namespace=namespace)
    wait_until(lambda: application_state(cluster, namespace, APP) == "RUNNING", 300,
               f"SparkApplication {APP} RUNNING", 2.0)
    # The job reads and emits: the first closed windows reach the result topic.
    wait_until(lambda: latest_results(brokers), 420, "the first totals in order-totals", 5.0)

    # 1. The driver, mid-run: new orders are waiting for it.
    send(1)
    first_driver = driver_pod(cluster, namespace, APP)
    assert first_driver is not None
    cluster.kubectl("-n", namespace, "delete", "pod", first_driver.name, "--grace-period=0",
                    "--force", "--wait=false")

    def driver_again() -> Driver | None:
        pod = driver_pod(cluster, namespace, APP)
        running = application_state(cluster, namespace, APP) == "RUNNING"
        return pod if pod is not None and pod.uid != first_driver.uid \
            and pod.phase == "Running" and running else None

    driver = wait_until(driver_again, 420, "the Spark Operator to run the application again",
                        3.0)
    attempts = application(cluster, namespace, APP)["status"].get("executionAttempts", 0)
    assert attempts >= 2, application(cluster, namespace, APP)["status"]

    # 2. An executor of the new driver, mid-run.
    send(2)
    executors = f"spark-app-selector={driver.spark_app_id},spark-role=executor"
    victims = wait_until(lambda: running_pods(cluster, namespace, executors), 300,
                         "the new driver's executors", 3.0)
    cluster.kubectl("-n", namespace, "delete", "pod", victims[0], "--grace-period=0",
                    "--force", "--wait=false")
    wait_until(lambda: len(set(running_pods(cluster, namespace, executors)) - {victims[0]})
               >= 2, 300, "the driver to replace its executor", 3.0)

    # 3. A broker, under the job.
    send(3)
    cluster.kubectl("-n", namespace, "delete", "pod", "my-cluster-1", "--grace-period=0",
                    "--force", "--wait=false")
    brokers.wait_whole(timeout=420)

    want = expected(committed)
    assert len(want) > 150
    seen: dict[tuple[int, str], Total] = {}

    def caught_up() -> bool:
        seen.clear()
        seen.update(latest_results(brokers))
        return sorted(seen.values()) == want

    with contextlib.suppress(WaitTimedOut):
        wait_until(caught_up, 600, "order-totals to hold every committed order's totals", 10.0)
    print(cluster.kubectl("-n", namespace, "get", "sparkapplications"))
    assert sorted(seen.values()) == want, verdict(seen, want)
    assert application_state(cluster, namespace, APP) == "RUNNING"

    rows = read_parquet_totals(cluster, namespace, s3_spark_conf(app),
                               next(a.split("=", 1)[1] for a in app["spec"]["arguments"]
                                    if a.startswith("--output=")))
    assert sorted(Total(**r) for r in rows) == want  # each total once, none missing
