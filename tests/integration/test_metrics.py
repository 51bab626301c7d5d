"""Prometheus metrics, scraped from a running broker."""

from __future__ import annotations

from kafkube.harness.metrics import scrape
from tests.integration.test_compat_clients import ck_consume, ck_produce, sample_records


def test_metrics_count_traffic_per_topic_and_api(broker):
    records = sample_records(40)
    assert ck_produce(broker.bootstrap, "metered", records) == []
    assert len(ck_consume(broker.bootstrap, "metered", len(records))) == len(records)
    m = scrape(broker.metrics_port)
    assert m['kafka_server_messages_in_total{topic="metered"}'] == 40
    assert m['kafka_server_messages_out_total{topic="metered"}'] >= 40
    bytes_in = m['kafka_server_bytes_in_total{topic="metered"}']
    assert bytes_in > sum(len(r["value"] or b"") for r in records)
    assert m['kafka_server_bytes_out_total{topic="metered"}'] >= bytes_in
    assert m['kafka_log_end_offset{partition="0",topic="metered"}'] == 40
    assert m['kafka_partition_high_watermark{partition="0",topic="metered"}'] == 40
    assert m['kafka_log_size_bytes{partition="0",topic="metered"}'] == bytes_in
    # Per partition, while this broker leads it (a rebalance's rates, reconcile/load.py):
    # what was produced, and what consumers fetched.
    assert m['kafkube_partition_leader_bytes_in_total{partition="0",topic="metered"}'] == \
        bytes_in
    assert m['kafkube_partition_leader_bytes_out_total{partition="0",topic="metered"}'] == \
        m['kafka_server_bytes_out_total{topic="metered"}']
    produce_requests = sum(v for k, v in m.items()
                           if k.startswith('kafka_network_requests_total{api="Produce"'))
    assert produce_requests >= 1
    assert m['kafka_network_request_latency_seconds_count{api="Fetch"}'] >= 1
    assert m["kafka_network_connections"] >= 0


def test_consumer_lag_per_group_and_partition(broker_factory):
    from confluent_kafka import Consumer, TopicPartition

    broker = broker_factory(**{"group.initial.rebalance.delay.ms": "0"})
    assert ck_produce(broker.bootstrap, "lagging", sample_records(30)) == []
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "lag-group",
                         "enable.auto.commit": False})
    try:
        consumer.commit(offsets=[TopicPartition("lagging", 0, 12)], asynchronous=False)
    finally:
        consumer.close()
    m = scrape(broker.metrics_port)
    labels = 'group="lag-group",partition="0",topic="lagging"'
    assert m[f"kafka_consumergroup_current_offset{{{labels}}}"] == 12
    assert m[f"kafka_consumergroup_lag{{{labels}}}"] == 18
