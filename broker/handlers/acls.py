"""ACL admin: DescribeAcls, CreateAcls and DeleteAcls (v1-3, the versions Kafka 4 serves).

The rules and messages are Kafka's: ``AclApis`` (the authorizer must be configured;
DESCRIBE on the cluster to describe, ALTER to create or delete; a CLUSTER ACL must name
``kafka-cluster``; no empty names), ``AclControlManager`` (what the controller accepts, a
duplicate succeeding without a second copy, every deletion of a request applied at once,
at most ``MAX_CHANGES`` changes per request) and ``ResourcePatternFilter`` /
``AccessControlEntryFilter`` for the filters (``broker.security.acl.AclFilter``). The ACLs
live in the cluster metadata image, so Create and Delete are one compare-and-set each, on
any broker, and Describe reads this broker's copy, as Kafka brokers answer it from their
own ACL cache.

One difference. Kafka's request parser refuses an enum field of code 0 (UNKNOWN) and closes
the connection without an answer. kio decodes any int8, and a handler here cannot close its
connection without being taken for a crashed one (the network layer logs a traceback), so
such a request is answered instead, with INVALID_REQUEST in every place Kafka's error
response puts an error and the parser's message; nothing is changed. Other codes Kafka does
not know (99, -5) parse in Kafka as UNKNOWN and get its answers: refused by CreateAcls and
DeleteAcls with INVALID_REQUEST, matching nothing in DescribeAcls.
"""

from __future__ import annotations

import datetime
import enum
import logging
from collections.abc import Iterable, Sequence
from typing import Any, TypeVar

from kio.schema.errors import ErrorCode

from broker.cluster.image import ClusterImage
from broker.cluster.metadata import ConcurrentUpdate
from broker.handlers import handles
from broker.handlers.context import RequestContext, cooperatively
from broker.protocol.messages import build_long_response, build_response
from broker.security.acl import (
    CLUSTER_NAME,
    AclBinding,
    AclFilter,
    Operation,
    PatternType,
    Permission,
    ResourceType,
)

log = logging.getLogger(__name__)

NO_THROTTLE = datetime.timedelta(0)
# QuorumController.MAX_RECORDS_PER_USER_OP: ACLs one request may add, or remove.
MAX_CHANGES = 10_000

# Kafka's messages, word for word (AclApis, AclControlManager, the requests' parsers,
# EventHandlerExceptionInfo).
NO_AUTHORIZER_DESCRIBE = "No Authorizer is configured on the broker"
NO_AUTHORIZER = "No Authorizer is configured."
CLUSTER_NAME_ONLY = f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}"
EMPTY_NAME = "Invalid empty resource name"
UNKNOWN_PATTERN_FILTER = "Unknown patternFilter."
UNKNOWN_ENTRY_FILTER = "Unknown entryFilter."
TOO_LARGE = "Unable to perform excessively large batch operation."
UNKNOWN_IN_DESCRIBE = "DescribeAclsRequest contains UNKNOWN elements"
UNKNOWN_IN_CREATE = "CreatableAcls contain unknown elements"
UNKNOWN_IN_DELETE = "Filters contain UNKNOWN elements"

Outcome = tuple[ErrorCode, str | None]
OK: Outcome = (ErrorCode.none, None)
E = TypeVar("E", bound=enum.IntEnum)


def _enum(kind: type[E], code: int) -> E:
    """Kafka's ``fromCode``: a code it does not know is UNKNOWN (0)."""
    try:
        return kind(code)
    except ValueError:
        return kind(0)


def has_unknown(items: Iterable[Any], *fields: str) -> bool:
    """Whether any item has a field of code 0 (UNKNOWN), which Kafka's parser refuses."""
    return any(getattr(item, name) == 0 for item in items for name in fields)


def to_filter(item: Any) -> AclFilter:
    """A DescribeAcls request or a DeleteAcls filter as an AclFilter (null: anything)."""
    return AclFilter(_enum(ResourceType, item.resource_type_filter), item.resource_name_filter,
                     _enum(PatternType, item.pattern_type_filter), item.principal_filter,
                     item.host_filter, _enum(Operation, item.operation),
                     _enum(Permission, item.permission_type))


# -- DescribeAcls ------------------------------------------------------------------------


def describe(acls: Iterable[AclBinding], acl_filter: AclFilter) -> list[dict[str, Any]]:
    """The matching ACLs grouped by resource pattern (Kafka's ``aclsResources``; its order
    is a hash map's, this one the order the ACLs were created in)."""
    groups: dict[tuple[ResourceType, str, PatternType], list[dict[str, Any]]] = {}
    for acl in acls:
        if acl_filter.matches(acl):
            groups.setdefault((acl.resource_type, acl.resource_name, acl.pattern_type), []
                              ).append({"principal": acl.principal, "host": acl.host,
                                        "operation": int(acl.operation),
                                        "permission_type": int(acl.permission)})
    return [{"resource_type": int(rtype), "resource_name": name, "pattern_type": int(ptype),
             "acls": entries} for (rtype, name, ptype), entries in groups.items()]


@handles(29, 1, 3)
async def describe_acls(ctx: RequestContext, request: Any) -> Any:
    def answer(code: ErrorCode, message: str | None,
               resources: Sequence[dict[str, Any]] = ()) -> Any:
        return {"throttle_time": NO_THROTTLE, "error_code": code, "error_message": message,
                "resources": resources}

    if has_unknown((request,), "resource_type_filter", "pattern_type_filter", "operation",
                   "permission_type"):
        return build_response(request, answer(ErrorCode.invalid_request, UNKNOWN_IN_DESCRIBE))
    if not ctx.authorize_cluster(Operation.DESCRIBE):
        return build_response(request, answer(ErrorCode.cluster_authorization_failed,
                                               ctx.not_authorized()))
    if not ctx.services.authorizer.enabled:
        return build_response(request, answer(ErrorCode.security_disabled,
                                               NO_AUTHORIZER_DESCRIBE))
    resources = describe(ctx.services.store.image.acls, to_filter(request))
    entries = sum(len(r["acls"]) for r in resources)
    return await build_long_response(request, answer(ErrorCode.none, None, resources), entries)


# -- CreateAcls --------------------------------------------------------------------------


def names_any(creation: Any) -> bool:
    """An ANY or MATCH value, which Kafka's ResourcePattern and AccessControlEntry refuse
    to hold: an exception that fails the whole request (UNKNOWN_SERVER_ERROR)."""
    return (creation.resource_type == ResourceType.ANY
            or creation.resource_pattern_type in (PatternType.ANY, PatternType.MATCH)
            or creation.operation == Operation.ANY
            or creation.permission_type == Permission.ANY)


def check_creation(creation: Any) -> AclBinding | Outcome:
    """The ACL asked for, or why AclApis refuses it (before the controller sees it); the
    ACL may still hold UNKNOWN values, which the controller refuses (``check_new``)."""
    resource_type = _enum(ResourceType, creation.resource_type)
    name = creation.resource_name
    if resource_type == ResourceType.CLUSTER and name != CLUSTER_NAME:
        return ErrorCode.invalid_request, CLUSTER_NAME_ONLY
    if not name:
        return ErrorCode.invalid_request, EMPTY_NAME
    return AclBinding(resource_type, name, _enum(PatternType, creation.resource_pattern_type),
                      creation.principal, creation.host, _enum(Operation, creation.operation),
                      _enum(Permission, creation.permission_type))


def check_new(acl: AclBinding) -> Outcome | None:
    """AclControlManager.validateNewAcl, for the codes Kafka parses as UNKNOWN."""
    if acl.resource_type == ResourceType.UNKNOWN:
        return ErrorCode.invalid_request, f"Invalid resourceType {acl.resource_type.name}"
    if acl.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        return ErrorCode.invalid_request, f"Invalid patternType {acl.pattern_type.name}"
    if acl.operation == Operation.UNKNOWN:
        return ErrorCode.invalid_request, f"Invalid operation {acl.operation.name}"
    if acl.permission not in (Permission.DENY, Permission.ALLOW):
        return ErrorCode.invalid_request, f"Invalid permissionType {acl.permission.name}"
    return None


def create(image: ClusterImage, checked: Sequence[AclBinding | Outcome]
           ) -> tuple[ClusterImage | None, list[Outcome], list[AclBinding]]:
    """``checked`` (from ``check_creation``) applied to ``image``: the new image (None when
    nothing is new), each creation's outcome and the ACLs added. An ACL already there, or
    twice in the request, succeeds and is stored once. Past ``MAX_CHANGES`` new ACLs the
    controller refuses every ACL it was sent (POLICY_VIOLATION); AclApis' refusals stand."""
    existing = set(image.acls)
    added: list[AclBinding] = []
    outcomes: list[Outcome] = []
    for item in checked:
        if not isinstance(item, AclBinding):
            outcomes.append(item)
        elif (refusal := check_new(item)) is not None:
            outcomes.append(refusal)
        else:
            if item not in existing:
                existing.add(item)
                added.append(item)
            outcomes.append(OK)
    if len(added) > MAX_CHANGES:
        too_large = (ErrorCode.policy_violation, TOO_LARGE)
        return None, [too_large if isinstance(item, AclBinding) else item
                      for item in checked], []
    if not added:
        return None, outcomes, []
    return image.with_acls((*image.acls, *added)), outcomes, added


@handles(30, 1, 3)
async def create_acls(ctx: RequestContext, request: Any) -> Any:
    creations = request.creations

    def answer(outcomes: Iterable[Outcome]) -> Any:
        results = [{"error_code": code, "error_message": message} for code, message in outcomes]
        return build_long_response(request, {"throttle_time": NO_THROTTLE,
                                             "results": results}, len(results))

    if has_unknown(creations, "resource_type", "resource_pattern_type", "operation",
                   "permission_type"):
        return await answer([(ErrorCode.invalid_request, UNKNOWN_IN_CREATE)] * len(creations))
    if not ctx.authorize_cluster(Operation.ALTER):
        return await answer([(ErrorCode.cluster_authorization_failed,
                              ctx.not_authorized())] * len(creations))
    if not ctx.services.authorizer.enabled:
        return await answer([(ErrorCode.security_disabled, NO_AUTHORIZER)] * len(creations))
    if any(names_any(c) for c in creations):
        return await answer([(ErrorCode.unknown_server_error, None)] * len(creations))
    checked = [check_creation(c) for c in creations]
    outcomes: list[Outcome] = []
    added: list[AclBinding] = []

    def change(image: ClusterImage) -> ClusterImage | None:
        nonlocal outcomes, added  # decided again on a fresh image after a lost race
        changed, outcomes, added = create(image, checked)
        return changed

    try:
        await ctx.services.store.update(change)
    except ConcurrentUpdate as e:
        outcomes = [(ErrorCode.unknown_server_error, str(e)) if o == OK else o
                    for o in outcomes]
        added = []
    for acl in added:
        log.info("%s added ACL %s", ctx.principal, acl.describe())
    return await answer(outcomes)


# -- DeleteAcls --------------------------------------------------------------------------


def check_filter(acl_filter: AclFilter) -> Outcome | None:
    """AclControlManager.validateFilter: a filter with an UNKNOWN part is refused."""
    if acl_filter.resource_type == ResourceType.UNKNOWN \
            or acl_filter.pattern_type == PatternType.UNKNOWN:
        return ErrorCode.invalid_request, UNKNOWN_PATTERN_FILTER
    if acl_filter.operation == Operation.UNKNOWN \
            or acl_filter.permission == Permission.UNKNOWN:
        return ErrorCode.invalid_request, UNKNOWN_ENTRY_FILTER
    return None


def match(acls: Sequence[AclBinding], acl_filter: AclFilter) -> list[AclBinding] | Outcome:
    """The ACLs a filter deletes, or why it is refused."""
    return check_filter(acl_filter) or [acl for acl in acls if acl_filter.matches(acl)]


def delete(image: ClusterImage, matches: Sequence[list[AclBinding] | Outcome]
           ) -> tuple[ClusterImage | None, list[tuple[Outcome, list[AclBinding]]],
                      set[AclBinding]]:
    """Each filter's matches (from ``match`` on ``image.acls``) removed from ``image``, all
    in one new image (None when nothing matched), with each filter's outcome and the ACLs
    it matched, and the set removed. An ACL matched by several filters is listed by each.
    A filter that would take the request past ``MAX_CHANGES`` removals fails
    (UNKNOWN_SERVER_ERROR, as Kafka's controller answers it) and removes nothing."""
    removed: set[AclBinding] = set()
    results: list[tuple[Outcome, list[AclBinding]]] = []
    for matched in matches:
        if isinstance(matched, tuple):
            results.append((matched, []))
            continue
        new = {acl for acl in matched if acl not in removed}
        if len(removed) + len(new) > MAX_CHANGES:
            results.append(((ErrorCode.unknown_server_error, None), []))
            continue
        removed |= new
        results.append((OK, matched))
    if not removed:
        return None, results, removed
    kept = tuple(acl for acl in image.acls if acl not in removed)
    return image.with_acls(kept), results, removed


def _matching_acl(acl: AclBinding) -> dict[str, Any]:
    return {"error_code": ErrorCode.none, "error_message": None,
            "resource_type": int(acl.resource_type), "resource_name": acl.resource_name,
            "pattern_type": int(acl.pattern_type), "principal": acl.principal,
            "host": acl.host, "operation": int(acl.operation),
            "permission_type": int(acl.permission)}


@handles(31, 1, 3)
async def delete_acls(ctx: RequestContext, request: Any) -> Any:
    filters = request.filters

    def answer(results: Sequence[tuple[Outcome, list[AclBinding]]]) -> Any:
        entries = len(results) + sum(len(acls) for _, acls in results)
        return build_long_response(request, {"throttle_time": NO_THROTTLE, "filter_results": [
            {"error_code": code, "error_message": message,
             "matching_acls": [_matching_acl(acl) for acl in acls]}
            for (code, message), acls in results]}, entries)

    def everywhere(code: ErrorCode, message: str | None) -> Any:
        return answer([((code, message), [])] * len(filters))

    if has_unknown(filters, "resource_type_filter", "pattern_type_filter", "operation",
                   "permission_type"):
        return await everywhere(ErrorCode.invalid_request, UNKNOWN_IN_DELETE)
    if not ctx.authorize_cluster(Operation.ALTER):
        return await everywhere(ErrorCode.cluster_authorization_failed, ctx.not_authorized())
    if not ctx.services.authorizer.enabled:
        return await everywhere(ErrorCode.security_disabled, NO_AUTHORIZER)
    acl_filters = [to_filter(f) for f in filters]
    # Matching is filters x ACLs: done here, a slice at a time, on this broker's image;
    # again in one go only if the image has changed by the time of the update.
    seen = ctx.services.store.image.acls
    planned = [match(seen, f) async for f in cooperatively(acl_filters)]
    results: list[tuple[Outcome, list[AclBinding]]] = []
    removed: set[AclBinding] = set()

    def change(image: ClusterImage) -> ClusterImage | None:
        nonlocal results, removed
        matches = planned if image.acls == seen else [match(image.acls, f)
                                                      for f in acl_filters]
        changed, results, removed = delete(image, matches)
        return changed

    try:
        await ctx.services.store.update(change)
    except ConcurrentUpdate as e:
        results = [((ErrorCode.unknown_server_error, str(e)), []) if outcome == OK
                   else (outcome, acls) for outcome, acls in results]
        removed = set()
    for acl in removed:
        log.info("%s removed ACL %s", ctx.principal, acl.describe())
    return await answer(results)
