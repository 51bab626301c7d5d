"""The front end's side of client quotas (broker/frontend/throttling.py): which requests are
charged to request_percentage, a kio response given its throttle time, and the mute."""

from __future__ import annotations

import asyncio
import datetime
import time
from pathlib import Path
from types import SimpleNamespace

from kio.schema.errors import ErrorCode

from broker.cluster.client_quotas import QuotaEntity
from broker.frontend.throttling import Mute, exempt, settle
from broker.handlers.context import RequestContext, RequestThrottle
from broker.protocol.codec import RequestHeader
from broker.protocol.messages import build_response
from tests.support.handlers import make_services, request


def context(tmp_path: Path, api_key: int, client_id: str = "busy") -> RequestContext:
    services = make_services(tmp_path)
    asyncio.run(services.store.update(lambda image: image.with_client_quotas(
        {QuotaEntity.client("busy"): {"request_percentage": 1.0}})))
    return RequestContext(services, RequestHeader(api_key, 1, 7, client_id), "127.0.0.1",
                          "127.0.0.1", throttle=RequestThrottle())


def test_a_slow_request_earns_a_throttle_its_response_reports(tmp_path: Path) -> None:
    ctx = context(tmp_path, 48)
    req = request(48, 1, {"components": [], "strict": False})
    response = build_response(req, {"throttle_time": datetime.timedelta(0),
                                    "error_code": ErrorCode.none, "error_message": None,
                                    "entries": []})
    # 0.5 s of the loop in a window of 10 s is 5 %, against 1 %: throttled.
    settled = settle(ctx, req, response, time.perf_counter() - 0.5)
    assert ctx.throttle.ms > 0
    assert settled.throttle_time == datetime.timedelta(milliseconds=ctx.throttle.ms)


def test_exempt_requests_are_not_charged(tmp_path: Path) -> None:
    assert exempt(context(tmp_path, 18), object())  # ApiVersions
    assert exempt(context(tmp_path, 1), SimpleNamespace(replica_id=2))  # a follower
    assert not exempt(context(tmp_path, 1), SimpleNamespace(replica_id=-1))


def test_a_muted_connection_waits_out_its_throttle() -> None:
    mute = Mute()
    mute.extend(RequestThrottle(ms=0))
    started = time.monotonic()
    asyncio.run(mute.wait())
    assert time.monotonic() - started < 0.05
    mute.extend(RequestThrottle(ms=200))
    asyncio.run(mute.wait())
    assert time.monotonic() - started >= 0.19
