"""ApiVersions: what this broker serves, read from the handler registry, and the features
the cluster finalized (KIP-584: a client picks its protocol by them; DescribeFeatures is
this request)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from kio.schema.api_versions.v0.response import ApiVersion as ApiVersionV0
from kio.schema.api_versions.v0.response import ApiVersionsResponse as ApiVersionsResponseV0
from kio.schema.errors import ErrorCode

from broker.cluster.features import GROUP_VERSION, SHARE_VERSION, SUPPORTED
from broker.handlers import REGISTRY, handles
from broker.handlers.context import RequestContext
from broker.protocol.messages import build_response

# APIs served only while a feature is finalized at a level, as Kafka lists them: a client
# (franz-go, the Java consumer) picks KIP-848 by ConsumerGroupHeartbeat being listed.
GATED: dict[int, tuple[str, int]] = {
    68: (GROUP_VERSION, 1), 69: (GROUP_VERSION, 1),
    **{key: (SHARE_VERSION, 1) for key in (76, 77, 78, 79, 90, 91, 92)}}


def _ranges(features: dict[str, int] | None = None) -> list[dict[str, int]]:
    """The registry's ranges; with the cluster's finalized ``features``, without the APIs
    a feature below its level turns off (None: all, for the v0 fallback answer)."""
    return [
        {"api_key": s.api_key, "min_version": s.min_version, "max_version": s.max_version}
        for s in sorted(REGISTRY.values(), key=lambda s: s.api_key)
        if features is None or s.api_key not in GATED
        or features.get(GATED[s.api_key][0], 0) >= GATED[s.api_key][1]
    ]


def unsupported_version_response(features: dict[str, int] | None = None
                                 ) -> ApiVersionsResponseV0:
    """The v0 answer to an ApiVersions version we do not know (KIP-511): the same APIs a
    known version lists, those of features the cluster has not finalized left out."""
    return ApiVersionsResponseV0(
        error_code=ErrorCode.unsupported_version,
        api_keys=tuple(ApiVersionV0(**r) for r in _ranges(features)),
    )


def _features(ctx: RequestContext) -> dict[str, Any]:
    """v3+: the supported ranges (before v4 without those starting at 0, which older
    clients take for a broken range, as Kafka omits them) and the finalized levels; a
    feature at level 0 is not finalized. The epoch is the image's version."""
    image = ctx.services.store.image
    return {
        "supported_features": [
            {"name": name, "min_version": low, "max_version": high}
            for name, (low, high) in sorted(SUPPORTED.items())
            if ctx.version >= 4 or low > 0],
        "finalized_features_epoch": image.version,
        "finalized_features": [
            {"name": name, "min_version_level": level, "max_version_level": level}
            for name, level in sorted(image.features.items()) if level > 0],
    }


@handles(18, 0, 4)
async def handle_api_versions(ctx: RequestContext, request: Any) -> Any:
    values: dict[str, Any] = {"error_code": ErrorCode.none,
                              "api_keys": _ranges(ctx.services.store.image.features),
                              "throttle_time": timedelta(0)}
    if ctx.version >= 3:
        values.update(_features(ctx))
    return build_response(request, values)
