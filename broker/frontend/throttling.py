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
import select
import socket
import time
from collections.abc import Callable
from typing import Any

from broker.handlers.context import RequestContext, RequestThrottle
from broker.security.acl import Operation
from broker.server.client_quotas import MAX_THROTTLE_MS

# Not charged to request_percentage (Kafka exempts what brokers send each other, and the
# requests a client needs before it can be throttled at all): ApiVersions, SaslHandshake,
# SaslAuthenticate, WriteTxnMarkers; and a follower's Fetch and brokers' requests (below).
EXEMPT_API_KEYS = frozenset({18, 17, 36, 27})
FETCH_KEY, OFFSET_FOR_LEADER_EPOCH_KEY, ADD_PARTITIONS_TO_TXN_KEY = 1, 23, 24
# The share coordinator's state APIs: only brokers send them.
SHARE_STATE_KEYS = frozenset(range(83, 88))
# How often a muted connection looks whether its peer has gone, and how many such looks a
# mute may take: a mute ends at most int32 ms after its last extension, and requests still
# being handled extend it at most a few times.
MUTE_CHECK_S = 1.0
MAX_MUTE_TURNS = 4 * (MAX_THROTTLE_MS // 1000 + 1)
_GONE = select.POLLHUP | select.POLLERR | select.POLLNVAL | getattr(select, "POLLRDHUP", 0)


def from_broker(ctx: RequestContext, body: Any) -> bool:
    """Whether a request is one a broker sends as a broker (a follower's
    OffsetForLeaderEpoch, a leader's AddPartitionsToTxn v4+ verification, the share-state
    APIs) from a principal allowed CLUSTER_ACTION: Kafka applies no quota to replication and
    exempts ClusterAction requests from request quotas, so a ``<default>`` user's quota
    cannot mute the brokers' connections to each other."""
    key = ctx.header.api_key
    if key == OFFSET_FOR_LEADER_EPOCH_KEY:
        broker_kind = getattr(body, "replica_id", -1) >= 0  # consumers send -1
    elif key == ADD_PARTITIONS_TO_TXN_KEY:
        broker_kind = ctx.version >= 4  # clients send v3 and below
    else:
        broker_kind = key in SHARE_STATE_KEYS
    return broker_kind and ctx.authorize_cluster(Operation.CLUSTER_ACTION, log_denied=False)


def exempt(ctx: RequestContext, body: Any) -> bool:
    key = ctx.header.api_key
    return key in EXEMPT_API_KEYS or (
        key == FETCH_KEY and getattr(body, "replica_id", -1) >= 0) or from_broker(ctx, body)


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


def peer_closed(sock: socket.socket) -> bool:
    """Whether the connection's peer has closed or reset it (or it was shut down here),
    without reading what it sent: a muted connection reads nothing, yet must not hold its
    file descriptor for the whole throttle after the client has gone."""
    poller = select.poll()
    try:
        poller.register(sock.fileno(), select.POLLIN | _GONE)
    except ValueError:  # closed here already
        return True
    events = poller.poll(0)
    if not events:
        return False
    if events[0][1] & _GONE:
        return True
    try:  # readable: an end of stream with nothing before it reads as b""
        return sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
    except (BlockingIOError, InterruptedError):
        return False
    except OSError:
        return True


class Mute:
    """A connection's muted time: the reader reads no request until it is over. ``closed``
    says whether the connection has gone meanwhile, which ends the wait."""

    __slots__ = ("_closed", "_until")

    def __init__(self, closed: Callable[[], bool] = lambda: False) -> None:
        self._until = 0.0
        self._closed = closed

    @property
    def muted(self) -> bool:
        return self._until > time.monotonic()

    def extend(self, throttle: RequestThrottle) -> None:
        if throttle.ms > 0:
            self._until = max(self._until, time.monotonic() + throttle.ms / 1000)

    async def wait(self) -> bool:
        """Wait until the mute is over, however often it is extended meanwhile (a request
        still being handled extends it when it ends); True then, False as soon as the
        connection has closed (looked at every MUTE_CHECK_S)."""
        for _ in range(MAX_MUTE_TURNS):
            remaining = self._until - time.monotonic()
            if remaining <= 0:
                return True
            if self._closed():
                return False
            await asyncio.sleep(min(remaining, MUTE_CHECK_S))
        return not self._closed()
