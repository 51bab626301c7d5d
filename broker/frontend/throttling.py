"""The front end's side of client quotas (KIP-219): charge a request's time to the client's
``request_percentage``, put the request's throttle time in its response, and mute the
connection for it.

Handlers charge byte rates and controller mutations themselves (broker/handlers/produce.py,
fetch.py, admin.py) and note their throttle on the request's ``RequestThrottle``; here the
request's time on the event loop is charged once the handler is done, and the largest
throttle is what the response reports and how long the connection is muted. Produce and
Fetch encode their own responses with their byte-rate throttle; a request-time throttle
earned by one of them mutes the connection without being reported in it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import time
from typing import Any

from broker.handlers.context import RequestContext, RequestThrottle

# Not charged to request_percentage (Kafka exempts what brokers send each other, and the
# requests a client needs before it can be throttled at all): ApiVersions, SaslHandshake,
# SaslAuthenticate, WriteTxnMarkers; and a follower's Fetch (below).
EXEMPT_API_KEYS = frozenset({18, 17, 36, 27})
FETCH_KEY = 1


def exempt(ctx: RequestContext, body: Any) -> bool:
    key = ctx.header.api_key
    return key in EXEMPT_API_KEYS or (
        key == FETCH_KEY and getattr(body, "replica_id", -1) >= 0)


def settle(ctx: RequestContext, body: Any, response: Any, started: float) -> Any:
    """Charge the request's time on the loop, and give a kio response the request's throttle
    time; the response to send."""
    throttle = ctx.throttle
    if not exempt(ctx, body):
        spent = (throttle.first_step_s if throttle.first_step_s is not None
                 else time.perf_counter() - started)
        throttle.add(ctx.services.client_quotas.record_request_time(
            ctx.principal, ctx.client_id, spent))
    if throttle.ms > 0 and hasattr(response, "throttle_time"):
        response = dataclasses.replace(
            response, throttle_time=datetime.timedelta(milliseconds=throttle.ms))
    return response


class Mute:
    """A connection's muted time: the reader reads no request until it is over."""

    __slots__ = ("_until",)

    def __init__(self) -> None:
        self._until = 0.0

    def extend(self, throttle: RequestThrottle) -> None:
        if throttle.ms > 0:
            self._until = max(self._until, time.monotonic() + throttle.ms / 1000)

    async def wait(self) -> None:
        remaining = self._until - time.monotonic()
        if remaining > 0:
            await asyncio.sleep(remaining)
