"""InitProducerId for idempotent producers (transactions come later)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from kio.schema.errors import ErrorCode

from broker.handlers import handles
from broker.handlers.context import RequestContext
from broker.protocol.messages import build_response

MAX_EPOCH = 32767


@handles(22, 0, 4)
async def handle_init_producer_id(ctx: RequestContext, request: Any) -> Any:
    def reply(error: ErrorCode, pid: int = -1, epoch: int = -1) -> Any:
        return build_response(request, {
            "throttle_time": timedelta(0), "error_code": error,
            "producer_id": pid, "producer_epoch": epoch,
        })

    if request.transactional_id is not None:
        # No transaction coordinator yet: refuse clearly instead of pretending.
        return reply(ErrorCode.transactional_id_authorization_failed)
    pid = getattr(request, "producer_id", -1)
    epoch = getattr(request, "producer_epoch", -1)
    if pid >= 0 and 0 <= epoch < MAX_EPOCH - 1:
        # KIP-360: an idempotent producer resets its sequences by bumping its epoch.
        return reply(ErrorCode.none, pid, epoch + 1)
    return reply(ErrorCode.none, ctx.services.store.next_producer_id(), 0)
