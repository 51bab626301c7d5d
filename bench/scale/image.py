"""Curve 3 of the recovery command, kafkube only (KRaft keeps its metadata in its own
replicated log, nothing like one object in an API server): 3 brokers on the Kubernetes
backend against a real kube-apiserver and etcd, grown topic by topic; at each step the
image ConfigMap's size against the 1 MiB limit, the time until a CreateTopics is in it,
the API server's PUT latency, and what encoding and decoding the whole image costs."""

from __future__ import annotations

import base64
import contextlib
import gzip
import json
import re
import shutil
import ssl
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.scale.clusters import create_topic_async, three_brokers, wait_future
from bench.scale.probes import POLL_S, BrokerWatch
from bench.scale.recovery_points import Point, why
from kafkube.harness.waiting import wait_until

# The API server refuses a ConfigMap whose data pass 1 MiB (broker.cluster.kubernetes).
CONFIGMAP_LIMIT = 1024 * 1024
MAX_PACKED = CONFIGMAP_LIMIT - 4096  # kafkube_contract.objects.MAX_IMAGE_BYTES


@dataclass(frozen=True)
class ApiMetrics:
    """Cumulative ConfigMap PUT figures of kube-apiserver's /metrics at one moment."""

    put_count: float
    put_seconds: float
    etcd_count: float
    etcd_seconds: float


METRIC = re.compile(r"^(\w+)\{([^}]*)\}\s+(\S+)$")


def parse_metrics(text: str) -> ApiMetrics:
    """ConfigMap writes from Prometheus text: the API server's request latency (verb PUT)
    and etcd's (operation update), sums and counts."""
    values = {"put_count": 0.0, "put_seconds": 0.0, "etcd_count": 0.0, "etcd_seconds": 0.0}
    for line in text.splitlines():
        match = METRIC.match(line)
        if match is None:
            continue
        name, labels, value = match.groups()
        if name.startswith("apiserver_request_duration_seconds_") and \
                'resource="configmaps"' in labels and 'verb="PUT"' in labels:
            key = "put_count" if name.endswith("_count") else "put_seconds"
        elif name.startswith("etcd_request_duration_seconds_") and \
                re.search(r'(type|resource)="configmaps"', labels) and \
                'operation="update"' in labels:  # "type" until 1.3x, "resource" since
            key = "etcd_count" if name.endswith("_count") else "etcd_seconds"
        else:
            continue
        if name.endswith(("_count", "_sum")):
            values[key] += float(value)
    return ApiMetrics(**values)


class ControlPlane:
    """``kafkube.harness.control_plane.LocalControlPlane`` in a temp dir, with what the image
    curve reads from it: the image ConfigMap and the server's metrics."""

    def __init__(self) -> None:
        from kafkube.harness.control_plane import LocalControlPlane, build_apiserver

        self.dir = Path(tempfile.mkdtemp(prefix="kafkube-bench-kube-"))
        self.plane = LocalControlPlane(self.dir / "plane", build_apiserver())
        self._api: Any = None

    def __enter__(self) -> ControlPlane:
        try:
            self.plane.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        try:
            self.plane.stop()
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)

    @property
    def core(self) -> Any:
        if self._api is None:
            from kubernetes import client as k8s

            from kafkube_contract.objects import api_client

            self._api = k8s.CoreV1Api(api_client(str(self.plane.kubeconfig)))
        return self._api

    def image_object(self, cluster: str) -> Any | None:
        from kubernetes.client.rest import ApiException

        from kafkube_contract.objects import metadata_name

        try:
            return self.core.read_namespaced_config_map(metadata_name(cluster), "default",
                                                        _request_timeout=10)
        except ApiException:
            return None

    def metrics(self) -> ApiMetrics:
        from kafkube.harness.control_plane import ADMIN_TOKEN

        context = ssl.create_default_context(cafile=str(self.plane.dir / "ca.crt"))
        request = urllib.request.Request(f"{self.plane.url}/metrics",
                                         headers={"Authorization": f"Bearer {ADMIN_TOKEN}"})
        with urllib.request.urlopen(request, timeout=30, context=context) as answer:
            return parse_metrics(answer.read().decode())


@dataclass(frozen=True)
class ImageSize:
    """The image ConfigMap as stored: gzip'd JSON in binaryData."""

    version: int
    compressed: int  # what the 1 MiB limit is checked against
    base64: int  # what the object carries
    json: int  # the image uncompressed
    topics: frozenset[str]


def image_size(obj: Any) -> ImageSize | None:
    from kafkube_contract.objects import A_IMAGE_VERSION, IMAGE_KEY

    if obj is None or not obj.binary_data or IMAGE_KEY not in obj.binary_data:
        return None
    encoded = obj.binary_data[IMAGE_KEY]
    packed = base64.b64decode(encoded)
    doc = json.loads(gzip.decompress(packed))
    version = int((obj.metadata.annotations or {}).get(A_IMAGE_VERSION, "0"))
    return ImageSize(version, len(packed), len(encoded), len(gzip.decompress(packed)),
                     frozenset(t["name"] for t in doc.get("topics", ())))


def image_curve(totals: list[int], timeout: float, log: Callable[[str], None]) -> list[Point]:
    """Grow one kafkube cluster on the Kubernetes backend to each total in ``totals``."""
    points: list[Point] = []
    cluster_name = f"scale{uuid.uuid4().hex[:8]}"
    with ControlPlane() as plane:
        overrides = {"kafkube.coordination.backend": "kubernetes",
                     "kafkube.cluster.name": cluster_name,
                     "kafkube.kubernetes.namespace": "default",
                     "kafkube.kubernetes.kubeconfig": str(plane.plane.kubeconfig)}
        log(f"image: kube-apiserver at {plane.plane.url}; 3 kafkube brokers on it ...")
        with three_brokers("kafkube", None, overrides) as addresses:
            have = 0
            for total in totals:
                if total <= have:
                    continue
                log(f"image: +{total - have:,} partitions (total {total:,}) ...")
                try:
                    points.append(image_step(plane, cluster_name, addresses, have, total,
                                             timeout))
                except Exception as e:  # recorded as the point's figure; the curve stops
                    points.append(Point("image", "kafkube", total, None, error=why(e)))
                    break
                have = total
                if points[-1].seconds is None:
                    break
    return points


def image_step(plane: ControlPlane, cluster: str, addresses: list[str], have: int,
               total: int, timeout: float) -> Point:
    """One CreateTopics of ``total - have`` partitions: until it is in the image object,
    until every broker serves it, and the image's size and writes meanwhile."""
    point = Point("image", "kafkube", total, None)
    topic = f"img-{total}"
    before, metrics0 = image_size(plane.image_object(cluster)), plane.metrics()
    t0 = time.monotonic()
    future = create_topic_async(",".join(addresses), topic, total - have, 3)
    future.add_done_callback(lambda _f: point.figures.setdefault(
        "create_returned_s", round(time.monotonic() - t0, 2)))

    def committed() -> ImageSize | None:
        size = image_size(plane.image_object(cluster))
        return size if size is not None and topic in size.topics else None
    with BrokerWatch(addresses, topic, total - have, t0, t0 + timeout) as watch:
        try:
            wait_until(committed, timeout, f"{topic} in the image ConfigMap", POLL_S / 2)
            point.seconds = round(time.monotonic() - t0, 2)
        except TimeoutError as e:
            point.error = str(e)
            return point
        point.figures |= {k: v for k, v in watch.result().items()
                          if k in ("every_broker_s", "per_broker_s")}
    with contextlib.suppress(Exception):
        wait_future(future, 10)
    after, metrics1 = image_size(plane.image_object(cluster)), plane.metrics()
    assert after is not None
    puts = metrics1.put_count - metrics0.put_count
    point.figures |= {
        "image_bytes": after.compressed, "image_base64_bytes": after.base64,
        "image_json_bytes": after.json,
        "limit_share": round(after.compressed / CONFIGMAP_LIMIT, 3),
        "image_writes": after.version - (before.version if before else 0),
        "configmap_puts": int(puts),
        "put_ms": round(1000 * (metrics1.put_seconds - metrics0.put_seconds) / puts, 1)
        if puts else None,
        "etcd_update_ms": round(1000 * (metrics1.etcd_seconds - metrics0.etcd_seconds)
                                / (metrics1.etcd_count - metrics0.etcd_count), 1)
        if metrics1.etcd_count > metrics0.etcd_count else None,
        "bytes_per_partition": round(after.compressed / total, 1),
    }
    point.figures |= codec_ms(plane.image_object(cluster))
    point.figures["churned_bytes_per_partition"] = churned_bytes_per_partition(total)
    return point


def codec_ms(obj: Any) -> dict[str, float]:
    """What one image version costs in CPU, here in this process: the controller encodes
    and gzips the whole image for every write, and every broker decodes every version."""
    from broker.cluster.kubernetes import decode_image
    from kafkube_contract.objects import IMAGE_KEY

    if obj is None or not obj.binary_data or IMAGE_KEY not in obj.binary_data:
        return {}
    started = time.perf_counter()
    image = decode_image(obj.binary_data, 0)
    decoded = time.perf_counter()
    gzip.compress(image.to_json().encode(), compresslevel=6, mtime=0)
    encoded = time.perf_counter()
    return {"decode_ms": round(1000 * (decoded - started), 1),
            "encode_ms": round(1000 * (encoded - decoded), 1)}


CHURN_BROKERS = 12


def churned_bytes_per_partition(partitions: int, seed: int = 17) -> float:
    """gzip'd bytes per partition of a synthetic image as a long-lived cluster's looks:
    ``CHURN_BROKERS`` brokers, replicas placed at random, ISRs shrunk here and there,
    leader and partition epochs moved on. A fresh image of 3 brokers repeats itself and
    compresses far better; this is the figure to hold against the 1 MiB limit."""
    import random

    from broker.cluster.image import ClusterImage
    from kafkube_contract.image import PartitionState, TopicMetadata

    rng = random.Random(seed)
    image = ClusterImage()
    brokers = list(range(CHURN_BROKERS))
    for t in range(max(1, partitions // 1000)):
        states = []
        for _ in range(1000):
            replicas = tuple(rng.sample(brokers, 3))
            isr = replicas if rng.random() < 0.8 else replicas[:2]
            states.append(PartitionState(replicas, isr, rng.choice(isr), rng.randrange(50),
                                         rng.randrange(200)))
        image = image.with_topic(TopicMetadata(f"topic-{t:05d}", str(uuid.UUID(
            int=rng.getrandbits(128))), {}, tuple(states)))
    packed = gzip.compress(image.to_json().encode(), compresslevel=6, mtime=0)
    return round(len(packed) / (max(1, partitions // 1000) * 1000), 1)

