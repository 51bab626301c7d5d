"""DescribeClientQuotas (48) and AlterClientQuotas (49), KIP-546.

The quotas live in the cluster image (``ClusterImage.client_quotas``), so Alter is answered
by any broker with one compare-and-set of every accepted entry (Kafka's controller writes
them as one atomic batch of records; the rules are broker/controller/quota_changes.py), and
Describe reads this broker's copy of the image, as Kafka brokers read their metadata cache
(``ClientQuotasImage.describe``). ``kafka-configs --describe --entity-type users`` asks it
before a user's SCRAM credentials, and ``--alter --add-config producer_byte_rate=..`` sends
Alter. Describe needs DESCRIBE_CONFIGS on the cluster, Alter ALTER_CONFIGS, as in Kafka.
What the quotas do to clients is broker/server/client_quotas.py.
"""

from __future__ import annotations

import datetime
from typing import Any

from kio.schema.errors import ErrorCode

from broker.cluster.backend import ClusterImageTooLarge
from broker.cluster.client_quotas import CLIENT_ID, IP, USER, ClientQuotas, QuotaEntity
from broker.cluster.image import ClusterImage
from broker.cluster.metadata import ConcurrentUpdate
from broker.controller.quota_changes import (
    QuotaAlteration,
    QuotaOp,
    QuotaOutcome,
    alter_quotas,
)
from broker.handlers import handles
from broker.handlers.context import DENIED_MESSAGES, RequestContext
from broker.protocol.messages import build_response
from broker.security.acl import Operation

NO_THROTTLE = datetime.timedelta(0)
# DescribeClientQuotasRequest's match types.
MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED = 0, 1, 2


class FilterError(Exception):
    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def check_filter(components: Any) -> None:
    """Kafka's checks of a filter, in its order; raises FilterError for the first failure."""
    seen: set[str] = set()
    for component in components:
        kind = component.entity_type
        if not kind:
            raise FilterError(ErrorCode.invalid_request, "Invalid empty entity type.")
        if kind in seen:
            raise FilterError(ErrorCode.invalid_request,
                              f"Entity type {kind} cannot appear more than once in the filter.")
        if kind not in (IP, USER, CLIENT_ID):
            raise FilterError(ErrorCode.unsupported_version, f"Unsupported entity type {kind}")
        match_type, match = component.match_type, component.match
        if match_type == MATCH_EXACT and match is None:
            raise FilterError(ErrorCode.invalid_request,
                              "Request specified MATCH_TYPE_EXACT, but set match string to null.")
        if match_type == MATCH_DEFAULT and match is not None:
            raise FilterError(ErrorCode.invalid_request, "Request specified "
                              "MATCH_TYPE_DEFAULT, but also specified a match string.")
        if match_type == MATCH_SPECIFIED and match is not None:
            raise FilterError(ErrorCode.invalid_request, "Request specified "
                              "MATCH_TYPE_SPECIFIED, but also specified a match string.")
        if match_type not in (MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED):
            raise FilterError(ErrorCode.invalid_request, f"Unknown match type {match_type}")
        seen.add(kind)
    if IP in seen and (USER in seen or CLIENT_ID in seen):
        raise FilterError(ErrorCode.invalid_request,
                          "Invalid entity filter component combination. IP filter component "
                          "should not be used with user or clientId filter component.")


def matching(quotas: ClientQuotas, components: Any, strict: bool
             ) -> list[tuple[QuotaEntity, dict[str, float]]]:
    """The entities a checked filter selects, Kafka's way: an exact component (a name, or
    the default) needs that very entry, a specified one any entry of its type (the default
    included); ``strict`` also wants no entry of another type. Sorted, for stable answers."""
    exact = {c.entity_type: (c.match if c.match_type == MATCH_EXACT else None)
             for c in components if c.match_type != MATCH_SPECIFIED}
    typed = {c.entity_type for c in components if c.match_type == MATCH_SPECIFIED}
    found = []
    for entity, values in quotas.items():
        entries = entity.as_dict()
        if strict and len(entries) != len(exact) + len(typed):
            continue
        if all(kind in entries and entries[kind] == name for kind, name in exact.items()) \
                and all(kind in entries for kind in typed):
            found.append((entity, dict(values)))
    return sorted(found, key=lambda item: [(k, v or "") for k, v in item[0].entries])


@handles(48, 0, 1)
async def describe_client_quotas(ctx: RequestContext, request: Any) -> Any:
    if not ctx.authorize_cluster(Operation.DESCRIBE_CONFIGS):
        denied = ErrorCode.cluster_authorization_failed
        return build_response(request, {"throttle_time": NO_THROTTLE, "error_code": denied,
                                        "error_message": DENIED_MESSAGES[denied],
                                        "entries": None})
    try:
        check_filter(request.components)
    except FilterError as e:
        return build_response(request, {"throttle_time": NO_THROTTLE, "error_code": e.code,
                                        "error_message": e.message, "entries": None})
    found = matching(ctx.services.store.image.client_quotas, request.components,
                     request.strict)
    entries = [{"entity": [{"entity_type": k, "entity_name": v} for k, v in entity.entries],
                "values": [{"key": key, "value": value} for key, value in sorted(values.items())]}
               for entity, values in found]
    return build_response(request, {"throttle_time": NO_THROTTLE, "error_code": ErrorCode.none,
                                    "error_message": None, "entries": entries})


def _alterations(request: Any) -> list[QuotaAlteration]:
    return [QuotaAlteration(tuple((e.entity_type, e.entity_name) for e in entry.entity),
                            tuple(QuotaOp(op.key, float(op.value), op.remove)
                                  for op in entry.ops))
            for entry in request.entries]


def _entry(outcome: QuotaOutcome) -> dict[str, Any]:
    return {"error_code": outcome.code, "error_message": outcome.message,
            "entity": [{"entity_type": k, "entity_name": v} for k, v in outcome.entity.pairs]}


def _failed(outcomes: list[QuotaOutcome], code: ErrorCode, message: str
            ) -> list[QuotaOutcome]:
    """The outcomes once the write failed: each accepted entry gets ``code``."""
    return [o if o.code != ErrorCode.none else QuotaOutcome(o.entity, code, message)
            for o in outcomes]


@handles(49, 0, 1)
async def alter_client_quotas(ctx: RequestContext, request: Any) -> Any:
    """Every entry refused with CLUSTER_AUTHORIZATION_FAILED without ALTER_CONFIGS on the
    cluster; with ``validate_only`` the outcomes are those of a real change, and nothing is
    written."""
    alterations = _alterations(request)
    if not ctx.authorize_cluster(Operation.ALTER_CONFIGS):
        denied = ErrorCode.cluster_authorization_failed
        outcomes = [QuotaOutcome(a, denied, DENIED_MESSAGES[denied]) for a in alterations]
        return build_response(request, {"throttle_time": NO_THROTTLE,
                                        "entries": [_entry(o) for o in outcomes]})
    if request.validate_only:
        _, outcomes = alter_quotas(ctx.services.store.image.client_quotas, alterations)
    else:
        # Each entry accepted until decided: a write failing before it decides fails them all.
        outcomes = [QuotaOutcome(a) for a in alterations]

        def change(image: ClusterImage) -> ClusterImage | None:
            nonlocal outcomes  # decided again on a fresh image if another writer won the race
            quotas, outcomes = alter_quotas(image.client_quotas, alterations)
            return None if quotas is None else image.with_client_quotas(quotas)

        # As the topic handlers answer them: an image too large for its object is a policy
        # the cluster refuses, a write that kept losing (or metadata not to be trusted now)
        # is REQUEST_TIMED_OUT, which clients retry.
        try:
            await ctx.services.store.update(change)
        except ClusterImageTooLarge as e:
            outcomes = _failed(outcomes, ErrorCode.policy_violation, str(e))
        except ConcurrentUpdate as e:
            outcomes = _failed(outcomes, ErrorCode.request_timed_out, str(e))
    return build_response(request, {"throttle_time": NO_THROTTLE,
                                    "entries": [_entry(o) for o in outcomes]})
