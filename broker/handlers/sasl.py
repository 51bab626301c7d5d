"""SaslHandshake and SaslAuthenticate: the client's side of the connection's authentication
(``broker.security.sasl`` keeps its state; the network layer closes the connection when
the session says so)."""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

from kio.schema.errors import ErrorCode

from broker.handlers import handles
from broker.handlers.context import RequestContext
from broker.protocol.messages import build_response
from broker.security.sasl import AuthenticationFailed, IllegalSaslState

log = logging.getLogger(__name__)


@handles(17, 0, 1)
async def handle_sasl_handshake(ctx: RequestContext, request: Any) -> Any:
    """v0 (KIP-43): the tokens that follow are raw frames, not SaslAuthenticate requests;
    v1 (KIP-152): they come as SaslAuthenticate."""
    sasl = ctx.session.sasl
    if sasl is None:  # not a SASL listener
        return build_response(request, {"error_code": ErrorCode.illegal_sasl_state,
                                        "mechanisms": ()})
    if not sasl.handshake(request.mechanism):
        log.info("%s: SASL mechanism %r is not enabled on listener %s (offered: %s)",
                 ctx.client_host, request.mechanism, ctx.session.listener.name,
                 ", ".join(sasl.mechanisms))
        return build_response(request, {"error_code": ErrorCode.unsupported_sasl_mechanism,
                                        "mechanisms": tuple(sasl.mechanisms)})
    sasl.raw_tokens = ctx.version == 0
    return build_response(request, {"error_code": ErrorCode.none,
                                    "mechanisms": tuple(sasl.mechanisms)})


@handles(36, 0, 2)
async def handle_sasl_authenticate(ctx: RequestContext, request: Any) -> Any:
    sasl = ctx.session.sasl
    if sasl is None:  # not a SASL listener (on one, the session lets it in only in order)
        return build_response(request, {
            "error_code": ErrorCode.illegal_sasl_state,
            "error_message": f"SaslAuthenticate on listener {ctx.listener}, which does not "
                             f"use SASL", "auth_bytes": b"", "session_lifetime": timedelta(0)})
    try:
        token, lifetime_ms = sasl.authenticate(bytes(request.auth_bytes))
    except (AuthenticationFailed, IllegalSaslState) as e:
        log.info("Failed authentication with %s (%s) on listener %s", ctx.client_host, e,
                 ctx.session.listener.name)
        return build_response(request, {
            "error_code": ErrorCode.sasl_authentication_failed, "error_message": str(e),
            "auth_bytes": b"", "session_lifetime": timedelta(0)})
    return build_response(request, {
        "error_code": ErrorCode.none, "error_message": None, "auth_bytes": token,
        "session_lifetime": timedelta(milliseconds=lifetime_ms)})
