"""A broker's services in the test's process (a real replica manager, its coordinators
and controller on a temp dir; no socket) and requests to its Kafka API handlers, for the
handler tests of the unit tier. A request reaches its handler as the broker decodes it (the
kio request encoded, then decoded by ``decode_request``: a hand-written decoder where the
broker has one), and every response is encoded and decoded again, to prove the handler
built a message of the right version.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

from kio.index import load_request_schema

from broker.common.metrics import BrokerMetrics
from broker.config.broker_config import BrokerConfig
from broker.config.group_settings import GroupSettings
from broker.controller.controller import Controller
from broker.coordinator.group_coordinator import GroupCoordinator
from broker.coordinator.share_coordinator import ShareCoordinator
from broker.coordinator.transaction_coordinator import TransactionCoordinator
from broker.coordinator.txn_markers import MarkerSender
from broker.handlers import REGISTRY, admin, offset_for_leader_epoch  # noqa: F401 (registers)
from broker.handlers.context import BrokerServices, Endpoint, RequestContext
from broker.network.peers import PeerChannels
from broker.protocol.codec import (
    RequestHeader,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
)
from broker.protocol.fetch import EncodedResponse
from broker.protocol.file_region import FileRegion
from broker.protocol.messages import build
from broker.security import acl
from broker.server.txn_verification import TransactionVerifier
from broker.share.persister import SharePersister
from broker.share.share_partitions import SharePartitionManager
from tests.support.in_process import open_replicas

NODE_ID = 1
CREATE_TOPICS, DELETE_TOPICS, CREATE_PARTITIONS = 19, 20, 37
DESCRIBE_CONFIGS, DESCRIBE_CLUSTER, OFFSET_FOR_LEADER_EPOCH = 32, 60, 23


def make_services(tmp_path: Path, **settings: str) -> BrokerServices:
    raw = {"log.dirs": str(tmp_path / "logs"), "node.id": str(NODE_ID), **settings}
    config = BrokerConfig.from_dict(raw)
    store, replicas = open_replicas(config, rack="rack-a")
    share_coordinator = ShareCoordinator(config, replicas)
    settings = GroupSettings(config, lambda group: store.image.group_configs.get(group, {}))
    replicas.leadership_listeners.append(share_coordinator.on_leadership)
    transactions = TransactionCoordinator(
        config, replicas, store, MarkerSender(store, PeerChannels(store, "markers", 1.0)))
    return BrokerServices(
        config, store, replicas, BrokerMetrics(), {"PLAINTEXT": Endpoint("", 9092, "rack-a")},
        GroupCoordinator(config, replicas, settings), Controller(config, store, lambda: 1),
        transactions, TransactionVerifier(store, NODE_ID, 50, PeerChannels(store, "v", 1.0),
                                          transactions.verify_partitions,
                                          transactions.add_partitions),
        acl.from_config(config, lambda: store.image.acls),
        shares=SharePartitionManager(config, replicas, SharePersister(share_coordinator, store,
                                                                      None),
                                     settings),
        share_coordinator=share_coordinator,
    )


def request(api_key: int, version: int, values: dict[str, Any]) -> Any:
    """A kio request of ``version`` from a version-independent dict."""
    return build(load_request_schema(api_key, version), values)


def call(services: BrokerServices, req: Any) -> Any:
    """Run the registered handler on ``req`` as the broker decodes it; the response as a kio
    message (decoded from the handler's bytes where it encodes by hand)."""
    header = RequestHeader(req.__api_key__, req.__version__, 42, "test-client")
    decoded_request = decode_request(encode_request(header, req)[4:])
    ctx = RequestContext(services, decoded_request.header, client_host="127.0.0.1",
                         local_host="10.1.2.3")
    spec = REGISTRY[req.__api_key__]
    assert spec.min_version <= req.__version__ <= spec.max_version
    response = asyncio.run(spec.handler(ctx, decoded_request.body))
    if isinstance(response, EncodedResponse):  # file regions read as the socket sends them
        response = inline(response)
    if isinstance(response, bytes):
        frame = response
    else:
        assert response.__version__ == req.__version__
        frame = encode_response(42, response)
    correlation_id, decoded = decode_response(frame[4:], req.__api_key__, req.__version__)
    assert correlation_id == 42
    assert isinstance(response, bytes) or decoded == response
    return decoded


def inline(response: EncodedResponse) -> bytes:
    """A frame of bytes and file regions as bytes, its regions read."""
    return b"".join(os.pread(c.fd, c.length, c.position) if isinstance(c, FileRegion) else c
                    for c in response.chunks)


def new_topic(name: str, partitions: int = 1, rf: int = 1, configs: dict | None = None,
              assignments: list[tuple[int, list[int]]] | None = None) -> dict[str, Any]:
    return {
        "name": name,
        "num_partitions": partitions,
        "replication_factor": rf,
        "assignments": [
            {"partition_index": i, "broker_ids": ids} for i, ids in (assignments or [])
        ],
        "configs": [{"name": k, "value": v} for k, v in (configs or {}).items()],
    }


def create(services: BrokerServices, version: int, *topics: dict, validate_only: bool = False):
    req = request(CREATE_TOPICS, version, {"topics": list(topics), "validate_only": validate_only})
    return call(services, req)


def only(results: Any) -> Any:
    assert len(results) == 1
    return results[0]
