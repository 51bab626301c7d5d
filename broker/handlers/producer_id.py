"""InitProducerId for idempotent producers (transactions come later)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from kio.schema.errors import ErrorCode

from broker.handlers import handles
from broker.handlers.context import RequestContext
from broker.protocol.messages import build_response


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
    # Without a transactional id Kafka always hands out a fresh id with epoch 0, whatever
    # id and epoch the client names (TransactionCoordinator.handleInitProducerId): naming
    # another producer's id must not fence it.
    return reply(ErrorCode.none, ctx.services.store.next_producer_id(), 0)
