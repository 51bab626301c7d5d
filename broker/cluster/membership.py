"""This broker's registration: its liveness lease, and what it does when it (re)joins.

Registering gives a new broker epoch, like a KRaft broker's incarnation. Joining with a new
epoch means this process may not hold what the previous one had acknowledged as follower
(it was dead, or paused past its lease), so it first steps out of leadership and ISRs where
another in-sync replica can take over, and catches up as a follower from there. A failed
renewal means the lease lapsed and the controller may already have fenced us: register
again and rejoin the same way.
"""

from __future__ import annotations

import logging

from broker.cluster.backend import BrokerRegistration, CoordinationBackend
from broker.controller.elections import Handover, step_down
from broker.server.metadata import ClusterMetadata

log = logging.getLogger(__name__)


class Membership:
    def __init__(self, metadata: ClusterMetadata, registration: BrokerRegistration,
                 session_timeout_ms: int) -> None:
        self.metadata = metadata
        self.backend: CoordinationBackend = metadata.backend
        self.registration = registration
        self.session_timeout_ms = session_timeout_ms
        self.broker_epoch = -1
        self.fenced_count = 0

    @property
    def node_id(self) -> int:
        return self.registration.node_id

    def join(self) -> None:
        self.broker_epoch = self.backend.register_broker(self.registration,
                                                         self.session_timeout_ms)
        self.leave_roles()
        log.info("broker %d registered with broker epoch %d", self.node_id, self.broker_epoch)

    def heartbeat(self) -> bool:
        """Renew the lease; on a lapsed lease rejoin. False if we had been fenced."""
        if self.backend.renew_broker(self.node_id, self.broker_epoch, self.session_timeout_ms):
            return True
        self.fenced_count += 1
        log.warning("broker %d: liveness lease lapsed (epoch %d was fenced); rejoining",
                    self.node_id, self.broker_epoch)
        self.join()
        return False

    def leave_roles(self, handover: Handover | None = None) -> None:
        """Hand leadership and ISR places to other in-sync replicas where there are any;
        with ``handover`` (a controlled shutdown) only to those it names."""
        live = set(self.backend.live_brokers())
        self.metadata.update(lambda image: step_down(image, self.node_id, live, handover))

    def leave(self) -> None:
        self.backend.unregister_broker(self.node_id, self.broker_epoch)
