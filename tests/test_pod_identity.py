"""A broker's identity as a StatefulSet pod: pure derivation, the node zone looked up on a real
API server, and the command line refusing what it cannot derive."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest
from kubernetes import client as k8s

from broker.cluster.kubernetes import api_client
from broker.cluster.pod_identity import ZONE_LABEL, pod_overrides, zone_from_api
from broker.config.broker_config import ConfigError

POD_ENV = {"POD_NAME": "orders-kafka-2", "POD_NAMESPACE": "streams", "NODE_NAME": "node-b",
           "KAFKUBE_HEADLESS_SERVICE": "orders-kafka-brokers"}


def test_identity_follows_the_statefulset_place() -> None:
    derived = pod_overrides(POD_ENV, {}, lambda node: {"node-b": "zone-b"}[node])
    assert derived == {
        "node.id": "2",
        "advertised.listeners":
            "PLAINTEXT://orders-kafka-2.orders-kafka-brokers.streams.svc.cluster.local:9092",
        "broker.rack": "zone-b",
    }


def test_explicit_settings_win_and_nothing_is_looked_up_for_them() -> None:
    def no_lookup(node: str) -> str:
        raise AssertionError("broker.rack is set; the node must not be looked up")

    configured = {"node.id": "7", "broker.rack": "r1", "advertised.listeners": "PLAINTEXT://x:1"}
    assert pod_overrides(POD_ENV, configured, no_lookup) == {}


@pytest.mark.parametrize("name", ["kafka", "kafka-", "Kafka-1", "kafka-1x", ""])
def test_a_pod_name_without_an_ordinal_is_refused(name: str) -> None:
    with pytest.raises(ConfigError, match=r"node\.id|POD_NAME"):
        pod_overrides({"POD_NAME": name}, {})


def test_the_zone_comes_from_the_node_label(control_plane: Any) -> None:
    api = k8s.CoreV1Api(api_client(str(control_plane.kubeconfig)))
    api.create_node(k8s.V1Node(metadata=k8s.V1ObjectMeta(
        name="zoned-node", labels={ZONE_LABEL: "zone-c", "example.com/rack": "r7"})))
    api.create_node(k8s.V1Node(metadata=k8s.V1ObjectMeta(name="unzoned-node")))
    lookup = zone_from_api(str(control_plane.kubeconfig))
    assert lookup("zoned-node") == "zone-c"
    assert lookup("unzoned-node") is None
    # A KafkaCluster's spec.rack.topologyKey names another label (KAFKUBE_RACK_LABEL).
    assert zone_from_api(str(control_plane.kubeconfig), "example.com/rack")("zoned-node") == "r7"
    assert "broker.rack" not in pod_overrides({**POD_ENV, "NODE_NAME": "unzoned-node"}, {},
                                              lookup)


def test_the_command_line_says_what_it_cannot_derive(control_plane: Any, tmp_path) -> None:
    env = {"PATH": "/usr/bin:/bin", "POD_NAME": "kafka-0", "NODE_NAME": "no-such-node"}
    run = subprocess.run(
        [sys.executable, "-m", "kafkube", "broker", "--pod-identity",
         "--override", f"log.dirs={tmp_path}",
         "--override", f"kafkube.kubernetes.kubeconfig={control_plane.kubeconfig}"],
        env=env, capture_output=True, text=True, timeout=60)
    assert run.returncode == 2, run.stderr
    assert "cannot read the label topology.kubernetes.io/zone of node no-such-node" in run.stderr
    assert "set broker.rack" in run.stderr
