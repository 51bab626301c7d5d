"""transaction.version 2 (KIP-890 part 2) on the wire: the feature as clients and
kafka-features.sh see it, and what the epoch bump of every EndTxn v5 buys: a batch sent late,
under the epoch of a transaction that ended, is fenced instead of opening a transaction that
nobody ends (a "hanging transaction", which holds every read_committed reader back)."""

from __future__ import annotations

import re
import time
from datetime import timedelta

from kio.schema.api_versions.v3.request import ApiVersionsRequest as ApiVersionsV3
from kio.schema.api_versions.v4.request import ApiVersionsRequest as ApiVersionsV4
from kio.schema.end_txn.v5.request import EndTxnRequest
from kio.schema.produce.v12.request import (
    PartitionProduceData,
    ProduceRequest,
    TopicProduceData,
)

from broker.protocol.records import ATTR_TRANSACTIONAL
from kafkube.harness.waiting import wait_until
from kafkube.harness.wire import WireClient, build_batch
from tests.integration.test_transactions import FAST_TIMEOUTS, _coordinator_client, _ends, _init
from tests.support.kafka_tools import FEATURE_COMMAND

TOPIC = "tv2"
TXN_ID = "txn-tv2"
NONE, INVALID_PRODUCER_EPOCH, INVALID_TXN_STATE = 0, 47, 48


def _features(answer) -> tuple[dict[str, tuple[int, int]], dict[str, int]]:
    return ({f.name: (f.min_version, f.max_version) for f in answer.supported_features},
            {f.name: f.max_version_level for f in answer.finalized_features})


def test_a_new_cluster_finalizes_transaction_version_2_and_kafka_features_changes_it(
        cluster_factory, kafka_tools) -> None:
    cluster = cluster_factory(1)
    with WireClient.connect(cluster.brokers[0].bootstrap) as c:
        assert _features(c.request(ApiVersionsV4(client_software_name="t",
                                                 client_software_version="1"))) == (
            {"group.version": (0, 1), "share.version": (0, 1), "transaction.version": (0, 2),
             "kafkube.metadata.version": (1, 2)},
            {"group.version": 1, "transaction.version": 2, "kafkube.metadata.version": 2})
        # Before v4 a range starting at 0 is left out, as Kafka does for older clients.
        assert _features(c.request(ApiVersionsV3(client_software_name="t",
                                                 client_software_version="1"))) == (
            {"kafkube.metadata.version": (1, 2)},
            {"group.version": 1, "transaction.version": 2, "kafkube.metadata.version": 2})
    bootstrap = cluster.brokers[0].bootstrap
    described = kafka_tools.run(FEATURE_COMMAND, "--bootstrap-server", bootstrap, "describe")
    assert re.search(r"Feature: transaction.version\s+SupportedMinVersion: 0\s+"
                     r"SupportedMaxVersion: 2\s+FinalizedVersionLevel: 2\s",
                     described.stdout), described.describe()
    assert re.search(r"Feature: kafkube.metadata.version\s+SupportedMinVersion: 1\s+"
                     r"SupportedMaxVersion: 2\s+FinalizedVersionLevel: 2\s",
                     described.stdout), described.describe()
    refused = kafka_tools.run(FEATURE_COMMAND, "--bootstrap-server", bootstrap, "upgrade",
                              "--feature", "transaction.version=1", check=False)
    said = refused.stdout + refused.stderr
    assert refused.returncode != 0 and "downgrade" in said, refused.describe()
    too_high = kafka_tools.run(FEATURE_COMMAND, "--bootstrap-server", bootstrap, "upgrade",
                               "--feature", "transaction.version=3", check=False)
    said = too_high.stdout + too_high.stderr
    assert too_high.returncode != 0 and "supports versions 0-2" in said, too_high.describe()
    kafka_tools.run(FEATURE_COMMAND, "--bootstrap-server", bootstrap, "downgrade",
                    "--feature", "transaction.version=1")
    with WireClient.connect(bootstrap) as c:
        assert wait_until(lambda: _features(c.request(ApiVersionsV4(
            client_software_name="t", client_software_version="1")))[1], 10,
            "the downgrade advertised") == {"group.version": 1, "transaction.version": 1,
                                            "kafkube.metadata.version": 2}


def _produce(pid: int, epoch: int, sequence: int, partition: int) -> ProduceRequest:
    batch = build_batch([(None, f"{epoch}-{sequence}".encode(), (), 0)],
                        int(time.time() * 1000), pid, epoch, sequence,
                        attributes=ATTR_TRANSACTIONAL)
    return ProduceRequest(transactional_id=TXN_ID, acks=-1, timeout=timedelta(seconds=10),
                          topic_data=(TopicProduceData(name=TOPIC, partition_data=(
                              PartitionProduceData(index=partition, records=batch),)),))


def _error(client: WireClient, request: ProduceRequest) -> int:
    (topic,) = client.request(request).responses
    return topic.partition_responses[0].error_code


def test_a_late_batch_of_an_ended_transaction_is_fenced_not_left_hanging(
        cluster_factory) -> None:
    cluster = cluster_factory(3, FAST_TIMEOUTS)
    cluster.create_topic(TOPIC, 2, 3)
    with _coordinator_client(cluster, TXN_ID) as c:
        init = _init(c, TXN_ID)
        pid, epoch = init.producer_id, init.producer_epoch
    leaders = {p: cluster.leader_of(TOPIC, p) for p in (0, 1)}
    data = {p: WireClient.connect(cluster.brokers[leaders[p]].bootstrap) for p in (0, 1)}
    try:
        # No AddPartitionsToTxn: Produce v12 has the leader add partition 0.
        assert _error(data[0], _produce(pid, epoch, 0, 0)) == NONE
        with _coordinator_client(cluster, TXN_ID) as c:
            ended = wait_until(lambda: (a := c.request(EndTxnRequest(
                transactional_id=TXN_ID, producer_id=pid, producer_epoch=epoch,
                committed=True))).error_code != 51 and a, 30, "EndTxn answered")
            assert (ended.error_code, ended.producer_id, ended.producer_epoch) == (
                NONE, pid, epoch + 1)
            # The same EndTxn again (a retry of one whose answer was lost): the same answer,
            # once the markers are written (CONCURRENT_TRANSACTIONS until then).
            again = wait_until(lambda: (a := c.request(EndTxnRequest(
                transactional_id=TXN_ID, producer_id=pid, producer_epoch=epoch,
                committed=True))).error_code != 51 and a, 30, "the retry answered")
            assert (again.error_code, again.producer_epoch) == (NONE, epoch + 1)
            # Nothing is open now: a commit is refused, an abort bumps all the same.
            assert c.request(EndTxnRequest(transactional_id=TXN_ID, producer_id=pid,
                                           producer_epoch=epoch + 1, committed=True)
                             ).error_code == INVALID_TXN_STATE
        # A batch sent late under the ended transaction's epoch: the marker bumped the
        # producer's epoch in partition 0, and the coordinator refuses to add partition 1.
        assert _error(data[0], _produce(pid, epoch, 1, 0)) == INVALID_PRODUCER_EPOCH
        assert _error(data[1], _produce(pid, epoch, 0, 1)) == INVALID_PRODUCER_EPOCH
        # The producer's next transaction, under the new epoch, from sequence 0.
        assert _error(data[1], _produce(pid, epoch + 1, 0, 1)) == NONE
        with _coordinator_client(cluster, TXN_ID) as c:
            aborted = wait_until(lambda: (a := c.request(EndTxnRequest(
                transactional_id=TXN_ID, producer_id=pid, producer_epoch=epoch + 1,
                committed=False))).error_code != 51 and a, 30, "the abort answered")
            assert (aborted.error_code, aborted.producer_epoch) == (NONE, epoch + 2)
    finally:
        for client in data.values():
            client.close()
    # Nothing hangs: every partition's last stable offset reaches its high watermark.
    wait_until(lambda: _ends(cluster, TOPIC, 2, "read_committed")
               == _ends(cluster, TOPIC, 2, "read_uncommitted"), 30, "the LSOs caught up")
