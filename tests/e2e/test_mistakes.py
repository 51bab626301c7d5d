"""Users' mistakes in a row on the suite's cluster, under an acks=all idempotent producer
(issue 27; docs/protections.md): the cluster's metadata ConfigMap deleted and a broker pod
with it, two nodes drained at once, the KafkaCluster deleted and applied again over its kept
claims, a storage size the volumes cannot take, a TLS listener added. Every acknowledged
record is read back, the cluster ends Ready, and what cannot be honoured is a readable
Warning."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

import pytest

from kafkube.harness.kind.deployment import Brokers
from kafkube.harness.kind.history import read_drain, read_produce
from kafkube.harness.kind.operated import example_cluster, namespace_of
from kafkube.harness.kind.platform import Cluster, KubectlError
from kafkube.harness.kind.streams import checked, end_stream, stream
from kafkube.harness.queue_checker import History
from kafkube.harness.waiting import wait_until

NAME = "oops"
TOPIC = "e2e-mistakes"
LISTENERS_TOPIC = "e2e-listeners"


@pytest.fixture(scope="module")
def brokers(operator: Cluster) -> Iterator[Brokers]:
    with namespace_of(operator) as namespace:
        operator.apply(example_cluster(NAME), namespace=namespace)
        ready(operator, namespace)
        yield Brokers(operator, namespace, NAME)


def ready(operator: Cluster, namespace: str) -> None:
    operator.kubectl("-n", namespace, "wait", f"kafkacluster/{NAME}", "--for=condition=Ready",
                     "--timeout=420s", timeout=450)


def status(brokers: Brokers) -> dict:
    return json.loads(brokers.kubectl("get", "kafkacluster", NAME, "-o", "json")).get(
        "status", {})


def warning(brokers: Brokers) -> dict:
    return next((c for c in status(brokers).get("conditions", []) if c["type"] == "Warning"),
                {})


def rolled_onto_current(brokers: Brokers) -> bool:
    """Every broker pod runs the StatefulSet's current template (its update revision) and is
    Ready: a roll is over."""
    sts = json.loads(brokers.kubectl("get", "statefulset", NAME, "-o", "json"))
    revision = (sts.get("status") or {}).get("updateRevision")
    pods = json.loads(brokers.kubectl(
        "get", "pods", "-l", f"app.kubernetes.io/name=kafkube,kafkube.io/cluster={NAME}",
        "-o", "json"))["items"]
    on_current = {p["metadata"]["name"] for p in pods
                  if p["metadata"].get("labels", {}).get("controller-revision-hash") == revision}
    return revision is not None and len(pods) == brokers.size \
        and on_current == brokers.ready_pods() and len(on_current) == brokers.size


def cluster_id_stored(brokers: Brokers) -> str | None:
    try:
        return brokers.kubectl("get", "configmap", f"{NAME}-metadata", "-o",
                               "jsonpath={.metadata.annotations.kafkube\\.io/cluster-id}")
    except KubectlError:
        return None


def node_of(brokers: Brokers, broker: int) -> str:
    return brokers.kubectl("get", "pod", f"{NAME}-{broker}", "-o", "jsonpath={.spec.nodeName}")


def drain(brokers: Brokers, node: str, seconds: int) -> str:
    """`kubectl drain` of the brokers on ``node`` (the client pods stay)."""
    return brokers.cluster.kubectl(
        "drain", node, "--ignore-daemonsets", "--delete-emptydir-data", "--pod-selector",
        f"kafkube.io/cluster={NAME}", f"--timeout={seconds}s", timeout=seconds + 30)


def test_mistakes_in_a_row_lose_no_acknowledged_record(brokers: Brokers) -> None:
    operator, namespace = brokers.cluster, brokers.namespace
    brokers.create_topic(TOPIC, 6)
    cluster_id = wait_until(lambda: status(brokers).get("clusterId"), 60, "the cluster id")
    history = History()
    pod = stream(brokers, TOPIC, 120_000, 120, 3000)

    # 1. The metadata ConfigMap deleted, then a broker pod: the brokers put it back, the
    #    restarted broker finds it, nothing is dropped.
    brokers.kubectl("delete", "configmap", f"{NAME}-metadata")
    wait_until(lambda: cluster_id_stored(brokers) == cluster_id, 60,
               "the metadata put back with its cluster id", 1.0)
    brokers.kubectl("delete", "pod", f"{NAME}-1", "--grace-period=0", "--force")
    brokers.wait_whole()
    assert cluster_id_stored(brokers) == cluster_id

    # 2. Two nodes drained at once: the first broker is evicted (its local volume keeps it
    #    Pending until its node is back); the second is not while the first is away.
    first, second = node_of(brokers, 0), node_of(brokers, 2)
    drain(brokers, first, 120)
    with pytest.raises(KubectlError) as refused:
        drain(brokers, second, 20)
    assert "disruption budget" in str(refused.value), refused.value
    assert f"{NAME}-2" in brokers.ready_pods()
    for node in (first, second):
        operator.kubectl("uncordon", node)
    brokers.wait_whole()
    end_stream(brokers, pod, 6)

    produced = read_produce(brokers.finish(pod, 400), history)
    drained = read_drain(brokers.run("drain", brokers.bootstrap, TOPIC, timeout=600), history)
    print(f"metadata deleted, a broker pod deleted, two nodes drained: "
          f"{checked(history, produced, drained)}")

    # 3. The KafkaCluster deleted and applied again: its claims, metadata and records kept.
    brokers.kubectl("delete", "kafkacluster", NAME, "--timeout=300s", timeout=320)
    operator.apply(example_cluster(NAME), namespace=namespace)
    ready(operator, namespace)
    assert status(brokers)["clusterId"] == cluster_id
    # The logs read again replace the first reading: every acknowledged record still there.
    again = read_drain(brokers.run("drain", brokers.bootstrap, TOPIC, timeout=600), history)
    assert again == drained
    checked(history, produced, again)

    # 4. storage.size grown where the volumes cannot expand (kind's local-path class): a
    #    Warning, and a config edit made with it still reaches the StatefulSet.
    revision = brokers.kubectl("get", "statefulset", NAME, "-o",
                               "jsonpath={.spec.template.metadata.annotations}")
    brokers.kubectl("patch", "kafkacluster", NAME, "--type", "merge", "-p", json.dumps(
        {"spec": {"storage": {"size": "2Gi"}, "config": {"log.retention.ms": 7_200_000}}}))

    def outcome() -> str | None:
        claim = brokers.kubectl("get", "statefulset", NAME, "-o", "jsonpath={.spec."
                                "volumeClaimTemplates[0].spec.resources.requests.storage}")
        reason = warning(brokers).get("reason")
        return reason if reason == "StorageExpansionRefused" else (
            "expanded" if claim == "2Gi" else None)

    seen = wait_until(outcome, 120, "the storage change refused with a Warning, or done", 2.0)
    # Refused by the StorageClass (local-path cannot expand), not by the operator's own RBAC.
    assert "cannot patch" not in str(warning(brokers).get("message")), warning(brokers)
    wait_until(lambda: brokers.kubectl("get", "statefulset", NAME, "-o", "jsonpath={.spec."
                                       "template.metadata.annotations}") != revision, 120,
               "the config edit in the StatefulSet", 2.0)
    print(f"KafkaCluster deleted and applied again: cluster {cluster_id}, {drained} records "
          f"read back; storage.size 1Gi -> 2Gi: {seen}; {warning(brokers).get('message')}")
    # The config edit rolls the brokers; a topic of replication factor 3 created while one of
    # them restarts is refused as Kafka refuses it (INVALID_REPLICATION_FACTOR, "only 2
    # broker(s) are registered"): the next step starts once the roll is over.
    wait_until(lambda: rolled_onto_current(brokers), 600,
               "every broker restarted onto the config edit", 2.0)
    brokers.wait_whole()

    # 5. A TLS listener added beside the plain one on a running cluster: three rolls (the
    #    listeners added, replication moved to REPLICATION, the old listener gone), the
    #    brokers replicating with each other all along, under a producer.
    brokers.create_topic(LISTENERS_TOPIC, 6)
    history = History()
    pod = stream(brokers, LISTENERS_TOPIC, 420_000, 420, 3000)
    brokers.kubectl("patch", "kafkacluster", NAME, "--type", "merge", "-p", json.dumps(
        {"spec": {"listeners": [{"name": "plain", "port": 9092},
                                {"name": "tls", "port": 9093, "tls": True}]}}))
    seen: list[str] = []

    def changed() -> bool:
        ready_condition = next(c for c in status(brokers)["conditions"] if c["type"] == "Ready")
        step = re.search(r"step \d of 3", ready_condition["message"])
        if step and step[0] not in seen:
            seen.append(step[0])
        config = brokers.kubectl("get", "configmap", f"{NAME}-config", "-o",
                                 "jsonpath={.data.server\\.properties}")
        return ready_condition["status"] == "True" and "inter.broker.listener.name=" \
            "REPLICATION" in config and "PLAIN://" in config and "PLAINTEXT://" not in config

    wait_until(changed, 900, "the listener change rolled out", 2.0)
    assert seen == ["step 1 of 3", "step 2 of 3"], seen
    # The last step's roll, and the brokers in sync again, still under the producer: a drain
    # started mid-roll was answered "Unknown partition" by librdkafka (get_watermark_offsets).
    wait_until(lambda: rolled_onto_current(brokers), 600,
               "every broker restarted onto the last step", 2.0)
    brokers.wait_whole()
    end_stream(brokers, pod, 6)
    produced = read_produce(brokers.finish(pod, 600), history)
    drained = read_drain(brokers.run("drain", brokers.bootstrap, LISTENERS_TOPIC,
                                     timeout=600), history)
    print(f"a TLS listener added ({', '.join(seen)}, then the last): "
          f"{checked(history, produced, drained)}; listeners "
          f"{status(brokers).get('listeners')}")
