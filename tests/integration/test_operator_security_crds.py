"""The security parts of the CRDs against a real kube-apiserver
(kafkube/harness/control_plane.py), as tests/integration/test_crds.py does for the rest:
KafkaCluster's spec.listeners, spec.authorization and CA settings, and the KafkaUser CRD
(structural schema, CEL rules, defaults, printer columns); what admission can judge is refused
with a readable message."""

from __future__ import annotations

import json

import pytest
from kubernetes import client as k8s

from tests.integration.test_crds import GROUP, NAMESPACE, VERSION, create, patch, refused

PLAIN = {"name": "plain", "port": 9092}
TLS = {"name": "tls", "port": 9093, "tls": True, "authentication": {"type": "tls"}}


@pytest.fixture(scope="module")
def api(crd_api: k8s.ApiClient) -> k8s.ApiClient:
    return crd_api


def test_listeners_get_their_defaults(api: k8s.ApiClient) -> None:
    spec = create(api, "kafkaclusters", {
        "listeners": [PLAIN, TLS], "authorization": {"type": "simple", "superUsers": ["a"]},
        "clusterCa": {"renewalDays": 10}})["spec"]
    assert spec["listeners"][0] == {"name": "plain", "port": 9092, "tls": False}
    assert spec["clusterCa"] == {"generateCertificateAuthority": True, "validityDays": 365,
                                 "renewalDays": 10}
    assert "clientsCa" not in spec  # the model's defaults apply; existing clusters unchanged


@pytest.mark.parametrize(("spec", "message"), [
    ({"listeners": [{"name": "tls", "port": 9093, "authentication": {"type": "tls"}}]},
     "authentication type tls needs tls: true"),
    ({"listeners": [{"name": "replication", "port": 9095}]}, "the operator's names"),
    ({"listeners": [{"name": "ext", "port": 9091}]}, "ports 9091 (replication)"),
    ({"listeners": [{"name": "ext", "port": 9405}]}, "9405 (health)"),
    ({"listeners": [PLAIN, {"name": "other", "port": 9092}]}, "a port of its own"),
    ({"listeners": [PLAIN, {**PLAIN, "port": 9095}]}, "Duplicate value"),
    ({"listeners": [{"name": "Bad_Name", "port": 9092}]}, "spec.listeners[0].name"),
    ({"listeners": [{"name": "low", "port": 80}]}, "spec.listeners[0].port"),
    ({"listeners": [{**PLAIN, "authentication": {"type": "gssapi"}}]}, "Unsupported value"),
    ({"authorization": {"type": "simple"}}, "spec.authorization needs spec.listeners"),
    ({"listeners": [PLAIN], "authorization": {"type": "opa"}}, "Unsupported value"),
    ({"listeners": [PLAIN], "clientsCa": {"validityDays": 10, "renewalDays": 10}},
     "renewalDays must be less than validityDays"),
])
def test_listener_specs_admission_can_judge_are_refused(api: k8s.ApiClient, spec: dict,
                                                        message: str) -> None:
    assert message in refused(create, api, "kafkaclusters", spec)


def user(cluster: str = "prod", authentication: str = "scram-sha-512",
         acls: list | None = None) -> dict:
    spec: dict = {"cluster": cluster, "authentication": {"type": authentication}}
    if acls is not None:
        spec["authorization"] = {"type": "simple", "acls": acls}
    return spec


def test_a_kafka_user_gets_its_acl_defaults(api: k8s.ApiClient) -> None:
    acls = [{"resource": {"type": "topic", "name": "orders"}, "operations": ["Read"]},
            {"resource": {"type": "cluster"}, "operations": ["IdempotentWrite"]}]
    spec = create(api, "kafkausers", user(acls=acls))["spec"]
    first = spec["authorization"]["acls"][0]
    assert first == {"resource": {"type": "topic", "name": "orders", "patternType": "literal"},
                     "operations": ["Read"], "host": "*", "type": "allow"}


@pytest.mark.parametrize(("spec", "message"), [
    ({"authentication": {"type": "tls"}}, "spec.cluster"),
    ({"cluster": "prod"}, "spec.authentication"),
    (user(authentication="plain"), "Unsupported value"),
    (user(acls=[{"resource": {"type": "topic"}, "operations": ["Read"]}]), "needs a name"),
    (user(acls=[{"resource": {"type": "cluster", "name": "x"}, "operations": ["Alter"]}]),
     "the cluster resource has no name"),
    (user(acls=[{"resource": {"type": "topic", "name": "*", "patternType": "prefix"},
                 "operations": ["Read"]}]), "a prefix cannot be *"),
    (user(acls=[{"resource": {"type": "topic", "name": "a"}, "operations": ["Fly"]}]),
     "Unsupported value"),
    (user(acls=[{"resource": {"type": "topic", "name": "a"}, "operations": []}]),
     "operations"),
    (user(acls=[{"resource": {"type": "user", "name": "a"}, "operations": ["Read"]}]),
     "Unsupported value"),
    (user(acls=[{"resource": {"type": "topic", "name": "a"}, "operations": ["Read"],
                 "type": "maybe"}]), "Unsupported value"),
    ({**user(), "quotas": {"producerByteRate": -1}}, "spec.quotas.producerByteRate"),
    ({**user(), "quotas": {"requestPercentage": 1.5}}, "spec.quotas.requestPercentage"),
    ({**user(), "quotas": {"controllerMutationRate": -0.5}},
     "spec.quotas.controllerMutationRate"),
    # Kafka's brokers refuse 0 ("must be greater than 0"): refused at admission, not left
    # KafkaRefused for ever.
    ({**user(), "quotas": {"producerByteRate": 0}},
     "spec.quotas.producerByteRate in body should be greater than 0"),
    ({**user(), "quotas": {"consumerByteRate": 0}}, "spec.quotas.consumerByteRate"),
    ({**user(), "quotas": {"requestPercentage": 0}}, "spec.quotas.requestPercentage"),
    ({**user(), "quotas": {"controllerMutationRate": 0}},
     "spec.quotas.controllerMutationRate in body should be greater than 0"),
])
def test_kafka_user_fields_admission_can_judge_are_refused(api: k8s.ApiClient, spec: dict,
                                                           message: str) -> None:
    assert message in refused(create, api, "kafkausers", spec)


def test_a_kafka_user_keeps_its_quotas(api: k8s.ApiClient) -> None:
    quotas = {"producerByteRate": 204800, "consumerByteRate": 1, "requestPercentage": 50,
              "controllerMutationRate": 0.01}
    assert create(api, "kafkausers", {**user(), "quotas": quotas})["spec"]["quotas"] == quotas


def test_a_user_name_must_be_simple(api: k8s.ApiClient) -> None:
    assert "metadata.name" in refused(create, api, "kafkausers", user(), "a.b")


def test_a_user_stays_with_its_cluster(api: k8s.ApiClient) -> None:
    name = create(api, "kafkausers", user())["metadata"]["name"]
    assert "another cluster" in refused(patch, api, "kafkausers", name, {"cluster": "other"})
    assert patch(api, "kafkausers", name, {"authentication": {"type": "tls"}})


def test_kubectl_get_kafkausers_shows_the_printer_columns(api: k8s.ApiClient) -> None:
    create(api, "kafkausers", user())
    request = api.param_serialize(
        "GET", f"/apis/{GROUP}/{VERSION}/namespaces/{NAMESPACE}/kafkausers",
        header_params={"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io"},
        auth_settings=["BearerToken"])
    response = api.call_api(*request)
    response.read()
    table = json.loads(response.data)
    shown = [c["name"] for c in table["columnDefinitions"] if c.get("priority", 0) == 0]
    assert shown == ["Name", "Cluster", "Authentication", "Ready", "Age"]
    assert table["rows"]
