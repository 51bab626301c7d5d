"""An upgrade of kafkube itself, on kind, under an acks=all stream: a KafkaCluster made on the
previous release's image (scripts/previous-release, built by `scripts/image.sh previous`),
rolled to this tree's image broker by broker with ``spec.metadataVersion: 1`` held, rolled
back to the previous image (possible: level 1 is the format the previous release reads),
rolled forward again and finalized at ``kafkube.metadata.version`` 2 (the image format
changes); then the previous image is refused with a Warning and never rolled out. Every
acknowledged record is read back at the end."""

from __future__ import annotations

import base64
import gzip
import json
import time
from collections.abc import Iterator

import pytest

from kafkube.harness.kind.deployment import Brokers
from kafkube.harness.kind.history import read_drain, read_produce
from kafkube.harness.kind.operated import cluster_status, example_cluster, ready_cluster
from kafkube.harness.kind.platform import Cluster
from kafkube.harness.kind.streams import checked, end_stream, stream
from kafkube.harness.queue_checker import History
from kafkube.harness.waiting import wait_until

CURRENT = "localhost/kafkube:dev"
PREVIOUS = "localhost/kafkube:previous"
NAME = "upgraded"
ROLL_TIMEOUT = 600.0


@pytest.fixture(scope="module")
def previous_cluster(operator: Cluster) -> Iterator[Brokers]:
    """A 3-broker KafkaCluster on the previous release's image, Ready."""
    resource = json.loads(example_cluster(NAME))
    resource["spec"]["image"] = PREVIOUS
    with ready_cluster(operator, resource) as brokers:
        yield brokers


def patch(brokers: Brokers, spec: dict) -> None:
    brokers.kubectl("patch", "kafkacluster", NAME, "--type", "merge", "-p",
                    json.dumps({"spec": spec}))


def pod_images(brokers: Brokers) -> dict[str, tuple[str, bool]]:
    """Each broker pod's image and readiness, as kubectl shows them."""
    out = brokers.kubectl(
        "get", "pods", "-l", f"app.kubernetes.io/name=kafkube,kafkube.io/cluster={NAME}",
        "-o", "jsonpath={range .items[*]}{.metadata.name} {.spec.containers[0].image} "
        "{.status.containerStatuses[0].ready}{'\\n'}{end}")
    return {name: (image, ready == "true") for name, image, ready in
            (line.split() for line in out.splitlines() if len(line.split()) == 3)}


def rolled_to(brokers: Brokers, image: str) -> None:
    """Every broker pod runs ``image`` and is ready, and the cluster is Ready again."""
    wait_until(lambda: (pods := pod_images(brokers)) and len(pods) == 3 and all(
        seen == (image, True) for seen in pods.values()), ROLL_TIMEOUT,
        f"every broker on {image}", 3.0)
    brokers.kubectl("wait", f"kafkacluster/{NAME}", "--for=condition=Ready",
                    "--timeout=300s", timeout=320)


def stored_format(brokers: Brokers) -> int:
    """The format of the cluster image in its ConfigMap, read as any reader would."""
    encoded = json.loads(brokers.kubectl("get", "configmap", f"{NAME}-metadata", "-o", "json"))[
        "binaryData"]["image.json.gz"]
    return json.loads(gzip.decompress(base64.b64decode(encoded)))["format"]


def warning(brokers: Brokers) -> dict:
    return next((c for c in cluster_status(brokers).get("conditions", [])
                 if c.get("type") == "Warning" and c.get("status") == "True"), {})


def test_an_upgrade_a_rollback_and_a_finalize_under_an_acks_all_stream(
        previous_cluster: Brokers) -> None:
    brokers = previous_cluster
    operator, namespace = brokers.cluster, brokers.namespace
    operator.apply(json.dumps({
        "apiVersion": "kafkube.io/v1alpha1", "kind": "Topic", "metadata": {"name": "e2e-up"},
        "spec": {"cluster": NAME, "partitions": 3, "replicationFactor": 3}}),
        namespace=namespace)
    operator.kubectl("-n", namespace, "wait", "topic/e2e-up", "--for=condition=Ready",
                     "--timeout=120s", timeout=130)
    assert stored_format(brokers) == 1 and cluster_status(brokers).get(
        "finalizedMetadataVersion", 0) == 0  # the previous release finalizes no level of it
    history = History()
    pod = stream(brokers, "e2e-up", 900_000, 900, 3000)
    steps: list[str] = []
    started = time.monotonic()

    # 1. Upgrade, the level held at 1: the new brokers write the format the old ones read.
    patch(brokers, {"image": CURRENT, "metadataVersion": 1})
    rolled_to(brokers, CURRENT)
    wait_until(lambda: cluster_status(brokers).get("finalizedMetadataVersion") == 1, 300,
               "kafkube.metadata.version 1 finalized", 3.0)
    assert stored_format(brokers) == 1
    steps.append(f"rolled to {CURRENT} at level 1 in {time.monotonic() - started:.0f} s")

    # 2. Rollback before finalizing 2: the previous image reads level 1's format.
    mark = time.monotonic()
    patch(brokers, {"image": PREVIOUS})
    rolled_to(brokers, PREVIOUS)
    steps.append(f"rolled back to {PREVIOUS} in {time.monotonic() - mark:.0f} s")

    # 3. Forward again, the level left to the operator: finalized at 2 once every broker
    #    runs the new image; from then on the image is in format 2.
    mark = time.monotonic()
    patch(brokers, {"image": CURRENT, "metadataVersion": None})
    rolled_to(brokers, CURRENT)
    wait_until(lambda: cluster_status(brokers).get("finalizedMetadataVersion") == 2, 300,
               "kafkube.metadata.version 2 finalized", 3.0)
    assert stored_format(brokers) == 2
    steps.append(f"rolled forward and finalized 2 in {time.monotonic() - mark:.0f} s")

    # 4. The previous image now cannot read the cluster: refused, never rolled out.
    patch(brokers, {"image": PREVIOUS})
    seen = wait_until(lambda: (w := warning(brokers)).get("reason") == "ImageTooOld" and w,
                      300, "the ImageTooOld Warning", 3.0)
    assert PREVIOUS in seen["message"] and "kafkube.metadata.version" in seen["message"]
    assert all(image == CURRENT for image, _ in pod_images(brokers).values())
    patch(brokers, {"image": CURRENT})
    wait_until(lambda: warning(brokers).get("reason") != "ImageTooOld", 300,
               "the Warning cleared", 3.0)
    steps.append(f"{PREVIOUS} refused: {seen['message']}")

    end_stream(brokers, pod, 3)
    produced = read_produce(brokers.finish(pod, 300), history)
    drained = read_drain(brokers.run("drain", brokers.bootstrap, "e2e-up", timeout=600),
                         history)
    print("upgrade: " + "; ".join(steps) + f"; {checked(history, produced, drained)}")
