"""UpdateFeatures: a cluster-wide feature level changed (``kafka-features.sh upgrade`` and
``downgrade``), written to the cluster image, which every broker then advertises in
ApiVersions.

As in Kafka the request is atomic: every update is checked first, and one refused refuses
them all (INVALID_UPDATE_VERSION with the reason). A level goes down only when the request
says so (v0 ``allow_downgrade``, v1+ an upgrade type of safe or unsafe downgrade). Levels
here are safe to lower: producers pick the transaction protocol again at their next
transaction, and a lower ``kafkube.metadata.version`` writes the older image format at the
next change. A level is raised only when every registered broker supports it.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from kio.schema.errors import ErrorCode

from broker.cluster.features import SUPPORTED
from broker.cluster.image import ClusterImage
from broker.cluster.metadata import ConcurrentUpdate
from broker.handlers import handles
from broker.handlers.context import RequestContext
from broker.protocol.messages import build_response
from broker.security.acl import Operation
from kafkube_contract.features import unsupported
from kafkube_contract.registration import BrokerRegistration

UPGRADE = 1


def _refusal(image: ClusterImage, name: str, level: int, downgrade: bool,
             brokers: Mapping[int, BrokerRegistration]) -> str | None:
    """Why this update may not be applied, or None. A level is raised only when every
    registered broker announced it in its supported range (Kafka's controller checks the
    same against its brokers' registrations): a broker of an older kafkube in the middle of a
    roll must never meet a format it cannot read."""
    if name not in SUPPORTED:
        return f"The broker does not support the feature {name!r}."
    low, high = SUPPORTED[name]
    level = max(level, 0)
    if not low <= level <= high:
        return (f"Invalid update version {level} for feature {name}: this broker supports "
                f"versions {low}-{high}.")
    current = image.feature(name)
    if level < current and not downgrade:
        return (f"Cannot downgrade {name} from {current} to {level} without setting the "
                f"upgrade type to safe or unsafe downgrade.")
    if level > current:
        reasons = unsupported({node: b.feature_ranges for node, b in brokers.items()},
                              name, level)
        # A broker that holds replicas but is not registered now (stopped, restarting)
        # may come back on any kafkube: Kafka checks its fenced brokers' registrations too.
        absent = sorted({b for topic in image.topics.values() for p in topic.assignments
                         for b in p.replicas} - set(brokers))
        reasons += [f"broker {b} holds replicas but is not running, so which kafkube it runs "
                    "is not known (start it, or move its replicas away)" for b in absent]
        if reasons:
            return f"Cannot raise {name} to {level}: " + "; ".join(reasons) + "."
    return None


def _wanted(ctx: RequestContext, request: Any) -> list[tuple[str, int, bool]]:
    """(feature, level, downgrade allowed) for each update, in every version's terms."""
    if ctx.version == 0:
        return [(u.feature, u.max_version_level, u.allow_downgrade)
                for u in request.feature_updates]
    return [(u.feature, u.max_version_level, u.upgrade_type != UPGRADE)
            for u in request.feature_updates]


@handles(57, 0, 2)
async def handle_update_features(ctx: RequestContext, request: Any) -> Any:
    wanted = _wanted(ctx, request)
    error, message = ErrorCode.none, None
    if not ctx.authorize_cluster(Operation.ALTER):
        error = ErrorCode.cluster_authorization_failed
    elif len({name for name, _, _ in wanted}) != len(wanted):
        error, message = ErrorCode.invalid_request, "A feature may be updated once a request."
    else:
        store = ctx.services.store
        brokers = store.live_brokers()  # now, not as of the last poll
        refusals = [r for name, level, down in wanted
                    if (r := _refusal(store.image, name, level, down, brokers))]
        if refusals:
            error, message = ErrorCode.invalid_update_version, " ".join(refusals)
        elif not getattr(request, "validate_only", False):
            def apply(image: ClusterImage) -> ClusterImage | None:
                if any(_refusal(image, name, level, down, brokers)
                       for name, level, down in wanted):
                    raise ValueError("the features changed meanwhile")
                updated = image
                for name, level, _ in wanted:
                    updated = updated.with_feature(name, max(level, 0))
                return None if updated.features == image.features else updated

            try:
                await ctx.services.store.update(apply)
            except (ConcurrentUpdate, ValueError) as e:
                error, message = ErrorCode.feature_update_failed, str(e)
    values: dict[str, Any] = {"throttle_time": timedelta(0), "error_code": error,
                              "error_message": message}
    if ctx.version < 2:  # v2 answers with the top-level error alone
        values["results"] = [{"feature": name, "error_code": error, "error_message": message}
                             for name, _, _ in wanted]
    return build_response(request, values)
