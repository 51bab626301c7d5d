"""TLS for SSL and SASL_SSL listeners, and for a broker dialling one: contexts from Kafka's
``ssl.*`` keys, and the principal a client certificate stands for.

Key and trust stores are PEM (``ssl.keystore.type=PEM``, as Kafka allows since KIP-651):
a file (``ssl.keystore.location``: the private key and the certificate chain) or the PEM
text itself (``ssl.keystore.key`` and ``ssl.keystore.certificate.chain``). Python's ``ssl``
module (OpenSSL) does the protocol; ``cryptography`` reads the client certificate's
subject as the RFC 2253 name Kafka's principal rules are written against.
"""

from __future__ import annotations

import contextlib
import os
import re
import ssl
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass

from cryptography import x509

from broker.config.broker_config import BrokerConfig
from kafkube_contract.config_keys import ConfigError

_VERSIONS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}
_CLIENT_AUTH = {"required": ssl.CERT_REQUIRED, "requested": ssl.CERT_OPTIONAL,
                "none": ssl.CERT_NONE}


def server_context(config: BrokerConfig, listener: str) -> ssl.SSLContext:
    """The context of an SSL or SASL_SSL listener, from its (listener-prefixed) keys."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    _common(context, config, listener)
    _load_keystore(context, config, listener)
    client_auth = config.for_listener(listener, "ssl.client.auth")
    if client_auth not in _CLIENT_AUTH:
        raise ConfigError(f"ssl.client.auth: {client_auth!r} is not required, requested or none")
    context.verify_mode = _CLIENT_AUTH[client_auth]
    if client_auth != "none" and not _load_truststore(context, config, listener):
        raise ConfigError(f"ssl.client.auth={client_auth} on listener {listener} needs a trust "
                          f"store (ssl.truststore.location or ssl.truststore.certificates)")
    elif client_auth == "none":
        _load_truststore(context, config, listener)
    return context


def client_context(config: BrokerConfig, listener: str) -> ssl.SSLContext:
    """The context a broker dials another with on the inter-broker listener: it trusts the
    trust store and, if it has a key store, presents it (mutual TLS)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    _common(context, config, listener)
    if not _load_truststore(context, config, listener):
        context.load_default_certs()
    context.check_hostname = bool(
        config.for_listener(listener, "ssl.endpoint.identification.algorithm"))
    if _has_keystore(config, listener):
        _load_keystore(context, config, listener)
    return context


def _common(context: ssl.SSLContext, config: BrokerConfig, listener: str) -> None:
    # No TLS 1.2 renegotiation: a client looping renegotiations costs CPU (Kafka refuses it).
    context.options |= ssl.OP_NO_RENEGOTIATION
    versions = sorted(_VERSIONS[v] for v in config.for_listener(listener, "ssl.enabled.protocols"))
    if not versions:
        raise ConfigError("ssl.enabled.protocols: no protocol enabled")
    context.minimum_version, context.maximum_version = versions[0], versions[-1]
    ciphers = config.for_listener(listener, "ssl.cipher.suites")
    if ciphers:
        try:
            context.set_ciphers(":".join(ciphers))
        except ssl.SSLError as e:
            raise ConfigError(f"ssl.cipher.suites: {e}") from None


def _check_pem(config: BrokerConfig, listener: str, key: str) -> None:
    kind = config.for_listener(listener, key)
    if kind != "PEM":
        raise ConfigError(f"{key}: {kind} stores are not read by kafkube; use PEM (Kafka "
                          f"reads PEM too: convert with openssl pkcs12 / keytool)")


def _has_keystore(config: BrokerConfig, listener: str) -> bool:
    return bool(config.for_listener(listener, "ssl.keystore.location")
                or config.for_listener(listener, "ssl.keystore.key"))


def _load_keystore(context: ssl.SSLContext, config: BrokerConfig, listener: str) -> None:
    _check_pem(config, listener, "ssl.keystore.type")
    location = config.for_listener(listener, "ssl.keystore.location")
    key = config.for_listener(listener, "ssl.keystore.key")
    chain = config.for_listener(listener, "ssl.keystore.certificate.chain")
    password = (config.for_listener(listener, "ssl.key.password")
                or config.for_listener(listener, "ssl.keystore.password"))
    try:
        if location:
            context.load_cert_chain(location, password=password)
        elif key and chain:
            with _pem_file(key + "\n" + chain) as path:
                context.load_cert_chain(path, password=password)
        else:
            raise ConfigError(f"listener {listener} uses TLS but has no key store: set "
                              f"ssl.keystore.location, or ssl.keystore.key and "
                              f"ssl.keystore.certificate.chain")
    except (OSError, ssl.SSLError) as e:
        raise ConfigError(f"ssl.keystore of listener {listener}: {e}") from None


def _load_truststore(context: ssl.SSLContext, config: BrokerConfig, listener: str) -> bool:
    location = config.for_listener(listener, "ssl.truststore.location")
    certificates = config.for_listener(listener, "ssl.truststore.certificates")
    if not location and not certificates:
        return False
    _check_pem(config, listener, "ssl.truststore.type")
    try:
        if location:
            context.load_verify_locations(cafile=location)
        else:
            context.load_verify_locations(cadata=certificates)
    except (OSError, ssl.SSLError) as e:
        raise ConfigError(f"ssl.truststore of listener {listener}: {e}") from None
    return True


@contextlib.contextmanager
def _pem_file(text: str) -> Iterator[str]:
    """OpenSSL loads keys from files only: the PEM text in a private temporary one."""
    fd, path = tempfile.mkstemp(suffix=".pem")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        yield path
    finally:
        os.unlink(path)


# -- principals ---------------------------------------------------------------------------

_RULE = re.compile(r"\s*(?:(DEFAULT)|RULE:((?:\\.|[^\\/])*)/((?:\\.|[^\\/])*)/([LU]?))\s*(?:,|$)")


@dataclass(frozen=True, slots=True)
class PrincipalRule:
    """One of ``ssl.principal.mapping.rules``; a None pattern is DEFAULT (the name as is)."""

    pattern: re.Pattern[str] | None = None
    replacement: str = ""
    case: str = ""

    def apply(self, name: str) -> str | None:
        if self.pattern is None:
            return name
        if not self.pattern.fullmatch(name):
            return None
        result = self.pattern.sub(self.replacement, name)
        return result.lower() if self.case == "L" else result.upper() if self.case == "U" \
            else result


def parse_principal_rules(text: str) -> tuple[PrincipalRule, ...]:
    rules: list[PrincipalRule] = []
    position = 0
    text = text.strip()
    while position < len(text):
        match = _RULE.match(text, position)
        if match is None or match.end() == position:
            raise ConfigError(f"ssl.principal.mapping.rules: cannot read {text[position:]!r}")
        if match.group(1):
            rules.append(PrincipalRule())
        else:
            try:
                pattern = re.compile(match.group(2))
            except re.error as e:
                raise ConfigError(f"ssl.principal.mapping.rules: {e}") from None
            # Java's $1 is Python's \g<1>.
            replacement = re.sub(r"\$(\d+)", r"\\g<\1>", match.group(3))
            rules.append(PrincipalRule(pattern, replacement, match.group(4)))
        position = match.end()
    return tuple(rules)


class NoMatchingRule(Exception):
    """A certificate's subject that no principal rule maps: its client is refused."""


def certificate_principal(der: bytes, rules: tuple[PrincipalRule, ...]) -> str:
    """``User:<name>`` for a client certificate: its subject as an RFC 2253 name, mapped by
    the first rule that matches (Kafka's DefaultKafkaPrincipalBuilder)."""
    try:
        subject = x509.load_der_x509_certificate(der).subject.rfc4514_string()
    except ValueError as e:  # OpenSSL took it, cryptography cannot read its subject
        raise NoMatchingRule(f"the client certificate's subject cannot be read: {e}") from None
    for rule in rules:
        name = rule.apply(subject)
        if name is not None:
            return f"User:{name}"
    raise NoMatchingRule(f"no rule in ssl.principal.mapping.rules maps {subject!r}")
