"""This broker's registration: its liveness lease, and what it does when it (re)joins.

Registering gives a new broker epoch, like a KRaft broker's incarnation. Joining with a new
epoch means this process may not hold what the previous one had acknowledged as follower
(it was dead, or paused past its lease), so it first steps out of leadership and ISRs where
another in-sync replica can take over, and catches up as a follower from there. It hands
leadership only to brokers it sees renewing their leases: a broker killed a moment ago
still holds an unexpired one. A failed
renewal means the lease lapsed and the controller may already have fenced us: register
again and rejoin the same way.

The registration also says which log dirs are offline and the replicas they held
(``report_offline``, KIP-858's heartbeat field): written as soon as a dir fails, and again
with each heartbeat until a write succeeds.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import replace

from broker.cluster.backend import CoordinationBackend, StoreUnavailable
from broker.cluster.metadata import ClusterMetadata
from broker.controller.elections import Handover, step_down
from kafkube_contract.registration import BrokerRegistration

log = logging.getLogger(__name__)

RENEWAL_POLL_S = 0.1


class Membership:
    def __init__(self, metadata: ClusterMetadata, registration: BrokerRegistration,
                 session_timeout_ms: int, heartbeat_interval_ms: int) -> None:
        self.metadata = metadata
        self.backend: CoordinationBackend = metadata.backend
        self.registration = registration
        self.session_timeout_ms = session_timeout_ms
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.broker_epoch = -1
        self.fenced_count = 0
        # The offline facts the store holds for this registration (None: not known to).
        self._reported: tuple[tuple[str, ...], frozenset[str]] | None = None

    @property
    def node_id(self) -> int:
        return self.registration.node_id

    async def join(self) -> None:
        self.broker_epoch = await self.metadata.call(
            self.backend.register_broker, self.registration, self.session_timeout_ms)
        log.info("broker %d registered with broker epoch %d", self.node_id, self.broker_epoch)
        self._reported = self._offline()
        live = await self.renewing_brokers() if self._leads_with_others() else None
        await self.leave_roles(live=live)

    async def heartbeat(self) -> bool:
        """Renew the lease; on a lapsed lease rejoin. False if we had been fenced."""
        if await self.metadata.call(self.backend.renew_broker, self.node_id, self.broker_epoch,
                                    self.session_timeout_ms):
            await self._send_offline()
            return True
        self.fenced_count += 1
        log.warning("broker %d: liveness lease lapsed (epoch %d was fenced); rejoining",
                    self.node_id, self.broker_epoch)
        await self.join()
        return False

    def _offline(self) -> tuple[tuple[str, ...], frozenset[str]]:
        r = self.registration
        return r.offline_log_dirs, r.offline_replicas

    async def report_offline(self, log_dirs: tuple[str, ...], replicas: frozenset[str]) -> None:
        """Announce the offline log dirs and their replicas now (the controller then takes
        those replicas out of their ISRs and elects other leaders)."""
        self.registration = replace(self.registration, offline_log_dirs=log_dirs,
                                    offline_replicas=replicas)
        await self._send_offline()

    async def _send_offline(self) -> None:
        """Write the offline facts if the store does not hold them yet; a failed write is
        tried again at the next heartbeat."""
        if self._reported == self._offline() or self.broker_epoch < 0:
            return
        wanted = self._offline()
        try:
            written = await self.metadata.call(self.backend.update_registration,
                                               self.registration, self.broker_epoch)
        except StoreUnavailable as e:
            log.warning("broker %d: offline log dirs not reported yet: %s", self.node_id, e)
            return
        if written:
            self._reported = wanted
            log.info("broker %d: registration now says log dirs %s are offline (%d replicas)",
                     self.node_id, list(wanted[0]), len(wanted[1]))

    def _leads_with_others(self) -> bool:
        """We lead, on record, a partition whose ISR has other members to hand it to."""
        return any(
            state.leader == self.node_id and len(state.isr) > 1
            for topic in self.backend.read_image().topics.values()
            for state in topic.assignments
        )

    async def renewing_brokers(self) -> set[int]:
        """The brokers seen renewing their leases from now on: alive, not just leased.

        Waits until every other broker with a live lease has renewed it, or one and a half
        heartbeat intervals (a live broker renews once per interval)."""
        first = self.backend.lease_expiries()
        others = set(first) - {self.node_id}
        deadline = time.monotonic() + 1.5 * self.heartbeat_interval_ms / 1000
        renewed: set[int] = set()
        while True:
            now = self.backend.lease_expiries()
            renewed = {n for n in others if now.get(n, 0) > first[n]}
            if renewed == others or time.monotonic() >= deadline:
                break
            await asyncio.sleep(RENEWAL_POLL_S)
        if others - renewed:
            log.warning("broker %d: brokers %s hold leases but did not renew them; handing "
                        "them nothing", self.node_id, sorted(others - renewed))
        return renewed | {self.node_id}

    async def leave_roles(self, handover: Handover | None = None,
                          live: set[int] | None = None) -> None:
        """Hand leadership and ISR places to other in-sync replicas where there are any:
        among ``live`` (by default the brokers with live leases), and with ``handover`` (a
        controlled shutdown) only to those it names."""
        if live is None:
            live = set(self.backend.live_brokers())
        await self.metadata.update(lambda image: step_down(image, self.node_id, live, handover))

    async def leave(self) -> None:
        await self.metadata.call(self.backend.unregister_broker, self.node_id, self.broker_epoch)
