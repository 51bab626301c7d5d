"""A rebalance by disk usage on kind (issue 33): a KafkaCluster whose broker 0 holds a replica
of every partition of a topic an acks=all producer fills (broker 0 twice as full as the
others), a KafkaRebalance applied with kubectl, its proposal read, approved with
`kubectl annotate`, executed under the throttle while a second acks=all producer writes to
the same topic; then a fresh proposal finds the disks within tolerance, and every
acknowledged record of both producers is read back."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest

from kafkube.harness.kind.deployment import Brokers
from kafkube.harness.kind.history import read_drain, read_produce
from kafkube.harness.kind.operated import example_cluster, ready_cluster
from kafkube.harness.kind.platform import Cluster
from kafkube.harness.kind.streams import checked, end_stream
from kafkube.harness.queue_checker import History
from kafkube.harness.waiting import wait_until

NAME = "balanced"
# Every partition has a replica on broker 0, the other on broker 1 or 2: filled evenly,
# broker 0 holds twice the bytes of each other broker.
ASSIGNMENT = "0,1;0,2;0,1;0,2;0,1;0,2"
CAPACITY = "256Mi"  # each broker's capacity as the planner sees it (storage.size)
RECORD = 64 * 1024
FILL = 2000  # records of RECORD bytes: 131 MB, broker 0 at ~0.49 of its capacity, the
#              others at ~0.24: 0.16 above the mean, past the tolerance of 0.1
TOLERANCE = 0.1


@pytest.fixture(scope="module")
def skewed(operator: Cluster) -> Iterator[Brokers]:
    resource = json.loads(example_cluster(NAME))
    resource["spec"]["storage"]["size"] = CAPACITY
    with ready_cluster(operator, resource) as brokers:
        yield brokers


def rebalance(brokers: Brokers, name: str) -> dict:
    return json.loads(brokers.kubectl("get", "kafkarebalance", name, "-o", "json")).get(
        "status", {})


def apply_rebalance(brokers: Brokers, name: str) -> None:
    brokers.cluster.apply(json.dumps({
        "apiVersion": "kafkube.io/v1alpha1", "kind": "KafkaRebalance",
        "metadata": {"name": name},
        "spec": {"cluster": NAME, "mode": "full", "tolerances": {"diskUsage": TOLERANCE},
                 "throttleBytesPerSecond": 8 * 1024 * 1024}}), namespace=brokers.namespace)


def goal(status: dict, name: str) -> dict:
    return next(g for g in status["proposal"]["goals"] if g["goal"] == name)


def test_a_disk_filled_on_one_broker_is_evened_out_by_an_approved_rebalance(
        skewed: Brokers) -> None:
    brokers = skewed
    brokers.finish(brokers.start("create-topic", brokers.bootstrap, "bulk", "--assignment",
                                 ASSIGNMENT, "--config", "min.insync.replicas=2"), 120)
    history = History()
    fill = brokers.start("produce", brokers.bootstrap, "bulk", "--count", str(FILL),
                         "--rate", "200", "--seconds", "300", "--prefix", "f-",
                         "--size", str(RECORD))
    filled = read_produce(brokers.finish(fill, 360), history, prefix="f-")
    assert filled.finished and filled.acked == FILL, filled

    apply_rebalance(brokers, "even")
    status = wait_until(lambda: (s := rebalance(brokers, "even")).get("state") ==
                        "ProposalReady" and s, 180, "a proposal", 3.0)
    disk = goal(status, "DiskUsage")
    assert not disk["metBefore"] and disk["metAfter"], disk
    assert goal(status, "RackAware")["metAfter"], status["proposal"]["goals"]
    proposal = status["proposal"]
    assert proposal["replicaMoves"] >= 1 and proposal["dataToMoveBytes"] > 0, proposal
    listed = brokers.kubectl("get", "kafkarebalances")

    stream = brokers.start("produce", brokers.bootstrap, "bulk", "--count", "200000",
                           "--rate", "200", "--seconds", "600")
    brokers.wait_running(stream, 120)
    started = time.monotonic()
    brokers.kubectl("annotate", "kafkarebalance", "even", "kafkube.io/rebalance=approve")
    done = wait_until(lambda: (s := rebalance(brokers, "even")).get("state") in (
        "Ready", "NotReady") and s, 600, "the rebalance done", 3.0)
    took = time.monotonic() - started
    assert done["state"] == "Ready", done
    assert done["progress"]["partitionsDone"] == done["progress"]["partitions"], done
    end_stream(brokers, stream, 6)
    produced = read_produce(brokers.finish(stream, 300), history)

    # A new proposal measures the disks again: within the tolerance now.
    apply_rebalance(brokers, "check")
    again = wait_until(lambda: (s := rebalance(brokers, "check")).get("state") in (
        "ProposalReady", "Ready") and s, 180, "a second proposal", 3.0)
    assert goal(again, "DiskUsage")["metBefore"], again["proposal"]["goals"]

    drained = read_drain(brokers.run("drain", brokers.bootstrap, "bulk", "--first-word",
                                     timeout=600), history)
    print(f"kubectl get kafkarebalances:\n{listed}\nDiskUsage before "
          f"{disk['before']}, planned {disk['after']}, measured after "
          f"{goal(again, 'DiskUsage')['before']}; {proposal['replicaMoves']} replica move(s), "
          f"{proposal['dataToMoveBytes']:,} bytes in {took:.0f} s; fill {filled.acked:,} "
          f"records of {RECORD:,} B; {checked(history, produced, drained)}")
