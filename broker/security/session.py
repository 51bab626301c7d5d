"""Who is on a connection: the session the network layer keeps per connection, and what a
listener needs to make one (its TLS context, its SASL mechanisms).

The principal is Kafka's: ``User:ANONYMOUS`` on PLAINTEXT (and on SSL without a client
certificate), the certificate's mapped subject on SSL with one, and the SASL user on
SASL_PLAINTEXT and SASL_SSL. Authorization (ACLs) reads it from here.
"""

from __future__ import annotations

import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass

from broker.config.broker_config import BrokerConfig
from broker.config.listeners import Listener, SecurityProtocol
from broker.security import tls
from broker.security.sasl import (
    ANONYMOUS,
    CredentialLookup,
    Mechanism,
    PlainServer,
    SaslAuthenticator,
    ScramServer,
    listener_jaas,
    parse_jaas,
)
from kafkube_contract.config_keys import ConfigError


@dataclass
class Session:
    listener: Listener
    client_host: str
    tls_principal: str = ANONYMOUS
    sasl: SaslAuthenticator | None = None

    @property
    def principal(self) -> str:
        if self.sasl is not None and self.sasl.principal is not None:
            return self.sasl.principal
        return self.tls_principal

    @property
    def authenticated(self) -> bool:
        return self.sasl is None or self.sasl.authenticated

    def allows(self, api_key: int) -> bool:
        return self.sasl is None or self.sasl.allows(api_key)


def plaintext_session(client_host: str, listener: str = "PLAINTEXT") -> Session:
    """An anonymous session on a PLAINTEXT listener (and what unit tests of handlers use)."""
    return Session(Listener(listener, SecurityProtocol.PLAINTEXT, "", 0), client_host)


class ListenerSecurity:
    """A listener's security, built once at start: refuses a listener configured in a way
    it could not serve (a missing key store, an unreadable JAAS entry) with a ConfigError."""

    def __init__(self, config: BrokerConfig, listener: Listener,
                 credentials: CredentialLookup) -> None:
        self.config = config
        self.listener = listener
        self.credentials = credentials
        protocol = listener.protocol
        self.context: ssl.SSLContext | None = (
            tls.server_context(config, listener.name) if protocol.tls else None)
        self.principal_rules = tls.parse_principal_rules(
            config.for_listener(listener.name, "ssl.principal.mapping.rules"))
        self.mechanisms: list[str] = (
            config.for_listener(listener.name, "sasl.enabled.mechanisms")
            if protocol.sasl else [])
        self.plain_users: dict[str, str] = {}
        if "PLAIN" in self.mechanisms:
            jaas = listener_jaas(config, listener.name, "PLAIN")
            if jaas is None:
                raise ConfigError(
                    f"listener {listener.name} offers PLAIN but has no sasl.jaas.config with "
                    f"its users (listener.name.{listener.name.lower()}.plain.sasl.jaas.config)")
            self.plain_users = parse_jaas(jaas).plain_users()

    def new_session(self, client_host: str, certificate: bytes | None,
                    clock: Callable[[], float] = time.monotonic) -> Session:
        """Raises tls.NoMatchingRule for a certificate no principal rule maps."""
        principal = ANONYMOUS
        if certificate:
            principal = tls.certificate_principal(certificate, self.principal_rules)
        sasl = None
        if self.listener.protocol.sasl:
            sasl = SaslAuthenticator(self.mechanisms, self._mechanism,
                                     self.config["connections.max.reauth.ms"], clock)
        return Session(self.listener, client_host, principal, sasl)

    def _mechanism(self, name: str) -> Mechanism:
        if name == "PLAIN":
            return PlainServer(self.plain_users)
        return ScramServer(name, self.credentials)
