"""SASL on a connection, as Kafka's SaslServerAuthenticator runs it: the mechanisms (PLAIN,
SCRAM-SHA-256, SCRAM-SHA-512), the order of requests, and re-authentication (KIP-368).

A client on a SASL listener may send ApiVersions, then SaslHandshake naming a mechanism,
then SaslAuthenticate requests carrying the mechanism's tokens until it is authenticated;
any other request before that closes the connection, as in Kafka. Failed authentication
answers SASL_AUTHENTICATION_FAILED and closes. With ``connections.max.reauth.ms`` the
session has a lifetime: the client authenticates again on the same connection before it
ends (as the same principal), or the connection is closed at its next request.

PLAIN checks the ``user_<name>="<password>"`` entries of the listener's JAAS configuration
(Kafka's PlainServerCallbackHandler); SCRAM the credentials in the cluster metadata, with
``scramp`` doing the exchange (RFC 5802 / 7677).
"""

from __future__ import annotations

import enum
import hmac
import logging
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import scramp

from broker.config.broker_config import BrokerConfig
from broker.security.scram import MECHANISMS, ScramCredential
from kafkube_contract.config_keys import ConfigError

log = logging.getLogger(__name__)

ANONYMOUS = "User:ANONYMOUS"
API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE = 18, 17, 36
CredentialLookup = Callable[[str, str], ScramCredential | None]  # (user, mechanism)


class AuthenticationFailed(Exception):
    """The client's credentials were refused; the message is what the client is told."""


class IllegalSaslState(Exception):
    """A request out of the SASL order: the connection is closed."""


# -- JAAS -----------------------------------------------------------------------------------

_JAAS = re.compile(r"\s*([\w.$]+)\s+(required|requisite|sufficient|optional)\s*(.*?);?\s*$",
                   re.DOTALL)
_OPTION = re.compile(r'\s*([\w.\-]+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s;"]+))')


@dataclass(frozen=True, slots=True)
class JaasConfig:
    login_module: str
    options: Mapping[str, str]

    def plain_users(self) -> dict[str, str]:
        """PLAIN's server side: user_<name>="<password>" options."""
        return {k.removeprefix("user_"): v for k, v in self.options.items()
                if k.startswith("user_")}


def parse_jaas(text: str) -> JaasConfig:
    """``<LoginModule> required key="value" ...;`` as Kafka's sasl.jaas.config."""
    match = _JAAS.fullmatch(text.strip())
    if match is None:
        raise ConfigError(f"sasl.jaas.config: expected '<LoginModule> required key=\"value\" "
                          f"...;', got {text[:80]!r}")
    options: dict[str, str] = {}
    rest = match.group(3).strip().rstrip(";")
    position = 0
    while position < len(rest):
        option = _OPTION.match(rest, position)
        if option is None:
            if rest[position:].strip():
                raise ConfigError(f"sasl.jaas.config: cannot read {rest[position:][:40]!r}")
            break
        quoted, bare = option.group(2), option.group(3)
        options[option.group(1)] = (re.sub(r"\\(.)", r"\1", quoted) if quoted is not None
                                    else bare)
        position = option.end()
    return JaasConfig(match.group(1), options)


def listener_jaas(config: BrokerConfig, listener: str, mechanism: str) -> str | None:
    """Kafka's lookup of a listener's JAAS entry for a mechanism:
    listener.name.<listener>.<mechanism>.sasl.jaas.config, then the listener's own, then
    the broker's sasl.jaas.config."""
    prefix = f"listener.name.{listener.lower()}."
    originals = config.originals
    return (originals.get(f"{prefix}{mechanism.lower()}.sasl.jaas.config")
            or originals.get(f"{prefix}sasl.jaas.config") or config["sasl.jaas.config"])


# -- mechanisms ------------------------------------------------------------------------------


class PlainServer:
    """RFC 4616: one token, ``authzid NUL authcid NUL password``."""

    def __init__(self, users: Mapping[str, str]) -> None:
        self.users = users
        self.complete = False
        self.user = ""

    def evaluate(self, token: bytes) -> bytes:
        parts = token.split(b"\x00")
        if len(parts) != 3:
            raise AuthenticationFailed("Invalid SASL/PLAIN response: expected 3 tokens")
        try:
            authzid, user, password = (p.decode() for p in parts)
        except UnicodeDecodeError:
            raise AuthenticationFailed("Invalid SASL/PLAIN response: not UTF-8") from None
        if not user:
            raise AuthenticationFailed("Authentication failed: username not specified")
        if not password:
            raise AuthenticationFailed("Authentication failed: password not specified")
        if authzid and authzid != user:
            raise AuthenticationFailed(
                "Authentication failed: Client requested an authorization id that is "
                "different from username")
        expected = self.users.get(user)
        if expected is None or not hmac.compare_digest(expected.encode(), password.encode()):
            raise AuthenticationFailed("Authentication failed: Invalid username or password")
        self.user, self.complete = user, True
        return b""


class ScramServer:
    """RFC 5802 with the credentials of the cluster metadata; two round trips."""

    def __init__(self, mechanism: str, lookup: CredentialLookup) -> None:
        self.mechanism = mechanism
        self.lookup = lookup
        self.complete = False
        self.user = ""
        self._server = scramp.ScramMechanism(mechanism).make_server(self._auth_info)
        self._step = 0

    def _auth_info(self, user: str) -> tuple[bytes, bytes, bytes, int]:
        credential = self.lookup(user, self.mechanism)
        if credential is None:
            raise scramp.ScramException(f"no {self.mechanism} credential for {user!r}")
        self.user = user
        return credential.salt, credential.stored_key, credential.server_key, \
            credential.iterations

    def evaluate(self, token: bytes) -> bytes:
        failed = AuthenticationFailed(
            f"Authentication failed during authentication due to invalid credentials with "
            f"SASL mechanism {self.mechanism}")
        try:
            message = token.decode()
        except UnicodeDecodeError:
            raise failed from None
        try:
            if self._step == 0:
                self._step = 1
                self._server.set_client_first(message)
                return self._server.get_server_first().encode()
            if self._step == 1:
                self._step = 2
                self._server.set_client_final(message)
                self.complete = True
                return self._server.get_server_final().encode()
        except scramp.ScramException as e:
            log.debug("SCRAM %s: %s", self.mechanism, e)
            raise failed from None
        raise IllegalSaslState("SCRAM exchange already complete")


Mechanism = PlainServer | ScramServer


# -- the connection's state ------------------------------------------------------------------


class SaslState(enum.Enum):
    HANDSHAKE = "handshake"  # ApiVersions or SaslHandshake expected
    AUTHENTICATE = "authenticate"  # SaslAuthenticate expected
    COMPLETE = "complete"
    FAILED = "failed"


class SaslAuthenticator:
    """One SASL connection's authentication, first and again (KIP-368)."""

    def __init__(self, mechanisms: list[str], make: Callable[[str], Mechanism],
                 reauth_ms: int, clock: Callable[[], float]) -> None:
        self.mechanisms = mechanisms
        self.make = make
        self.reauth_ms = reauth_ms
        self.clock = clock
        self.state = SaslState.HANDSHAKE
        self.principal: str | None = None  # set once authenticated
        self.mechanism_name = ""
        self.expires_at: float | None = None
        self.raw_tokens = False  # after SaslHandshake v0: tokens come as bare frames
        self._mechanism: Mechanism | None = None

    @property
    def authenticated(self) -> bool:
        return self.principal is not None

    def allows(self, api_key: int) -> bool:
        """Whether this request may come now; False closes the connection."""
        if api_key == SASL_HANDSHAKE:
            return self.state in (SaslState.HANDSHAKE, SaslState.COMPLETE)
        if api_key == SASL_AUTHENTICATE:
            return self.state == SaslState.AUTHENTICATE
        if self.state == SaslState.COMPLETE:
            return not self.expired()
        return api_key == API_VERSIONS and self.state == SaslState.HANDSHAKE \
            and not self.authenticated

    def expired(self) -> bool:
        return self.expires_at is not None and self.clock() >= self.expires_at

    def handshake(self, mechanism: str) -> bool:
        """False: the mechanism is not offered (UNSUPPORTED_SASL_MECHANISM), or differs
        from the one the session was authenticated with; either closes the connection,
        as in Kafka."""
        if mechanism not in self.mechanisms or (
                self.authenticated and mechanism != self.mechanism_name):
            self.state = SaslState.FAILED
            return False
        self.mechanism_name = mechanism
        self._mechanism = self.make(mechanism)
        self.state = SaslState.AUTHENTICATE
        return True

    def authenticate(self, token: bytes) -> tuple[bytes, int]:
        """The server's token and, once complete, the session lifetime in ms (0: none).
        Raises AuthenticationFailed; the connection then closes."""
        assert self._mechanism is not None
        try:
            answer = self._mechanism.evaluate(token)
        except (AuthenticationFailed, IllegalSaslState):
            self.state = SaslState.FAILED
            raise
        if not self._mechanism.complete:
            return answer, 0
        principal = f"User:{self._mechanism.user}"
        if self.principal is not None and principal != self.principal:
            self.state = SaslState.FAILED
            raise AuthenticationFailed(
                f"Cannot change principals during re-authentication from {self.principal}: "
                f"{principal}")
        self.principal = principal
        self.state = SaslState.COMPLETE
        self._mechanism = None
        self.expires_at = self.clock() + self.reauth_ms / 1000 if self.reauth_ms else None
        return answer, self.reauth_ms


def supported_mechanism(name: str) -> bool:
    return name == "PLAIN" or name in MECHANISMS
