"""Certificates and listener settings for the security tests: a cluster CA and the brokers'
certificate, clients' certificates (one expired, one from a CA the brokers do not trust),
written as PEM files the way the operator's Secrets hold them, and the broker overrides for
a cluster with every kind of listener."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from pathlib import Path

from kafkube_operator.model.certificates import KeyPair, issue, new_ca

ADMIN, ADMIN_PASSWORD = "admin", "admin-secret"
ALICE, ALICE_PASSWORD = "alice", "alice-secret"
PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
              f'username="{ADMIN}" password="{ADMIN_PASSWORD}" '
              f'user_{ADMIN}="{ADMIN_PASSWORD}" user_{ALICE}="{ALICE_PASSWORD}";')
SCRAM_JAAS = ('org.apache.kafka.common.security.scram.ScramLoginModule required '
              f'username="{ADMIN}" password="{ADMIN_PASSWORD}";')


@dataclass(frozen=True)
class Pki:
    ca: Path  # the cluster CA's certificate: clients' and brokers' trust store
    broker_keystore: Path  # key and certificate chain, for ssl.keystore.location
    alice_cert: Path
    alice_key: Path
    expired_cert: Path
    expired_key: Path
    stranger_cert: Path  # signed by a CA nobody trusts
    stranger_key: Path


def make_pki(root: Path) -> Pki:
    now = dt.datetime.now(dt.UTC)
    root.mkdir(parents=True, exist_ok=True)
    ca = new_ca("kafkube test cluster CA", now)
    broker = issue(ca, "broker", now, dns_names=["localhost"], ip_addresses=["127.0.0.1"])
    alice = issue(ca, ALICE, now, organization="kafkube")
    expired = issue(ca, "expired", now - dt.timedelta(days=30), validity_days=1,
                    not_before=now - dt.timedelta(days=30))
    stranger = issue(new_ca("someone else's CA", now), "stranger", now)

    def write(name: str, text: str) -> Path:
        path = root / name
        path.write_text(text)
        return path

    def pair(name: str, kp: KeyPair) -> tuple[Path, Path]:
        return write(f"{name}.crt", kp.certificate), write(f"{name}.key", kp.key)

    return Pki(write("ca.crt", ca.certificate), write("broker.pem", broker.keystore),
               *pair("alice", alice), *pair("expired", expired), *pair("stranger", stranger))


def secure_listeners(pki: Pki, inter_broker: str = "PLAINTEXT",
                     client_auth: str = "requested") -> dict[str, str]:
    """A broker with every protocol: PLAINTEXT, SSL (mutual TLS requested), SASL_SSL with
    SCRAM-SHA-512 and PLAIN, SASL_PLAINTEXT with PLAIN, and BROKER (SASL_SSL, SCRAM-SHA-512)
    for the brokers themselves when ``inter_broker`` is BROKER."""
    listeners = ["PLAINTEXT://127.0.0.1:0", "SSL://127.0.0.1:0", "SASL_SSL://127.0.0.1:0",
                 "SASL_PLAINTEXT://127.0.0.1:0"]
    protocol_map = "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_SSL:SASL_SSL,SASL_PLAINTEXT:SASL_PLAINTEXT"
    if inter_broker == "BROKER":
        listeners.append("BROKER://127.0.0.1:0")
        protocol_map += ",BROKER:SASL_SSL"
    return {
        "listeners": ",".join(listeners),
        "listener.security.protocol.map": protocol_map,
        "inter.broker.listener.name": inter_broker,
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(pki.broker_keystore),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(pki.ca),
        "listener.name.ssl.ssl.client.auth": client_auth,
        "sasl.enabled.mechanisms": "SCRAM-SHA-512,SCRAM-SHA-256,PLAIN",
        "listener.name.sasl_plaintext.sasl.enabled.mechanisms": "PLAIN",
        "listener.name.broker.sasl.enabled.mechanisms": "SCRAM-SHA-512",
        "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
        "listener.name.sasl_ssl.plain.sasl.jaas.config": PLAIN_JAAS,
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
        "listener.name.broker.scram-sha-512.sasl.jaas.config": SCRAM_JAAS,
        "connection.failed.authentication.delay.ms": "10",
    }
