"""A KafkaCluster's spec → its brokers' server.properties, with Kafka's names.

The operator owns the keys that tie a broker to its pod and to the cluster (identity,
listeners, log dirs, coordination): a value the user gives for one of them would break the
deployment, so it is left out and reported instead. ``auto.leader.rebalance.enable`` is the
operator's to act on: the brokers get ``false`` and the operator rebalances as it says.
Every other key of ``spec.config`` is judged by the brokers' config key table
(``kafkube_contract.broker_keys``), the one a broker starting with that file applies, so a
key the broker does not know or a value it would refuse is reported here, with the broker's
message, instead of crash-looping a pod.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from kafkube_contract.broker_keys import BROKER_KEYS, IGNORED_KAFKA_KEYS
from kafkube_contract.config_keys import ConfigError
from kafkube_contract.properties import render_properties
from kafkube_operator.model.listeners import ListenerLayout, SecuritySpec, security_properties
from kafkube_operator.model.pools import node_pools
from kafkube_operator.model.storage import log_dirs

# Set per pod (--pod-identity, the downward API) or by the operator for the whole cluster.
OWNED_KEYS = frozenset({
    "node.id", "broker.id", "broker.rack", "listeners", "advertised.listeners", "log.dirs",
    "log.dir", "kafkube.coordination.backend", "kafkube.cluster.name",
    "kafkube.kubernetes.namespace", "kafkube.kubernetes.kubeconfig", "kafkube.coordination.path",
    "kafkube.metrics.port", "kafkube.health.port",
    # The listeners' side of them: model/listeners.py renders them from spec.listeners.
    "inter.broker.listener.name", "listener.security.protocol.map",
    "security.inter.broker.protocol",
})
# With spec.listeners, from spec.authorization only: a step of a listener change
# (model/listener_change.py) decides when ACLs are enforced.
SECURED_KEYS = frozenset({"authorizer.class.name", "super.users"})
DATA_DIR = "/var/lib/kafkube/data"  # volume 0's log dir (model/storage.py)
PORT = 9092
METRICS_PORT = 9404
HEALTH_PORT = 9405  # /ready: the readiness probe (broker/health.py)


@dataclass(frozen=True)
class BrokerProperties:
    """What goes into the brokers' ConfigMap, and what of spec.config could not."""

    properties: dict[str, str]
    refused: dict[str, str] = field(default_factory=dict)  # key -> why, for a Warning

    @property
    def text(self) -> str:
        return render_properties(self.properties)


def _as_text(value: object) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def broker_properties(cluster: str, spec: Mapping, brokers: int | None = None,
                      min_isr_ceiling: int | None = None,
                      layout: ListenerLayout | None = None) -> BrokerProperties:
    """server.properties for every broker of KafkaCluster ``cluster``. Replication defaults
    follow the broker count up to Kafka's production values (RF 3, min ISR 2), so a
    one-broker cluster can still create topics. ``brokers``: the count actually deployed when
    it is not spec.replicas (a refused or unfinished scale-down must not change the brokers'
    defaults, nor restart them). ``min_isr_ceiling``: the smallest replication factor of a
    topic that follows the default min ISR (model/scale.py's ``min_isr_ceiling``): a default
    above it would refuse every acks=all write to that topic. ``layout``: the listeners of a
    step of a listener change (model/listener_change.py), else spec.listeners'."""
    replicas = sum(pool.replicas for pool in node_pools(spec)) if brokers is None else brokers
    min_isr = min(2, replicas, max(1, min_isr_ceiling or 2))
    metrics = (spec.get("metrics") or {}).get("enabled", True)
    properties = {
        "listeners": f"PLAINTEXT://0.0.0.0:{PORT}",
        "log.dirs": log_dirs(spec),
        "kafkube.coordination.backend": "kubernetes",
        "kafkube.cluster.name": cluster,
        "kafkube.metrics.port": str(METRICS_PORT if metrics else -1),
        "kafkube.health.port": str(HEALTH_PORT),
        "default.replication.factor": str(min(3, replicas)),
        "min.insync.replicas": str(min_isr),
        "offsets.topic.replication.factor": str(min(3, replicas)),
    }
    # spec.listeners and spec.authorization (model/listeners.py): none by default.
    security = security_properties(cluster, SecuritySpec.of(spec), layout)
    properties.update(security)
    refused: dict[str, str] = {}
    for key, value in sorted((spec.get("config") or {}).items()):
        text = _as_text(value)
        if key in OWNED_KEYS:
            refused[key] = "set by the operator for each broker; remove it from spec.config"
            continue
        if key in security or (security and key in SECURED_KEYS):
            refused[key] = "set by the operator from spec.listeners and spec.authorization"
            continue
        known = BROKER_KEYS.get(key)
        if known is None and key not in IGNORED_KAFKA_KEYS:
            refused[key] = "not a broker config kafkube knows"
            continue
        try:
            if known is not None:
                known.parse(text)
            render_properties({key: text})
        except ConfigError as e:
            refused[key] = str(e)
            continue
        properties[key] = text
    # The operator rebalances leaders (reconcile/leaders.py), by these same keys of
    # spec.config; brokers doing it too would race it.
    properties["auto.leader.rebalance.enable"] = "false"
    return BrokerProperties(properties, refused)
