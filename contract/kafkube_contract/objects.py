"""How a cluster's state is kept in Kubernetes objects, and pure readers of them.

Objects, all in the cluster's namespace and labelled ``kafkube.io/cluster=<cluster>``
(``CLUSTER_LABEL``) and ``kafkube.io/role`` (``ROLE_LABEL``):

* ``<cluster>-controller`` (``controller_lease_name``), a ``coordination.k8s.io/v1`` Lease,
  role ``controller``: holder = the controller's node id, its controller epoch and broker
  epoch as annotations;
* ``<cluster>-broker-<id>`` (``broker_lease_name``), one Lease per broker, role ``broker``:
  holder = the node id; its endpoint, listeners, rack, broker epoch and pod as annotations;
  renewed every ``broker.heartbeat.interval.ms``;
* ``<cluster>-metadata`` (``metadata_name``), a ConfigMap, role ``metadata``: the cluster
  image, gzip'd JSON in ``binaryData[IMAGE_KEY]`` (kafkube_contract/image.py), its version
  and the cluster id as annotations;
* ``<cluster>-epochs`` (``counters_name``), a ConfigMap, role ``counters``: the broker and
  controller epochs and producer ids handed out. Only brokers read it; the operator only
  notes that it exists (brokers of this cluster ran before).

A Lease's duration is kept in milliseconds in an annotation (``A_TTL_MS``), as
``broker.session.timeout.ms`` need not be whole seconds; ``leaseDurationSeconds`` carries it
rounded up for kubectl and readers that do not know the annotation.

Only the brokers write these objects. The readers here take the ``kubernetes`` client's
objects (``V1Lease``, ``V1ConfigMap``) and judge nothing: when a lease lapses is timed by
kafkube_contract/leases.py, and what a lapsed lease means is each reader's own rule (the
brokers fence more strictly than the operator needs to).
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import gzip
import zlib
from typing import Any

from kubernetes import client as k8s

from kafkube_contract.features import format_ranges, parse_ranges
from kafkube_contract.image import ImageUnreadable, StoredIdentity, parse_image_json
from kafkube_contract.registration import (
    BrokerRegistration,
    ControllerLease,
    feature_tuples,
    join_list,
    split_list,
)

GROUP = "kafkube.io"
CLUSTER_LABEL = f"{GROUP}/cluster"
ROLE_LABEL = f"{GROUP}/role"
A_EPOCH = f"{GROUP}/broker-epoch"
A_CONTROLLER_EPOCH = f"{GROUP}/controller-epoch"
A_TTL_MS = f"{GROUP}/lease-duration-ms"
A_HOST, A_PORT, A_RACK = f"{GROUP}/host", f"{GROUP}/port", f"{GROUP}/rack"
A_LISTENERS = f"{GROUP}/listeners"
A_OFFLINE_LOG_DIRS = f"{GROUP}/offline-log-dirs"
A_OFFLINE_REPLICAS = f"{GROUP}/offline-replicas"
A_METRICS_PORT = f"{GROUP}/metrics-port"  # added in contract 1: optional, 0 when absent
# Added in contract 1, optional: ``name=low-high,..`` (kafkube_contract/features.py).
A_SUPPORTED_FEATURES = f"{GROUP}/supported-features"
A_IMAGE_VERSION, A_CLUSTER_ID = f"{GROUP}/image-version", f"{GROUP}/cluster-id"
A_POD, A_POD_UID, A_CONTAINER = f"{GROUP}/pod", f"{GROUP}/pod-uid", f"{GROUP}/container"
IMAGE_KEY = "image.json.gz"

# The API server refuses a ConfigMap whose data exceed 1 MiB (its own check, before etcd's
# 1.5 MiB request limit); refusing here first gives the caller a message that says why.
MAX_IMAGE_BYTES = 1024 * 1024 - 4096
# Every request to the API server but a watch gives up after this long.
REQUEST_TIMEOUT_S = 10.0


def controller_lease_name(cluster: str) -> str:
    return f"{cluster}-controller"


def broker_lease_name(cluster: str, node_id: int) -> str:
    return f"{cluster}-broker-{node_id}"


def metadata_name(cluster: str) -> str:
    return f"{cluster}-metadata"


def counters_name(cluster: str) -> str:
    return f"{cluster}-epochs"


class _MicroTime(dt.datetime):
    """A ``MicroTime`` as the API server parses it: always six fractional digits. The client
    sends ``isoformat()``, which leaves the fraction out on a whole second, and the server
    refuses that (400), so one renewal in a thousand failed."""

    def isoformat(self, sep: str = "T", timespec: str = "microseconds") -> str:
        return super().isoformat(sep, "microseconds")


def micro_time(ms: int) -> dt.datetime:
    return _MicroTime.fromtimestamp(ms / 1000, tz=dt.UTC)


def epoch_ms(value: dt.datetime | None) -> int:
    return int(value.timestamp() * 1000) if value is not None else 0


def api_client(kubeconfig: str | None) -> k8s.ApiClient:
    """In a pod, the service account's token and CA; outside one, a kubeconfig."""
    from kubernetes import config as kube_config

    configuration = k8s.Configuration()
    if kubeconfig is None:
        try:
            kube_config.load_incluster_config(client_configuration=configuration)
            return k8s.ApiClient(configuration)
        except kube_config.ConfigException:
            pass
    kube_config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
    return k8s.ApiClient(configuration)


# -- readers -----------------------------------------------------------------------------------

def annotation(obj: Any, key: str, default: str = "-1") -> str:
    """One annotation of a Kubernetes object (``-1``, a number's "none", when missing)."""
    return (obj.metadata.annotations or {}).get(key, default)


def role_of(obj: Any) -> str | None:
    return (obj.metadata.labels or {}).get(ROLE_LABEL)


def stored_identity(config_map: Any) -> StoredIdentity:
    """The cluster id and image version the metadata ConfigMap's annotations record;
    ``ImageUnreadable`` when the version is not a number."""
    version = annotation(config_map, A_IMAGE_VERSION)
    try:
        return StoredIdentity(annotation(config_map, A_CLUSTER_ID, ""), int(version))
    except ValueError as e:
        raise ImageUnreadable(
            f"the cluster image's version ({A_IMAGE_VERSION}) is {version!r}, not a number"
        ) from e


def image_document(binary_data: dict[str, str] | None) -> Any:
    """The image document from the metadata ConfigMap's ``binaryData`` (base64 of gzip'd
    JSON), not yet read: ``kafkube_contract.image.read_image_doc`` or the broker's
    ``ClusterImage.from_doc`` read it. ``ImageUnreadable``, saying what is wrong, when the
    key is missing or its bytes are not base64 of gzip'd UTF-8 JSON, or empty."""
    encoded = (binary_data or {}).get(IMAGE_KEY)
    if encoded is None:
        raise ImageUnreadable(f"the ConfigMap has no binaryData {IMAGE_KEY!r}")
    try:
        raw = base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError) as e:
        raise ImageUnreadable(f"binaryData {IMAGE_KEY!r} is not base64: {e}") from e
    try:
        text = gzip.decompress(raw).decode()
    except (OSError, EOFError, zlib.error) as e:
        raise ImageUnreadable(f"binaryData {IMAGE_KEY!r} is not gzip'd: {e}") from e
    except UnicodeDecodeError as e:
        raise ImageUnreadable(f"binaryData {IMAGE_KEY!r} is not UTF-8 text: {e}") from e
    return parse_image_json(text)


def lease_duration_ms(lease: Any) -> int:
    """The lease's duration: the annotation's milliseconds, else ``leaseDurationSeconds``."""
    annotations = lease.metadata.annotations or {}
    return int(annotations.get(A_TTL_MS, (lease.spec.lease_duration_seconds or 0) * 1000))


def renewed_until_ms(lease: Any) -> int:
    """When the lease lapses as its holder wrote it: ``renewTime`` plus its duration, on the
    holder's clock. For display only: a reader judges liveness by when it saw the renewal,
    on its own clock (``kafkube_contract.leases.RenewalClock``)."""
    return epoch_ms(lease.spec.renew_time) + lease_duration_ms(lease)


def registration_of(lease: Any) -> BrokerRegistration:
    """The broker registration a broker Lease carries."""
    a = lease.metadata.annotations or {}
    return BrokerRegistration(
        int(lease.spec.holder_identity), a.get(A_HOST, ""), int(a.get(A_PORT, "0")),
        a.get(A_RACK), int(a.get(A_EPOCH, "-1")), a.get(A_LISTENERS, ""),
        split_list(a.get(A_OFFLINE_LOG_DIRS)), frozenset(split_list(a.get(A_OFFLINE_REPLICAS))),
        int(a.get(A_METRICS_PORT, "0") or 0),
        feature_tuples(parse_ranges(a.get(A_SUPPORTED_FEATURES))))


def features_annotations(registration: BrokerRegistration) -> dict[str, str]:
    """The annotation announcing the broker's supported feature ranges (none when it
    announces none)."""
    if not registration.supported_features:
        return {}
    return {A_SUPPORTED_FEATURES: format_ranges(registration.feature_ranges)}


def offline_annotations(registration: BrokerRegistration) -> dict[str, str]:
    """The annotations saying which log dirs of the broker are offline and the replicas
    they held; empty when none is (an older reader ignores them)."""
    if not registration.offline_log_dirs and not registration.offline_replicas:
        return {}
    return {A_OFFLINE_LOG_DIRS: join_list(registration.offline_log_dirs),
            A_OFFLINE_REPLICAS: join_list(registration.offline_replicas)}


def controller_of(lease: Any) -> ControllerLease | None:
    """The holder and controller epoch of the controller Lease; None when nobody holds it."""
    if not lease.spec.holder_identity:
        return None
    return ControllerLease(int(lease.spec.holder_identity),
                           int(annotation(lease, A_CONTROLLER_EPOCH)))
