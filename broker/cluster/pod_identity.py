"""Who a broker is when it runs as a pod of a StatefulSet (``kafkube broker --pod-identity``).

A StatefulSet gives each pod a stable name ``<statefulset>-<ordinal>``, a stable DNS name
through its headless Service and the same PersistentVolume after every restart, so those
decide the broker's identity: ``node.id`` is the ordinal (the log dir's meta.properties then
always matches), the advertised listener is the stable DNS name (clients' cached metadata
stays right when the pod's IP changes), and ``broker.rack`` is the zone label of the node the
pod was scheduled to (the downward API does not expose node labels, so it is looked up; a
KafkaCluster may name another node label in KAFKUBE_RACK_LABEL). In a cluster of several node
pools, each pool its own StatefulSet, ``KAFKUBE_NODE_ID_OFFSET`` is the pool's first node id:
``node.id`` is that plus the ordinal, so ids stay stable per pool and never collide.
Keys the configuration sets explicitly are left alone.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping

from kafkube_contract.config_keys import ConfigError

ZONE_LABEL = "topology.kubernetes.io/zone"
RACK_LABEL_ENV = "KAFKUBE_RACK_LABEL"
NODE_ID_OFFSET_ENV = "KAFKUBE_NODE_ID_OFFSET"
_ORDINAL = re.compile(r"^(?P<set>[a-z0-9]([-a-z0-9]*[a-z0-9])?)-(?P<ordinal>\d+)$")


def ordinal(pod_name: str) -> int:
    match = _ORDINAL.match(pod_name)
    if match is None:
        raise ConfigError(f"--pod-identity: pod name {pod_name!r} is not <statefulset>-<ordinal>; "
                          "set node.id explicitly")
    return int(match["ordinal"])


def pod_overrides(env: Mapping[str, str], configured: Mapping[str, str],
                  node_zone: Callable[[str], str | None] | None = None) -> dict[str, str]:
    """Config keys derived from the pod's environment (set by the StatefulSet through the
    downward API: POD_NAME, POD_NAMESPACE, NODE_NAME; KAFKUBE_HEADLESS_SERVICE), for those
    keys ``configured`` leaves unset."""
    pod = env.get("POD_NAME") or env.get("HOSTNAME")
    if not pod:
        raise ConfigError("--pod-identity needs POD_NAME (or HOSTNAME) in the environment")
    derived: dict[str, str] = {}
    if "node.id" not in configured:
        offset = env.get(NODE_ID_OFFSET_ENV, "0") or "0"
        if not offset.isdigit():
            raise ConfigError(f"--pod-identity: {NODE_ID_OFFSET_ENV} is {offset!r}, not a "
                              "node id")
        derived["node.id"] = str(int(offset) + ordinal(pod))
    service = env.get("KAFKUBE_HEADLESS_SERVICE")
    if "advertised.listeners" not in configured and service:
        namespace = env.get("POD_NAMESPACE", "default")
        domain = env.get("KAFKUBE_CLUSTER_DOMAIN", "cluster.local")
        port = env.get("KAFKUBE_PORT", "9092")
        derived["advertised.listeners"] = \
            f"PLAINTEXT://{pod}.{service}.{namespace}.svc.{domain}:{port}"
    node = env.get("NODE_NAME")
    if "broker.rack" not in configured and node and node_zone is not None:
        zone = node_zone(node)
        if zone:
            derived["broker.rack"] = zone
    return derived


def zone_from_api(kubeconfig: str | None,
                  label: str = ZONE_LABEL) -> Callable[[str], str | None]:
    """Look up a node's zone label, or the node label ``label`` (needs ``get`` on nodes: a
    ClusterRole)."""

    def lookup(node_name: str) -> str | None:
        from kubernetes import client as k8s

        from kafkube_contract.objects import REQUEST_TIMEOUT_S, api_client

        with api_client(kubeconfig) as api:
            node = k8s.CoreV1Api(api).read_node(node_name, _request_timeout=REQUEST_TIMEOUT_S)
        return (node.metadata.labels or {}).get(label)

    return lookup
