"""A broker as a client of another: TLS and SASL on the inter-broker listener.

Followers fetching, coordinators writing markers and leaders verifying transactions dial
the inter-broker listener (``inter.broker.listener.name``) with its protocol: a TLS context
trusting its trust store (and presenting the broker's key store, for mutual TLS), and the
broker's own SASL credentials, the username and password of the listener's JAAS entry for
``sasl.mechanism.inter.broker.protocol``, as Kafka brokers log in.
"""

from __future__ import annotations

import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import scramp
from kio.schema.errors import ErrorCode
from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest

from broker.config.broker_config import BrokerConfig
from broker.config.listeners import ListenerPlan
from broker.security import tls
from broker.security.sasl import SASL_AUTHENTICATE, SASL_HANDSHAKE, listener_jaas, parse_jaas
from kafkube_contract.config_keys import ConfigError

Roundtrip = Callable[[int, int, Any], Awaitable[Any]]


class PeerAuthenticationFailed(Exception):
    """The peer refused this broker's credentials: a configuration error to report."""


@dataclass(frozen=True, slots=True)
class ClientSecurity:
    context: ssl.SSLContext | None = None
    mechanism: str | None = None
    username: str = ""
    password: str = field(default="", repr=False)

    async def authenticate(self, roundtrip: Roundtrip) -> None:
        """SaslHandshake, then SaslAuthenticate until the mechanism completes."""
        if self.mechanism is None:
            return
        answer = await roundtrip(SASL_HANDSHAKE, 1, SaslHandshakeRequest(
            mechanism=self.mechanism))
        if answer.error_code != ErrorCode.none:
            raise PeerAuthenticationFailed(
                f"SaslHandshake({self.mechanism}): {answer.error_code.name}; the peer offers "
                f"{', '.join(answer.mechanisms)}")
        if self.mechanism == "PLAIN":
            tokens = [f"\x00{self.username}\x00{self.password}".encode()]
            await self._exchange(roundtrip, tokens[0])
            return
        client = scramp.ScramClient([self.mechanism], self.username, self.password)
        server_first = await self._exchange(roundtrip, client.get_client_first().encode())
        client.set_server_first(server_first.decode())
        server_final = await self._exchange(roundtrip, client.get_client_final().encode())
        try:
            client.set_server_final(server_final.decode())
        except scramp.ScramException as e:
            raise PeerAuthenticationFailed(f"the peer's SCRAM signature is wrong: {e}") from None

    async def _exchange(self, roundtrip: Roundtrip, token: bytes) -> bytes:
        answer = await roundtrip(SASL_AUTHENTICATE, 2, SaslAuthenticateRequest(auth_bytes=token))
        if answer.error_code != ErrorCode.none:
            raise PeerAuthenticationFailed(
                f"SaslAuthenticate({self.mechanism}) as {self.username}: "
                f"{answer.error_message or answer.error_code.name}")
        return bytes(answer.auth_bytes)


def inter_broker_security(config: BrokerConfig, plan: ListenerPlan) -> ClientSecurity:
    listener = plan.inter_broker_listener
    context = tls.client_context(config, listener.name) if listener.protocol.tls else None
    if not listener.protocol.sasl:
        return ClientSecurity(context)
    mechanism = config["sasl.mechanism.inter.broker.protocol"]
    jaas_text = listener_jaas(config, listener.name, mechanism)
    if not jaas_text:
        raise ConfigError(f"the inter-broker listener {listener.name} uses SASL {mechanism} "
                          f"but no sasl.jaas.config gives this broker's username and password")
    options = parse_jaas(jaas_text).options
    if "username" not in options or "password" not in options:
        raise ConfigError(f"sasl.jaas.config of listener {listener.name}: the broker's own "
                          f"username and password are missing")
    return ClientSecurity(context, mechanism, options["username"], options["password"])
