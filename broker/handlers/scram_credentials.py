"""SCRAM credential admin (KIP-554): DescribeUserScramCredentials and AlterUserScramCredentials.

The rules and messages are those of Kafka's KRaft code: ``ScramImage.describe`` for Describe
and ``ScramControlManager.alterCredentials`` for Alter. Credentials live in the cluster
metadata image, so Alter is answered by any broker with one compare-and-set of every
accepted change (Kafka's controller writes them as one atomic batch of records), and
Describe reads this broker's copy of the image, as Kafka brokers read their metadata cache.

Two checks go beyond Kafka's. A salt under ``MIN_SALT_BYTES``: Kafka stores it, but scramp,
which runs the SCRAM exchange here, refuses such a salt when the client authenticates, so
the user could never log in; refused at Alter, the mistake shows where it can be fixed. An
empty salted password: Kafka fails it as UNKNOWN_SERVER_ERROR, without a message, while
deriving the keys (an HMAC key must not be empty). Both are UNACCEPTABLE_CREDENTIAL here,
with a message saying why. Clients do not send either: the Java client's salts are some 25
random characters, librdkafka's 64 random bytes, and the salted password is a hash.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from broker.cluster.image import ClusterImage
from broker.cluster.metadata import ConcurrentUpdate
from broker.handlers import handles
from broker.handlers.context import DENIED_MESSAGES, RequestContext, cooperatively
from broker.protocol.messages import LONG_ANSWER, build_long_response
from broker.security.acl import Operation
from broker.security.scram import (
    MAX_ITERATIONS,
    MECHANISM_BY_TYPE,
    MECHANISMS,
    MIN_ITERATIONS,
    ScramCredential,
    from_salted_password,
)

NO_THROTTLE = datetime.timedelta(0)
# scramp.core.Salt.MIN_LENGTH: the shortest salt the SCRAM exchange accepts.
MIN_SALT_BYTES = 12

# Kafka's messages, word for word (ScramImage, ScramControlManager).
DESCRIBE_DUPLICATE_USER = ("Cannot describe SCRAM credentials for the same user twice in a "
                           "single request: ")
DESCRIBE_UNKNOWN_USER = "Attempt to describe a user credential that does not exist: "
ALTERED_TWICE = "A user credential cannot be altered twice in the same request"
DELETE_UNKNOWN = "Attempt to delete a user credential that does not exist"
EMPTY_USER = "Username must not be empty"
UNKNOWN_MECHANISM = "Unknown SCRAM mechanism"
TOO_FEW_ITERATIONS = "Too few iterations"
TOO_MANY_ITERATIONS = "Too many iterations"
# Ours (see the module docstring).
SALT_TOO_SHORT = (f"Salt must be at least {MIN_SALT_BYTES} bytes: this broker cannot "
                  "authenticate with a shorter one")
EMPTY_SALTED_PASSWORD = "Salted password must not be empty"

Credentials = dict[str, dict[str, ScramCredential]]  # user -> mechanism -> credential


@dataclass(frozen=True, slots=True)
class Refusal:
    code: ErrorCode
    message: str | None


# -- DescribeUserScramCredentials --------------------------------------------------------


def described_users(credentials: Credentials, users: Iterable[str] | None
                    ) -> list[tuple[str, int]]:
    """(user, times named) for each result: every user with a credential when ``users`` is
    None or empty (by name; Kafka's order is its hash map's), else each named user once, in
    request order."""
    named = list(users or ())
    if not named:
        return [(user, 1) for user in sorted(credentials)]
    counts = Counter(named)
    return [(user, counts[user]) for user in dict.fromkeys(named)]


def describe_user(credentials: Credentials, user: str, times_named: int) -> dict[str, Any]:
    mechanisms = credentials.get(user)
    if times_named > 1:
        code, message = ErrorCode.duplicate_resource, DESCRIBE_DUPLICATE_USER + user
    elif not mechanisms:
        code, message = ErrorCode.resource_not_found, DESCRIBE_UNKNOWN_USER + user
    else:
        infos = sorted((MECHANISMS[name][0], cred.iterations)
                       for name, cred in mechanisms.items())
        return {"user": user, "error_code": ErrorCode.none, "error_message": None,
                "credential_infos": [{"mechanism": m, "iterations": i} for m, i in infos]}
    return {"user": user, "error_code": code, "error_message": message, "credential_infos": []}


@handles(50, 0, 0)
async def describe_user_scram_credentials(ctx: RequestContext, request: Any) -> Any:
    """Needs DESCRIBE on the cluster, else the whole request is refused with
    CLUSTER_AUTHORIZATION_FAILED, at the top and in one result per named user
    (DescribeUserScramCredentialsRequest.getErrorResponse; Kafka leaves those results'
    user empty, here each names its user)."""
    if not ctx.authorize_cluster(Operation.DESCRIBE):
        denied = ErrorCode.cluster_authorization_failed
        message = DENIED_MESSAGES[denied]
        results = [{"user": u.name, "error_code": denied, "error_message": message,
                    "credential_infos": []} for u in request.users or ()]
        return await build_long_response(request, {
            "throttle_time": NO_THROTTLE, "error_code": denied, "error_message": message,
            "results": results}, len(results))
    credentials = ctx.services.store.image.scram_credentials
    users = None if request.users is None else [u.name for u in request.users]
    results = [describe_user(credentials, user, times)
               async for user, times in cooperatively(described_users(credentials, users))]
    return await build_long_response(request, {
        "throttle_time": NO_THROTTLE, "error_code": ErrorCode.none, "error_message": None,
        "results": results}, len(results))


# -- AlterUserScramCredentials -----------------------------------------------------------


def _check_user_and_mechanism(user: str, mechanism: int) -> Refusal | None:
    if not user:
        return Refusal(ErrorCode.unacceptable_credential, EMPTY_USER)
    if mechanism not in MECHANISM_BY_TYPE:
        return Refusal(ErrorCode.unsupported_sasl_mechanism, UNKNOWN_MECHANISM)
    return None


def _check_deletion(credentials: Credentials, deletion: Any) -> Refusal | None:
    refusal = _check_user_and_mechanism(deletion.name, deletion.mechanism)
    if refusal is None and MECHANISM_BY_TYPE[deletion.mechanism] not in credentials.get(
            deletion.name, {}):
        refusal = Refusal(ErrorCode.resource_not_found, DELETE_UNKNOWN)
    return refusal


def _check_upsertion(upsertion: Any) -> Refusal | None:
    refusal = _check_user_and_mechanism(upsertion.name, upsertion.mechanism)
    if refusal is not None:
        return refusal
    if upsertion.iterations < MIN_ITERATIONS:
        return Refusal(ErrorCode.unacceptable_credential, TOO_FEW_ITERATIONS)
    if upsertion.iterations > MAX_ITERATIONS:
        return Refusal(ErrorCode.unacceptable_credential, TOO_MANY_ITERATIONS)
    if len(upsertion.salt) < MIN_SALT_BYTES:
        return Refusal(ErrorCode.unacceptable_credential, SALT_TOO_SHORT)
    if not upsertion.salted_password:
        return Refusal(ErrorCode.unacceptable_credential, EMPTY_SALTED_PASSWORD)
    return None


def derive_keys(upsertions: Iterable[Any]) -> list[ScramCredential | Refusal]:
    """Each upsertion's stored credential, or why it is refused (no upsertion check needs
    the image): the HMACs are most of Alter's work, so they are done before the update."""
    return [
        _check_upsertion(u) or from_salted_password(
            MECHANISM_BY_TYPE[u.mechanism], u.salt, u.salted_password, u.iterations)
        for u in upsertions
    ]


def alter(image: ClusterImage, deletions: Iterable[Any], upsertions: Iterable[Any],
          derived: list[ScramCredential | Refusal]
          ) -> tuple[ClusterImage | None, dict[str, Refusal | None]]:
    """Kafka's ``alterCredentials`` on ``image``: the new image (None when nothing is
    accepted) and each user's outcome (None for accepted), in the order Kafka lists them:
    deletions, then upsertions, then refusals. ``derived`` is ``derive_keys(upsertions)``.

    A user may appear once per request, whatever the mechanisms (DUPLICATE_RESOURCE for the
    user, the first change included); once a user is refused, its later entries are ignored.
    """
    credentials = image.scram_credentials
    refused: dict[str, Refusal] = {}
    to_delete: dict[str, str] = {}  # user -> mechanism
    to_upsert: dict[str, tuple[str, ScramCredential]] = {}
    for deletion in deletions:
        name = deletion.name
        if name in refused:
            continue
        if to_delete.pop(name, None) is not None:
            refused[name] = Refusal(ErrorCode.duplicate_resource, ALTERED_TWICE)
        elif (refusal := _check_deletion(credentials, deletion)) is not None:
            refused[name] = refusal
        else:
            to_delete[name] = MECHANISM_BY_TYPE[deletion.mechanism]
    for upsertion, credential in zip(upsertions, derived, strict=True):
        name = upsertion.name
        if name in refused:
            continue
        if to_delete.pop(name, None) is not None or to_upsert.pop(name, None) is not None:
            refused[name] = Refusal(ErrorCode.duplicate_resource, ALTERED_TWICE)
        elif isinstance(credential, Refusal):
            refused[name] = credential
        else:
            to_upsert[name] = (MECHANISM_BY_TYPE[upsertion.mechanism], credential)
    outcomes: dict[str, Refusal | None] = {name: None for name in [*to_delete, *to_upsert]}
    outcomes.update(refused)
    if not to_delete and not to_upsert:
        return None, outcomes
    return _apply(image, to_delete, to_upsert), outcomes


def _apply(image: ClusterImage, deletions: dict[str, str],
           upsertions: dict[str, tuple[str, ScramCredential]]) -> ClusterImage:
    """Every accepted change (user -> mechanism) in one new image. Built here rather than
    with ``ClusterImage.with_scram_credential``, which copies every user's entry per change:
    a request may carry a million changes (up to ``socket.request.max.bytes``)."""
    users = dict(image.scram_credentials)
    for user, mechanism in deletions.items():
        remaining = {m: c for m, c in users[user].items() if m != mechanism}
        if remaining:
            users[user] = remaining
        else:
            del users[user]
    for user, (mechanism, credential) in upsertions.items():
        users[user] = {**users.get(user, {}), mechanism: credential}
    return dataclasses.replace(image, scram_credentials=users)


@handles(51, 0, 0)
async def alter_user_scram_credentials(ctx: RequestContext, request: Any) -> Any:
    """Needs ALTER on the cluster, checked before any key is derived; else every user
    named in the request is refused with CLUSTER_AUTHORIZATION_FAILED, sorted by name
    (AlterUserScramCredentialsRequest.getErrorResponse)."""
    if not ctx.authorize_cluster(Operation.ALTER):
        message = ctx.not_authorized()
        users = sorted({c.name for c in (*request.deletions, *request.upsertions)})
        return await build_long_response(request, {"throttle_time": NO_THROTTLE, "results": [
            {"user": user, "error_code": ErrorCode.cluster_authorization_failed,
             "error_message": message} for user in users]}, len(users))
    upsertions = request.upsertions
    derived = (derive_keys(upsertions) if len(upsertions) < LONG_ANSWER
               else await asyncio.to_thread(derive_keys, upsertions))
    outcomes: dict[str, Refusal | None] = {}

    def change(image: ClusterImage) -> ClusterImage | None:
        nonlocal outcomes  # decided again on a fresh image if another writer won the race
        changed, outcomes = alter(image, request.deletions, upsertions, derived)
        return changed

    try:
        await ctx.services.store.update(change)
    except ConcurrentUpdate as e:
        failed = Refusal(ErrorCode.unknown_server_error, str(e))
        outcomes = {user: refusal or failed for user, refusal in outcomes.items()}
    results = [
        {"user": user, "error_code": refusal.code if refusal else ErrorCode.none,
         "error_message": refusal.message if refusal else None}
        for user, refusal in outcomes.items()
    ]
    return await build_long_response(request, {"throttle_time": NO_THROTTLE,
                                                "results": results}, len(results))
