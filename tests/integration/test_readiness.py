"""A broker's /ready (broker/health.py), which the operator's readinessProbe and so the
PodDisruptionBudget go by (issue 27, item 4): a restarted broker that listens but is still
catching up is not ready, so ``kubectl drain`` waits before it evicts the next broker; it is
ready once back in the ISR of every partition it follows."""

from __future__ import annotations

import urllib.error
import urllib.request

from confluent_kafka import Producer
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

from broker.cluster.image import ClusterImage
from broker.health import behind
from kafkube.harness.waiting import wait_until
from kafkube_contract.image import PartitionState, TopicMetadata


def _ready(port: int, path: str = "/ready") -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def test_behind_names_what_a_broker_has_not_caught_up() -> None:
    image = ClusterImage({"t": TopicMetadata("t", "00000000-0000-4000-8000-000000000001", {}, (
        PartitionState((0, 1), (0, 1), 0),  # in sync
        PartitionState((0, 1), (0,), 0),  # 1 follows, out of the ISR
        PartitionState((1, 0), (1,), 1),  # 1 leads
        PartitionState((2, 1), (2,), 2),  # leader 2 not alive: nothing to catch up from
        PartitionState((0, 1), (0,), -1),  # offline
    ))})
    hosted = {("t", i) for i in range(5)}
    assert behind(image, 1, hosted, {0, 1}) == ["t-1"]
    assert behind(image, 1, hosted - {("t", 0)}, {0, 1}) == ["t-0", "t-1"]
    assert behind(image, 0, hosted, {0, 1}) == ["t-2"]  # follows t-2, out of its ISR
    assert behind(image, 0, hosted, {0}) == []  # t-2's leader gone: nothing to catch up


def test_a_restarted_broker_is_ready_only_back_in_its_isrs(cluster_factory) -> None:
    cluster = cluster_factory(3, {"kafkube.health.port": "0", "min.insync.replicas": "2",
                                  "replica.lag.time.max.ms": "3000"})
    cluster.create_topic("orders", 3, 3, {"follower.replication.throttled.replicas": "*"})
    for broker in cluster.brokers:
        wait_until(lambda b=broker: _ready(b.health_port)[0] == 200, 30, "every broker ready")
    # Broker 2's follower throttle, set while it runs (librdkafka sends a broker's configs
    # to that broker): it slows only out-of-sync replicas, as in Kafka, so nothing yet.
    _throttle(cluster, "20000")
    cluster.kill(2)
    cluster.wait_for_isr_without("orders", 2)
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    for _ in range(3000):
        producer.produce("orders", b"x" * 1000)
    assert producer.flush(60) == 0
    # Broker 2 comes back fetching at 20 KB/s: it listens, but is not in sync for a while.
    cluster.restart(2)
    port = cluster.brokers[2].health_port
    _, reason = wait_until(lambda: (r := _ready(port)) and r[0] == 503 and
                              "not in sync" in r[1] and r, 30, "503 while catching up")
    assert "orders-" in reason
    assert _ready(port, "/healthz")[0] == 200
    # The throttle lifted, it catches up, rejoins every ISR and is ready.
    _throttle(cluster, None)
    cluster.wait_for_isr_with("orders", 2)
    wait_until(lambda: _ready(port)[0] == 200, 30, "ready once back in sync")


def _throttle(cluster, rate: str | None) -> None:
    """Broker 2's follower throttle, a dynamic config (None lifts it)."""
    op = AlterConfigOpType.SET if rate is not None else AlterConfigOpType.DELETE
    resource = ConfigResource("broker", "2", incremental_configs=[ConfigEntry(
        "follower.replication.throttled.rate", rate or "", incremental_operation=op)])
    for future in cluster.admin.incremental_alter_configs([resource]).values():
        future.result(30)
