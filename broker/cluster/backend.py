"""CoordinationBackend: what Kafka kept in ZooKeeper (and KRaft in its quorum), as leases.

Three needs, each a lease or a compare-and-set, so a Kubernetes implementation maps onto
``coordination.k8s.io`` Leases and resourceVersion-guarded objects one to one:

* controller election: one lease; whoever holds it unexpired is the active controller, and
  each new holder gets a higher controller epoch;
* broker liveness: one lease per broker, renewed every ``broker.heartbeat.interval.ms`` and
  gone after ``broker.session.timeout.ms``; each registration gets a new broker epoch, so a
  paused broker that comes back learns it was fenced instead of carrying on;
* the cluster image: a versioned document written with compare-and-set; brokers notice a
  change by polling the version, or at once where the backend watches (``notifies_changes``).

Calls are synchronous. Reads must never wait on the network: SQLite answers in well under a
millisecond, the Kubernetes backend from its watch cache. Writes are short on SQLite; on
Kubernetes (``remote``) they are HTTP calls with a bounded timeout, which a broker makes from
a thread of its own (``ClusterMetadata.call``) so that its event loop keeps serving while the
API server is slow or down.
"""

from __future__ import annotations

import base64
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable

from broker.cluster.image import ClusterImage
from kafkube_contract.image import StoredIdentity
from kafkube_contract.registration import BrokerRegistration, ControllerLease


def new_cluster_id() -> str:
    """A random UUID in Kafka's URL-safe base64 form (Uuid.randomUuid().toString())."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()


class ClusterImageTooLarge(Exception):
    """The cluster image no longer fits where the backend keeps it (one Kubernetes object)."""


class StoreUnavailable(Exception):
    """The coordination store gave no answer (refused, reset, timed out, or could not serve):
    a write may be tried again later."""


class MetadataMissing(Exception):
    """The store holds no cluster image (never created, or deleted behind the brokers' back)."""


class CoordinationBackend(ABC):
    #: True if ``add_listener``'s callbacks fire on every change (a watch); else callers poll.
    notifies_changes = False
    #: True if writes cross the network (an API server): brokers make them off the event loop.
    remote = False
    #: Where the image is kept, as messages name it.
    where = "the coordination store"

    def add_listener(self, listener: Callable[[], None]) -> None:  # noqa: B027 - optional
        """Have ``listener`` called, from any thread, when a lease or the image changes."""

    def cluster_id(self) -> str:
        """The id of the cluster whose image the store holds."""
        stored = self.stored_identity()
        if stored is None:
            raise MetadataMissing("the coordination store holds no cluster image")
        return stored.cluster_id

    # -- the stored image's identity, its creation and its repair ---------------------------

    @abstractmethod
    def stored_identity(self) -> StoredIdentity | None:
        """The stored image's cluster id and version, None if there is none; cheap (cached)."""

    @abstractmethod
    def create_image(self, cluster_id: str, image: ClusterImage) -> bool:
        """Create the store of a new cluster holding ``image`` at ``image.version``, and its
        counters at zero; False if an image is stored already (another broker won)."""

    @abstractmethod
    def restore_image(self, cluster_id: str, image: ClusterImage) -> bool:
        """Put back ``image`` at its own version where the store lost it (no image) or went
        backwards (an image of ``cluster_id`` older than ``image.version``), by compare-and-set;
        counters recreated skip past any value handed out before. False if nothing was written
        (the store holds that version or newer, another cluster's image, or a race was lost)."""

    @abstractmethod
    def has_history(self) -> bool:
        """Whether brokers of this cluster ran before (counters, registrations): then an empty
        broker must not create a new cluster where the image is missing, but wait for it."""

    # -- broker liveness -------------------------------------------------------------------

    @abstractmethod
    def register_broker(self, registration: BrokerRegistration, ttl_ms: int) -> int:
        """Register (or re-register) a broker; returns its new broker epoch."""

    @abstractmethod
    def renew_broker(self, node_id: int, broker_epoch: int, ttl_ms: int) -> bool:
        """Extend the lease; False if this registration expired or was replaced (fenced)."""

    @abstractmethod
    def update_registration(self, registration: BrokerRegistration, broker_epoch: int) -> bool:
        """Replace what the live registration of ``broker_epoch`` announces of the broker
        (its offline log dirs and their replicas), keeping its epoch and lease: KRaft's
        broker heartbeat carrying offline dirs. False if that registration is gone."""

    @abstractmethod
    def unregister_broker(self, node_id: int, broker_epoch: int) -> None:
        """Give the lease up at once (clean shutdown), if it is still ours."""

    @abstractmethod
    def live_brokers(self) -> dict[int, BrokerRegistration]:
        """Brokers whose lease has not expired."""

    @abstractmethod
    def lease_expiries(self) -> dict[int, int]:
        """When each live broker's lease expires (wall-clock ms). A lease whose expiry moves
        on is being renewed: its holder is alive now, which an unexpired lease alone does
        not say (a broker killed a moment ago still holds one)."""

    # -- controller election --------------------------------------------------------------

    @abstractmethod
    def acquire_controller(self, node_id: int, broker_epoch: int, ttl_ms: int) -> int | None:
        """Take or renew the controller lease; the controller epoch if we hold it, else None.

        A lease held by an earlier registration of the same node (a restarted process) is
        taken over at once, as that holder is certainly gone.
        """

    @abstractmethod
    def resign_controller(self, node_id: int) -> None:
        """Release the lease if we hold it, so another broker takes over without waiting."""

    @abstractmethod
    def controller(self) -> ControllerLease | None:
        """The unexpired lease holder, if any."""

    # -- cluster image ---------------------------------------------------------------------

    @abstractmethod
    def image_version(self) -> int:
        """The current version: cheap, polled for change notification."""

    @abstractmethod
    def read_image(self) -> ClusterImage:
        """The current image with its version."""

    @abstractmethod
    def write_image(self, image: ClusterImage) -> bool:
        """Store ``image`` if the stored version is still ``image.version``; False otherwise."""

    @abstractmethod
    def allocate_producer_ids(self, count: int) -> int:
        """Reserve ``count`` producer ids cluster-wide; returns the first."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release connections."""
