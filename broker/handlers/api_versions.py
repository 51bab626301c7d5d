"""ApiVersions: what this broker serves, read from the handler registry."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from kio.schema.api_versions.v0.response import ApiVersion as ApiVersionV0
from kio.schema.api_versions.v0.response import ApiVersionsResponse as ApiVersionsResponseV0
from kio.schema.errors import ErrorCode

from broker.handlers import REGISTRY, handles
from broker.handlers.context import RequestContext
from broker.protocol.messages import build_response


def _ranges() -> list[dict[str, int]]:
    return [
        {"api_key": s.api_key, "min_version": s.min_version, "max_version": s.max_version}
        for s in sorted(REGISTRY.values(), key=lambda s: s.api_key)
    ]


def unsupported_version_response() -> ApiVersionsResponseV0:
    """The v0 answer to an ApiVersions version we do not know (KIP-511)."""
    return ApiVersionsResponseV0(
        error_code=ErrorCode.unsupported_version,
        api_keys=tuple(ApiVersionV0(**r) for r in _ranges()),
    )


@handles(18, 0, 4)
async def handle_api_versions(ctx: RequestContext, request: Any) -> Any:
    return build_response(
        request,
        {"error_code": ErrorCode.none, "api_keys": _ranges(), "throttle_time": timedelta(0)},
    )
