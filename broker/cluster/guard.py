"""The cluster metadata only moves forward: what a broker checks before it trusts the store.

On Kubernetes the cluster image is one ConfigMap, and one kubectl command deletes it, a
restored backup puts an older copy back, a GitOps tool prunes it. A broker that believed
such an image would drop every replica it no longer lists, and delete the logs. KRaft
refuses a metadata log of another cluster id and never applies an older one; so does this
guard, which every read and write of the image goes through:

* an image of another cluster id, or older than the newest this broker applied, is never
  applied: readers keep the last good image (brokers serve on, as through an API server
  outage) and writes are refused with ``MetadataFault``, whose message says what is wrong;
* a missing image, or one of this cluster gone backwards, is rebuilt from the newest good
  image this broker holds (``repair``): in memory while it runs, from the copy it keeps in
  its log dir when it starts (broker/cluster/local_copy.py). Each broker puts back its own
  version only where the store holds an older one, so the newest copy wins;
* only a broker with no data creates the image of a new cluster, and only where no broker of
  that name ran before (``CoordinationBackend.has_history``): anything else waits for the
  image to come back, saying why every ``REPORT_EVERY_S``;
* an image that cannot be read (``ImageUnreadable``: damaged, empty, without its topics, a
  version that is not a number) is never read as an empty one, nor applied, nor overwritten:
  readers keep the last good image, writes are refused, a starting broker waits, and the log
  says every ``REPORT_EVERY_S`` to delete the object, after which the brokers put theirs
  back as for a missing one.
"""

from __future__ import annotations

import enum
import logging
import threading
import time
from collections.abc import Callable

from broker.cluster.backend import CoordinationBackend, MetadataMissing, new_cluster_id
from broker.cluster.features import NEW_CLUSTER
from broker.cluster.image import ClusterImage
from kafkube_contract.image import ImageFormatError, ImageUnreadable, StoredIdentity
from kafkube_contract.registration import BrokerRegistration, ControllerLease

log = logging.getLogger(__name__)

REPORT_EVERY_S = 30.0
BOOTSTRAP_POLL_S = 1.0
RESTORE_WAIT_S = 10.0  # how long a starting broker leaves an older image to running ones


class MetadataFault(Exception):
    """The stored cluster metadata cannot be trusted (missing, of another cluster, older than
    what this broker applied): no change to it is made until it is repaired."""


class Verdict(enum.Enum):
    TRUSTED = "trusted"
    MISSING = "missing"  # rebuilt from our copy
    BEHIND = "behind"  # of our cluster but older than our copy: rebuilt from it
    FOREIGN = "foreign"  # of another cluster: never applied, never overwritten
    UNREADABLE = "unreadable"  # damaged: never applied, never overwritten


def judge(stored: StoredIdentity | None, cluster_id: str, version: int) -> Verdict:
    """What the store holds, measured against the newest image this broker applied."""
    if stored is None:
        return Verdict.MISSING
    if stored.cluster_id != cluster_id:
        return Verdict.FOREIGN
    return Verdict.BEHIND if stored.version < version else Verdict.TRUSTED


def explain(verdict: Verdict, stored: StoredIdentity | None, cluster_id: str,
            version: int, store: str) -> str:
    """A fault as an operator reads it: what the store holds, what the broker holds."""
    if verdict is Verdict.MISSING:
        return (f"the cluster metadata ({store}) is missing; this broker holds cluster "
                f"{cluster_id} at version {version} and puts it back")
    assert stored is not None
    if verdict is Verdict.FOREIGN:
        return (f"the cluster metadata ({store}) belongs to cluster {stored.cluster_id}, not to "
                f"cluster {cluster_id} whose data this broker holds: it is not applied. Delete "
                f"it (the brokers put theirs back) or restore the one of cluster {cluster_id}")
    return (f"the cluster metadata ({store}) went back to version {stored.version}; this "
            f"broker applied version {version} and puts it back")


def unreadable(store: str, why: str, cluster_id: str | None, version: int) -> str:
    held = (f"; this broker holds cluster {cluster_id} at version {version}"
            if cluster_id and version >= 0 else "")
    return (f"the cluster metadata ({store}) cannot be read{': ' + why if why else ''}. It is "
            f"not applied nor overwritten{held}: delete it, and the brokers put back the "
            "newest image they hold")


class _Reporter:
    """Logs a fault when it changes, and again every REPORT_EVERY_S while it lasts."""

    def __init__(self) -> None:
        self._last: tuple[str, float] | None = None

    def fault(self, message: str) -> None:
        now = time.monotonic()
        if self._last is None or self._last[0] != message or now - self._last[1] >= REPORT_EVERY_S:
            log.error("%s", message)
            self._last = (message, now)

    def cleared(self) -> None:
        if self._last is not None:
            log.warning("the cluster metadata can be trusted again")
        self._last = None


def bootstrap(store: CoordinationBackend, local_id: str | None, copy: ClusterImage | None,
              where: str, wait: Callable[[float], None] = time.sleep,
              clock: Callable[[], float] = time.monotonic) -> tuple[str, ClusterImage]:
    """The cluster id and image a starting broker may trust. ``local_id`` is the cluster its
    log dirs belong to (None for a broker with no data), ``copy`` the newest image it kept.
    Creates the image of a new cluster, restores a lost one, or waits until one it may
    trust is there."""
    report = _Reporter()
    behind_since: float | None = None
    while True:
        try:
            stored = store.stored_identity()
        except ImageUnreadable as e:
            report.fault(unreadable(where, str(e), local_id, copy.version if copy else -1))
            wait(BOOTSTRAP_POLL_S)
            continue
        # A copy on disk may be older than what running brokers hold in memory: while any
        # runs, they put the image back (MetadataGuard.repair), and this broker waits.
        others = bool(store.live_brokers())
        if stored is None:
            if local_id is not None and copy is not None and not others:
                if not store.restore_image(local_id, copy):
                    wait(BOOTSTRAP_POLL_S / 5)  # lost a race: look again shortly
                continue
            if local_id is None and not store.has_history():
                if not store.create_image(new_cluster_id(),
                                          ClusterImage(features=dict(NEW_CLUSTER))):
                    wait(BOOTSTRAP_POLL_S / 5)
                continue
            report.fault(
                f"the cluster metadata ({where}) is missing: waiting for "
                + ("the running brokers to put it back" if others else
                   "a broker that holds a copy, or for the object to be restored")
                + (f" (this broker's data belong to cluster {local_id}"
                   + (")" if copy is not None else ", and it has no copy)")
                   if local_id else " (brokers of this cluster ran before)"))
        elif local_id is not None and stored.cluster_id != local_id:
            report.fault(explain(Verdict.FOREIGN, stored, local_id, -1, where))
        elif local_id is not None and copy is not None and stored.version < copy.version:
            # Older than this broker's copy: running brokers put back a newer one if they
            # hold one; after RESTORE_WAIT_S none did, and the copy is the newest there is.
            behind_since = behind_since if behind_since is not None else clock()
            if others and clock() - behind_since < RESTORE_WAIT_S:
                report.fault(explain(Verdict.BEHIND, stored, local_id, copy.version, where)
                             .replace("puts it back", "waits for the running brokers"))
                wait(BOOTSTRAP_POLL_S)
                continue
            if not store.restore_image(local_id, copy):
                wait(BOOTSTRAP_POLL_S / 5)
            continue
        else:
            try:
                image = store.read_image()
            except MetadataMissing:
                continue
            except ImageUnreadable as e:
                report.fault(unreadable(where, str(e), local_id,
                                        copy.version if copy else -1))
                wait(BOOTSTRAP_POLL_S)
                continue
            report.cleared()
            return stored.cluster_id, image
        wait(BOOTSTRAP_POLL_S)


class MetadataGuard(CoordinationBackend):
    """A coordination backend whose image only moves forward within one cluster; leases and
    counters pass through. Reads are as cheap as the store's (its cached identity first)."""

    def __init__(self, store: CoordinationBackend, cluster_id: str, image: ClusterImage,
                 where: str) -> None:
        self.store = store
        self.notifies_changes = store.notifies_changes
        self.remote = store.remote
        self._cluster_id = cluster_id
        self._good = image
        self._where = where
        self._lock = threading.Lock()
        self._fault: tuple[Verdict, str] | None = None
        self._report = _Reporter()
        # The stored version whose image could not be read, and why: not applied, and no
        # write goes on top of it, until the store holds another.
        self._unreadable: tuple[int, str] | None = None

    # -- the guarded image ------------------------------------------------------------------

    @property
    def fault(self) -> str | None:
        """Why the store cannot be trusted now, or None."""
        fault = self._fault
        return fault[1] if fault is not None else None

    @property
    def repairable(self) -> bool:
        fault = self._fault
        return fault is not None and fault[0] in (Verdict.MISSING, Verdict.BEHIND)

    def _judge(self) -> StoredIdentity | None:
        """The stored identity if it can be trusted; else None, with the fault noted."""
        version = self._good.version
        try:
            stored = self.store.stored_identity()
        except ImageUnreadable as e:
            return self._faulted(Verdict.UNREADABLE, unreadable(
                self._where, str(e), self._cluster_id, version))
        verdict = judge(stored, self._cluster_id, version)
        bad = self._unreadable
        if bad is not None and (stored is None or stored.version != bad[0]):
            bad = self._unreadable = None  # another image since: judged afresh
        if verdict is Verdict.TRUSTED and bad is not None:
            return self._faulted(Verdict.UNREADABLE, unreadable(
                self._where, bad[1], self._cluster_id, version))
        if verdict is Verdict.TRUSTED:
            if self._fault is not None:
                self._fault = None
                self._report.cleared()
            return stored
        return self._faulted(verdict, explain(verdict, stored, self._cluster_id, version,
                                              self._where))

    def _faulted(self, verdict: Verdict, message: str) -> None:
        self._fault = (verdict, message)
        self._report.fault(message)

    def stored_identity(self) -> StoredIdentity | None:
        return self.store.stored_identity()

    def cluster_id(self) -> str:
        return self._cluster_id

    def image_version(self) -> int:
        stored = self._judge()
        return stored.version if stored is not None else self._good.version

    def read_image(self) -> ClusterImage:
        stored = self._judge()
        if stored is not None and stored.version != self._good.version:
            try:
                image = self.store.read_image()
            except MetadataMissing:
                return self._good
            except ImageFormatError as e:
                # Damaged, or written in a newer format than this broker reads (a newer
                # kafkube finalized a level past this one's): not applied, and no write
                # of this broker's goes on top of it, which would drop what it cannot read.
                self._unreadable = (stored.version, str(e))
                self._faulted(Verdict.UNREADABLE, unreadable(
                    self._where, str(e), self._cluster_id, self._good.version))
                return self._good
            with self._lock:
                if image.version > self._good.version:
                    self._good = image
        return self._good

    def write_image(self, image: ClusterImage) -> bool:
        if self._judge() is None:
            raise MetadataFault(self.fault or "the cluster metadata cannot be trusted")
        if image.version < self._good.version:
            return False  # computed from an image older than one applied: compute again
        try:
            return self.store.write_image(image)
        except MetadataMissing as e:  # deleted since it was judged
            raise MetadataFault(str(e)) from e

    def repair(self) -> bool:
        """Put the newest good image back where the store lost it or went backwards; a write,
        so brokers on a remote store make it from their coordination thread."""
        if self._judge() is not None or not self.repairable:
            return False
        return self.store.restore_image(self._cluster_id, self._good)

    def create_image(self, cluster_id: str, image: ClusterImage) -> bool:
        raise MetadataFault("a running broker never creates the image of a new cluster")

    def restore_image(self, cluster_id: str, image: ClusterImage) -> bool:
        return self.store.restore_image(cluster_id, image)

    def has_history(self) -> bool:
        return self.store.has_history()

    # -- passed through -----------------------------------------------------------------------

    def add_listener(self, listener: Callable[[], None]) -> None:
        self.store.add_listener(listener)

    def register_broker(self, registration: BrokerRegistration, ttl_ms: int) -> int:
        return self.store.register_broker(registration, ttl_ms)

    def renew_broker(self, node_id: int, broker_epoch: int, ttl_ms: int) -> bool:
        return self.store.renew_broker(node_id, broker_epoch, ttl_ms)

    def update_registration(self, registration: BrokerRegistration, broker_epoch: int) -> bool:
        return self.store.update_registration(registration, broker_epoch)

    def unregister_broker(self, node_id: int, broker_epoch: int) -> None:
        self.store.unregister_broker(node_id, broker_epoch)

    def live_brokers(self) -> dict[int, BrokerRegistration]:
        return self.store.live_brokers()

    def lease_expiries(self) -> dict[int, int]:
        return self.store.lease_expiries()

    def acquire_controller(self, node_id: int, broker_epoch: int, ttl_ms: int) -> int | None:
        return self.store.acquire_controller(node_id, broker_epoch, ttl_ms)

    def resign_controller(self, node_id: int) -> None:
        self.store.resign_controller(node_id)

    def controller(self) -> ControllerLease | None:
        return self.store.controller()

    def allocate_producer_ids(self, count: int) -> int:
        try:
            return self.store.allocate_producer_ids(count)
        except MetadataMissing as e:
            raise MetadataFault(str(e)) from e

    def close(self) -> None:
        self.store.close()
