"""A broker's identity as a StatefulSet pod against a real API server: the node zone
looked up, and the command line refusing what it cannot derive."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

from kubernetes import client as k8s

from broker.cluster.pod_identity import ZONE_LABEL, pod_overrides, zone_from_api
from kafkube_contract.objects import api_client
from tests.unit.broker.test_pod_identity import POD_ENV


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
