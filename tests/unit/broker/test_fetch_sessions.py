"""Incremental fetch sessions (KIP-227), through the Fetch handler and the wire codec.

Real Java consumers use sessions in ``test_java_client.py``; here each rule is checked on
its own: what a session remembers, what an incremental response leaves out, the session
errors, forgetting, closing, eviction, and sessions turned off.
"""

from __future__ import annotations

import asyncio
import os
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from kio.index import load_request_schema
from kio.schema.errors import ErrorCode

from broker.handlers import fetch as fetch_module
from broker.handlers.context import BrokerServices, RequestContext
from broker.handlers.fetch import handle_fetch
from broker.protocol.codec import RequestHeader, decode_request, decode_response, encode_request
from broker.protocol.messages import build
from broker.server import fetch_session
from broker.server.fetch_session import CachedPartition, FetchSessionCache
from kafkube.harness.wire import build_batch
from tests.support.handlers import make_services

TOPIC = "sessions"


@pytest.fixture
def services(tmp_path: Path) -> BrokerServices:
    services = make_services(tmp_path)
    asyncio.run(services.replicas.create_topic(TOPIC, 3, {}))
    return services


def produce(services: BrokerServices, partition: int, count: int = 1) -> None:
    for _ in range(count):
        batch = build_batch([(None, b"v" * 10, (), 0)], 1_700_000_000_000)
        outcome = services.replicas.get(TOPIC, partition).append(batch, 1 << 20)
        assert outcome.error == ErrorCode.none


def fetch(services: BrokerServices, session_id: int, epoch: int,
          offsets: dict[int, int], forgotten: tuple[int, ...] = ()) -> Any:
    """One Fetch v12 through the decoder, the handler and kio's response decoder."""
    body = build(load_request_schema(1, 12), {
        "cluster_id": None, "replica_id": -1, "max_wait": timedelta(0), "min_bytes": 0,
        "max_bytes": 1 << 20, "isolation_level": 0, "session_id": session_id,
        "session_epoch": epoch, "rack_id": "",
        "topics": [{"topic": TOPIC, "partitions": [
            {"partition": p, "current_leader_epoch": -1, "fetch_offset": offset,
             "last_fetched_epoch": -1, "log_start_offset": -1, "partition_max_bytes": 1 << 20}
            for p, offset in offsets.items()]}] if offsets else [],
        "forgotten_topics_data": [{"topic": TOPIC, "partitions": list(forgotten)}]
        if forgotten else [],
    })
    request = decode_request(encode_request(RequestHeader(1, 12, 5, "t"), body)[4:])
    ctx = RequestContext(services, request.header, "127.0.0.1", "127.0.0.1")
    encoded = asyncio.run(handle_fetch(ctx, request.body))
    wire = b"".join(c if isinstance(c, bytes) else os.pread(c.fd, c.length, c.position)
                    for c in encoded.chunks)
    correlation_id, response = decode_response(wire[4:], 1, 12)
    assert correlation_id == 5
    return response


def reported(response: Any) -> dict[int, tuple[int, int]]:
    """partition -> (error, bytes of records) of every partition in the response."""
    return {p.partition_index: (p.error_code, len(p.records or b""))
            for t in response.responses for p in t.partitions}


def test_a_session_reports_only_partitions_with_news(services: BrokerServices):
    produce(services, 0, 2)
    opened = fetch(services, 0, 0, {0: 0, 1: 0, 2: 0})
    assert opened.session_id > 0 and opened.error_code == ErrorCode.none
    full = reported(opened)
    assert set(full) == {0, 1, 2} and full[0][1] > 0  # a full response: all partitions
    sid = opened.session_id

    # Partition 0 moves on; nothing else changed: nothing to report.
    assert reported(fetch(services, sid, 1, {0: 2})) == {}
    # New data on partition 1 (and so a new high watermark): only partition 1 is reported,
    # read from the offset the session remembered.
    produce(services, 1)
    news = reported(fetch(services, sid, 2, {}))
    assert list(news) == [1] and news[1][1] > 0
    # The client moves partition 1 on; quiet again.
    assert reported(fetch(services, sid, 3, {1: 1})) == {}


def test_an_incremental_fetch_builds_no_answer_for_a_quiet_partition(
        services: BrokerServices, monkeypatch: pytest.MonkeyPatch):
    """A quiet partition of a session costs its check, not an answer left out afterwards:
    with every partition's answer built, each Fetch of a consumer of 10,000 partitions
    cost the whole session (~150 ms), and a read from offset 0 at 10,000 partitions took
    ten times the CPU in some runs (docs/performance.md)."""
    opened = fetch(services, 0, 0, {0: 0, 1: 0, 2: 0})
    sid = opened.session_id
    built: list[int] = []
    real = fetch_module.FetchPartition

    def counted(index: int, *args: Any, **kwargs: Any) -> Any:
        built.append(index)
        return real(index, *args, **kwargs)

    monkeypatch.setattr(fetch_module, "FetchPartition", counted)
    assert reported(fetch(services, sid, 1, {})) == {}
    assert built == []  # none of the three caught-up, unchanged partitions
    produce(services, 2)
    assert list(reported(fetch(services, sid, 2, {}))) == [2]
    assert built == [2]
    # The client moves on to the end; then the log start moves there (DeleteRecords):
    # reported although there are no records.
    assert reported(fetch(services, sid, 3, {2: 1})) == {}
    assert services.replicas.get(TOPIC, 2).delete_records(1)[1] == ErrorCode.none
    assert reported(fetch(services, sid, 4, {})) == {2: (ErrorCode.none, 0)}
    assert built == [2, 2]


def test_session_errors_and_closing(services: BrokerServices):
    sid = fetch(services, 0, 0, {0: 0}).session_id
    stale = fetch(services, sid, 5, {})
    assert (stale.error_code, stale.responses) == (ErrorCode.invalid_fetch_session_epoch, ())
    assert fetch(services, sid, 1, {}).error_code == ErrorCode.none  # the session survives
    unknown = fetch(services, sid + 1, 1, {})
    assert unknown.error_code == ErrorCode.fetch_session_id_not_found
    # Epoch -1 naming the session closes it and is answered as a sessionless full fetch.
    closing = fetch(services, sid, -1, {0: 0, 2: 0})
    assert closing.session_id == 0 and set(reported(closing)) == {0, 2}
    assert fetch(services, sid, 2, {}).error_code == ErrorCode.fetch_session_id_not_found


def test_forgotten_partitions_leave_the_session(services: BrokerServices):
    sid = fetch(services, 0, 0, {0: 0, 1: 0}).session_id
    assert reported(fetch(services, sid, 1, {}, forgotten=(1,))) == {}
    produce(services, 1)
    produce(services, 0)
    assert list(reported(fetch(services, sid, 2, {}))) == [0]


def test_an_error_is_reported_again_once_it_clears():
    session = FetchSessionCache(10).open([CachedPartition("t", 0, 0, 100, -1)])
    p = session.partitions[("t", 0)]
    assert session.must_report(p, ErrorCode.none, 5, 0, 0)
    assert session.must_report(p, ErrorCode.not_leader_or_follower, 5, 0, 0)
    assert session.must_report(p, ErrorCode.none, 5, 0, 0)  # same HW as before the error
    assert not session.must_report(p, ErrorCode.none, 5, 0, 0)
    # A partition forgotten by an overlapping request while this one waited: no KeyError.
    del session.partitions[("t", 0)]
    assert session.must_report(p, ErrorCode.none, 6, 0, record_bytes=10)
    assert session.partitions == {}


def test_a_session_left_empty_is_closed(services: BrokerServices):
    sid = fetch(services, 0, 0, {0: 0}).session_id
    emptied = fetch(services, sid, 1, {}, forgotten=(0,))
    assert (emptied.error_code, emptied.session_id, emptied.responses) == (ErrorCode.none, 0, ())
    assert fetch(services, sid, 2, {}).error_code == ErrorCode.fetch_session_id_not_found


def test_partitions_that_returned_data_go_to_the_back():
    cache = FetchSessionCache(10)
    session = cache.open([CachedPartition("t", p, 0, 100, -1) for p in range(3)])
    first = session.partitions[("t", 0)]
    assert session.must_report(first, ErrorCode.none, 5, 0, record_bytes=80)
    assert [p for _, p in session.partitions] == [1, 2, 0]
    # Reported once, a partition with no change is not reported again.
    assert not session.must_report(first, ErrorCode.none, 5, 0, record_bytes=0)
    assert session.must_report(first, ErrorCode.not_leader_or_follower, 5, 0, 0)


def test_a_full_cache_evicts_only_an_idle_session_and_can_be_turned_off(
    services: BrokerServices, monkeypatch: pytest.MonkeyPatch,
):
    cache = FetchSessionCache(2)
    a = cache.open([])
    b = cache.open([])
    assert cache.open([]) is None  # both in recent use: the newcomer gets no session
    monkeypatch.setattr(fetch_session, "EVICTION_IDLE_S", 0.0)
    assert cache.resume(a.session_id, 1)[1] == ErrorCode.none  # a is now the most recent
    c = cache.open([])
    assert len(cache) == 2
    assert cache.resume(b.session_id, 1) == (None, ErrorCode.fetch_session_id_not_found)
    assert cache.resume(c.session_id, 1)[1] == ErrorCode.none
    assert FetchSessionCache(0).open([]) is None
    services.fetch_sessions = FetchSessionCache(0)  # max.incremental.fetch.session.cache.slots=0
    response = fetch(services, 0, 0, {0: 0, 1: 0})
    assert response.session_id == 0 and set(reported(response)) == {0, 1}
