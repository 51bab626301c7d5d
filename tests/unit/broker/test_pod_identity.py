"""A broker's identity as a StatefulSet pod, derived from its environment: node.id,
advertised.listeners and broker.rack, explicit settings first."""

from __future__ import annotations

import pytest

from broker.cluster.pod_identity import pod_overrides
from kafkube_contract.config_keys import ConfigError

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


def test_a_node_pools_offset_comes_before_the_ordinal() -> None:
    """A pod of a node pool's StatefulSet: its node id is the pool's first id plus its
    ordinal, so two pools' pod 0 are two brokers."""
    env = {**POD_ENV, "POD_NAME": "orders-kafka-big-1", "KAFKUBE_NODE_ID_OFFSET": "100"}
    assert pod_overrides(env, {})["node.id"] == "101"
    with pytest.raises(ConfigError, match="KAFKUBE_NODE_ID_OFFSET is '-3'"):
        pod_overrides({**env, "KAFKUBE_NODE_ID_OFFSET": "-3"}, {})
