"""Apache Kafka's own command-line tools against a 3-broker kafkube cluster.

Each test asserts what the tool printed or did, not only that it exited 0.
"""

from __future__ import annotations

import re

from tests.cluster import cluster_factory  # noqa: F401
from tests.conftest import wait_until
from tests.kafka_tools import TOPIC_COMMAND, kafka_tools  # noqa: F401


def test_topic_command_create_describe_list_delete(kafka_tools, cluster_factory):  # noqa: F811
    cluster = cluster_factory(3)
    b = ("--bootstrap-server", cluster.bootstrap)
    kafka_tools.run(TOPIC_COMMAND, *b, "--create", "--topic", "tools-topics",
                    "--partitions", "6", "--replication-factor", "3",
                    "--config", "retention.ms=3600000")
    cluster.wait_for_isr("tools-topics", 3)
    listed = kafka_tools.run(TOPIC_COMMAND, *b, "--list").stdout.split()
    assert "tools-topics" in listed
    described = kafka_tools.run(TOPIC_COMMAND, *b, "--describe", "--topic", "tools-topics").stdout
    assert re.search(r"PartitionCount:\s*6\s+ReplicationFactor:\s*3", described), described
    assert "retention.ms=3600000" in described
    rows = re.findall(r"Partition: (\d+)\s+Leader: (\d+)\s+Replicas: ([\d,]+)\s+Isr: ([\d,]+)",
                      described)
    assert sorted(int(r[0]) for r in rows) == list(range(6)), described
    for _, leader, replicas, isr in rows:
        assert sorted(replicas.split(",")) == ["0", "1", "2"]
        assert sorted(isr.split(",")) == ["0", "1", "2"]
        assert leader in replicas.split(",")
    under = kafka_tools.run(TOPIC_COMMAND, *b, "--describe", "--under-replicated-partitions")
    assert "tools-topics" not in under.stdout, under.stdout
    kafka_tools.run(TOPIC_COMMAND, *b, "--alter", "--topic", "tools-topics", "--partitions", "8")
    wait_until(lambda: len(cluster.partitions("tools-topics") or ()) == 8, 30,
               "8 partitions in the metadata")
    kafka_tools.run(TOPIC_COMMAND, *b, "--delete", "--topic", "tools-topics")
    listed = kafka_tools.run(TOPIC_COMMAND, *b, "--list").stdout.split()
    assert "tools-topics" not in listed
