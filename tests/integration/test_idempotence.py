"""Idempotent producers against a live broker: sequence and epoch rules, duplicates across
restarts, and a real client retrying through a proxy that loses a produce response.

The rules are Kafka's (ProducerStateManager, ProducerAppendInfo, UnifiedLog): a retried
batch that matches one of the producer's last five gets its original offsets back and is
not appended again; a sequence gap is OUT_OF_ORDER_SEQUENCE_NUMBER; an older epoch is
INVALID_PRODUCER_EPOCH; a newer epoch must start at sequence 0.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
import time
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from broker.protocol.codec import ProtocolError, decode_request
from kafkube.harness.wire import (
    LATEST,
    WireClient,
    build_batch,
    create_topic,
    fetch,
    init_producer_id,
    list_offset,
    parse_batches,
    produce,
)

NONE = 0
INVALID_RECORD = 87
OUT_OF_ORDER_SEQUENCE_NUMBER = 45
INVALID_PRODUCER_EPOCH = 47
INT32_MAX = 2**31 - 1
TOPIC = "idem"


def batch(pid: int, epoch: int, seq: int, count: int = 1, tag: str = "m") -> bytes:
    """``count`` records "tag-seq", "tag-seq+1" ... of producer ``pid``/``epoch``, stamped
    now: a producer whose last batch is older than producer.id.expiration.ms is forgotten
    when the broker restarts, as in Kafka."""
    values = [f"{tag}-{seq + i}".encode() for i in range(count)]
    return build_batch([(None, v, (), i) for i, v in enumerate(values)],
                       int(time.time() * 1000), pid, epoch, seq)


def all_values(client: WireClient, topic: str = TOPIC) -> list[tuple[int, bytes | None]]:
    """(offset, value) of every record in partition 0, read batch by batch."""
    out: list[tuple[int, bytes | None]] = []
    offset = 0
    end = list_offset(client, topic, LATEST)
    for _ in range(10_000):
        if offset >= end:
            break
        data = fetch(client, topic, offset)
        assert data.error_code == NONE
        batches = parse_batches(data.records)
        assert batches, f"no batch at offset {offset} below the end {end}"
        for b in batches:
            out.extend((r.offset, r.value) for r in b.records)
            offset = b.base_offset + b.last_offset_delta + 1
    return out


@pytest.fixture
def client(broker) -> Iterator[WireClient]:
    with WireClient.connect(broker.bootstrap) as c:
        create_topic(c, TOPIC)
        yield c


# -- protocol level ----------------------------------------------------------------------


def test_duplicate_gets_its_original_offset_and_is_not_appended(client):
    pid, epoch = init_producer_id(client)
    assert pid >= 0 and epoch == 0
    first = batch(pid, epoch, 0, count=2)
    r = produce(client, TOPIC, first)
    assert (r.error_code, r.base_offset) == (NONE, 0)
    assert list_offset(client, TOPIC) == 2

    r = produce(client, TOPIC, first)  # the very same bytes, as a retry sends them
    assert (r.error_code, r.base_offset) == (NONE, 0)
    assert list_offset(client, TOPIC) == 2

    second = batch(pid, epoch, 2, count=3)
    assert produce(client, TOPIC, second).base_offset == 2
    # Any of the last five batches is recognised, not only the latest one.
    for retried, offset in ((first, 0), (second, 2), (first, 0)):
        r = produce(client, TOPIC, retried)
        assert (r.error_code, r.base_offset) == (NONE, offset)
    assert list_offset(client, TOPIC) == 5
    assert all_values(client) == [(i, f"m-{i}".encode()) for i in range(5)]


def test_sequence_gap_and_partial_overlap_are_out_of_order(client):
    pid, epoch = init_producer_id(client)
    assert produce(client, TOPIC, batch(pid, epoch, 0, count=2)).error_code == NONE
    for seq, count in ((3, 1), (10, 2), (1, 1), (1, 2), (0, 1)):
        r = produce(client, TOPIC, batch(pid, epoch, seq, count))
        assert r.error_code == OUT_OF_ORDER_SEQUENCE_NUMBER, (seq, count)
        assert r.base_offset == -1
    assert list_offset(client, TOPIC) == 2
    # The producer carries on from where the log is.
    assert produce(client, TOPIC, batch(pid, epoch, 2)).base_offset == 2


def test_duplicates_are_remembered_for_five_batches(client):
    pid, epoch = init_producer_id(client)
    batches = [batch(pid, epoch, seq) for seq in range(6)]
    for offset, b in enumerate(batches):
        assert produce(client, TOPIC, b).base_offset == offset
    # The five latest are duplicates; the oldest has left the window: Kafka then reports it
    # as out of order, since it neither matches a cached batch nor follows the last one.
    for offset in range(1, 6):
        assert produce(client, TOPIC, batches[offset]).base_offset == offset
    assert produce(client, TOPIC, batches[0]).error_code == OUT_OF_ORDER_SEQUENCE_NUMBER
    assert list_offset(client, TOPIC) == 6


def test_epoch_bump_fences_the_older_epoch(client):
    """The Java client bumps an idempotent producer's epoch itself (KIP-360) and restarts
    its sequences at 0; the broker then fences the old epoch."""
    pid, epoch = init_producer_id(client)
    assert produce(client, TOPIC, batch(pid, epoch, 0, count=2)).base_offset == 0
    # A newer epoch must start at sequence 0.
    r = produce(client, TOPIC, batch(pid, epoch + 1, 5))
    assert r.error_code == OUT_OF_ORDER_SEQUENCE_NUMBER
    assert produce(client, TOPIC, batch(pid, epoch + 1, 0, tag="new")).base_offset == 2
    old_next = batch(pid, epoch, 2)
    old_retry = batch(pid, epoch, 0, count=2)
    for stale in (old_next, old_retry):
        r = produce(client, TOPIC, stale)
        assert (r.error_code, r.base_offset) == (INVALID_PRODUCER_EPOCH, -1)
    assert produce(client, TOPIC, batch(pid, epoch + 1, 1, tag="new")).base_offset == 3
    assert list_offset(client, TOPIC) == 4


def test_init_producer_id_with_the_current_epoch_fences_it(client):
    """librdkafka bumps the epoch by sending InitProducerId with its current id and epoch.
    Whatever the broker returns must be usable from sequence 0, and if it kept the id the
    old epoch is fenced."""
    pid, epoch = init_producer_id(client)
    assert produce(client, TOPIC, batch(pid, epoch, 0)).base_offset == 0
    pid2, epoch2 = init_producer_id(client, pid, epoch)
    assert pid2 >= 0
    assert produce(client, TOPIC, batch(pid2, epoch2, 0, tag="new")).base_offset == 1
    if pid2 == pid:
        assert epoch2 > epoch
        r = produce(client, TOPIC, batch(pid, epoch, 1))
        assert r.error_code == INVALID_PRODUCER_EPOCH
    assert list_offset(client, TOPIC) == 2


def test_init_producer_id_without_transactional_id_is_always_a_new_id(client):
    pid, epoch = init_producer_id(client)
    new_pid, new_epoch = init_producer_id(client, pid, epoch)
    assert (new_pid != pid, new_epoch) == (True, 0)


def test_unknown_producer_may_start_at_any_sequence(client):
    """A producer id the partition has no state for (new, or expired by retention) is
    accepted at any sequence, as Kafka does since KIP-360."""
    pid, epoch = init_producer_id(client)
    assert produce(client, TOPIC, batch(pid, epoch, 42)).base_offset == 0
    assert produce(client, TOPIC, batch(pid, epoch, 44)).error_code == (
        OUT_OF_ORDER_SEQUENCE_NUMBER
    )
    assert produce(client, TOPIC, batch(pid, epoch, 43)).base_offset == 1


def test_sequence_wraps_after_int32_max(client):
    """DefaultRecordBatch.incrementSequence: the sequence after Int32.MAX_VALUE is 0."""
    pid, epoch = init_producer_id(client)
    last = batch(pid, epoch, INT32_MAX - 1, count=2)  # sequences MAX-1, MAX
    assert produce(client, TOPIC, last).base_offset == 0
    assert produce(client, TOPIC, batch(pid, epoch, 1)).error_code == (
        OUT_OF_ORDER_SEQUENCE_NUMBER
    )
    wrapped = batch(pid, epoch, 0, count=2)
    assert produce(client, TOPIC, wrapped).base_offset == 2
    assert produce(client, TOPIC, wrapped).base_offset == 2  # and is deduplicated
    assert produce(client, TOPIC, last).base_offset == 0
    assert list_offset(client, TOPIC) == 4


def test_batches_without_producer_id_are_never_deduplicated(client):
    plain = build_batch([(None, b"plain", (), 0)], 1_700_000_000_000)
    assert [produce(client, TOPIC, plain).base_offset for _ in range(3)] == [0, 1, 2]


def test_producer_id_without_sequence_is_invalid(client):
    pid, epoch = init_producer_id(client)
    r = produce(client, TOPIC, batch(pid, epoch, -1))
    assert r.error_code == INVALID_RECORD
    assert list_offset(client, TOPIC) == 0


# -- across restarts ---------------------------------------------------------------------


@pytest.mark.parametrize("how", ["clean", "sigkill"])
def test_duplicates_are_recognised_after_a_restart(broker, how):
    with WireClient.connect(broker.bootstrap) as c:
        create_topic(c, TOPIC)
        pid, epoch = init_producer_id(c)
        batches = [batch(pid, epoch, 0, 2), batch(pid, epoch, 2, 3), batch(pid, epoch, 5, 1)]
        offsets = [produce(c, TOPIC, b).base_offset for b in batches]
        assert offsets == [0, 2, 5]
    if how == "sigkill":
        broker.kill()
    broker.restart()
    assert not any("Traceback" in line for line in broker.output)
    with WireClient.connect(broker.bootstrap) as c:
        assert list_offset(c, TOPIC) == 6
        # The producer state was rebuilt from the log: the last batch and the older ones
        # are still duplicates, and nothing is appended for them.
        for b, offset in zip(reversed(batches), reversed(offsets), strict=True):
            r = produce(c, TOPIC, b)
            assert (r.error_code, r.base_offset) == (NONE, offset)
        assert list_offset(c, TOPIC) == 6
        # Sequence and epoch checks apply to the rebuilt state as well.
        assert produce(c, TOPIC, batch(pid, epoch, 9)).error_code == (
            OUT_OF_ORDER_SEQUENCE_NUMBER
        )
        assert produce(c, TOPIC, batch(pid, epoch, 6)).base_offset == 6
        assert produce(c, TOPIC, batch(pid, epoch + 1, 0, tag="e1")).base_offset == 7
        assert produce(c, TOPIC, batch(pid, epoch, 7)).error_code == INVALID_PRODUCER_EPOCH
        # Producer ids stay unique across restarts.
        new_pid, _ = init_producer_id(c)
        assert new_pid != pid
        assert all_values(c) == [(i, f"m-{i}".encode()) for i in range(7)] + [(7, b"e1-0")]


# -- a real client retrying a lost response ----------------------------------------------


class ResponseDroppingProxy:
    """A loopback TCP proxy that forwards Kafka traffic to a broker, except that it
    swallows the response to the first Produce request it sees and drops that connection,
    so the client has to retry a batch the broker has already appended.

    One thread accepts; each connection gets two pump threads. Every socket has a short
    timeout so all threads notice ``close()`` within a fraction of a second.
    """

    POLL = 0.1

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(self.POLL)
        self.port = self.listener.getsockname()[1]
        self.target_port = 0
        self.stopping = threading.Event()
        self.dropped = threading.Event()
        self._lock = threading.Lock()
        self._claimed = False
        self.produce_batches: list[list[tuple[int, int, int]]] = []  # per Produce request
        self._threads: list[threading.Thread] = []
        self._sockets: list[socket.socket] = []

    def start(self, target_port: int) -> None:
        self.target_port = target_port
        self._spawn(self._accept_loop)

    def _spawn(self, fn, *args) -> None:
        thread = threading.Thread(target=fn, args=args, daemon=True)
        self._threads.append(thread)
        thread.start()

    def _accept_loop(self) -> None:
        while not self.stopping.is_set():
            try:
                downstream, _ = self.listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.target_port), timeout=5)
            for s in (downstream, upstream):
                s.settimeout(self.POLL)
                self._sockets.append(s)
            swallow: dict[str, int | None] = {"correlation_id": None}
            self._spawn(self._requests, downstream, upstream, swallow)
            self._spawn(self._responses, upstream, downstream, swallow)

    def _frames(self, sock: socket.socket) -> Iterator[bytes]:
        """Whole frames (size prefix included) read from ``sock`` until EOF or close()."""
        buf = bytearray()
        while not self.stopping.is_set():
            try:
                data = sock.recv(1 << 16)
            except TimeoutError:
                continue
            except OSError:
                return
            if not data:
                return
            buf += data
            while len(buf) >= 4:
                (size,) = struct.unpack_from(">i", buf)
                if len(buf) < 4 + size:
                    break
                yield bytes(buf[: 4 + size])
                del buf[: 4 + size]

    def _requests(self, src: socket.socket, dst: socket.socket, swallow: dict) -> None:
        try:
            for frame in self._frames(src):
                api_key, _, correlation_id = struct.unpack_from(">hhi", frame, 4)
                if api_key == 0:
                    self._note_produce(frame)
                    with self._lock:
                        if not self._claimed:
                            self._claimed = True
                            swallow["correlation_id"] = correlation_id
                dst.sendall(frame)
        except OSError:
            pass
        finally:
            _shut(src, dst)

    def _note_produce(self, frame: bytes) -> None:
        """Remember (producer id, epoch, base sequence) of each batch a Produce carries."""
        try:
            request = decode_request(frame[4:])
        except ProtocolError:
            return
        seen = []
        for topic in request.body.topic_data:
            for p in topic.partition_data:
                seen += [(b.producer_id, b.producer_epoch, b.base_sequence)
                         for b in parse_batches(p.records)]
        self.produce_batches.append(seen)

    def _responses(self, src: socket.socket, dst: socket.socket, swallow: dict) -> None:
        try:
            for frame in self._frames(src):
                (correlation_id,) = struct.unpack_from(">i", frame, 4)
                if correlation_id == swallow["correlation_id"]:
                    self.dropped.set()
                    return  # the response is lost with the connection
                dst.sendall(frame)
        except OSError:
            pass
        finally:
            _shut(src, dst)

    def close(self) -> None:
        self.stopping.set()
        self.listener.close()
        for s in self._sockets:
            _shut(s)
        for thread in self._threads:
            thread.join(5)
        assert not any(t.is_alive() for t in self._threads), "proxy threads did not stop"


def _shut(*socks: socket.socket) -> None:
    for s in socks:
        with contextlib.suppress(OSError):
            s.shutdown(socket.SHUT_RDWR)
        s.close()


@pytest.fixture
def proxy() -> Iterator[ResponseDroppingProxy]:
    p = ResponseDroppingProxy()
    yield p
    p.close()


def test_client_retry_after_a_lost_response_is_deduplicated(broker_factory, proxy):
    count = 30
    broker = broker_factory(**{"advertised.listeners": f"PLAINTEXT://127.0.0.1:{proxy.port}"})
    proxy.start(broker.port)
    bootstrap = f"127.0.0.1:{proxy.port}"
    with WireClient.connect(broker.bootstrap) as direct:
        create_topic(direct, "retried")

    producer = Producer({
        "bootstrap.servers": bootstrap,
        "enable.idempotence": True,
        "acks": "all",
        "linger.ms": 20,
        "batch.num.messages": 5,
        "request.timeout.ms": 5000,
        "message.timeout.ms": 30000,
        "retry.backoff.ms": 50,
        "reconnect.backoff.ms": 50,
    })
    reports: list[tuple[object, bytes, int]] = []
    for i in range(count):
        producer.produce("retried", value=b"r-%d" % i,
                         on_delivery=lambda err, msg: reports.append((err, msg.value(),
                                                                      msg.offset())))
        producer.poll(0)
    assert producer.flush(45) == 0, "messages still undelivered"

    assert proxy.dropped.is_set(), "the proxy never swallowed a produce response"
    first = proxy.produce_batches[0]
    assert first, "the first Produce request carried no batch"
    assert sum(1 for seen in proxy.produce_batches if first[0] in seen) >= 2, (
        f"the first batch {first[0]} was never retried: {proxy.produce_batches}"
    )
    assert [err for err, _, _ in reports] == [None] * count
    assert sorted(offset for _, _, offset in reports) == list(range(count))
    assert {value: offset for _, value, offset in reports} == {
        b"r-%d" % i: i for i in range(count)
    }

    with WireClient.connect(broker.bootstrap) as direct:
        assert list_offset(direct, "retried") == count, "a retried batch was appended twice"

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "idem-check",
                         "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition("retried", 0, 0)])
        got: list[tuple[int, bytes]] = []
        deadline = time.monotonic() + 30
        while len(got) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            got.append((msg.offset(), msg.value()))
    finally:
        consumer.close()
    assert got == [(i, b"r-%d" % i) for i in range(count)]
    assert broker.alive()
