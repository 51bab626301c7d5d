"""The operator end to end: `helm install` of charts/kafkube-operator, then KafkaClusters
applied with kubectl, on the suite's cluster (kind, or any cluster named by
KAFKUBE_E2E_KUBECONFIG). Each scenario asserts what a user would look at: `kubectl get`, the
conditions `kubectl wait` waits on, what is left after a delete."""

from __future__ import annotations

import datetime
import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kafkube.harness.kind.deployment import Brokers
from kafkube.harness.kind.history import read_drain, read_produce
from kafkube.harness.kind.operated import OPERATOR_NAMESPACE, example_cluster, namespace_of
from kafkube.harness.kind.platform import Cluster, KubectlError
from kafkube.harness.kind.streams import checked, end_stream, stream, unwritable
from kafkube.harness.queue_checker import History
from kafkube.harness.waiting import wait_until

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def my_cluster(operator: Cluster) -> Iterator[Brokers]:
    """examples/kafkacluster.yaml applied with kubectl, waited on as a user would."""
    with namespace_of(operator) as namespace:
        operator.apply(example_cluster("my-cluster"), namespace=namespace)
        operator.kubectl("-n", namespace, "wait", "kafkacluster/my-cluster",
                         "--for=condition=Ready", "--timeout=420s", timeout=450)
        yield Brokers(operator, namespace, "my-cluster")


def get_table(cluster: Cluster, namespace: str, kind: str) -> list[list[str]]:
    """`kubectl get KIND` as a user sees it: the header row, then one row per object."""
    return [line.split() for line in cluster.kubectl("-n", namespace, "get", kind).splitlines()]


def status(cluster: Cluster, namespace: str, name: str) -> dict:
    return json.loads(cluster.kubectl("-n", namespace, "get", "kafkacluster", name,
                                      "-o", "json")).get("status", {})


def test_a_kafka_cluster_applied_with_kubectl_becomes_ready(my_cluster: Brokers) -> None:
    operator, namespace = my_cluster.cluster, my_cluster.namespace
    header, row = get_table(operator, namespace, "kafkaclusters")
    assert header == ["NAME", "DESIRED", "READY", "CONTROLLER", "STATUS", "AGE"]
    assert row[:3] == ["my-cluster", "3", "3"] and row[4] == "Ready", row
    assert row[3] in {"0", "1", "2"}
    seen = status(operator, namespace, "my-cluster")
    assert seen["bootstrapServers"] == f"my-cluster-bootstrap.{namespace}.svc:9092"
    racks = {b["id"]: b.get("rack") for b in seen["brokers"]}
    assert sorted(racks) == [0, 1, 2]
    # broker.rack comes from the zone of each broker's node, and the brokers spread over them.
    assert len(set(racks.values())) == 3 and None not in racks.values(), racks
    events = operator.kubectl("-n", namespace, "get", "events", "--field-selector",
                              "involvedObject.kind=KafkaCluster", "-o",
                              "jsonpath={range .items[*]}{.reason} {.message}{'\\n'}{end}")
    assert "Created created StatefulSet my-cluster" in events


def test_deleting_a_kafka_cluster_removes_what_it_owns_and_keeps_its_claims(
        operator: Cluster) -> None:
    with namespace_of(operator) as namespace:
        deleted_with_its_objects(operator, namespace)


def deleted_with_its_objects(operator: Cluster, namespace: str) -> None:
    operator.apply(example_cluster("short-lived", replicas=1), namespace=namespace)
    operator.kubectl("-n", namespace, "wait", "kafkacluster/short-lived",
                     "--for=condition=Ready", "--timeout=420s", timeout=450)
    operator.kubectl("-n", namespace, "delete", "kafkacluster", "short-lived",
                     "--timeout=300s", timeout=320)

    def left() -> list[str]:
        return operator.kubectl("-n", namespace, "get",
                                "statefulsets,services,configmaps,leases,pods,pdb,roles",
                                "-l", "kafkube.io/cluster=short-lived", "-o", "name").split()

    # The cluster image and its counters stay with the claims (deleteClaim: false), so the
    # same KafkaCluster applied again finds its data (docs/protections.md).
    kept = ["configmap/short-lived-epochs", "configmap/short-lived-metadata"]
    wait_until(lambda: sorted(left()) == kept, 180, "the cluster's objects gone", 2.0)
    bindings = operator.kubectl("get", "clusterrolebindings", "-l",
                                f"kafkube.io/namespace={namespace}", "-o", "name")
    assert bindings.strip() == ""
    # deleteClaim: false - the broker's data stays for a cluster of the same name.
    claims = operator.kubectl("-n", namespace, "get", "pvc", "-o", "name").split()
    assert claims == ["persistentvolumeclaim/data-short-lived-0"]


def test_a_topic_of_12_partitions_spreads_its_leaders_and_carries_100000_records(
        my_cluster: Brokers) -> None:
    operator, namespace = my_cluster.cluster, my_cluster.namespace
    operator.apply((REPO / "examples" / "topic.yaml").read_text(), namespace=namespace)
    operator.kubectl("-n", namespace, "wait", "topic/orders", "--for=condition=Ready",
                     "--timeout=120s", timeout=150)
    seen = json.loads(operator.kubectl("-n", namespace, "get", "topic", "orders", "-o",
                                       "json"))["status"]
    racks = {b["id"]: b["rack"] for b in status(operator, namespace, "my-cluster")["brokers"]}
    leaders = [p["leader"] for p in seen["partitions"]]
    assert {b: leaders.count(b) for b in racks} == {0: 4, 1: 4, 2: 4}, leaders
    assert {racks[b] for b in leaders} == set(racks.values())  # leaders in every zone
    for p in seen["partitions"]:
        assert len({racks[r] for r in p["replicas"]}) == 3, p  # one replica per zone
        assert sorted(p["isr"]) == sorted(p["replicas"]), p
    header, row = get_table(operator, namespace, "topics")
    assert header[:6] == ["NAME", "CLUSTER", "PARTITIONS", "RF", "UNDER-REPLICATED", "READY"]
    assert row[:6] == ["orders", "my-cluster", "12", "3", "0", "True"], row

    history = History()
    produced = read_produce(my_cluster.run("produce", my_cluster.bootstrap, "orders",
                                           "--count", "100000", "--acks", "all",
                                           timeout=600), history)
    drained = read_drain(my_cluster.run("drain", my_cluster.bootstrap, "orders", timeout=600),
                         history)
    report = history.check()
    assert produced.acked == 100_000 and drained == 100_000
    assert report.ok(idempotent=True), report.summary()

    # A topic made through the Kafka API (a client's CreateTopics) appears as a Topic.
    my_cluster.create_topic("Made_By_Client", 3)

    def mirrored() -> list[str] | None:
        rows = get_table(operator, namespace, "topics")[1:]
        found = [r for r in rows if r[0].startswith("made-by-client-")]
        return found[0] if found else None

    row = wait_until(mirrored, 60, "a Topic for Made_By_Client", 2.0)
    assert row[1:4] == ["my-cluster", "3", "3"], row


def patch(cluster: Cluster, namespace: str, what: str, body: dict) -> str:
    return cluster.kubectl("-n", namespace, "patch", what, "--type=merge", "-p",
                           json.dumps(body))


def events_since(cluster: Cluster, namespace: str, name: str, since: float) -> list[str]:
    """"reason message" of the Events the operator posted on a resource after ``since``
    (time.time()), oldest first."""
    items = json.loads(cluster.kubectl("-n", namespace, "get", "events", "--field-selector",
                                       f"involvedObject.name={name}", "-o", "json"))["items"]
    stamped = []
    for e in items:
        when = e.get("lastTimestamp") or e.get("eventTime") or e["metadata"]["creationTimestamp"]
        moment = datetime.datetime.fromisoformat(when.replace("Z", "+00:00")).timestamp()
        if moment >= since - 1:
            stamped.append((moment, f"{e['reason']} {e['message']}"))
    return [text for _, text in sorted(stamped)]


def test_a_broker_pod_deleted_with_grace_0_during_a_stream_loses_nothing(
        my_cluster: Brokers) -> None:
    my_cluster.create_topic("e2e-delete", 6)
    before = my_cluster.describe("e2e-delete")
    history = History()
    pod = stream(my_cluster, "e2e-delete", 40_000, 90, 5000)
    victim = my_cluster.controller()
    led = sorted(p for p, (leader, _, _) in before.items() if leader == victim)
    my_cluster.kubectl("delete", "pod", f"my-cluster-{victim}", "--grace-period=0", "--force")

    new = my_cluster.controller_other_than(victim)
    end_stream(my_cluster, pod, 6)
    produced = read_produce(my_cluster.finish(pod, 300), history)
    drained = read_drain(my_cluster.run("drain", my_cluster.bootstrap, "e2e-delete",
                                        timeout=600), history)
    print(f"controller broker {victim} deleted (grace 0): broker {new} took the Lease; "
          f"{unwritable(produced, led)}; {checked(history, produced, drained)}")
    my_cluster.wait_whole()


def test_invalid_edits_are_refused_and_the_cluster_keeps_serving(my_cluster: Brokers) -> None:
    operator, namespace = my_cluster.cluster, my_cluster.namespace
    # Refused at admission: the API server's CEL rule answers kubectl.
    with pytest.raises(KubectlError) as refused:
        patch(operator, namespace, "topic/orders", {"spec": {"partitions": 6}})
    assert "partitions cannot be decreased" in str(refused.value)
    # What only the cluster can judge: Warning conditions, nothing deleted or moved.
    operator.apply(json.dumps({"apiVersion": "kafkube.io/v1alpha1", "kind": "Topic",
                               "metadata": {"name": "too-wide"},
                               "spec": {"cluster": "my-cluster", "replicationFactor": 5}}),
                   namespace=namespace)
    operator.kubectl("-n", namespace, "wait", "topic/too-wide",
                     "--for=jsonpath={.status.conditions[?(@.type==\"Warning\")].reason}"
                     "=ReplicationFactorTooLarge", "--timeout=60s", timeout=70)
    revision = operator.kubectl("-n", namespace, "get", "statefulset", "my-cluster", "-o",
                                "jsonpath={.status.updateRevision}")
    patch(operator, namespace, "kafkacluster/my-cluster",
          {"spec": {"replicas": 1, "config": {"log.retention.msx": 1}}})
    try:
        refused_while_serving(my_cluster, revision)
    finally:
        patch(operator, namespace, "kafkacluster/my-cluster",
              {"spec": {"replicas": 3, "config": {"log.retention.msx": None}}})
        operator.kubectl("delete", "-n", namespace, "topic", "too-wide")
    operator.kubectl("-n", namespace, "wait", "kafkacluster/my-cluster",
                     "--for=jsonpath={.status.state}=Ready", "--timeout=120s", timeout=130)


def refused_while_serving(my_cluster: Brokers, revision: str) -> None:
    """A scale to 1 (RF 3 topics) and a bad config key: both in the Warning condition, the
    StatefulSet untouched (same size, same revision: no broker restarted), records still
    accepted."""
    operator, namespace = my_cluster.cluster, my_cluster.namespace
    for what in ("below the replication factor", "log.retention.msx"):
        wait_until(lambda w=what: w in json.dumps(status(operator, namespace, "my-cluster")
                                                  .get("conditions", [])), 60,
                   f"a Warning about {what}", 2.0)
    seen = status(operator, namespace, "my-cluster")
    warning = next(c for c in seen["conditions"] if c["type"] == "Warning")
    assert "spec.replicas 1 is below the replication factor 3 of topic" in warning["message"]
    assert "log.retention.msx: not a broker config" in warning["message"]
    assert seen["state"] == "Warning"
    sts = json.loads(operator.kubectl("-n", namespace, "get", "statefulset", "my-cluster",
                                      "-o", "json"))
    assert sts["spec"]["replicas"] == 3 and sts["status"]["updateRevision"] == revision
    # Still serving.
    history = History()
    produced = read_produce(my_cluster.run("produce", my_cluster.bootstrap, "orders",
                                           "--count", "2000", "--acks", "all"), history)
    assert produced.acked == 2000


def test_the_standby_operator_takes_over_and_reconciles_a_later_edit(
        my_cluster: Brokers) -> None:
    operator, namespace = my_cluster.cluster, my_cluster.namespace
    lease = json.loads(operator.kubectl("-n", OPERATOR_NAMESPACE, "get", "lease",
                                        "kafkube-operator", "-o", "json"))
    active = lease["spec"]["holderIdentity"]
    deleted = time.time()
    operator.kubectl("-n", OPERATOR_NAMESPACE, "delete", "pod", active, "--grace-period=0",
                     "--force")

    def new_holder() -> str | None:
        holder = json.loads(operator.kubectl(
            "-n", OPERATOR_NAMESPACE, "get", "lease", "kafkube-operator", "-o",
            "json"))["spec"]["holderIdentity"]
        return holder if holder != active else None

    standby = wait_until(new_holder, 60, "the standby to take the operator Lease", 1.0)
    took = time.time() - deleted
    patch(operator, namespace, "topic/orders", {"spec": {"config": {"retention.ms": 86400000}}})
    wait_until(lambda: any(e.startswith("ConfigChanged") for e in
                           events_since(operator, namespace, "orders", deleted)), 90,
               "the edit reconciled by the new operator", 2.0)
    print(f"operator {active} deleted: {standby} took the Lease within {took:.1f} s "
          "(lease 10 s) and applied a later Topic edit")


def test_a_config_change_rolls_the_brokers_one_at_a_time_with_the_controller_last(
        my_cluster: Brokers) -> None:
    operator, namespace = my_cluster.cluster, my_cluster.namespace
    my_cluster.create_topic("e2e-roll", 6)
    history = History()
    pod = stream(my_cluster, "e2e-roll", 120_000, 150, 5000)
    controller = my_cluster.controller()
    started = time.time()
    patch(operator, namespace, "kafkacluster/my-cluster",
          {"spec": {"config": {"log.retention.ms": 172800000}}})
    wait_until(lambda: any(e.startswith("RollingRestartDone") for e in
                           events_since(operator, namespace, "my-cluster", started)), 600,
               "the rolling restart done", 3.0)
    rolled = time.time() - started
    restarts = [e.split()[3] for e in events_since(operator, namespace, "my-cluster", started)
                if e.startswith("RollingRestart restarted pod")]
    assert sorted(restarts) == ["my-cluster-0", "my-cluster-1", "my-cluster-2"], restarts
    assert restarts[-1] == f"my-cluster-{controller}", (restarts, controller)
    end_stream(my_cluster, pod, 6)
    produced = read_produce(my_cluster.finish(pod, 400), history)
    drained = read_drain(my_cluster.run("drain", my_cluster.bootstrap, "e2e-roll",
                                        timeout=600), history)
    summary = checked(history, produced, drained)
    gaps = produced.longest_gap_ms(list(range(6)))
    longest = max(gaps.values(), default=0) / 1000
    # min.insync.replicas 2 of 3: a partition stays writable while one broker restarts; the
    # only pause is its leader moving.
    assert longest < 30, gaps
    # Then a preferred-leader election: every partition led by its preferred replica.
    described = wait_until(lambda: (d := my_cluster.describe("e2e-roll")) and all(
        leader == replicas[0] for leader, replicas, _ in d.values()) and d, 120,
        "leaders back on their preferred replicas", 5.0)
    print(f"rolling restart of 3 brokers in {rolled:.0f} s, order {restarts} (controller "
          f"{controller} last); longest pause of a partition {longest:.1f} s; {summary}; "
          f"leaders {[leader for leader, _, _ in described.values()]}")


def new_topic(operator: Cluster, namespace: str, name: str) -> None:
    """A Topic of my-cluster, 3 partitions, RF 3, as a user applies one."""
    operator.apply(json.dumps({"apiVersion": "kafkube.io/v1alpha1", "kind": "Topic",
                               "metadata": {"name": name},
                               "spec": {"cluster": "my-cluster", "partitions": 3,
                                        "replicationFactor": 3}}), namespace=namespace)


def test_kubectl_scale_adds_brokers_that_take_replicas_and_drains_them_back(
        my_cluster: Brokers) -> None:
    operator, namespace = my_cluster.cluster, my_cluster.namespace
    my_cluster.create_topic("e2e-scale", 6)
    operator.kubectl("-n", namespace, "scale", "kafkacluster/my-cluster", "--replicas=5")
    new_topic(operator, namespace, "made-while-growing")  # brokers 3 and 4 still starting
    wait_until(lambda: status(operator, namespace, "my-cluster").get("readyReplicas") == 5
               and "scaling" not in status(operator, namespace, "my-cluster"), 600,
               "5 brokers ready and the replicas spread", 3.0)
    described = my_cluster.describe("e2e-scale")
    holders = {b for _, replicas, _ in described.values() for b in replicas}
    assert {3, 4} <= holders, described
    my_cluster.size = 5
    history = History()
    pod = stream(my_cluster, "e2e-scale", 60_000, 120, 3000)
    operator.kubectl("-n", namespace, "scale", "kafkacluster/my-cluster", "--replicas=3")
    # Topics created all through the drain of brokers 3 and 4 (one a poll, up to 4): none
    # may stay on them (cordoned before the first move), else it is stranded when they go.
    made = ["made-while-growing"]

    def drained() -> bool:
        if len(made) < 5:
            made.append(f"made-while-draining-{len(made)}")
            new_topic(operator, namespace, made[-1])
        return operator.kubectl("-n", namespace, "get", "pods", "-l",
                                "kafkube.io/cluster=my-cluster", "-o", "name").split() == [
            "pod/my-cluster-0", "pod/my-cluster-1", "pod/my-cluster-2"]

    wait_until(drained, 600, "brokers 3 and 4 drained and their pods gone", 3.0)
    described = my_cluster.describe("e2e-scale")
    assert {b for _, replicas, _ in described.values() for b in replicas} == {0, 1, 2}
    for name in made:
        operator.kubectl("-n", namespace, "wait", f"topic/{name}", "--for=condition=Ready",
                         "--timeout=120s", timeout=130)
        made = my_cluster.describe(name)
        assert len(made) == 3 and all(
            sorted(replicas) == sorted(isr) and set(replicas) <= {0, 1, 2}
            and len(replicas) == 3 for _, replicas, isr in made.values()), (name, made)
    end_stream(my_cluster, pod, 6)
    produced = read_produce(my_cluster.finish(pod, 400), history)
    drained = read_drain(my_cluster.run("drain", my_cluster.bootstrap, "e2e-scale",
                                        timeout=600), history)
    print(f"scaled 3 → 5 → 3 during a stream: {checked(history, produced, drained)}")
    my_cluster.size = 3


def topic_status(cluster: Cluster, namespace: str, name: str) -> dict:
    return json.loads(cluster.kubectl("-n", namespace, "get", "topic", name,
                                      "-o", "json")).get("status", {})


def test_a_topics_replication_factor_goes_1_3_2_under_an_acks_all_stream(
        my_cluster: Brokers) -> None:
    """spec.replicationFactor edited with kubectl on a live topic: a throttled, rack-aware
    reassignment each way, followed in the Topic's status; every acknowledged record is
    read back."""
    operator, namespace = my_cluster.cluster, my_cluster.namespace
    operator.apply(json.dumps({
        "apiVersion": "kafkube.io/v1alpha1", "kind": "Topic", "metadata": {"name": "e2e-rf"},
        "spec": {"cluster": "my-cluster", "partitions": 3, "replicationFactor": 1,
                 "config": {"min.insync.replicas": "1"}}}), namespace=namespace)
    operator.kubectl("-n", namespace, "wait", "topic/e2e-rf", "--for=condition=Ready",
                     "--timeout=120s", timeout=130)
    history = History()
    pod = stream(my_cluster, "e2e-rf", 90_000, 150, 3000)
    seen = []
    for factor in (3, 2):
        patch(operator, namespace, "topic/e2e-rf", {"spec": {"replicationFactor": factor}})
        wait_until(lambda f=factor: (s := topic_status(operator, namespace, "e2e-rf")).get(
            "replicationFactor") == f and "reassignment" not in s and
            "replicationThrottle" not in s, 300, f"replication factor {factor}", 2.0)
        operator.kubectl("-n", namespace, "wait", "topic/e2e-rf", "--for=condition=Ready",
                         "--timeout=120s", timeout=130)
        described = my_cluster.describe("e2e-rf")
        racks = {b["id"]: b.get("rack") for b in status(operator, namespace,
                                                           "my-cluster")["brokers"]}
        assert all(len(replicas) == factor and len({racks[b] for b in replicas}) == factor
                   for _, replicas, _ in described.values()), described
        seen.append(get_table(operator, namespace, "topic/e2e-rf")[1])
    end_stream(my_cluster, pod, 3)
    produced = read_produce(my_cluster.finish(pod, 300), history)
    drained = read_drain(my_cluster.run("drain", my_cluster.bootstrap, "e2e-rf",
                                        timeout=600), history)
    print(f"kubectl get topic e2e-rf after each change: {seen}; replication factor 1 → 3 → 2 "
          f"during a stream: {checked(history, produced, drained)}")
