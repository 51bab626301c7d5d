"""The CRDs of crds/ against a real kube-apiserver (kafkube/harness/control_plane.py): accepted as
structural schemas with compiling CEL rules, defaults filled in, and what admission can judge
refused with a readable message before any operator sees it."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes.client.rest import ApiException

from tests.support import REPO

CRDS = REPO / "crds"
GROUP, VERSION, NAMESPACE = "kafkube.io", "v1alpha1", "default"
KINDS = {"kafkaclusters": "KafkaCluster", "topics": "Topic", "kafkausers": "KafkaUser",
         "kafkarebalances": "KafkaRebalance"}


@pytest.fixture(scope="module")
def api(crd_api: k8s.ApiClient) -> k8s.ApiClient:
    return crd_api


def create(api: k8s.ApiClient, plural: str, spec: dict, name: str | None = None) -> dict:
    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": KINDS[plural],
            "metadata": {"name": name or f"t-{uuid.uuid4().hex[:8]}"}, "spec": spec}
    return k8s.CustomObjectsApi(api).create_namespaced_custom_object(
        GROUP, VERSION, NAMESPACE, plural, body)


def patch(api: k8s.ApiClient, plural: str, name: str, spec: dict) -> dict:
    return k8s.CustomObjectsApi(api).patch_namespaced_custom_object(
        GROUP, VERSION, NAMESPACE, plural, name, {"spec": spec})


def refused(call, *args: Any) -> str:
    """The API server's message for a request it refused as invalid (422)."""
    with pytest.raises(ApiException) as caught:
        call(*args)
    assert caught.value.status == 422, caught.value.body
    return json.loads(caught.value.body)["message"]


def test_a_kafka_cluster_gets_the_defaults(api: k8s.ApiClient) -> None:
    spec = create(api, "kafkaclusters", {})["spec"]
    assert spec["replicas"] == 3
    assert spec["storage"] == {"size": "10Gi", "deleteClaim": False}
    assert spec["rack"] == {"topologyKey": "topology.kubernetes.io/zone"}
    assert spec["metrics"] == {"enabled": True}


def test_kafka_cluster_fields_admission_can_judge_are_refused(api: k8s.ApiClient) -> None:
    assert "spec.replicas" in refused(create, api, "kafkaclusters", {"replicas": -1})
    assert "spec.metadataVersion" in refused(create, api, "kafkaclusters",
                                             {"metadataVersion": 0})
    assert create(api, "kafkaclusters", {"metadataVersion": 1})["spec"]["metadataVersion"] == 1
    assert "positive quantity" in refused(create, api, "kafkaclusters",
                                          {"storage": {"size": "0"}})
    assert "config keys are Kafka config names" in refused(
        create, api, "kafkaclusters", {"config": {"Log Retention": "1"}})
    for value in ({"hours": 1}, [1], True, 0.5):  # decimals and booleans go in quotes
        assert "spec.config.log.retention.ms" in refused(
            create, api, "kafkaclusters", {"config": {"log.retention.ms": value}})
    config = {"log.retention.ms": 86_400_000, "cleanup.policy": "compact",
              "log.cleaner.min.cleanable.ratio": "0.5", "auto.create.topics.enable": "false"}
    assert create(api, "kafkaclusters", {"config": config})["spec"]["config"] == config


def test_the_storage_class_cannot_change(api: k8s.ApiClient) -> None:
    name = create(api, "kafkaclusters", {"storage": {"class": "fast"}})["metadata"]["name"]
    message = refused(patch, api, "kafkaclusters", name, {"storage": {"class": "slow"}})
    assert "storage.class cannot be changed" in message
    assert patch(api, "kafkaclusters", name, {"storage": {"size": "20Gi"}})
    # Issue 27, item 5: set where it was unset would freeze the StatefulSet just the same.
    unset = create(api, "kafkaclusters", {})["metadata"]["name"]
    assert "storage.class cannot be changed" in refused(
        patch, api, "kafkaclusters", unset, {"storage": {"class": "fast"}})


def test_the_storage_size_cannot_shrink(api: k8s.ApiClient) -> None:
    name = create(api, "kafkaclusters", {"storage": {"size": "20Gi"}})["metadata"]["name"]
    message = refused(patch, api, "kafkaclusters", name, {"storage": {"size": "10Gi"}})
    assert "storage.size cannot shrink from 20Gi to 10Gi" in message
    assert patch(api, "kafkaclusters", name, {"storage": {"size": "21Gi"}})
    assert patch(api, "kafkaclusters", name, {"storage": {"size": "22548578304"}})  # 21Gi


def test_jbod_volumes_are_added_never_removed_shrunk_or_duplicated(api: k8s.ApiClient) -> None:
    two = [{"id": 1, "size": "20Gi"}, {"id": 2, "size": "30Gi", "class": "fast"}]
    assert "Duplicate value" in refused(create, api, "kafkaclusters", {"storage": {
        "volumes": [{"id": 1, "size": "1Gi"}, {"id": 1, "size": "2Gi"}]}})
    assert refused(create, api, "kafkaclusters", {"storage": {"volumes": [{"id": 0,
                                                                            "size": "1Gi"}]}})
    name = create(api, "kafkaclusters", {"storage": {"volumes": two[:1]}})["metadata"]["name"]
    assert patch(api, "kafkaclusters", name, {"storage": {"volumes": two}})  # added
    assert "storage.volumes cannot be removed" in refused(
        patch, api, "kafkaclusters", name, {"storage": {"volumes": two[1:]}})
    assert "cannot shrink" in refused(patch, api, "kafkaclusters", name, {"storage": {
        "volumes": [{"id": 1, "size": "10Gi"}, two[1]]}})
    assert "cannot be changed" in refused(patch, api, "kafkaclusters", name, {"storage": {
        "volumes": [two[0], {**two[1], "class": "slow"}]}})
    assert patch(api, "kafkaclusters", name, {"storage": {  # grown, in another order
        "volumes": [two[1], {"id": 1, "size": "25Gi"}]}})


def test_kubectl_scale_sets_the_replicas(api: k8s.ApiClient) -> None:
    name = create(api, "kafkaclusters", {})["metadata"]["name"]
    objects = k8s.CustomObjectsApi(api)
    objects.patch_namespaced_custom_object_scale(GROUP, VERSION, NAMESPACE, "kafkaclusters",
                                                 name, {"spec": {"replicas": 5}})
    got = objects.get_namespaced_custom_object(GROUP, VERSION, NAMESPACE, "kafkaclusters", name)
    assert got["spec"]["replicas"] == 5
    with pytest.raises(ApiException) as caught:
        objects.patch_namespaced_custom_object_scale(
            GROUP, VERSION, NAMESPACE, "kafkaclusters", name, {"spec": {"replicas": 0}})
    assert caught.value.status == 422


def test_node_pools_keep_their_ids_apart_and_leave_only_empty(api: k8s.ApiClient) -> None:
    big = {"name": "big", "replicas": 3, "firstNodeId": 100,
           "storage": {"size": "100Gi", "class": "ssd"}, "nodeSelector": {"disk": "ssd"},
           "tolerations": [{"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}]}
    name = create(api, "kafkaclusters", {"pools": [big]})["metadata"]["name"]
    assert "node ids of the pools overlap" in refused(
        create, api, "kafkaclusters", {"replicas": 101, "pools": [big]})
    assert "node ids of the pools overlap" in refused(create, api, "kafkaclusters", {
        "pools": [big, {"name": "small", "replicas": 1, "firstNodeId": 102}]})
    assert "Duplicate value" in refused(create, api, "kafkaclusters", {"pools": [big, big]})
    assert refused(create, api, "kafkaclusters", {"pools": [{**big, "name": "Big_1"}]})
    assert "may not be named default" in refused(create, api, "kafkaclusters", {
        "pools": [{**big, "name": "default"}]})
    assert "spec.replicas may be 0 only while a node pool" in refused(
        create, api, "kafkaclusters", {"replicas": 0})
    assert "firstNodeId cannot change" in refused(
        patch, api, "kafkaclusters", name, {"pools": [{**big, "firstNodeId": 200}]})
    assert "cannot shrink" in refused(patch, api, "kafkaclusters", name, {
        "pools": [{**big, "storage": {"size": "50Gi", "class": "ssd"}}]})
    assert "removed from spec.pools only once scaled to 0" in refused(
        patch, api, "kafkaclusters", name, {"pools": None})
    # Every broker moved to pool big: the default pool at 0, then big alone.
    moved = patch(api, "kafkaclusters", name, {"replicas": 0})["spec"]
    assert moved["replicas"] == 0 and moved["pools"][0]["tolerations"] == big["tolerations"]
    assert patch(api, "kafkaclusters", name, {"replicas": 2, "pools": [{**big, "replicas": 0}]})
    assert "pools" not in patch(api, "kafkaclusters", name, {"pools": None})["spec"]


def test_partitions_never_decrease(api: k8s.ApiClient) -> None:
    name = create(api, "topics", {"cluster": "c", "partitions": 12})["metadata"]["name"]
    message = refused(patch, api, "topics", name, {"partitions": 6})
    assert "spec.partitions: Invalid value" in message
    assert "partitions cannot be decreased" in message
    assert patch(api, "topics", name, {"partitions": 16})["spec"]["partitions"] == 16


@pytest.mark.parametrize("bad", ["bad/name", ".", "..", "x" * 250, "a b"])
def test_kafka_topic_name_rules(api: k8s.ApiClient, bad: str) -> None:
    message = refused(create, api, "topics", {"cluster": "c", "topicName": bad})
    assert "spec.topicName" in message


def test_a_topic_keeps_its_name_and_cluster(api: k8s.ApiClient) -> None:
    created = create(api, "topics", {"cluster": "c", "topicName": "Orders_v1.eu-west"})
    name = created["metadata"]["name"]
    assert created["spec"]["replicationFactor"] == 3 and created["spec"]["partitions"] == 1
    assert "cannot be renamed" in refused(patch, api, "topics", name, {"topicName": "other"})
    assert "another cluster" in refused(patch, api, "topics", name, {"cluster": "d"})
    assert "cannot be renamed" in refused(patch, api, "topics", name, {"topicName": None})


def test_kubectl_get_shows_the_printer_columns(api: k8s.ApiClient) -> None:
    """What `kubectl get kafkaclusters,topics` prints: the server's Table rendering."""
    expected = {"kafkaclusters": ["Name", "Desired", "Ready", "Controller", "Status", "Age"],
                "topics": ["Name", "Cluster", "Partitions", "RF", "Under-replicated", "Ready",
                           "Age"],
                "kafkarebalances": ["Name", "Cluster", "State", "Replica-moves",
                                    "Leader-moves", "Moved", "Age"]}
    create(api, "topics", {"cluster": "c", "partitions": 4, "replicationFactor": 2})
    create(api, "kafkarebalances", {"cluster": "c"})
    create(api, "kafkaclusters", {"replicas": 5})
    for plural, columns in expected.items():
        request = api.param_serialize(
            "GET", f"/apis/{GROUP}/{VERSION}/namespaces/{NAMESPACE}/{plural}",
            header_params={"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io"},
            auth_settings=["BearerToken"])
        response = api.call_api(*request)
        response.read()
        table = json.loads(response.data)
        shown = [c["name"] for c in table["columnDefinitions"] if c.get("priority", 0) == 0]
        assert shown == columns
        if plural == "kafkaclusters":  # kubectl get -o wide
            assert [c["name"] for c in table["columnDefinitions"] if c.get("priority")] == [
                "Bootstrap", "Metadata", "Upgrade"]
        assert table["rows"]


def test_a_kafka_rebalance_gets_the_defaults_and_its_mode_needs_brokers(
        api: k8s.ApiClient) -> None:
    spec = create(api, "kafkarebalances", {"cluster": "c", "tolerances": {}})["spec"]
    assert spec["mode"] == "full" and spec["maxMovesPerProposal"] == 50
    assert spec["tolerances"] == {"diskUsage": 0.1, "leaderBytesIn": 0.2,
                                  "leaderBytesOut": 0.2, "minRateBytesPerSecond": 10240}
    assert "need spec.brokers" in refused(create, api, "kafkarebalances",
                                          {"cluster": "c", "mode": "remove-brokers"})
    assert "spec.goals" in refused(create, api, "kafkarebalances",
                                   {"cluster": "c", "goals": ["Fastest"]})
    auto = create(api, "kafkaclusters", {"rebalance": {"auto": {"enabled": True}}})
    assert auto["spec"]["rebalance"]["auto"] == {"enabled": True, "maxMovesPerProposal": 50}
