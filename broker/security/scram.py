"""SCRAM credentials (RFC 5802, RFC 7677) as Kafka stores them: per user and mechanism, the
salt, the iteration count, and the stored and server keys, never the password.

They live in the cluster metadata image (KIP-554: AlterUserScramCredentials writes them,
the controller's record in Kafka, the image here), so every broker authenticates every
user. The exchange itself is ``scramp``'s (broker.security.sasl); only the keys derived from
a salted password are computed here, as AlterUserScramCredentials carries that, not the
password.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
from dataclasses import dataclass
from typing import Any

DEFAULT_ITERATIONS = 8192

# Kafka's ScramMechanism: name -> (type id on the wire, hash)
MECHANISMS: dict[str, tuple[int, str]] = {
    "SCRAM-SHA-256": (1, "sha256"),
    "SCRAM-SHA-512": (2, "sha512"),
}
MECHANISM_BY_TYPE = {type_id: name for name, (type_id, _) in MECHANISMS.items()}
MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384


@dataclass(frozen=True, slots=True)
class ScramCredential:
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    def to_doc(self) -> dict[str, Any]:
        return {"salt": _b64(self.salt), "stored_key": _b64(self.stored_key),
                "server_key": _b64(self.server_key), "iterations": self.iterations}

    @classmethod
    def from_doc(cls, doc: dict[str, Any]) -> ScramCredential:
        return cls(base64.b64decode(doc["salt"]), base64.b64decode(doc["stored_key"]),
                   base64.b64decode(doc["server_key"]), doc["iterations"])


def from_salted_password(mechanism: str, salt: bytes, salted_password: bytes,
                         iterations: int) -> ScramCredential:
    """The stored credential for a salted password (RFC 5802 section 3: StoredKey is
    H(HMAC(SaltedPassword, "Client Key")), ServerKey HMAC(SaltedPassword, "Server Key"))."""
    digest = MECHANISMS[mechanism][1]
    client_key = hmac.digest(salted_password, b"Client Key", digest)
    return ScramCredential(salt, hashlib.new(digest, client_key).digest(),
                           hmac.digest(salted_password, b"Server Key", digest), iterations)


def salted_password(mechanism: str, password: str, salt: bytes, iterations: int) -> bytes:
    """Hi(password, salt, i) of RFC 5802: what a client sends in AlterUserScramCredentials."""
    return hashlib.pbkdf2_hmac(MECHANISMS[mechanism][1], password.encode(), salt, iterations)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def new_credential(mechanism: str, password: str,
                   iterations: int = DEFAULT_ITERATIONS) -> ScramCredential:
    salt = os.urandom(32)
    return from_salted_password(mechanism, salt,
                                salted_password(mechanism, password, salt, iterations),
                                iterations)


def matches(credential: ScramCredential, mechanism: str, password: str) -> bool:
    """Whether ``password`` is the one the credential was made from."""
    expected = from_salted_password(
        mechanism, credential.salt,
        salted_password(mechanism, password, credential.salt, credential.iterations),
        credential.iterations)
    return hmac.compare_digest(expected.stored_key, credential.stored_key)
