"""A KafkaCluster's ``spec.listeners`` and ``spec.authorization`` → the brokers' security
configuration with Kafka's names, and the Secrets their pods mount.

Written the way Strimzi users write them, kept small::

    listeners:
      - {name: plain, port: 9092, tls: false}
      - {name: tls, port: 9093, tls: true, authentication: {type: tls}}
      - {name: scram, port: 9094, tls: true, authentication: {type: scram-sha-512}}
    authorization: {type: simple, superUsers: [admin]}

As in Strimzi, the brokers talk to each other (and the operator to them) on a listener of
their own, ``REPLICATION`` on port 9091: mutual TLS with certificates of the cluster CA, so
no broker password has to exist anywhere, and a client certificate of the clients CA (a
KafkaUser's) is never accepted there. The brokers' and the operator's principals carry
``O=kafkube``, which the operator never puts in a KafkaUser's certificate, so no user can
take a super user's name.

No ``spec.listeners``: one PLAINTEXT listener on 9092 and nothing of this module, exactly as
before listeners existed (``enabled`` is False).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

REPLICATION = "replication"
REPLICATION_PORT = 9091
ORGANIZATION = "kafkube"  # in the brokers' and the operator's subjects, never in a user's
OPERATOR_COMMON_NAME = "kafkube-operator"
CLUSTER_DOMAIN = "cluster.local"  # pod_identity.py's default of KAFKUBE_CLUSTER_DOMAIN
STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
SCRAM = "scram-sha-512"
TLS = "tls"
SCRAM_MECHANISM = "SCRAM-SHA-512"

# Where the brokers find their key store and the CAs' certificates: not under the config
# directory, whose ConfigMap volume is read-only (a mount point cannot be made inside it).
BROKER_CERTS_DIR = "/etc/kafkube-certs/broker"
CLUSTER_CA_DIR = "/etc/kafkube-certs/cluster-ca"
CLIENTS_CA_DIR = "/etc/kafkube-certs/clients-ca"
BROKER_KEYSTORE = "broker.pem"


@dataclass(frozen=True)
class ListenerSpec:
    """One entry of spec.listeners."""

    name: str
    port: int
    tls: bool = False
    authentication: str | None = None  # "tls", "scram-sha-512" or None

    @property
    def config_name(self) -> str:
        """Kafka's listener name: upper case in ``listeners``, lower in ``listener.name.*``."""
        return self.name.upper()

    @property
    def protocol(self) -> str:
        sasl = self.authentication == SCRAM
        if self.tls:
            return "SASL_SSL" if sasl else "SSL"
        return "SASL_PLAINTEXT" if sasl else "PLAINTEXT"


@dataclass(frozen=True)
class SecuritySpec:
    """spec.listeners and spec.authorization, read once; ``listeners`` empty means the
    default single PLAINTEXT listener and nothing else."""

    listeners: tuple[ListenerSpec, ...] = ()
    authorization: bool = False
    super_users: tuple[str, ...] = ()

    @classmethod
    def of(cls, spec: Mapping) -> SecuritySpec:
        listeners = tuple(
            ListenerSpec(str(entry["name"]), int(entry["port"]), bool(entry.get("tls", False)),
                         (entry.get("authentication") or {}).get("type"))
            for entry in spec.get("listeners") or ())
        authorization = spec.get("authorization") or {}
        return cls(listeners, authorization.get("type") == "simple",
                   tuple(str(u) for u in authorization.get("superUsers") or ()))

    @property
    def enabled(self) -> bool:
        return bool(self.listeners)

    @property
    def uses_clients_ca(self) -> bool:
        return any(li.authentication == TLS for li in self.listeners)


PLAINTEXT_DEFAULT = ListenerSpec("plaintext", 9092)  # the one listener without spec.listeners
REPLICATION_LISTENER = ListenerSpec(REPLICATION, REPLICATION_PORT, True, TLS)


@dataclass(frozen=True)
class ListenerLayout:
    """The listeners the brokers are configured with: every one (the replication listener
    and the default PLAINTEXT one included), which of them the brokers replicate on, and
    whether the authorizer is on. The spec says the layout it wants (``of``); a running
    cluster is moved to it in steps (model/listener_change.py), each a roll, so brokers of
    two steps always share a listener to replicate on."""

    listeners: tuple[ListenerSpec, ...]
    inter_broker: str  # Kafka's listener name (upper case)
    authorization: bool = False

    @classmethod
    def of(cls, security: SecuritySpec) -> ListenerLayout:
        if not security.enabled:
            return cls((PLAINTEXT_DEFAULT,), PLAINTEXT_DEFAULT.config_name)
        return cls((REPLICATION_LISTENER, *security.listeners), REPLICATION_LISTENER.config_name,
                   security.authorization)

    @property
    def default(self) -> bool:
        """The layout of a cluster without spec.listeners: no security config at all."""
        return self == ListenerLayout.of(SecuritySpec())

    @property
    def names(self) -> set[str]:
        return {li.config_name for li in self.listeners}

    def listener(self, config_name: str) -> ListenerSpec | None:
        return next((li for li in self.listeners if li.config_name == config_name), None)

    @property
    def uses_tls(self) -> bool:
        return any(li.tls for li in self.listeners)

    @property
    def uses_clients_ca(self) -> bool:
        return any(li.authentication == TLS and li.name != REPLICATION for li in self.listeners)

    def as_status(self) -> dict:
        """For ``status.listenerLayout``: where a listener change stands, should the brokers'
        ConfigMap be deleted mid-change (``of_status`` reads it back)."""
        # No nulls: a merge patch would take them for deletions, never matching what it read.
        return {"listeners": [{"name": li.name, "port": li.port, "tls": li.tls}
                              | ({"authentication": li.authentication}
                                 if li.authentication else {}) for li in self.listeners],
                "interBroker": self.inter_broker, "authorization": self.authorization}

    @classmethod
    def of_status(cls, status: Mapping | None) -> ListenerLayout | None:
        found = (status or {}).get("listenerLayout")
        if not found:
            return None
        return cls(tuple(ListenerSpec(str(li["name"]), int(li["port"]), bool(li.get("tls")),
                                      li.get("authentication"))
                         for li in found.get("listeners") or ()),
                   str(found.get("interBroker")), bool(found.get("authorization")))


def layout_of_properties(properties: Mapping[str, str]) -> ListenerLayout | None:
    """The layout a rendered server.properties configures (the brokers' ConfigMap), None if
    it names no listeners. The reverse of ``security_properties``."""
    text = properties.get("listeners")
    if not text:
        return None
    protocols = dict(entry.split(":", 1) for entry in
                     (properties.get("listener.security.protocol.map") or "").split(",") if entry)
    listeners = []
    for uri in text.split(","):
        name, _, address = uri.partition("://")
        protocol = protocols.get(name, name)
        prefix = f"listener.name.{name.lower()}."
        authentication = SCRAM if protocol.startswith("SASL") else (
            TLS if properties.get(prefix + "ssl.client.auth") == "required" else None)
        listeners.append(ListenerSpec(name.lower(), int(address.rpartition(":")[2]),
                                      protocol in ("SSL", "SASL_SSL"), authentication))
    inter = properties.get("inter.broker.listener.name") or listeners[0].config_name
    if listeners == [PLAINTEXT_DEFAULT]:  # an authorizer there is spec.config's, not a step's
        return ListenerLayout((PLAINTEXT_DEFAULT,), inter)
    return ListenerLayout(tuple(listeners), inter, "authorizer.class.name" in properties)


def principal(subject: str) -> str:
    """Kafka's principal of a certificate subject or a SASL user name, as the brokers'
    default ``ssl.principal.mapping.rules`` make it."""
    return f"User:{subject}"


def broker_subject(cluster: str) -> str:
    return f"CN={cluster}-kafka,O={ORGANIZATION}"


def operator_subject() -> str:
    return f"CN={OPERATOR_COMMON_NAME},O={ORGANIZATION}"


def super_users(cluster: str, security: SecuritySpec) -> list[str]:
    """The brokers and the operator first (they replicate and administer everything), then
    the spec's, a bare name taken as ``User:<name>``."""
    users = [principal(broker_subject(cluster)), principal(operator_subject())]
    for user in security.super_users:
        named = user if ":" in user else principal(user)
        if named not in users:
            users.append(named)
    return users


def security_properties(cluster: str, security: SecuritySpec,
                        layout: ListenerLayout | None = None) -> dict[str, str]:
    """The broker config of spec.listeners and spec.authorization (empty when there are no
    listeners), or of ``layout``, a step towards them. ``advertised.listeners`` is per pod:
    see ``advertised_listeners``."""
    layout = layout or ListenerLayout.of(security)
    if layout.default:
        return {}
    listeners = layout.listeners
    properties = {
        "listeners": ",".join(f"{li.config_name}://0.0.0.0:{li.port}" for li in listeners),
        "listener.security.protocol.map": ",".join(
            f"{li.config_name}:{li.protocol}" for li in listeners),
        "inter.broker.listener.name": layout.inter_broker,
    }
    if layout.uses_tls:
        properties.update({
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": f"{BROKER_CERTS_DIR}/{BROKER_KEYSTORE}",
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": f"{CLUSTER_CA_DIR}/ca.crt",
        })
    if any(li.authentication == SCRAM for li in listeners):
        properties["sasl.enabled.mechanisms"] = SCRAM_MECHANISM
    for li in listeners:
        prefix = f"listener.name.{li.name}."
        if li.authentication == TLS:
            properties[prefix + "ssl.client.auth"] = "required"
            if li.name != REPLICATION:  # users' certificates come from the clients CA
                properties[prefix + "ssl.truststore.location"] = f"{CLIENTS_CA_DIR}/ca.crt"
        elif li.authentication == SCRAM:
            properties[prefix + "sasl.enabled.mechanisms"] = SCRAM_MECHANISM
    if layout.authorization:
        properties["authorizer.class.name"] = STANDARD_AUTHORIZER
        properties["super.users"] = ";".join(super_users(cluster, security))
    return properties


def advertised_listeners(headless_service: str, namespace: str,
                         security: SecuritySpec | ListenerLayout) -> str:
    """Each broker's stable DNS name on every listener, as ``--pod-identity`` derives it for
    the single default listener; ``$(POD_NAME)`` is expanded by the kubelet from the
    container's environment."""
    host = f"$(POD_NAME).{headless_service}.{namespace}.svc.{CLUSTER_DOMAIN}"
    layout = security if isinstance(security, ListenerLayout) else ListenerLayout.of(security)
    return ",".join(f"{li.config_name}://{host}:{li.port}" for li in layout.listeners)


def broker_dns_names(headless_service: str, bootstrap_service: str,
                     namespace: str) -> list[str]:
    """The SANs of the brokers' certificate: every broker through the headless service (a
    wildcard, so scaling needs no new certificate) and the bootstrap service, with and
    without the cluster domain."""
    names = []
    for suffix in (f"{namespace}.svc", f"{namespace}.svc.{CLUSTER_DOMAIN}"):
        names += [f"*.{headless_service}.{suffix}", f"{bootstrap_service}.{suffix}"]
    return [*names, bootstrap_service, f"{bootstrap_service}.{namespace}"]


def listener_status(bootstrap_service: str, namespace: str,
                    security: SecuritySpec) -> list[dict[str, str]]:
    """Where clients bootstrap on each listener (status.listeners, as Strimzi shows them);
    empty without spec.listeners (status.bootstrapServers says it)."""
    return [{"name": li.name, "bootstrapServers": f"{bootstrap_service}.{namespace}.svc:{li.port}"}
            for li in security.listeners]
