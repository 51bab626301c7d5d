"""Two broker processes on one log dir (broker/storage/log_dir_lock.py): the second waits,
saying why, and serves the logs only once the first has ended, as after `kubectl delete pod
--force --grace-period=0` on Kubernetes, where the StatefulSet's next pod starts on the same
volume while the old container is still being stopped. Without the lock both wrote the same
segments."""

from __future__ import annotations

import time

from confluent_kafka import Producer

from kafkube.harness.process import BrokerProcess
from kafkube.harness.waiting import wait_until
from tests.support.clients import read_values

TOPIC = "locked"
RECORDS = 200


def produce(bootstrap: str) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    failures = []
    for i in range(RECORDS):
        producer.produce(TOPIC, f"r{i}".encode(),
                         on_delivery=lambda err, _msg: err and failures.append(err))
    assert producer.flush(30) == 0 and not failures, failures


def test_a_second_broker_on_a_log_dir_in_use_waits_for_the_first_to_end(
        cluster_factory) -> None:
    cluster = cluster_factory(1)
    first = cluster.brokers[0]
    cluster.create_topic(TOPIC, 1, 1)
    produce(cluster.bootstrap)

    config = first.config()
    config["listeners"] = "PLAINTEXT://127.0.0.1:0"
    twin = BrokerProcess(first.log_dir, config, name="twin of broker 0")
    cluster.brokers.append(twin)  # stopped with the cluster, its output kept on failure
    twin.spawn()
    wait_until(lambda: any("is locked by another process" in line for line in twin.output),
               30, "the twin to say the log dir is locked", 0.2)
    assert twin.alive() and not twin.port, "the twin served a log dir in use"

    first.kill()
    assert twin.wait_ready(time.monotonic() + 60) is None, twin.tail(40)
    assert read_values(twin.bootstrap, TOPIC, RECORDS) == [f"r{i}" for i in range(RECORDS)]
