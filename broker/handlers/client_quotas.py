"""DescribeClientQuotas (KIP-546), answered truthfully for a broker without client quotas.

kafkube enforces no client quotas and does not serve AlterClientQuotas, so no quota can
exist and every valid filter matches nothing. The API is served all the same because
Kafka's tools ask it before anything else about users: ``kafka-configs --describe
--entity-type users`` lists a user's quotas, then the user's SCRAM credentials (KIP-554,
broker.handlers.scram_credentials), and fails outright if the broker lacks the API.
A bad filter gets Kafka's error (``ClientQuotasImage.describe``), with its message. The
request needs DESCRIBE_CONFIGS on the cluster, checked first.
"""

from __future__ import annotations

import datetime
from typing import Any

from kio.schema.errors import ErrorCode

from broker.handlers import handles
from broker.handlers.context import DENIED_MESSAGES, RequestContext
from broker.protocol.messages import build_response
from broker.security.acl import Operation

NO_THROTTLE = datetime.timedelta(0)
# ClientQuotaEntity's entity types, and DescribeClientQuotasRequest's match types.
USER, CLIENT_ID, IP = "user", "client-id", "ip"
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
    return build_response(request, {"throttle_time": NO_THROTTLE, "error_code": ErrorCode.none,
                                    "error_message": None, "entries": []})
