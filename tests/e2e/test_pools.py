"""Node pools on kind (issue 33), under an acks=all stream: a second pool added to a running
KafkaCluster (its own StatefulSet, node ids from 100, its brokers registered and given a
share of the replicas), then the default pool scaled to 0 with `kubectl scale`: its brokers
drained onto the new pool before their pods go; every acknowledged record is read back."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest

from kafkube.harness.kind.deployment import Brokers
from kafkube.harness.kind.history import read_drain, read_produce
from kafkube.harness.kind.operated import cluster_status, example_cluster, ready_cluster
from kafkube.harness.kind.platform import Cluster
from kafkube.harness.kind.streams import checked, end_stream, stream
from kafkube.harness.queue_checker import History
from kafkube.harness.waiting import wait_until

NAME = "pooled"
BIG = {"name": "big", "replicas": 3, "firstNodeId": 100, "storage": {"size": "2Gi"},
       "resources": {"requests": {"cpu": "200m", "memory": "384Mi"},
                     "limits": {"memory": "1Gi"}}}


@pytest.fixture(scope="module")
def pooled(operator: Cluster) -> Iterator[Brokers]:
    with ready_cluster(operator, json.loads(example_cluster(NAME))) as brokers:
        yield brokers


def replicas_on(brokers: Brokers, topic: str) -> set[int]:
    return {b for _, replicas, _ in brokers.describe(topic).values() for b in replicas}


def test_brokers_move_to_a_new_pool_and_the_first_is_emptied_by_drain(pooled: Brokers) -> None:
    brokers = pooled
    operator, namespace = brokers.cluster, brokers.namespace
    operator.apply(json.dumps({
        "apiVersion": "kafkube.io/v1alpha1", "kind": "Topic", "metadata": {"name": "e2e-pool"},
        "spec": {"cluster": NAME, "partitions": 6, "replicationFactor": 3}}),
        namespace=namespace)
    operator.kubectl("-n", namespace, "wait", "topic/e2e-pool", "--for=condition=Ready",
                     "--timeout=120s", timeout=130)
    history = History()
    pod = stream(brokers, "e2e-pool", 600_000, 600, 3000)
    started = time.monotonic()

    brokers.kubectl("patch", "kafkacluster", NAME, "--type", "merge", "-p",
                    json.dumps({"spec": {"pools": [BIG]}}))
    wait_until(lambda: (s := cluster_status(brokers).get("pools")) and all(
        p["readyReplicas"] == p["replicas"] for p in s) and len(s) == 2, 600,
        "both pools' brokers ready", 3.0)
    wait_until(lambda: {100, 101, 102} <= replicas_on(brokers, "e2e-pool"), 300,
               "replicas spread onto pool big", 3.0)
    grown = time.monotonic() - started
    pools_seen = cluster_status(brokers)["pools"]

    mark = time.monotonic()
    brokers.kubectl("scale", "kafkacluster", NAME, "--replicas=0")
    wait_until(lambda: replicas_on(brokers, "e2e-pool") == {100, 101, 102}, 600,
               "the default pool's brokers drained onto pool big", 3.0)
    wait_until(lambda: brokers.kubectl("get", "statefulset", NAME, "-o",
                                       "jsonpath={.spec.replicas}") == "0", 300,
               "the default pool's StatefulSet at 0", 3.0)
    wait_until(lambda: brokers.ready_pods() == {f"{NAME}-big-{i}" for i in range(3)}, 300,
               "only pool big's pods left", 3.0)
    brokers.kubectl("wait", f"kafkacluster/{NAME}", "--for=condition=Ready",
                    "--timeout=300s", timeout=320)
    drained = time.monotonic() - mark
    table = brokers.kubectl("get", "statefulsets,pods", "-l",
                            f"app.kubernetes.io/name=kafkube,kafkube.io/cluster={NAME}")

    end_stream(brokers, pod, 6)
    produced = read_produce(brokers.finish(pod, 300), history)
    read = read_drain(brokers.run("drain", brokers.bootstrap, "e2e-pool", timeout=600),
                      history)
    print(f"status.pools with both: {pools_seen}\n{table}\npool big added and filled in "
          f"{grown:.0f} s, the default pool drained to 0 in {drained:.0f} s; "
          f"{checked(history, produced, read)}")
