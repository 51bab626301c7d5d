"""KafkaCluster → the objects that run it (kafkube_operator.model.cluster): golden files for
the manifests, and the properties every rendering must keep whatever the spec.

Regenerate the golden files after an intended change with
    KAFKUBE_UPDATE_GOLDEN=1 .venv/bin/pytest tests/unit/operator/test_operator_cluster_model.py
and read the diff before committing it."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from broker.config.broker_config import BrokerConfig
from kafkube_contract.properties import parse_properties
from kafkube_operator.model.cluster import CONFIG_HASH, ClusterRef, desired_cluster
from tests.support.golden import assert_golden

GOLDEN = Path(__file__).parent / "golden"
UID = "6b1f3e2a-0000-4000-8000-000000000001"


def kafka_cluster(name: str = "prod", namespace: str = "kafka", **spec: object) -> dict:
    return {"apiVersion": "kafkube.io/v1alpha1", "kind": "KafkaCluster",
            "metadata": {"name": name, "namespace": namespace, "uid": UID, "generation": 1},
            "spec": spec}


CASES = {
    # What the API server's defaults make of an empty spec.
    "defaults": kafka_cluster(replicas=3, image="localhost/kafkube:dev",
                              storage={"size": "10Gi", "deleteClaim": False},
                              rack={"topologyKey": "topology.kubernetes.io/zone"},
                              metrics={"enabled": True}),
    "custom": kafka_cluster(
        name="orders", namespace="team-a", replicas=5, image="registry.example/kafkube:1.2",
        storage={"size": "200Gi", "class": "fast-ssd", "deleteClaim": True},
        resources={"requests": {"cpu": "2", "memory": "4Gi"}, "limits": {"memory": "8Gi"}},
        rack={"topologyKey": "example.com/rack"}, metrics={"enabled": False},
        config={"log.retention.ms": 604_800_000, "num.partitions": 6,
                "auto.create.topics.enable": "false", "node.id": 4}),
    # JBOD: spec.storage is volume 0, two more volumes, one of another class.
    "jbod": kafka_cluster(replicas=3, image="localhost/kafkube:dev",
                          storage={"size": "10Gi", "class": "standard", "deleteClaim": False,
                                   "volumes": [{"id": 2, "size": "50Gi", "class": "fast-ssd"},
                                               {"id": 1, "size": "20Gi"}]},
                          rack={"topologyKey": "topology.kubernetes.io/zone"},
                          metrics={"enabled": True}),
    # Node pools: the default pool (3 brokers, ids 0-2) and pool "big" (2 brokers from id
    # 100) with storage of its own (two volumes), node selector, tolerations and affinity.
    "pools": kafka_cluster(
        replicas=3, image="localhost/kafkube:dev", storage={"size": "10Gi"},
        rack={"topologyKey": "topology.kubernetes.io/zone"}, metrics={"enabled": True},
        nodeSelector={"pool": "general"},
        pools=[{"name": "big", "replicas": 2, "firstNodeId": 100,
                "storage": {"size": "500Gi", "class": "fast-ssd",
                            "volumes": [{"id": 1, "size": "500Gi"}]},
                "resources": {"requests": {"cpu": "4", "memory": "8Gi"}},
                "nodeSelector": {"disk": "nvme"},
                "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "kafka",
                                 "effect": "NoSchedule"}],
                "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchExpressions": [
                        {"key": "kubernetes.io/arch", "operator": "In",
                         "values": ["amd64"]}]}]}}}}]),
}


def rendered(resource: dict) -> str:
    return yaml.safe_dump_all(desired_cluster(resource).objects, sort_keys=False)


@pytest.mark.parametrize("case", sorted(CASES))
def test_manifests_match_the_golden_files(case: str) -> None:
    assert_golden(GOLDEN / f"kafkacluster-{case}.yaml", rendered(CASES[case]))


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_namespaced_object_is_owned_and_labelled(case: str) -> None:
    resource = CASES[case]
    ref = ClusterRef.of(resource)
    for obj in desired_cluster(resource).objects:
        meta = obj["metadata"]
        assert meta["labels"]["kafkube.io/cluster"] == ref.name
        if obj["kind"] == "ClusterRoleBinding":
            assert "ownerReferences" not in meta
            assert meta["labels"]["kafkube.io/namespace"] == ref.namespace
            continue
        assert meta["namespace"] == ref.namespace
        (owner,) = meta["ownerReferences"]
        assert (owner["kind"], owner["name"], owner["uid"]) == ("KafkaCluster", ref.name, UID)
        assert owner["controller"] is True


def test_selectors_find_the_pods_and_only_the_pods() -> None:
    desired = desired_cluster(CASES["defaults"])
    (sts,) = desired.by_kind("StatefulSet")
    pod_labels = sts["spec"]["template"]["metadata"]["labels"]
    selectors = [sts["spec"]["selector"]["matchLabels"],
                 *(s["spec"]["selector"] for s in desired.by_kind("Service")),
                 desired.by_kind("PodDisruptionBudget")[0]["spec"]["selector"]["matchLabels"]]
    for selector in selectors:
        assert selector.items() <= pod_labels.items()
    # The brokers' own ConfigMaps and Leases carry only kafkube.io/cluster: not selected.
    assert any(k != "kafkube.io/cluster" for k in selectors[0])


def test_the_brokers_start_from_the_rendered_properties() -> None:
    desired = desired_cluster(CASES["custom"])
    (config_map,) = desired.by_kind("ConfigMap")
    properties = parse_properties(config_map["data"]["server.properties"])
    config = BrokerConfig.from_dict(properties)
    assert config["log.retention.ms"] == 604_800_000 and config["num.partitions"] == 6
    assert config["kafkube.metrics.port"] == -1
    assert config["kafkube.cluster.name"] == "orders"
    assert desired.refused_config.keys() == {"node.id"}
    (sts,) = desired.by_kind("StatefulSet")
    (container,) = sts["spec"]["template"]["spec"]["containers"]
    mounted = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    config_path = container["args"][container["args"].index("--config") + 1]
    assert config_path == f"{mounted['config']}/server.properties"
    assert properties["log.dirs"].startswith(mounted["data"] + "/")


def test_a_config_or_image_change_changes_the_pod_template_and_nothing_else_does() -> None:
    """The pod template is what the StatefulSet's update revision hashes: the operator rolls
    the pods exactly when it changes."""
    base = CASES["defaults"]

    def template(resource: dict) -> dict:
        return desired_cluster(resource).by_kind("StatefulSet")[0]["spec"]["template"]

    retention = copy.deepcopy(base)
    retention["spec"]["config"] = {"log.retention.ms": 1000}
    image = copy.deepcopy(base)
    image["spec"]["image"] = "localhost/kafkube:next"
    scaled = copy.deepcopy(base)
    scaled["spec"]["replicas"] = 5
    assert (template(retention)["metadata"]["annotations"][CONFIG_HASH]
            != template(base)["metadata"]["annotations"][CONFIG_HASH])
    assert template(image) != template(base)
    # Scaling keeps the template, so adding brokers restarts none; the replication
    # defaults (capped at 3 and 2) are the same for 3 and 5 brokers.
    assert template(scaled) == template(base)


def test_renders_are_deterministic() -> None:
    assert rendered(copy.deepcopy(CASES["custom"])) == rendered(CASES["custom"])


def test_a_refused_scale_down_changes_neither_size_nor_template() -> None:
    """spec.replicas 1 refused (model/scale.py keeps 3 brokers): the brokers' replication
    defaults follow the brokers deployed, so nothing restarts."""
    base = CASES["defaults"]
    shrunk = copy.deepcopy(base)
    shrunk["spec"]["replicas"] = 1
    (kept,) = desired_cluster(shrunk, sizes={"": 3}).by_kind("StatefulSet")
    (before,) = desired_cluster(base).by_kind("StatefulSet")
    assert kept == before
