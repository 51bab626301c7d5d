"""The Kubernetes coordination backend: Leases and ConfigMaps in place of ZooKeeper.

The objects (a Lease for the controller and one per broker, the ``<cluster>-metadata``
ConfigMap holding the cluster image, the ``<cluster>-epochs`` ConfigMap of counters), their
names, labels and annotations are the contract's (kafkube_contract/objects.py): the operator
reads them too, and may run another kafkube version.

Every write is a compare-and-set on ``resourceVersion``, so two brokers acting on the same
stale read cannot both win, as with the SQLite backend's guarded UPDATEs. Reads are answered
from a cache kept by watches (client-go's informer pattern), so ``live_brokers``,
``controller`` and ``image_version`` never wait on the API server and a broker keeps answering
them while it is slow or down. Writes are blocking HTTP calls with a bounded timeout, which
brokers make from a thread of their own (``ClusterMetadata.call``).

Lease expiry is judged as Kubernetes leader election judges it: ``renewTime`` plus the lease
duration, against the reader's own clock. The duration is kept in milliseconds in an
annotation, as ``broker.session.timeout.ms`` need not be whole seconds;
``leaseDurationSeconds`` carries it rounded up for kubectl and other readers.
"""

from __future__ import annotations

import base64
import gzip
import logging
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kubernetes import client as k8s
from kubernetes.client.rest import ApiException

from broker.cluster.backend import (
    ClusterImageTooLarge,
    CoordinationBackend,
    MetadataMissing,
    StoreUnavailable,
)
from broker.cluster.contact import Contact, now_ms
from broker.cluster.image import ClusterImage
from broker.cluster.k8s_counters import Counters
from broker.cluster.pod_liveness import PodRef, process_ended
from broker.cluster.watch_cache import WatchCache, unreachable
from kafkube_contract.image import StoredIdentity
from kafkube_contract.leases import RenewalClock
from kafkube_contract.objects import (
    A_CLUSTER_ID,
    A_CONTAINER,
    A_CONTROLLER_EPOCH,
    A_EPOCH,
    A_HOST,
    A_IMAGE_VERSION,
    A_LISTENERS,
    A_METRICS_PORT,
    A_OFFLINE_LOG_DIRS,
    A_OFFLINE_REPLICAS,
    A_POD,
    A_POD_UID,
    A_PORT,
    A_RACK,
    A_TTL_MS,
    CLUSTER_LABEL,
    IMAGE_KEY,
    MAX_IMAGE_BYTES,
    REQUEST_TIMEOUT_S,
    ROLE_LABEL,
    annotation,
    api_client,
    broker_lease_name,
    controller_lease_name,
    controller_of,
    counters_name,
    epoch_ms,
    features_annotations,
    image_document,
    lease_duration_ms,
    metadata_name,
    micro_time,
    offline_annotations,
    registration_of,
    role_of,
    stored_identity,
)
from kafkube_contract.registration import BrokerRegistration, ControllerLease

log = logging.getLogger(__name__)

CONFLICT, NOT_FOUND, GONE = 409, 404, 410


def decode_image(binary_data: dict[str, str], version: int) -> ClusterImage:
    """The cluster image from its ConfigMap's binaryData."""
    return ClusterImage.from_doc(image_document(binary_data), version)


@dataclass(frozen=True, slots=True)
class KubernetesSettings:
    namespace: str
    cluster: str
    kubeconfig: str | None = None  # None: in-cluster credentials, else ~/.kube/config
    pod: PodRef | None = None  # the pod this broker runs in; brokers in pods watch pods


class KubernetesBackend(CoordinationBackend):
    notifies_changes = True
    remote = True

    def __init__(self, settings: KubernetesSettings, client: k8s.ApiClient | None = None,
                 on_change: Callable[[], None] | None = None, sync_timeout: float = 30.0) -> None:
        self.settings = settings
        self.namespace = settings.namespace
        self.cluster = settings.cluster
        self.where = f"ConfigMap {self.namespace}/{metadata_name(self.cluster)}"
        self._client = client or api_client(settings.kubeconfig)
        self._leases_api = k8s.CoordinationV1Api(self._client)
        self._core = k8s.CoreV1Api(self._client)
        self._listeners: list[Callable[[], None]] = [on_change] if on_change else []
        self._contact = Contact()
        selector = f"{CLUSTER_LABEL}={self.cluster}"
        # Leases are judged by when their renewals were seen here (kafkube_contract/leases.py),
        # on the wall clock that times our own renewals' requests.
        self._renewals = RenewalClock(now_ms)
        self._leases = WatchCache(
            "leases", k8s.V1Lease,
            lambda **kw: self._leases_api.list_namespaced_lease(self.namespace, **kw),
            selector, self._changed, self._contact,
            on_put=lambda lease: self._renewals.seen(lease.metadata.name,
                                                     lease.metadata.resource_version))
        self._config_maps = WatchCache(
            "configmaps", k8s.V1ConfigMap,
            lambda **kw: self._core.list_namespaced_config_map(self.namespace, **kw),
            f"{selector},{ROLE_LABEL} in (metadata,counters)", self._changed, self._contact)
        # The brokers' pods carry the cluster label too (deploy/kafkube.yaml, the operator).
        self._pods = WatchCache(
            "pods", k8s.V1Pod,
            lambda **kw: self._core.list_namespaced_pod(self.namespace, **kw),
            selector, self._changed, self._contact) if settings.pod is not None else None
        self._ended_logged: set[tuple[str, str]] = set()
        self._counters = Counters(
            self._core, self.namespace, self.counters_name,
            lambda: self._meta(self.counters_name, "counters", {}), self._call,
            self._config_maps, self._lease_epochs, self._create)
        for cache in self._caches:
            if not cache.wait_synced(sync_timeout):
                raise TimeoutError(f"no list of {cache.kind} in namespace {self.namespace} "
                                   f"within {sync_timeout:.0f}s")
        self._decoded: tuple[int, ClusterImage] | None = None

    def _call(self, method: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """One request to the API server, with a bounded timeout, noting contact; no answer
        is ``StoreUnavailable``, an answer (a conflict, a 404) the client's ApiException."""
        try:
            with self._contact.request(unreachable):
                return method(*args, _request_timeout=REQUEST_TIMEOUT_S, **kwargs)
        except Exception as e:
            if unreachable(e):
                raise StoreUnavailable(f"the API server did not answer: {e}") from e
            raise

    @property
    def _caches(self) -> list[WatchCache]:
        return [c for c in (self._leases, self._config_maps, self._pods) if c is not None]

    def _lapsed(self, lease: Any) -> bool:
        return self._contact.lapsed(self._expiry_ms(lease), self._duration_ms(lease))

    def _expiry_ms(self, lease: Any) -> int:
        """A lease duration after its last renewal was seen, on this reader's clock."""
        return self._renewals.expiry_ms(lease)

    def _ended(self, lease: Any) -> str | None:
        """Why the broker process holding this lease is known to be gone, by its pod
        (broker/cluster/pod_liveness.py), or None."""
        a = lease.metadata.annotations or {}
        if self._pods is None or A_POD not in a or lease.spec.acquire_time is None:
            return None
        ref = PodRef(a[A_POD], a.get(A_POD_UID, ""), a.get(A_CONTAINER, ""))
        reason = process_ended(ref, epoch_ms(lease.spec.acquire_time), self._pods.get(ref.name),
                               self._pods.gone_uid(ref.name))
        if reason is not None and (key := (lease.metadata.name, a.get(A_EPOCH, ""))) \
                not in self._ended_logged:
            self._ended_logged.add(key)
            log.warning("broker %s (epoch %s) fenced before its lease expired: %s",
                        lease.spec.holder_identity, key[1], reason)
        return reason

    def _alive(self, lease: Any) -> bool:
        return not self._lapsed(lease) and self._ended(lease) is None

    def _controller_alive(self, lease: Any) -> bool:
        """The controller lease holds while it is renewed and its holder's process, the one
        registered with the broker epoch it names, is not seen gone."""
        if self._lapsed(lease):
            return False
        if not lease.spec.holder_identity:
            return True
        holder = self._leases.get(self.broker_lease_name(int(lease.spec.holder_identity)))
        return holder is None or self._annotation(holder, A_EPOCH) != \
            self._annotation(lease, A_EPOCH) or self._ended(holder) is None

    # -- names and bodies ---------------------------------------------------------------

    def add_listener(self, listener: Callable[[], None]) -> None:
        """Called from the watch threads whenever a lease or the image changes."""
        self._listeners.append(listener)

    def _changed(self) -> None:
        for listener in list(self._listeners):
            try:
                listener()
            except Exception:  # e.g. the broker's event loop already closed
                log.debug("coordination change listener failed", exc_info=True)

    @property
    def controller_lease_name(self) -> str:
        return controller_lease_name(self.cluster)

    def broker_lease_name(self, node_id: int) -> str:
        return broker_lease_name(self.cluster, node_id)

    @property
    def metadata_name(self) -> str:
        return metadata_name(self.cluster)

    @property
    def counters_name(self) -> str:
        return counters_name(self.cluster)

    def _meta(self, name: str, role: str, annotations: dict[str, str],
              resource_version: str | None = None) -> k8s.V1ObjectMeta:
        return k8s.V1ObjectMeta(
            name=name, namespace=self.namespace, resource_version=resource_version,
            labels={"app.kubernetes.io/name": "kafkube", CLUSTER_LABEL: self.cluster,
                    ROLE_LABEL: role},
            annotations=annotations)

    def _lease_body(self, name: str, role: str, holder: int, ttl_ms: int,
                    annotations: dict[str, str], acquired_ms: int | None = None,
                    transitions: int = 0, resource_version: str | None = None) -> k8s.V1Lease:
        now = now_ms()
        return k8s.V1Lease(
            metadata=self._meta(name, role, {**annotations, A_TTL_MS: str(ttl_ms)},
                                resource_version),
            spec=k8s.V1LeaseSpec(
                holder_identity=str(holder),
                lease_duration_seconds=max(1, math.ceil(ttl_ms / 1000)),
                acquire_time=micro_time(acquired_ms if acquired_ms is not None else now),
                renew_time=micro_time(now), lease_transitions=transitions))

    _duration_ms = staticmethod(lease_duration_ms)
    _annotation = staticmethod(annotation)

    # -- the cluster object and the counters ------------------------------------------

    # -- the stored image's identity, its creation and its repair ---------------------------

    def stored_identity(self) -> StoredIdentity | None:
        obj = self._config_maps.get(self.metadata_name)
        return stored_identity(obj) if obj is not None else None

    def create_image(self, cluster_id: str, image: ClusterImage) -> bool:
        """Brokers of a new cluster starting together race; the API server lets one win."""
        if not self._create(self._image_body(image, image.version, cluster_id, None)):
            return False
        log.info("created the metadata of a new cluster %s (id %s)", self.cluster, cluster_id)
        self._counters.create()
        return True

    def restore_image(self, cluster_id: str, image: ClusterImage) -> bool:
        current = self._config_maps.get(self.metadata_name)
        body = self._image_body(image, image.version, cluster_id, None)
        if current is None:
            written = self._create(body)
        elif self._annotation(current, A_CLUSTER_ID, "") != cluster_id \
                or int(self._annotation(current, A_IMAGE_VERSION)) >= image.version:
            return False
        else:
            body.metadata.resource_version = current.metadata.resource_version
            try:
                self._config_maps.put(self._call(self._core.replace_namespaced_config_map,
                                                 self.metadata_name, self.namespace, body))
                written = True
            except ApiException as e:
                if e.status not in (CONFLICT, NOT_FOUND):
                    raise
                written = False
        if written:
            log.warning("restored %s/%s: image version %d of cluster %s, from this broker's copy",
                        self.namespace, self.metadata_name, image.version, cluster_id)
        return written

    def _lease_epochs(self) -> tuple[list[int], list[int]]:
        """The broker epochs and controller epochs the Leases carry (counters' floors)."""
        leases = self._leases.items()
        return ([int(self._annotation(lease, A_EPOCH)) for lease in leases],
                [int(self._annotation(lease, A_CONTROLLER_EPOCH)) for lease in leases])

    def has_history(self) -> bool:
        return self._config_maps.get(self.counters_name) is not None or any(
            role_of(lease) == "broker" for lease in self._leases.items())

    def _create(self, body: k8s.V1ConfigMap) -> bool:
        try:
            self._config_maps.put(self._call(self._core.create_namespaced_config_map,
                                             self.namespace, body))
            return True
        except ApiException as e:
            if e.status != CONFLICT:
                raise
        # Another broker's is there: read it now rather than wait for the watch to say.
        found = self._call(self._core.read_namespaced_config_map, body.metadata.name,
                           self.namespace)
        self._config_maps.put(found)
        return False

    def _image_body(self, image: ClusterImage, version: int, cluster_id: str,
                    resource_version: str | None) -> k8s.V1ConfigMap:
        packed = gzip.compress(image.to_json().encode(), compresslevel=6, mtime=0)
        if len(packed) > MAX_IMAGE_BYTES:
            raise ClusterImageTooLarge(
                f"the cluster image is {len(packed)} bytes compressed, over the "
                f"{MAX_IMAGE_BYTES} bytes one ConfigMap can hold "
                f"({sum(len(t.assignments) for t in image.topics.values())} partitions)")
        return k8s.V1ConfigMap(
            metadata=self._meta(self.metadata_name, "metadata",
                                {A_IMAGE_VERSION: str(version), A_CLUSTER_ID: cluster_id},
                                resource_version),
            binary_data={IMAGE_KEY: base64.b64encode(packed).decode()})

    def _metadata_object(self) -> Any:
        obj = self._config_maps.get(self.metadata_name)
        if obj is None:
            obj = self._refresh_metadata()
        return obj

    def _refresh_metadata(self) -> Any:
        try:
            obj = self._call(self._core.read_namespaced_config_map,
                             self.metadata_name, self.namespace)
        except ApiException as e:
            if e.status != NOT_FOUND:
                raise
            # Not forgotten here: the watch may already hold one created since; it tells.
            raise MetadataMissing(f"ConfigMap {self.namespace}/{self.metadata_name} is missing: "
                                  "the cluster metadata is gone") from e
        self._config_maps.put(obj)
        return self._config_maps.get(self.metadata_name)

    # -- broker liveness ------------------------------------------------------------------

    def _read_lease(self, name: str) -> Any | None:
        try:
            lease = self._call(self._leases_api.read_namespaced_lease, name, self.namespace)
        except ApiException as e:
            if e.status == NOT_FOUND:
                self._leases.forget(name)
                return None
            raise
        self._leases.put(lease)
        return lease

    def _write_lease(self, body: k8s.V1Lease) -> bool:
        """Create (no resourceVersion) or compare-and-set replace; False on a conflict."""
        name = body.metadata.name
        sent = now_ms()  # the renewal holds from here for us, however long the request took
        try:
            if body.metadata.resource_version is None:
                written = self._call(self._leases_api.create_namespaced_lease, self.namespace, body)
            else:
                written = self._call(self._leases_api.replace_namespaced_lease,
                                     name, self.namespace, body)
        except ApiException as e:
            if e.status in (CONFLICT, NOT_FOUND):
                self._read_lease(name)
                return False
            raise
        self._renewals.seen(name, written.metadata.resource_version, at_ms=sent)
        self._leases.put(written)
        return True

    def register_broker(self, registration: BrokerRegistration, ttl_ms: int) -> int:
        r = registration
        epoch = self._counters.next("broker")
        name = self.broker_lease_name(r.node_id)
        annotations = {A_EPOCH: str(epoch), A_HOST: r.host, A_PORT: str(r.port)}
        if r.rack is not None:
            annotations[A_RACK] = r.rack
        if r.listeners:
            annotations[A_LISTENERS] = r.listeners
        if r.metrics_port:
            annotations[A_METRICS_PORT] = str(r.metrics_port)
        if (pod := self.settings.pod) is not None:
            annotations |= {A_POD: pod.name, A_POD_UID: pod.uid, A_CONTAINER: pod.container}
        annotations |= offline_annotations(r) | features_annotations(r)
        current = self._leases.get(name)
        while True:
            rv = current.metadata.resource_version if current is not None else None
            transitions = (current.spec.lease_transitions or 0) + 1 if current else 0
            body = self._lease_body(name, "broker", r.node_id, ttl_ms, annotations,
                                    transitions=transitions, resource_version=rv)
            if self._write_lease(body):
                return epoch
            current = self._leases.get(name)

    def renew_broker(self, node_id: int, broker_epoch: int, ttl_ms: int) -> bool:
        return self._rewrite_broker_lease(
            node_id, broker_epoch, lambda lease: (ttl_ms, dict(lease.metadata.annotations)))

    def update_registration(self, registration: BrokerRegistration, broker_epoch: int) -> bool:
        def changed(lease: Any) -> tuple[int, dict[str, str]]:
            kept = {k: v for k, v in (lease.metadata.annotations or {}).items()
                    if k not in (A_OFFLINE_LOG_DIRS, A_OFFLINE_REPLICAS)}
            return lease_duration_ms(lease), kept | offline_annotations(registration)
        return self._rewrite_broker_lease(registration.node_id, broker_epoch, changed)

    def _rewrite_broker_lease(self, node_id: int, broker_epoch: int,
                              change: Callable[[Any], tuple[int, dict[str, str]]]) -> bool:
        """Write this broker's live Lease again at ``broker_epoch`` with what ``change``
        makes of it (its duration and annotations), keeping its acquire time and
        transitions; once more after a conflict, from a fresh read. False: the lease is
        another epoch's, or lapsed."""
        name = self.broker_lease_name(node_id)
        lease = self._leases.get(name)
        for _ in range(2):
            if lease is None or int(self._annotation(lease, A_EPOCH)) != broker_epoch \
                    or not self._alive(lease):
                return False
            ttl_ms, annotations = change(lease)
            body = self._lease_body(
                name, "broker", node_id, ttl_ms, annotations,
                acquired_ms=epoch_ms(lease.spec.acquire_time),
                transitions=lease.spec.lease_transitions or 0,
                resource_version=lease.metadata.resource_version)
            if self._write_lease(body):
                return True
            lease = self._leases.get(name)
        return False

    def unregister_broker(self, node_id: int, broker_epoch: int) -> None:
        name = self.broker_lease_name(node_id)
        lease = self._leases.get(name)
        if lease is None or int(self._annotation(lease, A_EPOCH)) != broker_epoch:
            return
        self._delete_lease(lease)

    def _delete_lease(self, lease: Any) -> None:
        name = lease.metadata.name
        try:
            self._call(
                self._leases_api.delete_namespaced_lease, name, self.namespace,
                body=k8s.V1DeleteOptions(preconditions=k8s.V1Preconditions(
                    resource_version=lease.metadata.resource_version)))
            self._leases.forget(name)
        except ApiException as e:
            if e.status not in (CONFLICT, NOT_FOUND):
                raise

    def _broker_leases(self) -> list[Any]:
        return [
            lease for lease in self._leases.items()
            if role_of(lease) == "broker" and self._alive(lease)
        ]

    def live_brokers(self) -> dict[int, BrokerRegistration]:
        return {(r := registration_of(lease)).node_id: r for lease in self._broker_leases()}

    def lease_expiries(self) -> dict[int, int]:
        return {int(lease.spec.holder_identity): self._expiry_ms(lease)
                for lease in self._broker_leases()}

    # -- controller election --------------------------------------------------------------

    def acquire_controller(self, node_id: int, broker_epoch: int, ttl_ms: int) -> int | None:
        name = self.controller_lease_name
        lease = self._leases.get(name)
        for _ in range(2):  # once more after a conflict, from a fresh read
            rv = transitions = acquired = None
            if lease is not None:
                holder = int(lease.spec.holder_identity) if lease.spec.holder_identity else -1
                holder_epoch = int(self._annotation(lease, A_EPOCH))
                epoch = int(self._annotation(lease, A_CONTROLLER_EPOCH))
                expired = not self._controller_alive(lease)
                rv = lease.metadata.resource_version
                transitions = lease.spec.lease_transitions or 0
                if holder == node_id and holder_epoch == broker_epoch:
                    acquired = epoch_ms(lease.spec.acquire_time)
                    if expired:
                        # Our lease lapsed (we were paused): someone may have acted as
                        # controller meanwhile, so this is a new term.
                        epoch = self._counters.next("controller")
                elif not expired and holder != node_id:
                    return None
                else:
                    epoch = self._counters.next("controller")
                    transitions += 1
            else:
                epoch = self._counters.next("controller")
            body = self._lease_body(
                name, "controller", node_id, ttl_ms,
                {A_EPOCH: str(broker_epoch), A_CONTROLLER_EPOCH: str(epoch)},
                acquired_ms=acquired, transitions=transitions or 0, resource_version=rv)
            if self._write_lease(body):
                return epoch
            lease = self._leases.get(name)
        return None

    def resign_controller(self, node_id: int) -> None:
        lease = self._leases.get(self.controller_lease_name)
        if lease is not None and lease.spec.holder_identity == str(node_id):
            self._delete_lease(lease)

    def controller(self) -> ControllerLease | None:
        lease = self._leases.get(self.controller_lease_name)
        if lease is None or not lease.spec.holder_identity \
                or not self._controller_alive(lease):
            return None
        return controller_of(lease)

    # -- cluster image ---------------------------------------------------------------------

    def image_version(self) -> int:
        return int(self._annotation(self._metadata_object(), A_IMAGE_VERSION))

    def read_image(self) -> ClusterImage:
        obj = self._metadata_object()
        version = int(self._annotation(obj, A_IMAGE_VERSION))
        decoded = self._decoded
        if decoded is None or decoded[0] != version:
            decoded = self._decoded = (version, decode_image(obj.binary_data, version))
        return decoded[1]

    def write_image(self, image: ClusterImage) -> bool:
        current = self._metadata_object()
        if int(self._annotation(current, A_IMAGE_VERSION)) != image.version:
            return False
        body = self._image_body(image, image.version + 1, self._annotation(current, A_CLUSTER_ID),
                                current.metadata.resource_version)
        try:
            written = self._call(self._core.replace_namespaced_config_map,
                                 self.metadata_name, self.namespace, body)
        except ApiException as e:
            if e.status == NOT_FOUND:  # deleted: the watch will say so, and the guard judge it
                return False
            if e.status == CONFLICT:
                self._refresh_metadata()  # the watch may lag: the caller re-reads from this
                return False
            raise
        self._config_maps.put(written)
        return True

    def allocate_producer_ids(self, count: int) -> int:
        return self._counters.next("producer-id", count) - 1

    def close(self) -> None:
        for cache in self._caches:
            cache.stop()
        self._client.close()
