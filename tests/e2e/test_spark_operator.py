"""The streaming job as users run it for weeks: a SparkApplication (spark/k8s/
sparkapplication.yaml's `orders-stream`) under the Kubeflow Spark Operator (its own chart,
spark/k8s/spark-operator.values.yaml), its checkpoint and Parquet output on the object store
in the cluster (spark/k8s/object-store.yaml), reading `orders` of a KafkaCluster made by the
operator, written by transactional producers with aborted transactions among them.

Its driver pod is deleted (the operator submits it again, and it resumes from its checkpoint
on S3), then an executor pod (the driver replaces it and retries its tasks), then a broker pod,
each while a micro-batch is running and the first two while orders are being sent. At the end
the Parquet totals (read back through Spark) and `order-totals` equal what plain Python
computes from the committed orders: no duplicate, no gap, nothing of an aborted transaction;
a total written again after a fault (the Kafka sink is at-least-once) is the same total."""

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
    latest_batch,
    manifest_document,
    read_parquet_totals,
    result_history,
    running_pods,
)
from kafkube.harness.waiting import WaitTimedOut, wait_until
from kafkube_spark.events import Order, Total, expected_totals, orders, recent_start
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
        for manifest in ("object-store-credentials.yaml", "object-store.yaml"):
            cluster.apply((SPARK_K8S / manifest).read_text(), namespace=namespace)
        cluster.kubectl("-n", namespace, "rollout", "status", "statefulset/s3",
                        "--timeout=180s", timeout=200)
        yield pipeline_cluster


def expected(committed: list[Order]) -> list[Total]:
    """What the stream has emitted once it has read every committed order: the windows its
    final watermark (latest event time read minus 10 minutes) has closed."""
    return expected_totals(committed, closed_before=max(o.ts for o in committed) - WATERMARK_MS)


def verdict(seen: dict[tuple[int, str], Total], want: list[Total]) -> str:
    """Why the results differ. Windows are emitted in event-time order, once: a total that
    is off is wrong, one missing below the latest window emitted is lost, one above it is
    not emitted yet (the job is behind, nothing judged lost)."""
    expected_by_key = {(t.window_start, t.category): t for t in want}
    latest = max(seen)[0] if seen else None
    wrong = [(seen[k], t) for k, t in sorted(expected_by_key.items())
             if k in seen and seen[k] != t]
    missing = sorted(k for k in expected_by_key if k not in seen)
    lost = [k for k in missing if latest is not None and k[0] < latest]
    extra = sorted(k for k in seen if k not in expected_by_key)
    return (f"{len(wrong)} totals wrong (got, want: {wrong[:3]}), {len(lost)} lost (e.g. "
            f"{lost[:3]}), {len(missing) - len(lost)} not emitted yet (latest window emitted "
            f"{latest}, last expected {max(expected_by_key)[0]}), {len(extra)} unexpected "
            f"(e.g. {extra[:3]})")


def test_the_stream_under_the_spark_operator_is_exact_across_a_dead_driver_executor_and_broker(
        spark_platform: Brokers) -> None:
    brokers, cluster, namespace = spark_platform, spark_platform.cluster, \
        spark_platform.namespace
    start = recent_start(TOTAL)
    sequence = list(orders(TOTAL, start_ms=start))
    committed = [o for o in sequence if not aborted(o.order_id, TRANSACTION, ABORT_EVERY)]
    bounds = [TOTAL * i // PHASES for i in range(PHASES + 1)]

    def send(phase: int) -> str:
        """A client pod sending one part of the orders; `sent` waits for it."""
        return brokers.start("orders", brokers.bootstrap, "orders", "--count", str(TOTAL),
                             "--start-ms", str(start), "--first", str(bounds[phase]),
                             "--last", str(bounds[phase + 1]),
                             "--transaction-size", str(TRANSACTION),
                             "--abort-every", str(ABORT_EVERY))

    def sent(phase: int, pod: str) -> None:
        first, last = bounds[phase], bounds[phase + 1]
        out = brokers.finish(pod, 300)
        transactions = range(first // TRANSACTION, (last - 1) // TRANSACTION + 1)
        gave_up = sum(1 for t in transactions if aborted(t * TRANSACTION, TRANSACTION,
                                                         ABORT_EVERY))
        assert out[-1:] == [f"T {len(transactions) - gave_up} {gave_up}"], out[-5:]

    def at_work(driver: Driver, since: int) -> int:
        """Wait for the driver to start a micro-batch after batch SINCE: the job is then
        reading and writing, so a fault lands with work in flight."""
        return wait_until(lambda: (n := latest_batch(cluster, namespace, driver.name)) > since
                          and (n,), 300, f"a micro-batch after {since} on {driver.name}",
                          1.0)[0]

    app = manifest_document(SPARK_K8S / "sparkapplication.yaml", "SparkApplication", APP)
    sent(0, send(0))
    cluster.apply(json.dumps(app), namespace=namespace)
    wait_until(lambda: application_state(cluster, namespace, APP) == "RUNNING", 300,
               f"SparkApplication {APP} RUNNING", 2.0)
    # The job reads and emits: the first closed windows reach the result topic.
    wait_until(lambda: result_history(brokers), 420, "the first totals in order-totals", 5.0)

    # 1. The driver, mid-batch, with orders still coming.
    first_driver = driver_pod(cluster, namespace, APP)
    assert first_driver is not None
    before = latest_batch(cluster, namespace, first_driver.name)
    producer = send(1)
    at_work(first_driver, before)
    cluster.kubectl("-n", namespace, "delete", "pod", first_driver.name, "--grace-period=0",
                    "--force", "--wait=false")
    sent(1, producer)

    def driver_again() -> Driver | None:
        pod = driver_pod(cluster, namespace, APP)
        running = application_state(cluster, namespace, APP) == "RUNNING"
        return pod if pod is not None and pod.uid != first_driver.uid \
            and pod.phase == "Running" and running else None

    driver = wait_until(driver_again, 420, "the Spark Operator to run the application again",
                        3.0)
    attempts = application(cluster, namespace, APP)["status"].get("executionAttempts", 0)
    assert attempts >= 2, application(cluster, namespace, APP)["status"]

    # 2. An executor of the new driver, mid-batch, with orders still coming.
    executors = f"spark-app-selector={driver.spark_app_id},spark-role=executor"
    victims = wait_until(lambda: running_pods(cluster, namespace, executors), 300,
                         "the new driver's executors", 3.0)
    before = latest_batch(cluster, namespace, driver.name)
    producer = send(2)
    at_work(driver, before)
    cluster.kubectl("-n", namespace, "delete", "pod", victims[0], "--grace-period=0",
                    "--force", "--wait=false")
    sent(2, producer)
    wait_until(lambda: len(set(running_pods(cluster, namespace, executors)) - {victims[0]})
               >= 2, 300, "the driver to replace its executor", 3.0)

    # 3. A broker, mid-batch (the orders all sent: the producers' transactions are not what
    # this checks).
    before = latest_batch(cluster, namespace, driver.name)
    sent(3, send(3))
    at_work(driver, before)
    cluster.kubectl("-n", namespace, "delete", "pod", f"{brokers.name}-1", "--grace-period=0",
                    "--force", "--wait=false")
    brokers.wait_whole(timeout=420)

    want = expected(committed)
    assert len(want) > 150
    history: dict[tuple[int, str], list[Total]] = {}

    def caught_up() -> bool:
        history.clear()
        history.update(result_history(brokers))
        return sorted(values[-1] for values in history.values()) == want

    with contextlib.suppress(WaitTimedOut):
        wait_until(caught_up, 600, "order-totals to hold every committed order's totals", 10.0)
    print(cluster.kubectl("-n", namespace, "get", "sparkapplications"))
    latest = {key: values[-1] for key, values in history.items()}
    assert sorted(latest.values()) == want, verdict(latest, want)
    # Written again after a fault (the sink is at-least-once), never with another total.
    assert {k: v for k, v in history.items() if len(set(v)) > 1} == {}
    assert application_state(cluster, namespace, APP) == "RUNNING"

    # Parquet, exactly once: the file sink's query has a checkpoint of its own and may finish
    # its last batch after the Kafka sink's.
    output = next(a.split("=", 1)[1] for a in app["spec"]["arguments"]
                  if a.startswith("--output="))
    parquet: list[Total] = []

    def parquet_complete() -> bool:
        parquet[:] = read_parquet_totals(brokers, app, output)
        return parquet == want

    with contextlib.suppress(WaitTimedOut):
        wait_until(parquet_complete, 300, "the Parquet totals to be complete", 10.0)
    assert parquet == want, verdict({(t.window_start, t.category): t for t in parquet}, want)
